"""Retention: ``sweep`` expires and trims threads as its policy says, and nothing else.

Real graphs on every backend (files, memory, S3), their checkpoints written at
times set with ``time_machine`` (LangGraph stamps each checkpoint's ``ts`` with
the clock), and each sweep judged at a ``now`` of the test's choosing: no test
sleeps. What must hold:

* a thread idle longer than ``idle`` (since its last write in any namespace), or
  older than ``max_age``, is deleted (or kept to its newest checkpoint); the others
  stay exactly as they were, and one with no checkpoint that verifies is skipped;
* ``keep_last`` keeps the newest checkpoints of each namespace, each reading
  back exactly as before, with what a resume needs (an ``interrupt()`` thread
  still resumes; a subgraph's namespace is trimmed on its own; a
  ``DeltaChannel`` still rebuilds the same value);
* pinned and exempt threads are left alone, and a thread written by another
  process while the sweep runs is skipped;
* a dry run reports exactly what the real sweep then does, and changes no byte;
* a sweep killed with SIGKILL leaves each thread as it was or as the policy says.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any

import pytest
import time_machine
from echo_graph import build_graph
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import (
    MemoryStorage,
    RetentionPolicy,
    SweepReport,
    VerifiedSaver,
)
from langgraph_checkpoint_verified.storage import files as file_records

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
DAY = timedelta(days=1)
BACKENDS = ["files", "memory", "s3"]


def config(thread_id: str, **metadata: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "metadata": metadata}


@pytest.fixture(params=BACKENDS)
def open_saver(request, tmp_path: Path) -> Callable[[], VerifiedSaver]:
    """Opens a saver on one store; each call opens it again (same records)."""
    memory = MemoryStorage()
    if request.param == "s3":
        endpoint, bucket = request.getfixturevalue("s3_bucket")
        from test_s3 import s3_storage

        return lambda: VerifiedSaver(storage=s3_storage(endpoint, bucket))
    if request.param == "memory":
        return lambda: VerifiedSaver(storage=memory)
    return lambda: VerifiedSaver(tmp_path / "store")


def chat(saver: VerifiedSaver, thread_id: str, turns: int, at: datetime, **metadata: Any) -> None:
    """``turns`` turns of the echo chat, one a minute from ``at``."""
    graph = build_graph(saver)
    for turn in range(turns):
        with time_machine.travel(at + timedelta(minutes=turn)):
            graph.invoke(
                {"messages": [("user", f"{thread_id} {turn}")]}, config(thread_id, **metadata)
            )


def snapshot(saver: VerifiedSaver, thread_id: str) -> dict[tuple[str, str], Any]:
    """Every checkpoint of a thread that verifies: what a read of it returns."""
    return {
        (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]): (
            t.checkpoint["channel_values"],
            t.metadata,
            t.parent_config,
            t.pending_writes,
        )
        for t in saver.list({"configurable": {"thread_id": thread_id}})
    }


def test_idle_and_old_threads_expire_and_the_others_stay_exactly(open_saver):
    saver = open_saver()
    chat(saver, "idle", 3, T0)  # last written T0 + 2 min
    chat(saver, "old", 2, T0)  # first written T0 ...
    chat(saver, "old", 1, T0 + 50 * DAY)  # ... but written again since
    chat(saver, "fresh", 3, T0 + 50 * DAY)
    before = {t: snapshot(saver, t) for t in ("old", "fresh")}
    idle_checkpoints = len(snapshot(saver, "idle"))
    now = T0 + 60 * DAY

    idle_only = saver.sweep(RetentionPolicy(idle=30 * DAY), now=now)
    assert idle_only.threads_deleted == ["idle"]
    assert idle_only.checkpoints_dropped == idle_checkpoints
    assert idle_only.bytes_freed > 0

    reopened = open_saver()
    assert reopened.get_tuple(config("idle")) is None
    assert "idle" not in reopened.engine.thread_ids()
    assert {t: snapshot(reopened, t) for t in ("old", "fresh")} == before

    aged = reopened.sweep(RetentionPolicy(max_age=55 * DAY), now=now)
    assert aged.threads_deleted == ["old"]
    assert snapshot(open_saver(), "fresh") == before["fresh"]


def test_expiry_may_keep_the_latest_checkpoint_instead(open_saver):
    saver = open_saver()
    chat(saver, "t", 4, T0)
    newest = saver.get_tuple(config("t"))
    count = len(snapshot(saver, "t"))
    report = saver.sweep(RetentionPolicy(idle=DAY, on_expiry="keep_latest"), now=T0 + 2 * DAY)
    assert report.threads_deleted == []
    assert report.threads_trimmed == {"t": count - 1}
    assert report.checkpoints_dropped == count - 1
    reopened = open_saver()
    assert [t.config for t in reopened.list(config("t"))] == [newest.config]
    assert reopened.get_tuple(config("t")) == newest
    # and the chat goes on from it
    build_graph(reopened).invoke({"messages": [("user", "again")]}, config("t"))
    assert reopened.get_tuple(config("t")).checkpoint["channel_values"]["turns"] == 5


def test_keep_last_keeps_the_newest_checkpoints_each_exactly_as_before(open_saver):
    saver = open_saver()
    chat(saver, "long", 10, T0)
    chat(saver, "short", 1, T0)
    before = snapshot(saver, "long")
    short_before = snapshot(saver, "short")
    report = saver.sweep(RetentionPolicy(keep_last=3), now=T0 + DAY)
    kept = sorted(before, key=lambda key: key[1], reverse=True)[:3]
    assert report.threads_trimmed == {"long": len(before) - 3}
    assert report.checkpoints_dropped == len(before) - 3
    reopened = open_saver()
    assert snapshot(reopened, "long") == {key: before[key] for key in kept}
    assert snapshot(reopened, "short") == short_before
    assert reopened.verify().ok
    # a second sweep has nothing left to do
    assert reopened.sweep(RetentionPolicy(keep_last=3), now=T0 + DAY).checkpoints_dropped == 0


def test_pinned_and_exempt_threads_are_left_alone(open_saver):
    saver = open_saver()
    chat(saver, "pinned", 2, T0, pinned=True)
    chat(saver, "vip", 2, T0, customer="vip")
    chat(saver, "other", 2, T0)
    policy = RetentionPolicy(
        idle=DAY, exempt=lambda thread_id, metadata: metadata.get("customer") == "vip"
    )
    report = saver.sweep(policy, now=T0 + 2 * DAY)
    assert report.threads_deleted == ["other"]
    assert report.skipped == {
        "pinned": "pinned (metadata 'pinned')",
        "vip": "exempt (the policy's exempt callback)",
    }
    assert open_saver().get_tuple(config("pinned")) is not None
    unpinned = RetentionPolicy(idle=DAY, pin_key=None)
    assert saver.sweep(unpinned, now=T0 + 2 * DAY).threads_deleted == ["pinned", "vip"]


def test_a_thread_is_idle_from_its_last_write_in_any_namespace(open_saver):
    """A subgraph that ran once, long ago, leaves its namespace's newest checkpoint old:
    the thread is idle only once every namespace is, the root's newer writes included."""
    saver = open_saver()
    graph = build_nested(saver)
    with time_machine.travel(T0):
        graph.invoke({"text": "t", "log": []}, config("nested"))  # waits in the subgraph
        graph.invoke(Command(resume="yes"), config("nested"))
    with time_machine.travel(T0 + 50 * DAY):
        graph.update_state(config("nested"), {"text": "edited"})  # the root namespace only
    before = snapshot(saver, "nested")
    assert len({ns for ns, _ in before}) > 1
    report = saver.sweep(RetentionPolicy(idle=30 * DAY), now=T0 + 60 * DAY)
    assert report.threads_deleted == []
    assert snapshot(open_saver(), "nested") == before


