"""What one ``put`` and one ``put_writes`` cost in syscalls, on a warm thread of a real graph.

``faultfs.FaultFS.counting`` records every ``os`` call that changes the store; each
``put`` and ``put_writes`` of ``VerifiedSaver(path)`` is measured in the thread that
makes it, so LangGraph's background threads do not mix their calls up. A first run of
the graph warms the thread up (its directories and lock file exist from then on); every
call of the second run must cost exactly the figures below.

Each call is one append to the thread's log and one ``fdatasync``, then one ``pwrite``
of the parity records of the stripes the append touched (``docs/format.md``), which is
never synced on its own: no new file, no rename, no directory sync. A call that ends
while the next one waits for the thread's lock passes its append on
(``storage.log.commits``): it costs its append alone, and the next call's one
``fdatasync`` and one parity ``pwrite`` cover both.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faultfs import FaultFS, Op, Tally
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.storage.log.room import MIN_ROOM
from langgraph_checkpoint_verified.storage.log.thread_log import LOG_NAME

# put: one entry appended to the thread's log, one fdatasync, one write of its parity;
# no new file, no rename, no directory sync (the log, its parity and its directory were
# made by the thread's first call)
SYNCS_PER_PUT = 1
WRITES_PER_PUT = 2
DIR_SYNCS_PER_PUT = 0
RENAMES_PER_PUT = 0
LINKS_PER_PUT = 0
NEW_FILES_PER_PUT = 0
NEW_DIRS_PER_PUT = 0

# put_writes: the same, one entry per batch of writes
SYNCS_PER_PUT_WRITES = 1
WRITES_PER_PUT_WRITES = 2
DIR_SYNCS_PER_PUT_WRITES = 0
RENAMES_PER_PUT_WRITES = 0
LINKS_PER_PUT_WRITES = 0
NEW_FILES_PER_PUT_WRITES = 0
NEW_DIRS_PER_PUT_WRITES = 0

EXPECTED = {
    "put": {
        "syncs": SYNCS_PER_PUT,
        "writes": WRITES_PER_PUT,
        "dir_syncs": DIR_SYNCS_PER_PUT,
        "renames": RENAMES_PER_PUT,
        "links": LINKS_PER_PUT,
        "new_files": NEW_FILES_PER_PUT,
        "new_dirs": NEW_DIRS_PER_PUT,
    },
    "put_writes": {
        "syncs": SYNCS_PER_PUT_WRITES,
        "writes": WRITES_PER_PUT_WRITES,
        "dir_syncs": DIR_SYNCS_PER_PUT_WRITES,
        "renames": RENAMES_PER_PUT_WRITES,
        "links": LINKS_PER_PUT_WRITES,
        "new_files": NEW_FILES_PER_PUT_WRITES,
        "new_dirs": NEW_DIRS_PER_PUT_WRITES,
    },
}

# a call whose append the next call's sync covers: its append, nothing else
PASSED_ON = {
    "syncs": 0,
    "writes": 1,
    "dir_syncs": 0,
    "renames": 0,
    "links": 0,
    "new_files": 0,
    "new_dirs": 0,
}

STEPS_PER_RUN = 6


class Loop(TypedDict):
    count: int


def build_graph(saver: VerifiedSaver) -> Any:
    """One node that runs ``STEPS_PER_RUN`` times per run: a ``put_writes`` and a ``put`` each."""

    def step(state: Loop) -> dict:
        return {"count": state["count"] + 1}

    builder = StateGraph(Loop)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges(
        "step", lambda state: "step" if state["count"] % STEPS_PER_RUN else END
    )
    return builder.compile(checkpointer=saver)


class CountingSaver(VerifiedSaver):
    """Measures each ``put`` and ``put_writes`` in the thread that makes it."""

    def __init__(self, path: Path, disk: FaultFS, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.disk = disk
        self.costs: list[tuple[str, dict[str, int]]] = []
        self.measuring = False

    def _measured(self, method: str, call: Any) -> Any:
        with self.disk.capture() as ops:
            result = call()
        if self.measuring:
            self.costs.append((method, cost(ops)))
        return result

    def put(self, config, checkpoint, metadata, new_versions):
        return self._measured(
            "put",
            lambda: super(CountingSaver, self).put(config, checkpoint, metadata, new_versions),
        )

    def put_writes(self, config, writes, task_id, task_path=""):
        return self._measured(
            "put_writes",
            lambda: super(CountingSaver, self).put_writes(config, writes, task_id, task_path),
        )


def cost(ops: list[Op]) -> dict[str, int]:
    """What a call did, its room's zeros apart (a write to the log of a room's size)."""
    room = [
        op
        for op in ops
        if op.kind == "write" and op.path.endswith(f"/{LOG_NAME}") and op.size >= MIN_ROOM
    ]
    tally = Tally.of(op for op in ops if op not in room)
    return {
        "room_writes": len(room),
        "syncs": tally.syncs,
        "writes": tally.writes,
        "dir_syncs": tally.dir_syncs,
        "renames": tally.renames,
        "links": tally.links,
        "new_files": tally.new_files,
        "new_dirs": tally.new_dirs,
    }


def steady_state_costs(root: Path, *, fsync: bool, api: str) -> list[tuple[str, dict[str, int]]]:
    """The cost of every call of a second run of the graph on one thread."""
    root.mkdir()
    with FaultFS.counting(root) as disk:
        saver = CountingSaver(root, disk, fsync=fsync)
        graph = build_graph(saver)
        config = {"configurable": {"thread_id": "warm"}}
        for run in range(2):
            saver.measuring = run == 1  # the first run makes the thread's directories
            if api == "sync":
                graph.invoke({"count": 0}, config)
            else:
                asyncio.run(graph.ainvoke({"count": 0}, config))
    assert not disk.unmodelled
    assert graph.get_state(config).values == {"count": STEPS_PER_RUN}
    methods = [method for method, _ in saver.costs]
    # the input checkpoint and one per step; the input's writes and each step's
    assert methods.count("put") == STEPS_PER_RUN + 2, methods
    assert methods.count("put_writes") == STEPS_PER_RUN + 1, methods
    return saver.costs


def outgrown_once(costs: list[tuple[str, dict[str, int]]]) -> list[tuple[str, dict[str, int]]]:
    """The costs with the room's zeros set apart: a call whose entries outgrow the log's
    room writes new room after them first (``storage.log.room``), one write more, and a
    run's few KB outgrow it once at most."""
    assert sum(measured.pop("room_writes") for _, measured in costs) <= 1, costs
    return costs


