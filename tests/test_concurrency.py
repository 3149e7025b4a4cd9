"""Several processes on one store at once: every acknowledged write is there and
verifies, no temporary file is left, and a reader never sees damage."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import traceback
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.records.keys import TEMP_PREFIX

PUTS_PER_PROCESS = 40
SHARED_TASK = "shared-task"


def config(thread_id, checkpoint_id=None):
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def write_chain(report, store, thread_id, worker, barrier, shared_checkpoint=None):
    """Run in a child process: a chain of checkpoints with incremental values and writes.

    Reports (on the ``report`` connection) every acknowledged (returned) write; a
    failure is reported, not hidden.
    """
    try:
        saver = VerifiedSaver(store, fsync=False)
        barrier.wait()
        acknowledged = []
        if shared_checkpoint:
            # every process writes the same task's writes and its own task's writes
            saver.put_writes(config(thread_id, shared_checkpoint), [("w", worker)], SHARED_TASK)
            saver.put_writes(config(thread_id, shared_checkpoint), [("w", worker)], f"w{worker}")
        parent = config(thread_id)
        for step in range(PUTS_PER_PROCESS):
            versions = {"constant": 1, "step": step + 1}
            checkpoint = generate_checkpoint(
                checkpoint_id=str(uuid6(clock_seq=worker)),
                channel_values={"constant": f"constant of {worker}", "step": [worker, step]},
                channel_versions=versions,
            )
            parent = saver.put(
                parent,
                checkpoint,
                generate_metadata(step=step, worker=worker),
                versions if step == 0 else {"step": step + 1},
            )
            saver.put_writes(parent, [("done", [worker, step])], f"task-{worker}-{step}")
            acknowledged.append((parent["configurable"]["checkpoint_id"], worker, step))
        report.send(("ok", acknowledged))
    except BaseException:
        report.send(("error", traceback.format_exc()))


def read_while_writing(report, store, thread_id, barrier, writer_done):
    """Run in a child process: list and load the thread until the writer is done."""
    try:
        saver = VerifiedSaver(store)
        barrier.wait()
        passes = 0
        loaded = 0
        while True:
            finished = writer_done.is_set()
            for found in saver.list(config(thread_id)):
                worker, step = found.checkpoint["channel_values"]["step"]
                assert found.metadata["step"] == step
                assert found.checkpoint["channel_values"]["constant"] == f"constant of {worker}"
                loaded += 1
            latest = saver.get_tuple(config(thread_id))
            if latest is not None:
                assert latest.checkpoint["channel_values"]["constant"].startswith("constant of")
            passes += 1
            if finished:
                break
        stats = saver.stats
        report.send(
            (
                "ok",
                {
                    "passes": passes,
                    "loaded": loaded,
                    "damaged": stats.damaged_records,
                    "quarantined": stats.quarantined_records,
                    "fallbacks": stats.fallbacks,
                    "restarts": stats.restarts_from_scratch,
                },
            )
        )
    except BaseException:
        report.send(("error", traceback.format_exc()))


@dataclass
class Child:
    process: Any  # a multiprocessing Process
    report: multiprocessing.connection.Connection  # where its one report arrives


def start(context, function, *args):
    """Start ``function(report, *args)`` in a (daemon) child process."""
    receiver, sender = context.Pipe(duplex=False)
    # daemon: a child still blocked when a test fails dies with the test process
    process = context.Process(target=function, args=(sender, *args), daemon=True)
    process.start()
    sender.close()  # the child has its own copy
    return Child(process, receiver)


def collect(children, barrier=None):
    """Each child's report, in order, waiting for the events themselves: a report, or
    the child's exit without one. No clock: a slow machine only makes this slower.

    When a child fails, ``barrier`` is aborted, so children still waiting at it stop
    (with an error report) instead of waiting forever for the one that is gone.
    """
    reports: dict[int, tuple[str, Any]] = {}
    waiting = dict(enumerate(children))
    while waiting:
        handles = [c.report for c in waiting.values()]
        handles += [c.process.sentinel for c in waiting.values()]
        ready = multiprocessing.connection.wait(handles)
        for index, child in list(waiting.items()):
            if child.report in ready or child.process.sentinel in ready:
                try:
                    reports[index] = child.report.recv()  # sent before it exits, if at all
                except EOFError:
                    child.process.join()
                    reports[index] = ("error", f"exited with {child.process.exitcode} unheard")
                del waiting[index]
                if reports[index][0] == "error" and barrier is not None:
                    barrier.abort()
    errors = [payload for status, payload in reports.values() if status == "error"]
    assert not errors, "\n".join(errors)
    for child in children:
        child.process.join()  # it has reported: it is exiting
        assert child.process.exitcode == 0
    return [reports[index][1] for index in range(len(children))]


def temp_files(root):
    return [
        os.path.join(dirpath, name)
        for dirpath, dirnames, filenames in os.walk(root)
        for name in filenames + dirnames
        if name.startswith(TEMP_PREFIX)
    ]


def assert_all_present(saver, thread_id, acknowledged):
    for checkpoint_id, worker, step in acknowledged:
        found = saver.get_tuple(config(thread_id, checkpoint_id))
        assert found is not None, (thread_id, checkpoint_id)
        assert found.checkpoint["channel_values"] == {
            "constant": f"constant of {worker}",
            "step": [worker, step],
        }
        assert found.pending_writes == [(f"task-{worker}-{step}", "done", [worker, step])]


def test_processes_on_different_threads(tmp_path):
    store = tmp_path / "store"
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(3)
    children = [start(context, write_chain, store, f"thread-{w}", w, barrier) for w in range(3)]
    reports = collect(children, barrier)

    saver = VerifiedSaver(store)
    acknowledged = sorted(a for report in reports for a in report)
    assert len(acknowledged) == 3 * PUTS_PER_PROCESS
    for checkpoint_id, worker, step in acknowledged:
        assert_all_present(saver, f"thread-{worker}", [(checkpoint_id, worker, step)])
    for w in range(3):
        assert len(list(saver.list(config(f"thread-{w}")))) == PUTS_PER_PROCESS
    report = saver.verify()
    assert report.ok
    assert temp_files(store) == []
    assert saver.stats.damaged_records == 0


def test_processes_on_the_same_thread(tmp_path):
    store = tmp_path / "store"
    saver = VerifiedSaver(store, fsync=False)
    shared = saver.put(config("shared"), generate_checkpoint(), generate_metadata(step=-1), {})
    shared_id = shared["configurable"]["checkpoint_id"]

    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(3)
    children = [
        start(context, write_chain, store, "shared", w, barrier, shared_id) for w in range(3)
    ]
    reports = collect(children, barrier)

    reopened = VerifiedSaver(store)
    acknowledged = [a for report in reports for a in report]
    assert len(acknowledged) == 3 * PUTS_PER_PROCESS
    assert_all_present(reopened, "shared", acknowledged)
    listed = list(reopened.list(config("shared")))
    assert len(listed) == 3 * PUTS_PER_PROCESS + 1
    assert sorted(t.checkpoint["id"] for t in listed) == sorted(
        [a[0] for a in acknowledged] + [shared_id]
    )
    # the shared task's regular writes: exactly one process won, whole
    writes = reopened.get_tuple(shared).pending_writes
    shared_writes = [w for w in writes if w[0] == SHARED_TASK]
    assert len(shared_writes) == 1
    assert shared_writes[0][2] in (0, 1, 2)
    assert sorted(w for w in writes if w[0] != SHARED_TASK) == [(f"w{w}", "w", w) for w in range(3)]
    assert reopened.verify().ok
    assert temp_files(store) == []
    assert reopened.stats.damaged_records == 0


def test_a_reader_listing_while_a_writer_writes_sees_no_damage(tmp_path):
    store = tmp_path / "store"
    VerifiedSaver(store)  # create the store before either process opens it
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    writer_done = context.Event()

    reader = start(context, read_while_writing, store, "busy", barrier, writer_done)
    writer = start(context, write_chain, store, "busy", 7, barrier)
    try:
        (acknowledged,) = collect([writer], barrier)
    finally:
        writer_done.set()  # the reader's last pass starts now, even if the writer failed
    (seen,) = collect([reader], barrier)

    assert seen["damaged"] == 0
    assert seen["quarantined"] == 0
    assert seen["fallbacks"] == 0
    assert seen["restarts"] == 0
    assert seen["passes"] >= 1
    # its last pass started after the writer was done, so it saw everything
    assert seen["loaded"] >= PUTS_PER_PROCESS
    saver = VerifiedSaver(store)
    assert_all_present(saver, "busy", acknowledged)
    assert saver.verify().ok
    assert temp_files(store) == []