def test_a_thread_none_of_whose_checkpoints_verifies_is_left_alone(open_saver):
    """A sweep judges a thread by its newest checkpoint that verifies: a thread with none
    is skipped and said to need ``verify``, never deleted on a guess. (Its damaged
    records are moved to the quarantine by the reads, as any read does.)"""
    saver = open_saver()
    chat(saver, "broken", 2, T0)
    chat(saver, "idle", 2, T0)
    records = sorted(saver.storage.walk("threads/broken"))
    for key in records:
        if key.endswith(".ckpt"):
            saver.storage.write(key, b"garbage")
    report = open_saver().sweep(RetentionPolicy(idle=DAY), now=T0 + 30 * DAY)
    assert report.threads_deleted == ["idle"]
    assert report.skipped == {"broken": "no checkpoint verifies: run verify"}
    left = sorted(open_saver().storage.walk("threads/broken"))
    assert left == [key for key in records if not key.endswith(".ckpt")] != []


def test_limit_and_dry_run_report_exactly_what_the_sweep_does(open_saver, tmp_path):
    saver = open_saver()
    for n in range(4):
        chat(saver, f"idle-{n}", 2 + n, T0)
    chat(saver, "busy", 6, T0 + 10 * DAY)
    policy = RetentionPolicy(idle=5 * DAY, keep_last=2)
    now = T0 + 11 * DAY
    fingerprint = store_fingerprint(saver)
    planned = saver.sweep(policy, now=now, limit=3, dry_run=True)
    assert store_fingerprint(saver) == fingerprint  # a dry run changes nothing at all
    assert planned.dry_run
    done = saver.sweep(policy, now=now, limit=3)
    assert {**planned.to_dict(), "dry_run": False} == done.to_dict()
    # threads in name order: "busy" is trimmed, two idle ones deleted, then the limit
    assert done.threads_deleted == ["idle-0", "idle-1"]
    assert list(done.threads_trimmed) == ["busy"]
    assert done.skipped == dict.fromkeys(
        ["idle-2", "idle-3"], "not swept: the sweep's limit of 3 threads"
    )
    rest = open_saver().sweep(policy, now=now)
    assert rest.threads_deleted == ["idle-2", "idle-3"] and rest.threads_trimmed == {}