@pytest.mark.parametrize("api", ["sync", "async"])
def test_each_put_and_put_writes_on_a_warm_thread_costs_the_same(tmp_path, api):
    costs = outgrown_once(steady_state_costs(tmp_path / "store", fsync=True, api=api))
    for method, measured in costs:
        assert measured in (EXPECTED[method], PASSED_ON), f"{method}: measured {measured}"
    # every call passed on returned once another call's sync covered it: at least one
    # call of every chain synced
    passed_on = [measured for _, measured in costs if measured == PASSED_ON]
    assert len(passed_on) < len(costs) - len(passed_on)


@pytest.mark.parametrize("api", ["sync", "async"])
def test_without_fsync_nothing_is_synced_and_the_rest_is_the_same(tmp_path, api):
    costs = outgrown_once(steady_state_costs(tmp_path / "store", fsync=False, api=api))
    for method, measured in costs:
        assert measured["syncs"] == 0, f"{method}: measured {measured}"
        assert measured["dir_syncs"] == 0
        without_syncs = {**EXPECTED[method], "syncs": 0, "dir_syncs": 0}
        assert measured == without_syncs, f"{method}: measured {measured}"


def put_first(saver: VerifiedSaver, thread_id: str) -> None:
    """The first checkpoint of a thread, made by the call."""
    checkpoint = {
        "v": 1,
        "id": "1",
        "ts": "",
        "channel_values": {"x": 1},
        "channel_versions": {"x": 1},
        "versions_seen": {},
    }
    saver.put({"configurable": {"thread_id": thread_id}}, checkpoint, {}, {"x": 1})


