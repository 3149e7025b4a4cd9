"""Reads and writes that race with maintenance or with each other stay consistent.

* ``prune`` (and ``delete_for_runs``) beside a running graph never makes a healthy
  thread look damaged: readers see the thread before or after, never a restart; a
  read caught between the rewrite and the removal reads the checkpoint again.
* Concurrent ``put_writes`` of growing prefixes for one (checkpoint, task), the
  way LangGraph saves the null task's writes again, keep every write.
* A checkpoint stored whole (``full_snapshot_every``) holds every channel the
  checkpoint has, including a value it inherits unchanged from its parent, so one
  damaged record costs only the checkpoints until the next one stored whole.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import FileStorage, MemoryStorage, VerifiedSaver
from langgraph_checkpoint_verified.records.keys import checkpoint_key

BACKENDS = ["files", "memory"]


def open_saver(backend: str, path: Path, **kwargs: Any) -> VerifiedSaver:
    if backend == "files":
        return VerifiedSaver(path / "store", fsync=False, **kwargs)
    return VerifiedSaver.in_memory(**kwargs)


# -- prune beside a running graph ---------------------------------------------------------


class Counter(TypedDict, total=False):
    count: int
    payload: str


def counter_graph(saver: VerifiedSaver) -> Any:
    def step(state: Counter) -> dict:
        update: dict = {"count": state.get("count", 0) + 1}
        if "payload" not in state:
            update["payload"] = "x" * 20_000  # set once: later checkpoints refer to it
        return update

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("maintenance", ["prune", "delete_for_runs"])
def test_maintenance_beside_a_running_graph_never_restarts_the_thread(tmp_path, maintenance):
    saver = VerifiedSaver(tmp_path / "store", fsync=False)
    graph = counter_graph(saver)
    config = {"configurable": {"thread_id": "t"}}
    runs = 120
    finished_runs: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def maintain() -> None:
        try:
            while not stop.is_set():
                if maintenance == "prune":
                    saver.prune(["t"])
                elif len(finished_runs) > 1:
                    # every run but the newest: its checkpoints refer to values that
                    # older runs stored, so survivors are rewritten, then those removed
                    saver.delete_for_runs(finished_runs[:-1])
        except BaseException as exc:  # reported below
            errors.append(exc)

    worker = threading.Thread(target=maintain)
    worker.start()
    try:
        for expected in range(1, runs + 1):
            run_id = str(uuid.uuid4())
            graph.invoke({}, {"configurable": {"thread_id": "t", "run_id": run_id}})
            finished_runs.append(run_id)
            state = graph.get_state(config).values
            assert state.get("count") == expected, f"thread restarted at run {expected}: {state}"
            assert len(state["payload"]) == 20_000
    finally:
        stop.set()
        worker.join()
    assert not errors, errors
    assert saver.stats.restarts_from_scratch == 0
    assert saver.stats.damaged_records == 0
    assert saver.stats.fallbacks == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_caught_by_prune_between_its_records_reads_the_checkpoint_again(tmp_path, backend):
    """``prune`` rewrites the checkpoint it keeps to hold its values itself, then removes
    the records it referred to. A read of that checkpoint made before, whose next record
    (the one holding ``payload``) is read after, finds that record gone: it reads the
    checkpoint again and returns it, not an older one or none (a thread restarted)."""
    # two savers on one storage, as a server's savers of one store are
    shared = FileStorage(tmp_path / "store", fsync=False) if backend == "files" else MemoryStorage()
    writer = VerifiedSaver(storage=shared)
    graph = counter_graph(writer)
    config = {"configurable": {"thread_id": "t"}}
    for _ in range(4):
        graph.invoke({}, config)
    newest = writer.get_tuple(config).config["configurable"]["checkpoint_id"]

    reader = VerifiedSaver(storage=shared)
    read = shared.read
    checkpoints_read: list[str] = []
    pruned = threading.Event()
    reading = threading.current_thread()  # not prune's own reads

    def read_and_prune_once(key: str) -> Any:
        if key.endswith(".ckpt") and not pruned.is_set() and threading.current_thread() is reading:
            checkpoints_read.append(key)
            if newest not in key:  # the newest was read: now the record holding payload
                pruner = threading.Thread(target=lambda: (writer.prune(["t"]), pruned.set()))
                pruner.start()
                pruner.join()
        return read(key)

    shared.read = read_and_prune_once  # type: ignore[method-assign]
    found = reader.get_tuple(config)
    assert pruned.is_set() and newest in checkpoints_read[0], checkpoints_read
    assert found is not None and found.config["configurable"]["checkpoint_id"] == newest
    assert found.checkpoint["channel_values"]["count"] == 4
    assert len(found.checkpoint["channel_values"]["payload"]) == 20_000
    assert reader.stats.damaged_records == reader.stats.fallbacks == 0


# -- concurrent put_writes of one task ----------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_put_writes_of_one_task_keep_every_write(tmp_path, backend):
    # fsync on, as by default: the slower the write, the wider the window for a race
    saver = VerifiedSaver(tmp_path / "store") if backend == "files" else VerifiedSaver.in_memory()
    checkpoint = {
        "v": 1,
        "id": "1",
        "ts": "",
        "channel_values": {},
        "channel_versions": {},
        "versions_seen": {},
    }
    config = saver.put({"configurable": {"thread_id": "t"}}, checkpoint, {}, {})
    writes = [("ch", f"w{i}") for i in range(40)]
    threads_n = 8
    barrier = threading.Barrier(threads_n)

    def save_prefixes(offset: int) -> None:
        barrier.wait()
        for end in range(1 + offset, len(writes) + 1, threads_n):
            saver.put_writes(config, writes[:end], "task")

    for trial in range(10):
        config = saver.put(config, {**checkpoint, "id": f"{trial + 2}"}, {}, {})
        workers = [threading.Thread(target=save_prefixes, args=(i,)) for i in range(threads_n)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        stored = [value for _, _, value in saver.get_tuple(config).pending_writes]
        assert stored == [value for _, value in writes]


# -- full snapshots keep inherited values ---------------------------------------------------


def extend(state: list, batches: list[list]) -> list:
    out = list(state)
    for batch in batches:
        out.extend(batch)
    return out


class DeltaState(TypedDict):
    items: Annotated[list, DeltaChannel(extend, snapshot_frequency=4)]
    count: int


def delta_graph(saver: Any) -> Any:
    def add(state: DeltaState) -> dict:
        return {"items": [f"i{state['count']}"], "count": state["count"] + 1}

    def count_only(state: DeltaState) -> dict:
        return {"count": state["count"] + 1}

    builder = StateGraph(DeltaState)
    builder.add_node("add", add)
    builder.add_node("count_only", count_only)
    builder.add_edge(START, "add")
    builder.add_edge("add", "count_only")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("every", [1, 2, 3])
def test_full_snapshots_hold_values_inherited_from_the_parent(tmp_path, backend, every):
    saver = open_saver(backend, tmp_path, full_snapshot_every=every)
    reference_saver = InMemorySaver()
    graphs = [delta_graph(saver), delta_graph(reference_saver)]
    config = {"configurable": {"thread_id": "t"}}
    for graph in graphs:
        graph.invoke({"items": ["start"], "count": 0}, config)
        for _ in range(4):
            graph.invoke({"count": 0}, config)
    ours = [t.checkpoint["channel_values"] for t in saver.list(config)]
    theirs = [t.checkpoint["channel_values"] for t in reference_saver.list(config)]
    assert len(ours) == len(theirs)
    for step, (got, want) in enumerate(zip(ours, theirs, strict=True)):
        assert got.keys() == want.keys(), f"checkpoint {step} from the newest"
        assert repr(got) == repr(want), f"checkpoint {step} from the newest"
    assert graphs[0].get_state(config).values == graphs[1].get_state(config).values


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_damaged_record_costs_only_the_checkpoints_until_the_next_full_one(tmp_path, backend):
    """What ``full_snapshot_every`` bounds: the record that holds ``payload`` damaged,
    the checkpoints referring to it for ``payload`` are unusable up to the next one
    stored whole, which holds ``payload`` itself; from there on the thread is intact."""
    every = 4
    saver = open_saver(backend, tmp_path, full_snapshot_every=every)
    graph = counter_graph(saver)
    config = {"configurable": {"thread_id": "t"}}
    for _ in range(5):
        graph.invoke({}, config)
    chain = [t for t in saver.list(config)][::-1]  # oldest first; the first is stored whole
    ids = [t.config["configurable"]["checkpoint_id"] for t in chain]
    holder = next(i for i, t in enumerate(chain) if "payload" in t.checkpoint["channel_values"])
    next_full = next(i for i in range(holder + 1, len(chain)) if i % every == 0)
    assert next_full < len(chain) - 1, "checkpoints after the next full one, to be read"
    saver.storage.write(checkpoint_key("t", "", ids[holder]), b"garbage")

    fresh = VerifiedSaver(storage=saver.storage, full_snapshot_every=every)
    report = fresh.verify()
    assert sorted(u.checkpoint_id for u in report.unusable_checkpoints) == ids[holder:next_full]
    newest = fresh.get_tuple(config)
    assert newest is not None and newest.config["configurable"]["checkpoint_id"] == ids[-1]
    assert newest.checkpoint["channel_values"]["count"] == 5
    assert len(newest.checkpoint["channel_values"]["payload"]) == 20_000
    assert fresh.stats.fallbacks == 0