def store_fingerprint(saver: VerifiedSaver) -> dict[str, str]:
    """A digest of every record of the store, by key."""
    storage = saver.storage
    return {
        key: hashlib.sha256(storage.read(key) or b"").hexdigest() for key in storage.walk("threads")
    }


# -- what a resume needs -----------------------------------------------------------------


class Review(TypedDict):
    draft: str
    approved: bool


def build_review(checkpointer: Any) -> Any:
    def write(state: Review) -> dict[str, Any]:
        return {"draft": state["draft"] + "!"}

    def approve(state: Review) -> dict[str, Any]:
        return {"approved": interrupt({"draft": state["draft"]})}

    builder = StateGraph(Review)
    builder.add_node("write", write)
    builder.add_node("approve", approve)
    builder.add_edge(START, "write")
    builder.add_edge("write", "approve")
    builder.add_edge("approve", END)
    return builder.compile(checkpointer=checkpointer)


def test_a_thread_waiting_at_an_interrupt_still_resumes_after_keep_last_one(open_saver):
    saver = open_saver()
    graph = build_review(saver)
    reference = build_review(InMemorySaver())
    for target in (graph, reference):
        target.invoke({"draft": "a", "approved": False}, config("review"))
        target.invoke({"draft": "b", "approved": False}, config("review"))
    assert saver.sweep(RetentionPolicy(keep_last=1), now=T0).checkpoints_dropped > 0
    resumed = build_review(open_saver()).invoke(Command(resume=True), config("review"))
    assert resumed == reference.invoke(Command(resume=True), config("review"))


class Outer(TypedDict):
    text: str
    log: list[str]


def build_nested(checkpointer: Any) -> Any:
    def inner_step(state: Outer) -> dict[str, Any]:
        answer = interrupt("go on?")
        return {"text": state["text"] + f" inner:{answer}", "log": [*state["log"], "inner"]}

    inner = StateGraph(Outer)
    inner.add_node("inner_step", inner_step)
    inner.add_edge(START, "inner_step")
    sub = inner.compile()

    def outer_step(state: Outer) -> dict[str, Any]:
        return {"log": [*state["log"], "outer"]}

    outer = StateGraph(Outer)
    outer.add_node("outer_step", outer_step)
    outer.add_node("sub", sub)
    outer.add_edge(START, "outer_step")
    outer.add_edge("outer_step", "sub")
    outer.add_edge("sub", END)
    return outer.compile(checkpointer=checkpointer)