NEW_LOG_SYNCS = [
    ("sync", f"threads/new/{LOG_NAME}"),
    ("dirsync", "threads/new"),
    ("dirsync", "threads"),
]
"""A new thread's log synced, then its directory and the one above (``threads``)."""


def syncs_of(ops: list[Op]) -> list[tuple[str, str]]:
    """The file and directory syncs among ``ops``, in order, by path."""
    return [(op.kind, op.path) for op in ops if op.kind in ("sync", "dirsync")]


@pytest.fixture
def a_thread_in(tmp_path: Path) -> Iterator[tuple[FaultFS, VerifiedSaver]]:
    """A counted store with one thread in it already (``threads/`` made and synced)."""
    root = tmp_path / "store"
    root.mkdir()
    with FaultFS.counting(root) as disk:
        saver = VerifiedSaver(root)
        put_first(saver, "old")
        yield disk, saver


def test_the_counts_see_the_calls_the_saver_makes(tmp_path):
    # the counter is not blind: a put on a new thread costs more (its directories and its
    # log), and every operation is made by the thread that called put
    root = tmp_path / "store"
    root.mkdir()
    with FaultFS.counting(root) as disk:
        saver = VerifiedSaver(root)
        with disk.capture() as ops:
            put_first(saver, "new")
    first = Tally.of(ops)
    assert first.new_dirs > 0 and first.dir_syncs > DIR_SYNCS_PER_PUT
    # the thread's log (its flock is the thread's lock) and the log's parity
    assert first.new_files == NEW_FILES_PER_PUT + 2
    assert ops == disk.ops[-len(ops) :]  # after the ones opening the store made
    assert {op.thread for op in ops} == {threading.get_ident()}


def test_a_new_thread_s_first_put_syncs_its_log_before_its_directories(a_thread_in):
    # the log's fdatasync commits the file system's journal with the new directory
    # entries in it; the directory syncs made after it (still needed where a file's sync
    # does not carry its name) then find nothing left to commit: one journal commit for
    # a new thread, not three. All three are made before put returns.
    disk, saver = a_thread_in
    with disk.capture() as ops:
        put_first(saver, "new")
    assert syncs_of(ops) == NEW_LOG_SYNCS
    # nothing but the parity written after them: the log's bytes were all synced first
    after = ops[[op.kind for op in ops].index("dirsync") :]
    assert [op.path for op in after if op.kind == "write"] == [f"threads/new/{LOG_NAME}.parity"]


def test_a_lock_block_that_appends_nothing_syncs_the_new_log_s_directories(a_thread_in):
    # the block's flock makes the log; with no append to sync them after, its directory
    # entries are synced as the block ends, before another process may append to it
    disk, saver = a_thread_in
    with disk.capture() as ops, saver.engine.storage.lock("threads/empty", exclusive=True):
        inside = len(ops)
    made = [op.path for op in ops[:inside] if op.kind in ("mkdir", "create")]
    assert made == [
        "threads/empty",
        f"threads/empty/{LOG_NAME}.parity",
        f"threads/empty/{LOG_NAME}",
    ]
    assert [(op.kind, op.path) for op in ops[inside:]] == [
        ("dirsync", "threads/empty"),
        ("dirsync", "threads"),
    ]


def made_before_its_flock(saver: VerifiedSaver, thread_key: str) -> None:
    """Leave ``saver`` where a process making a thread's log stands before it takes the
    log's ``flock``: the directory, the parity sidecar and the empty log made, nothing
    synced, nothing appended. Another saver on the store may take the ``flock`` first."""
    storage = saver.engine.storage
    storage.appender._append_descriptor(storage._log(thread_key))


def test_the_first_put_to_a_log_another_process_made_syncs_its_directories(a_thread_in):
    # the maker syncs a new log's directory entries after its first append, under the
    # log's flock; another process that takes the flock between the log's making and the
    # maker's first flock appends first, and its put may not rely on entries nobody has
    # synced yet: a log found empty is one whose entries are synced by its first append
    disk, saver = a_thread_in
    maker = VerifiedSaver(saver.engine.storage.root)  # its own descriptors and flocks
    made_before_its_flock(maker, "threads/new")
    with disk.capture() as ops:
        put_first(saver, "new")
    # and the store's own directory: ``threads`` may be as new
    assert syncs_of(ops) == [*NEW_LOG_SYNCS, ("dirsync", "")]
    # the maker goes on to append after it, to the log as it finds it, and syncs what it
    # made as it always does, and the store's directory: it did not make ``threads``
    # either (``test_a_put_beside_another_process_making_a_thread_survives_a_power_cut``)
    with disk.capture() as ops:
        put_first(maker, "new")
    assert syncs_of(ops) == [*NEW_LOG_SYNCS, ("dirsync", "")]
    assert len(list(VerifiedSaver(saver.engine.storage.root).list(None))) == 2


def test_a_log_made_in_a_thread_directory_made_elsewhere_syncs_the_ones_above(a_thread_in):
    # the thread's directory made by another process (not synced yet), its log by this one
    disk, saver = a_thread_in
    maker = VerifiedSaver(saver.engine.storage.root)
    maker.engine.storage.files.ensure_directory(
        f"{saver.engine.storage.root}/threads/new", sync=False
    )
    with disk.capture() as ops:
        put_first(saver, "new")
    assert syncs_of(ops) == [*NEW_LOG_SYNCS, ("dirsync", "")]


@pytest.mark.parametrize("seed", range(1, 9))
@pytest.mark.parametrize(
    ("made", "put"),
    [
        # the store's first thread: ``threads`` is made by the maker too, and lost with
        # the rest unless the put that returned synced it
        ("new", "new"),
        # two processes make a store's first two threads at once: the first makes
        # ``threads`` and its thread's directory, and has synced neither when the second
        # makes its own thread in that ``threads`` and returns from its put: that put may
        # not rely on the store's entry for ``threads``, which nobody has synced yet
        ("first", "second"),
    ],
    ids=["the log another process just made", "a thread beside another process's first"],
)
def test_a_put_beside_another_process_making_a_thread_survives_a_power_cut(
    tmp_path, seed, made, put
):
    root = tmp_path / "store"
    VerifiedSaver(root)  # the store made (its marker synced) before the disk is modelled
    with FaultFS(root, seed=seed) as disk:
        maker, writer = VerifiedSaver(root), VerifiedSaver(root)
        made_before_its_flock(maker, f"threads/{made}")
        put_first(writer, put)  # acknowledged
        disk.cut_power()
    (found,) = VerifiedSaver(root).list({"configurable": {"thread_id": put}})
    assert found.checkpoint["channel_values"] == {"x": 1}


def test_a_process_s_first_thread_in_a_threads_it_did_not_make_syncs_the_store_s_once(
    a_thread_in,
):
    # another process made ``threads``: the first thread this one makes in it syncs the
    # store's directory too (the entry naming ``threads``); the next ones need not
    disk, saver = a_thread_in
    other = VerifiedSaver(saver.engine.storage.root)
    with disk.capture() as ops:
        put_first(other, "new")
    assert syncs_of(ops) == [*NEW_LOG_SYNCS, ("dirsync", "")]
    with disk.capture() as ops:
        put_first(other, "next")
    assert syncs_of(ops) == [(kind, path.replace("new", "next")) for kind, path in NEW_LOG_SYNCS]