def test_subgraph_namespaces_are_trimmed_each_on_their_own_and_resume(open_saver):
    saver = open_saver()
    graph, reference = build_nested(saver), build_nested(InMemorySaver())
    for target in (graph, reference):
        for n in range(3):
            target.invoke({"text": f"t{n}", "log": []}, config("nested"))
            target.invoke(Command(resume=n), config("nested"))
        target.invoke({"text": "last", "log": []}, config("nested"))  # waits in the subgraph
    namespaces = {ns for ns, _ in snapshot(saver, "nested")}
    assert len(namespaces) > 1  # the subgraph's checkpoints have a namespace of their own
    saver.sweep(RetentionPolicy(keep_last=2), now=T0)
    reopened = open_saver()
    kept = snapshot(reopened, "nested")
    for ns in namespaces:
        assert 1 <= sum(1 for n, _ in kept if n == ns) <= 2
    state = build_nested(reopened).get_state(config("nested"), subgraphs=True)
    assert (
        state.tasks[0].state.values
        == reference.get_state(config("nested"), subgraphs=True).tasks[0].state.values
    )
    assert build_nested(reopened).invoke(Command(resume="x"), config("nested")) == (
        reference.invoke(Command(resume="x"), config("nested"))
    )


def extend(state: list, batches: list[list]) -> list:
    out = list(state)
    for batch in batches:
        out.extend(batch)
    return out


class Items(TypedDict):
    items: Annotated[list, DeltaChannel(extend, snapshot_frequency=4)]
    count: int


def build_items(checkpointer: Any) -> Any:
    def add(state: Items) -> dict[str, Any]:
        return {"items": [f"i{state['count']}"], "count": state["count"] + 1}

    def again(state: Items) -> str:
        return "add" if state["count"] % 5 else END

    builder = StateGraph(Items)
    builder.add_node("add", add)
    builder.add_edge(START, "add")
    builder.add_conditional_edges("add", again, ["add", END])
    return builder.compile(checkpointer=checkpointer)


def test_keep_last_keeps_what_a_delta_channel_is_rebuilt_from(open_saver):
    saver = open_saver()
    graph = build_items(saver)
    graph.invoke({"items": [], "count": 0}, config("delta"))
    graph.invoke({"count": 1}, config("delta"))
    history = {
        s.config["configurable"]["checkpoint_id"]: s.values
        for s in graph.get_state_history(config("delta"))
    }
    report = saver.sweep(RetentionPolicy(keep_last=2), now=T0)
    assert report.checkpoints_dropped > 0
    kept = build_items(open_saver())
    newest = sorted(history, reverse=True)[:2]
    for checkpoint_id in newest:
        at = {"configurable": {"thread_id": "delta", "checkpoint_id": checkpoint_id}}
        assert kept.get_state(at).values == history[checkpoint_id]
    # the ancestors the newest ones are rebuilt from were kept: more than two remain
    remaining = [
        s.config["configurable"]["checkpoint_id"] for s in kept.get_state_history(config("delta"))
    ]
    assert set(newest) <= set(remaining) and len(remaining) > 2
    # dry run and real run agree where delta channels keep ancestors
    again = open_saver()
    assert again.sweep(RetentionPolicy(keep_last=2), now=T0, dry_run=True).checkpoints_dropped == 0


async def test_asweep_is_the_same_sweep(open_saver):
    saver = open_saver()
    chat(saver, "a", 2, T0)
    chat(saver, "b", 2, T0 + 10 * DAY)
    report = await saver.asweep(RetentionPolicy(idle=5 * DAY), now=T0 + 11 * DAY)
    assert isinstance(report, SweepReport) and report.threads_deleted == ["a"]


# -- safety ------------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from echo_graph import build_graph
    from langgraph_checkpoint_verified import VerifiedSaver
    graph = build_graph(VerifiedSaver({store!r}))
    graph.invoke({{"messages": [("user", "still here")]}},
                 {{"configurable": {{"thread_id": "busy"}}}})
    """
)


def test_a_thread_written_by_another_process_during_the_sweep_is_left_alone(tmp_path):
    """The sweep judges ``busy`` idle; before it takes the thread's lock, another process
    writes a checkpoint to it (started from the policy's ``exempt`` callback, which
    the sweep calls while judging): the sweep must see it and leave the thread."""
    store = tmp_path / "store"
    saver = VerifiedSaver(store)
    chat(saver, "busy", 2, T0)
    chat(saver, "gone", 2, T0)
    script = WRITER.format(tests=str(Path(__file__).parent), store=str(store))

    def write_meanwhile(thread_id: str, metadata: Any) -> bool:
        if thread_id == "busy":
            subprocess.run([sys.executable, "-c", script], check=True)
        return False

    report = saver.sweep(RetentionPolicy(idle=DAY, exempt=write_meanwhile), now=T0 + 2 * DAY)
    assert report.threads_deleted == ["gone"]
    assert report.skipped == {"busy": "written during the sweep: in use, left alone"}
    latest = VerifiedSaver(store).get_tuple(config("busy"))
    assert latest.checkpoint["channel_values"]["messages"][-2].content == "still here"


def test_the_sweep_changes_a_thread_only_while_it_holds_the_thread_s_lock(tmp_path):
    """A trim and a delete are made under the thread's lock: a put of another process
    (whose lock is the log's ``flock``) waits for them, and never lands in a log being
    rewritten or removed."""
    import fcntl

    from langgraph_checkpoint_verified.records.keys import thread_prefix

    store = tmp_path / "store"
    saver = VerifiedSaver(store)
    chat(saver, "long", 4, T0 + 9 * DAY)
    chat(saver, "old", 1, T0)
    held: dict[str, bool] = {}

    def probe(prefix: str) -> None:
        fd = os.open(store / prefix / "log", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # even a shared one must wait
            held[prefix] = False
        except BlockingIOError:
            held[prefix] = True
        finally:
            os.close(fd)

    real_compact, real_delete_tree = saver.storage.compact, saver.storage.delete_tree

    def compact(prefix: str, *, changes: Any = None) -> None:
        probe(prefix)
        real_compact(prefix, changes=changes)

    def delete_tree(prefix: str) -> None:
        probe(prefix)
        real_delete_tree(prefix)

    saver.storage.compact, saver.storage.delete_tree = compact, delete_tree
    report = saver.sweep(RetentionPolicy(idle=5 * DAY, keep_last=2), now=T0 + 10 * DAY)
    assert report.threads_deleted == ["old"]
    assert set(report.threads_trimmed) == {"long"}
    assert held == {thread_prefix("long"): True, thread_prefix("old"): True}


SWEEPER = textwrap.dedent(
    """
    import sys
    from datetime import datetime, timedelta
    from langgraph_checkpoint_verified import RetentionPolicy, VerifiedSaver
    saver = VerifiedSaver(sys.argv[1])
    real_compact = saver.storage.compact

    def compact(prefix, *, changes=None):
        print(prefix, flush=True)  # the parent kills somewhere after this line
        real_compact(prefix, changes=changes)

    saver.storage.compact = compact
    policy = RetentionPolicy(idle=timedelta(days=5), keep_last=2)
    saver.sweep(policy, now=datetime.fromisoformat(sys.argv[2]))
    print("done", flush=True)
    """
)
SEED = 20261125


def test_a_sweep_killed_at_random_moments_leaves_each_thread_whole_or_swept(tmp_path):
    """SIGKILL at a random point of each of several sweeps: every thread reads back
    exactly as before, or exactly as the sweep would leave it; a sweep run again
    then finishes the job, and the store verifies."""
    origin = tmp_path / "origin"
    saver = VerifiedSaver(origin)
    threads = [f"t{n}" for n in range(6)]
    for n, thread_id in enumerate(threads):
        chat(saver, thread_id, 3 + n, T0 + (0 if n % 2 else 10) * DAY)
    now = T0 + 11 * DAY
    policy = RetentionPolicy(idle=5 * DAY, keep_last=2)
    before = {t: snapshot(saver, t) for t in threads}
    expected_dir = tmp_path / "expected"
    shutil.copytree(origin, expected_dir)
    expected_saver = VerifiedSaver(expected_dir)
    expected_saver.sweep(policy, now=now)
    expected = {t: snapshot(expected_saver, t) for t in threads}
    assert all(expected[t] != before[t] for t in threads)  # every thread is changed
    rng = random.Random(SEED)
    for attempt in range(4):
        store = tmp_path / f"killed-{attempt}"
        shutil.copytree(origin, store)
        child = subprocess.Popen(
            [sys.executable, "-c", SWEEPER, str(store), now.isoformat()],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        for _ in range(rng.randrange(1, len(threads) + 1)):
            if not child.stdout.readline():
                break  # it finished first
        child.send_signal(signal.SIGKILL)
        child.wait()
        after = VerifiedSaver(store)
        for thread_id in threads:
            found = snapshot(after, thread_id)
            assert found in (before[thread_id], expected[thread_id]), thread_id
        after.sweep(policy, now=now)
        finished = VerifiedSaver(store)
        assert {t: snapshot(finished, t) for t in threads} == expected
        assert finished.verify().ok
        assert not [p for p in store.rglob("*") if p.name.startswith(".tmp-")]


def test_a_sweep_syncs_the_renames_of_the_threads_it_deletes_together(tmp_path, monkeypatch):
    """Each thread a sweep deletes leaves the store as its directory is renamed away; the
    renames are made durable together, one sync of ``threads/`` for every
    ``DELETIONS_SYNCED_TOGETHER`` of them, and each tree is removed only after that.
    ``delete_thread`` on its own still syncs at once."""
    store = tmp_path / "store"
    saver = VerifiedSaver(store)
    old = [f"old{n:02d}" for n in range(12)]
    for thread_id in old:
        chat(saver, thread_id, 1, T0)
    chat(saver, "recent", 2, T0 + 10 * DAY)
    chat(saver, "deleted-alone", 1, T0)
    kept = snapshot(saver, "recent")
    before = set((store / "threads").iterdir())
    monkeypatch.setattr(file_records, "DELETIONS_SYNCED_TOGETHER", 5)
    synced: list[str] = []
    renamed_at_sync: list[int] = []
    sync_directory = file_records.RecordFileStorage.sync_directory

    def counted(self: Any, directory: str) -> None:
        synced.append(directory)
        renamed_at_sync.append(len(list((store / "threads").glob(".tmp-*"))))
        sync_directory(self, directory)

    monkeypatch.setattr(file_records.RecordFileStorage, "sync_directory", counted)
    saver.delete_thread("deleted-alone")
    assert synced == [str(store / "threads")]
    synced.clear()
    renamed_at_sync.clear()

    report = saver.sweep(RetentionPolicy(idle=5 * DAY), now=T0 + 11 * DAY)

    assert report.threads_deleted == old
    assert synced == [str(store / "threads")] * 3  # 12 threads: 5, 5, then 2 as it ends
    assert renamed_at_sync == [5, 5, 2]  # each synced while still there, then removed
    left = set((store / "threads").iterdir())
    assert len(left) == 1 and left < before  # the recent thread's: nothing renamed left
    reopened = VerifiedSaver(store)
    assert all(reopened.get_tuple(config(t)) is None for t in [*old, "deleted-alone"])
    assert snapshot(reopened, "recent") == kept
    assert reopened.verify().ok


DELETING_SWEEPER = textwrap.dedent(
    """
    import sys
    from datetime import datetime, timedelta
    from langgraph_checkpoint_verified import RetentionPolicy, VerifiedSaver
    saver = VerifiedSaver(sys.argv[1])
    real_delete_tree = saver.storage.delete_tree

    def delete_tree(prefix):
        real_delete_tree(prefix)
        print(prefix, flush=True)  # renamed away
        sys.stdin.readline()  # the parent says go on, or kills it here

    saver.storage.delete_tree = delete_tree
    saver.sweep(RetentionPolicy(idle=timedelta(days=5)), now=datetime.fromisoformat(sys.argv[2]))
    print("done", flush=True)
    """
)


def test_a_sweep_killed_between_its_deletions_and_their_sync_leaves_each_thread_whole_or_gone(
    tmp_path,
):
    """SIGKILL after some of a sweep's deletions, before they were synced and removed: each
    thread reads back whole or is gone; the renamed trees the sweep left are removed by the
    next process that lists the threads (their writer is gone), and a sweep run again
    finishes the job."""
    origin = tmp_path / "origin"
    saver = VerifiedSaver(origin)
    old = [f"old{n}" for n in range(8)]
    for thread_id in old:
        chat(saver, thread_id, 2, T0)
    chat(saver, "recent", 2, T0 + 10 * DAY)
    before = {t: snapshot(saver, t) for t in [*old, "recent"]}
    now = T0 + 11 * DAY
    rng = random.Random(SEED)
    for attempt in range(3):
        store = tmp_path / f"killed-{attempt}"
        shutil.copytree(origin, store)
        child = subprocess.Popen(
            [sys.executable, "-c", DELETING_SWEEPER, str(store), now.isoformat()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None
        deleted = rng.randrange(1, len(old))  # fewer than all: killed inside its block
        for n in range(deleted):
            assert child.stdout.readline()
            if n + 1 < deleted:
                child.stdin.write("go on\n")
                child.stdin.flush()
        child.send_signal(signal.SIGKILL)  # waiting after its last deletion
        child.wait()
        assert len(list((store / "threads").glob(".tmp-*"))) == deleted  # not yet removed
        after = VerifiedSaver(store)
        for thread_id, whole in before.items():
            assert snapshot(after, thread_id) in (whole, {}), thread_id
        assert snapshot(after, "recent") == before["recent"]
        report = after.sweep(RetentionPolicy(idle=5 * DAY), now=now)
        assert len(report.threads_deleted) == len(old) - deleted  # what the killed one left
        assert not list(store.rglob(".tmp-*"))  # the killed sweep's renamed trees: removed
        finished = VerifiedSaver(store)
        assert [t for t in before if snapshot(finished, t)] == ["recent"]
        assert finished.verify().ok


FAILING_SYNC_SWEEPER = textwrap.dedent(
    """
    import errno, os, sys
    from datetime import datetime, timedelta
    from langgraph_checkpoint_verified import RetentionPolicy, VerifiedSaver
    from langgraph_checkpoint_verified.storage.files import RecordFileStorage
    store = sys.argv[1]
    real_sync_directory = RecordFileStorage.sync_directory

    def sync_directory(self, directory):
        if os.path.basename(directory) == "threads":
            raise OSError(errno.EIO, os.strerror(errno.EIO), directory)
        real_sync_directory(self, directory)

    RecordFileStorage.sync_directory = sync_directory
    saver = VerifiedSaver(store)
    now = datetime.fromisoformat(sys.argv[2])
    try:
        saver.sweep(RetentionPolicy(idle=timedelta(days=5)), now=now)
    except OSError as exc:
        print("raised", errno.errorcode[exc.errno], flush=True)
    else:
        print("returned", flush=True)
    config = {"configurable": {"thread_id": sys.argv[3]}}
    print("deleted thread", "absent" if saver.get_tuple(config) is None else "present", flush=True)
    """
)


def test_a_sweep_whose_sync_fails_raises_and_its_renamed_trees_are_removed_later(tmp_path):
    """The directory sync that makes a sweep's deletions durable fails (EIO): the sweep
    raises it instead of returning a report. The threads it renamed away read as absent,
    and their trees are left in place, not removed before their renames are durable; the
    next process to list the threads, once the sweep's is gone, removes them. Nothing
    else is touched."""
    store = tmp_path / "store"
    saver = VerifiedSaver(store)
    old = [f"old{n}" for n in range(4)]
    for thread_id in old:
        chat(saver, thread_id, 2, T0)
    chat(saver, "recent", 2, T0 + 10 * DAY)
    kept = snapshot(saver, "recent")
    now = T0 + 11 * DAY
    swept = subprocess.run(
        [sys.executable, "-c", FAILING_SYNC_SWEEPER, str(store), now.isoformat(), old[0]],
        capture_output=True,
        text=True,
        check=True,
    )
    assert swept.stdout.splitlines() == ["raised EIO", "deleted thread absent"], swept.stderr
    assert len(list((store / "threads").glob(".tmp-*"))) == len(old)  # not removed
    after = VerifiedSaver(store)
    assert [t for t in [*old, "recent"] if snapshot(after, t)] == ["recent"]
    assert snapshot(after, "recent") == kept
    listed = {c.config["configurable"]["thread_id"] for c in after.list(None)}
    assert listed == {"recent"}
    assert not list(store.rglob(".tmp-*"))  # removed by listing threads/: their writer is gone
    assert after.sweep(RetentionPolicy(idle=5 * DAY), now=now).threads_deleted == []
    assert after.verify().ok


# -- the background sweeper --------------------------------------------------------------


def test_a_background_sweeper_sweeps_with_the_saver_and_stops_with_it(tmp_path):
    store = tmp_path / "store"
    chat(VerifiedSaver(store), "ancient", 2, datetime(2020, 1, 1, tzinfo=timezone.utc))
    reports: list[SweepReport] = []
    saver = VerifiedSaver(
        store,
        retention=RetentionPolicy(idle=30 * DAY),
        sweep_interval=3600,
        on_sweep=reports.append,
    )
    assert saver.sweeper is not None
    assert saver.sweeper.wait_for_sweeps(1, timeout=300)
    assert reports[0].threads_deleted == ["ancient"]
    # a second saver on the same store shares the one sweeper
    other = VerifiedSaver(store, retention=RetentionPolicy(idle=DAY))
    assert other.sweeper is saver.sweeper
    other.close()
    assert saver.sweeper.users == 1
    saver.close()
    assert saver.sweeper.users == 0
    assert saver.sweeper.thread is not None and not saver.sweeper.thread.is_alive()


async def test_a_saver_made_on_an_event_loop_sweeps_in_a_task(tmp_path):
    store = tmp_path / "store"
    chat(VerifiedSaver(store), "ancient", 2, datetime(2020, 1, 1, tzinfo=timezone.utc))
    swept = asyncio.Event()
    saver = VerifiedSaver(
        store,
        retention=RetentionPolicy(idle=30 * DAY),
        sweep_interval=3600,
        on_sweep=lambda report: swept.set(),
    )
    assert saver.sweeper is not None and saver.sweeper.task is not None
    await asyncio.wait_for(swept.wait(), 300)
    assert saver.get_tuple(config("ancient")) is None
    saver.close()
    await asyncio.wait_for(saver.sweeper.task, 300)


def test_a_policy_says_clearly_what_is_wrong():
    with pytest.raises(ValueError, match="idle must be a positive datetime.timedelta"):
        RetentionPolicy(idle=30)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keep_last must be an int >= 1"):
        RetentionPolicy(keep_last=0)
    with pytest.raises(ValueError, match="on_expiry must be"):
        RetentionPolicy(on_expiry="archive")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sweep needs a RetentionPolicy"):
        VerifiedSaver.in_memory().sweep()


def test_prune_takes_the_servers_own_word_for_delete(tmp_path):
    saver = VerifiedSaver(tmp_path / "store")
    chat(saver, "t", 2, T0)
    saver.prune(["t"], strategy="delete_all")
    assert saver.get_tuple(config("t")) is None


def test_a_sweep_on_a_bucket_costs_a_few_requests_a_thread(fault_proxy, s3_bucket):
    """Counted at the S3 proxy, by a saver that has read nothing yet (another machine)."""
    from test_s3 import s3_storage

    _, bucket = s3_bucket
    writer = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    for n in range(4):
        chat(writer, f"t{n}", 3, T0 + (0 if n % 2 else 10) * DAY)
    sweeper = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    fault_proxy.clear_counts()
    report = sweeper.sweep(RetentionPolicy(idle=5 * DAY), now=T0 + 11 * DAY)
    assert report.threads_deleted == ["t1", "t3"]
    per_thread = {op: n / 4 for op, n in fault_proxy.counts.items() if n}
    # judging a thread: its namespaces, its newest checkpoint's name (after the
    # namespace's head), that record; deleting one: its names again (the re-check),
    # its records and sizes, and one batched DELETE
    assert fault_proxy.counts["GET"] == 4 * 2
    assert fault_proxy.counts["DELETE"] == 2
    assert fault_proxy.counts["LIST"] <= 1 + 4 * 3 + 2 * 7, per_thread
    assert fault_proxy.counts["PUT"] == 0


def test_a_savers_allowlist_clones_do_not_own_its_sweeper(tmp_path):
    """LangGraph asks for clones (``with_allowlist``) and closes them with the saver:
    the sweeper is released once, by the saver that started it."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    strict = JsonPlusSerializer(allowed_msgpack_modules=None)  # as LANGGRAPH_STRICT_MSGPACK
    saver = VerifiedSaver(tmp_path / "store", serde=strict, retention=RetentionPolicy(idle=DAY))
    clone = saver.with_allowlist([("my_module", "MyClass")])
    assert clone is not saver and clone.sweeper is None
    sweeper = saver.sweeper
    assert sweeper is not None and sweeper.users == 1
    saver.close()  # closes the clone too
    assert sweeper.users == 0
    assert sweeper.thread is not None and not sweeper.thread.is_alive()
