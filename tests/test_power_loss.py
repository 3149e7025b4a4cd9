"""Power cuts at every step of a real workload: what was acknowledged survives, nothing wrong
is returned, and the graph carries on.

The workload is what a real ``StateGraph`` did to its checkpointer, replayed call by call
on ``VerifiedSaver(path)`` (fsync on) under ``faultfs.FaultFS``: opening the store, two
runs of a two-node graph on thread ``t`` (every ``put`` and ``put_writes`` LangGraph made,
with its arguments), then ``copy_thread("t", "u")``, ``delete_for_runs(["run-1"])`` and
``prune(["t"])``. The graph's calls are recorded once and replayed in one thread, so that
operation ``k`` of the disk is the same in every repetition.

For each ``k`` in ``1..N`` (``N`` operations that change the disk in the whole workload)
and each seed, the workload runs in a fresh store until the power goes out just after
operation ``k``; the disk is then cut (unsynced data dropped, unsynced directory
operations kept or lost at random; with some seeds, appends torn, or a file's unsynced
data kept whole, file by file, as a kernel writing dirty pages back would) and a new
``VerifiedSaver`` opens the store. What must hold:

* it opens, finds nothing damaged and never falls back;
* every call that returned before the cut has its effect: each checkpoint put (or
  copied) and not since deleted loads by id, itself (not an ancestor), with exactly the
  channel values that were put, and with every pending write acknowledged for it;
* the call cut short left the old state or the new one, per record: a checkpoint it was
  writing is there complete or not at all; ``prune`` and ``delete_for_runs`` keep what they
  keep, in its old form or its new one;
* nothing wrong is returned: every checkpoint ``list`` yields was put (or copied), with
  the values that were put, and with pending writes that were put for it;
* the graph continues from ``get_tuple`` on both threads and finishes with a consistent
  state (no step's writes lost or applied twice);
* no log's parity describes other bytes than the log's (a compaction replaces both).

The last part of the file tests the layer itself, and shows that these checks catch a
writer that is not durable.
"""

from __future__ import annotations

import copy
import operator
import os
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from faultfs import FaultFS, PowerCut
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import FileStorage, VerifiedSaver
from langgraph_checkpoint_verified.storage.files import RecordFileStorage

DELETES_ARE_DURABLE = True
"""Whether a checkpoint deleted by ``prune`` or ``delete_for_runs`` stays deleted after a cut.

Today a record is deleted with an ``unlink`` that no directory fsync follows, while its
pending writes go with a synced rename of their directory: after a cut, a deleted
checkpoint may be back, with the values that were put but without its pending writes
(it is never wrong, only old). The test checks that this is all that happens, and fails
once deletions become durable, so that this is set to ``True`` and checked from then on.
"""

SEEDS = [(1, False, False), (2, True, False), (3, False, True), (4, True, True)]
"""(seed, torn_writes, written_back): see ``faultfs.FaultFS``."""


# -- the workload ----------------------------------------------------------------------------


class State(TypedDict):
    count: Annotated[int, operator.add]
    log: Annotated[list, operator.add]


NODES = ("a", "b")


def build_graph(saver: VerifiedSaver) -> Any:
    """``input -> a -> b``: each node adds 1 to ``count`` and its name to ``log``."""
    builder = StateGraph(State)
    for name in NODES:
        builder.add_node(name, lambda state, name=name: {"count": 1, "log": [name]})
    builder.add_edge(START, NODES[0])
    builder.add_edge(NODES[0], NODES[1])
    builder.add_edge(NODES[1], END)
    return builder.compile(checkpointer=saver)


def thread_config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


Key = tuple[str, str]  # (thread_id, checkpoint_id)


@dataclass
class Step:
    """One call of the workload, and what it does to the store once it returned."""

    name: str
    run: Callable[[VerifiedSaver], Any]
    effect: Callable[[Expected, bool], None]  # (expected, acknowledged)

    def __str__(self) -> str:
        return self.name


@dataclass
class Expected:
    """What the store must hold (acknowledged effects) and what it may hold (every effect).

    Pending writes are kept per ``(task_id, idx)``, as the saver stores them.
    """

    required: dict[Key, dict] = field(default_factory=dict)
    required_writes: dict[Key, dict[tuple[str, int], tuple]] = field(default_factory=dict)
    allowed: dict[Key, dict] = field(default_factory=dict)
    allowed_writes: dict[Key, dict[tuple[str, int], tuple]] = field(default_factory=dict)
    run_of: dict[Key, str | None] = field(default_factory=dict)
    deleted: set[Key] = field(default_factory=set)

    def put(self, key: Key, values: dict, run_id: str | None, acknowledged: bool) -> None:
        self.allowed[key] = values
        self.run_of[key] = run_id
        if acknowledged:
            self.required[key] = values
            self.deleted.discard(key)

    def put_writes(self, key: Key, writes: dict, acknowledged: bool) -> None:
        self.allowed_writes.setdefault(key, {}).update(writes)
        if acknowledged:
            self.required_writes.setdefault(key, {}).update(writes)

    def copy_thread(self, source: str, target: str, acknowledged: bool) -> None:
        for (thread_id, checkpoint_id), values in list(self.allowed.items()):
            if thread_id == source:
                self.allowed[(target, checkpoint_id)] = values
                self.run_of[(target, checkpoint_id)] = self.run_of[(source, checkpoint_id)]
        for (thread_id, checkpoint_id), writes in list(self.allowed_writes.items()):
            if thread_id == source:
                self.allowed_writes[(target, checkpoint_id)] = dict(writes)
        if acknowledged:
            for (thread_id, checkpoint_id), values in list(self.required.items()):
                if thread_id == source:
                    self.required[(target, checkpoint_id)] = values
            for (thread_id, checkpoint_id), writes in list(self.required_writes.items()):
                if thread_id == source:
                    self.required_writes[(target, checkpoint_id)] = dict(writes)

    def delete(self, doomed: Iterable[Key], acknowledged: bool) -> None:
        # cut short, a deletion may or may not have happened: no longer required either way
        for key in doomed:
            self.required.pop(key, None)
            self.required_writes.pop(key, None)
            if acknowledged:
                self.deleted.add(key)


@dataclass
class Call:
    """A ``put`` or ``put_writes`` exactly as LangGraph made it."""

    method: str
    args: tuple

    @property
    def key(self) -> Key:
        config = self.args[0]["configurable"]
        checkpoint_id = self.args[1]["id"] if self.method == "put" else config["checkpoint_id"]
        return config["thread_id"], checkpoint_id

    def step(self) -> Step:
        key = self.key
        if self.method == "put":
            config, checkpoint = self.args[0], self.args[1]
            values = checkpoint["channel_values"]
            run_id = config["configurable"].get("run_id")
            return Step(
                f"put {key[1]}",
                lambda saver: saver.put(*copy.deepcopy(self.args)),
                lambda expected, ack: expected.put(key, values, run_id, ack),
            )
        _, writes, task_id, _ = self.args
        by_index = {(task_id, idx): (task_id, ch, value) for idx, (ch, value) in enumerate(writes)}
        return Step(
            f"put_writes {key[1]} task {task_id}",
            lambda saver: saver.put_writes(*copy.deepcopy(self.args)),
            lambda expected, ack: expected.put_writes(key, by_index, ack),
        )


def plain_config(config: dict) -> dict:
    """The parts of a LangGraph config a checkpointer reads (the rest is run-time objects)."""
    configurable = {k: v for k, v in config["configurable"].items() if not k.startswith("__")}
    return {"configurable": configurable, "metadata": dict(config.get("metadata") or {})}


class RecordingSaver(VerifiedSaver):
    """Keeps every ``put`` and ``put_writes`` call, in the order they were made."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[Call] = []

    def put(self, config, checkpoint, metadata, new_versions):
        args = (plain_config(config), checkpoint, metadata, new_versions)
        self.calls.append(Call("put", copy.deepcopy(args)))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config, writes, task_id, task_path=""):
        args = (plain_config(config), list(writes), task_id, task_path)
        self.calls.append(Call("put_writes", copy.deepcopy(args)))
        return super().put_writes(config, writes, task_id, task_path)


@pytest.fixture(scope="module")
def graph_calls(tmp_path_factory) -> list[Call]:
    """Two runs of the graph on thread ``t``; each checkpoint's metadata names its run."""
    saver = RecordingSaver(tmp_path_factory.mktemp("recording") / "store", fsync=False)
    graph = build_graph(saver)
    for run in (1, 2):
        config = {"configurable": {"thread_id": "t", "run_id": f"run-{run}"}}
        # sync: each put returns before the next step, so the calls come one at a time
        graph.invoke({"log": ["input"]}, config, durability="sync")
    methods = [call.method for call in saver.calls]
    assert methods.count("put") == 8 and methods.count("put_writes") == 6, methods
    return saver.calls


def workload(calls: list[Call]) -> list[Step]:
    """Every step after opening the store (``run_workload`` opens it)."""

    def deleted_runs(runs: set[str]) -> Callable[[Expected, bool], None]:
        def effect(expected: Expected, acknowledged: bool) -> None:
            doomed = [key for key, run in expected.run_of.items() if run in runs]
            expected.delete(doomed, acknowledged)

        return effect

    def pruned(thread_id: str) -> Callable[[Expected, bool], None]:
        def effect(expected: Expected, acknowledged: bool) -> None:
            # keep_latest keeps the newest checkpoint that verifies: the newest required one
            kept = max(cid for (tid, cid) in expected.required if tid == thread_id)
            doomed = [key for key in expected.allowed if key[0] == thread_id and key[1] != kept]
            expected.delete(doomed, acknowledged)

        return effect

    return [
        *(call.step() for call in calls),
        Step(
            "copy_thread t -> u",
            lambda saver: saver.copy_thread("t", "u"),
            lambda expected, ack: expected.copy_thread("t", "u", ack),
        ),
        Step(
            "delete_for_runs run-1",
            lambda saver: saver.delete_for_runs(["run-1"]),
            deleted_runs({"run-1"}),
        ),
        Step("prune t", lambda saver: saver.prune(["t"]), pruned("t")),
    ]


@dataclass
class Outcome:
    """How far a workload got before the power went out."""

    expected: Expected
    in_flight: str | None  # the step cut short, "open" if opening the store, None if none


def run_workload(steps: list[Step], open_saver: Callable[[], VerifiedSaver]) -> Outcome:
    """Open a saver and run ``steps`` until they end or the power goes out."""
    expected = Expected()
    try:
        saver = open_saver()
    except PowerCut:
        return Outcome(expected, "open")
    for step in steps:
        try:
            step.run(saver)
        except PowerCut:
            step.effect(expected, False)
            return Outcome(expected, step.name)
        step.effect(expected, True)
    return Outcome(expected, None)


# -- what a store must show after a cut --------------------------------------------------------


def canonical(writes: Iterable[tuple]) -> list[str]:
    """Pending writes as a sorted list of reprs: values such as lists are not hashable."""
    return sorted(repr(tuple(write)) for write in writes)


def contained(smaller: Iterable[tuple], larger: Iterable[tuple]) -> bool:
    remaining = canonical(larger)
    for item in canonical(smaller):
        if item not in remaining:
            return False
        remaining.remove(item)
    return True


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    resurrected: list[Key] = field(default_factory=list)


def check_store(root: Path, expected: Expected, continued: set | None = None) -> Findings:
    """Open the store as a user would after the cut, and compare it with ``expected``.

    ``continued`` collects the states the graph was continued from: a state met again
    (same newest checkpoint, same pending writes, already checked equal to what was put)
    would only run the same steps again, so it is not continued twice.
    """
    findings = Findings()
    problems = findings.problems
    try:
        # fsync off: it changes nothing in what is read, and the graph run after the checks
        # need not be durable (the machine this test runs on is not losing power)
        saver = VerifiedSaver(root, fsync=False)
    except Exception as exc:  # the first thing that must hold
        problems.append(f"the store does not open: {exc!r}")
        return findings

    for (thread_id, checkpoint_id), values in sorted(expected.required.items()):
        config = thread_config(thread_id)
        config["configurable"]["checkpoint_id"] = checkpoint_id
        found = saver.get_tuple(config)
        where = f"acknowledged checkpoint {thread_id}/{checkpoint_id}"
        if found is None:
            problems.append(f"{where} is gone")
            continue
        if found.config["configurable"]["checkpoint_id"] != checkpoint_id:
            problems.append(f"{where} is unusable: got its ancestor {found.config}")
            continue
        if found.checkpoint["channel_values"] != values:
            problems.append(
                f"{where} has values {found.checkpoint['channel_values']}, put {values}"
            )
        required = expected.required_writes.get((thread_id, checkpoint_id), {}).values()
        if not contained(required, found.pending_writes):
            problems.append(
                f"{where} lost acknowledged pending writes: has {found.pending_writes}, "
                f"acknowledged {list(required)}"
            )

    for found in saver.list(None):
        configurable = found.config["configurable"]
        key = (configurable["thread_id"], configurable["checkpoint_id"])
        where = f"listed checkpoint {key[0]}/{key[1]}"
        if key not in expected.allowed:
            problems.append(f"{where} was never put")
            continue
        if found.checkpoint["channel_values"] != expected.allowed[key]:
            problems.append(
                f"{where} has values {found.checkpoint['channel_values']}, "
                f"put {expected.allowed[key]}"
            )
        if not contained(found.pending_writes, expected.allowed_writes.get(key, {}).values()):
            problems.append(f"{where} has pending writes never put: {found.pending_writes}")
        if key in expected.deleted:
            findings.resurrected.append(key)
            if DELETES_ARE_DURABLE:
                problems.append(f"{where} was deleted, and is back")

    stats = saver.stats
    if stats.damaged_records or stats.fallbacks or stats.restarts_from_scratch:
        problems.append(f"damage or fallbacks after the cut: {stats}")
    if problems:
        return findings  # continuing the graph would only repeat them

    for thread_id in ("t", "u"):
        problems.extend(continue_graph(saver, thread_id, continued))
    return findings


def continue_graph(saver: VerifiedSaver, thread_id: str, continued: set | None) -> list[str]:
    """Resume (or restart) the thread from ``get_tuple`` and check the state it ends with."""
    config = thread_config(thread_id)
    latest = saver.get_tuple(config)
    before = list(latest.checkpoint["channel_values"].get("log", [])) if latest else []
    if continued is not None:
        state = (
            (thread_id, latest.config["configurable"]["checkpoint_id"])
            + tuple(canonical(latest.pending_writes))
            if latest
            else (thread_id,)
        )
        if state in continued:
            return []
        continued.add(state)
    graph = build_graph(saver)
    pending = graph.get_state(config).next
    try:
        # an unfinished run is resumed; a finished one (or none) is followed by a new run
        graph.invoke(None if pending else {"log": ["input"]}, config)
    except Exception as exc:
        return [f"thread {thread_id} does not continue from {before}: {exc!r}"]
    state = graph.get_state(config)
    log, count = state.values["log"], state.values["count"]
    problems = []
    if state.next or log[: len(before)] != before or log[-len(NODES) :] != list(NODES):
        problems.append(f"thread {thread_id} continued from {before} to {log}, next {state.next}")
    if count != sum(1 for entry in log if entry != "input"):
        problems.append(f"thread {thread_id}: count {count} for log {log}")
    return problems


# -- the test ------------------------------------------------------------------------------


def count_operations(
    root: Path, steps: list[Step], open_saver: Callable[[Path], VerifiedSaver] = VerifiedSaver
) -> int:
    """How many operations the workload makes; its uncut result must pass every check."""
    with FaultFS(root) as disk:
        outcome = run_workload(steps, lambda: open_saver(root))
    assert outcome.in_flight is None
    assert not disk.unmodelled, disk.unmodelled
    findings = check_store(root, outcome.expected)
    assert not findings.problems, findings.problems
    return len(disk.ops)


def parity_problems(root: Path) -> list[str]:
    """Parity that describes other bytes than its log's (what a sidecar left beside the log a
    compaction replaced would do): every block a record covers must match it. Parity lost
    or behind its log is allowed (the bytes are only unprotected until the next append)."""
    if not (root / "threads").is_dir():
        return []
    return [
        f"the parity of {log} describes other bytes: {found}"
        for log, found in FileStorage(root, fsync=False).scrub("threads", repair=False)
        if found.healed or found.unhealable
    ]


def cut_everywhere(
    tmp_path: Path,
    steps: list[Step],
    *,
    seed: int,
    torn_writes: bool,
    written_back: bool = False,
    open_saver: Callable[[Path], VerifiedSaver] = VerifiedSaver,
    operations: int,
) -> tuple[list[str], int]:
    """Cut after each operation in turn; the problems found, and how many cuts resurrected a
    deleted checkpoint."""
    failures: list[str] = []
    resurrections = 0
    continued: set = set()
    for k in range(1, operations + 1):
        root = tmp_path / f"store-{seed}-{k}"
        root.mkdir()
        with FaultFS(
            root, seed=seed * 100_003 + k, torn_writes=torn_writes, written_back=written_back
        ) as disk:
            disk.cut_after(k)
            outcome = run_workload(steps, lambda root=root: open_saver(root))
            assert disk.power_is_off, f"the workload ended before operation {k}"
            op = disk.ops[k - 1]
            report = disk.cut_power()
        findings = check_store(root, outcome.expected, continued)
        findings.problems.extend(parity_problems(root))
        resurrections += bool(findings.resurrected)
        if findings.problems:
            failures.append(
                f"cut after {op} (during {outcome.in_flight}), seed {seed}: "
                f"{'; '.join(findings.problems)} [the cut: {report}]"
            )
        shutil.rmtree(root)
    return failures, resurrections


@pytest.mark.parametrize(("seed", "torn_writes", "written_back"), SEEDS)
def test_a_power_cut_after_any_operation_loses_nothing_acknowledged(
    tmp_path, graph_calls, seed, torn_writes, written_back
):
    steps = workload(graph_calls)
    operations = count_operations(tmp_path / "uncut", steps)
    assert operations >= len(steps)  # every step changes the disk
    failures, resurrections = cut_everywhere(
        tmp_path,
        steps,
        seed=seed,
        torn_writes=torn_writes,
        written_back=written_back,
        operations=operations,
    )
    assert not failures, f"{len(failures)} of {operations} cuts went wrong:\n" + "\n".join(
        failures[:5]
    )
    if not DELETES_ARE_DURABLE:
        assert resurrections, (
            "no deleted checkpoint came back after any cut: deletions are durable now, "
            "set DELETES_ARE_DURABLE = True"
        )


# -- the checks catch writers that are not durable ---------------------------------------------


class CarelessStorage(RecordFileStorage):
    """Files written the classic way, each with one of its two fsyncs left out.

    ``sync_file=False``: a temp file renamed into place without an fsync of the file (the
    new name survives a cut, the bytes it names may not). ``sync_dir=False``: the file is
    fsynced, but not the directory the rename happened in (the name may be lost).
    """

    def __init__(self, root: Path, *, sync_file: bool, sync_dir: bool) -> None:
        super().__init__(root)
        self.sync_file = sync_file
        self.sync_dir = sync_dir

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        path = Path(self.location(key))
        missing = [parent for parent in path.parents if not parent.exists()]
        for directory in reversed(missing):
            directory.mkdir()
            sync_dir(directory.parent)
        if not replace and path.exists():
            return False
        temp = path.with_name(f".tmp-{uuid.uuid4().hex}")
        write_file(temp, data, sync_file=self.sync_file)
        os.replace(temp, path)
        if self.sync_dir:
            sync_dir(path.parent)
        return True


@pytest.mark.parametrize(
    "open_saver",
    [
        pytest.param(lambda root: VerifiedSaver(root, fsync=False), id="fsync-off"),
        pytest.param(
            lambda root: VerifiedSaver(
                storage=CarelessStorage(root, sync_file=False, sync_dir=True)
            ),
            id="rename-without-fsync-of-the-file",
        ),
        pytest.param(
            lambda root: VerifiedSaver(
                storage=CarelessStorage(root, sync_file=True, sync_dir=False)
            ),
            id="rename-without-fsync-of-the-directory",
        ),
    ],
)
def test_the_checks_catch_a_saver_that_acknowledges_before_durable(
    tmp_path, graph_calls, open_saver
):
    steps = workload(graph_calls)[:-3]  # the graph's calls are enough
    operations = count_operations(tmp_path / "uncut", steps, open_saver)
    failures, _ = cut_everywhere(
        tmp_path, steps, seed=1, torn_writes=False, open_saver=open_saver, operations=operations
    )
    lost = [failure for failure in failures if "acknowledged checkpoint" in failure]
    assert lost, failures


# -- the layer itself --------------------------------------------------------------------------


def write_file(path: Path, data: bytes, *, sync_file: bool, flags: int = 0) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o600)
    try:
        os.write(fd, data)
        if sync_file:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_write(path: Path, data: bytes, *, fsync_file: bool = True) -> None:
    """The classic atomic write: temp file, (fsync), rename, fsync the directory."""
    temp = path.with_name(f".tmp-{path.name}")
    write_file(temp, data, sync_file=fsync_file)
    os.replace(temp, path)
    sync_dir(path.parent)


def read(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


SEEDS_FOR_LAYER = range(12)


def test_a_rename_without_fsync_of_the_file_loses_its_data(tmp_path):
    outcomes = set()
    for seed in SEEDS_FOR_LAYER:
        root = tmp_path / f"s{seed}"
        root.mkdir()
        with FaultFS(root, seed=seed, torn_writes=True) as disk:
            durable_write(root / "good", b"synced" * 100)
            durable_write(root / "bad", b"unsynced" * 100, fsync_file=False)
            assert "bad: 800 bytes written, 0 synced" in disk.unsynced()
            report = disk.cut_power()
        assert read(root / "good") == b"synced" * 100
        assert not report.touches("good")
        # the rename was made durable, the data it names was not: a torn prefix at most
        assert report.touches("bad"), report
        data = read(root / "bad")
        assert data is not None and len(data) < 800 and (b"unsynced" * 100).startswith(data)
        outcomes.add(len(data))
    assert len(outcomes) > 1  # torn appends keep random prefixes


def test_written_back_keeps_each_file_s_unsynced_bytes_whole_or_not_file_by_file(tmp_path):
    """What lets a sidecar written after its log (neither synced) survive the cut without
    the log's bytes: the kernel wrote one file's pages back, not the other's."""
    seen = set()
    for seed in SEEDS_FOR_LAYER:
        root = tmp_path / f"s{seed}"
        root.mkdir()
        for name in ("first", "second"):
            (root / name).write_bytes(b"old")  # before the layer: durable
        with FaultFS(root, seed=seed, written_back=True) as disk:
            for name in ("first", "second"):
                fd = os.open(root / name, os.O_WRONLY | os.O_APPEND)
                os.write(fd, b" and new")
                os.close(fd)
            disk.cut_power()
        outcome = tuple(read(root / name) for name in ("first", "second"))
        assert set(outcome) <= {b"old", b"old and new"}, outcome
        seen.add(outcome)
    assert (b"old", b"old and new") in seen and (b"old and new", b"old") in seen


def test_directory_operations_not_synced_are_kept_or_lost(tmp_path):
    seen = set()
    for seed in SEEDS_FOR_LAYER:
        root = tmp_path / f"s{seed}"
        root.mkdir()
        (root / "renamed").write_bytes(b"old")  # before the layer: durable
        (root / "removed").write_bytes(b"still here")
        with FaultFS(root, seed=seed) as disk:
            write_file(root / "created", b"new", sync_file=True)
            write_file(root / ".tmp", b"new", sync_file=True)
            os.replace(root / ".tmp", root / "renamed")
            os.unlink(root / "removed")
            os.mkdir(root / "sub")
            sync_dir(root / "sub")  # the directory's own entries, not its name in root
            write_file(root / "sub" / "inner", b"inner", sync_file=True)
            sync_dir(root / "sub")
            report = disk.cut_power()
        outcome = (
            read(root / "created"),
            read(root / "renamed"),
            read(root / "removed"),
            read(root / "sub" / "inner"),
        )
        assert outcome[0] in (None, b"new")
        assert outcome[1] in (b"old", b"new")  # a lost rename: the old content is back
        assert outcome[2] in (None, b"still here")  # a lost unlink: the file is back
        assert outcome[3] in (None, b"inner")  # whatever is in a lost directory goes with it
        assert (outcome[0] is None) == ("created" in report.lost)
        assert (outcome[2] is not None) == ("removed" in report.restored)
        assert (outcome[1] == b"old") == ("renamed" in report.changed)
        assert not (root / ".tmp").exists() or outcome[1] == b"old"
        seen.add(outcome)
    # every operation was seen both kept and lost
    for position in range(4):
        assert len({outcome[position] for outcome in seen}) == 2, seen


def test_synced_directories_keep_their_operations(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    for seed in SEEDS_FOR_LAYER:
        with FaultFS(root, seed=seed) as disk:
            os.makedirs(root / "a" / "b")
            sync_dir(root / "a")
            sync_dir(root)
            durable_write(root / "a" / "b" / "record", b"kept")
            assert disk.unsynced() == []
            report = disk.cut_power()
        assert read(root / "a" / "b" / "record") == b"kept"
        assert str(report) == "nothing changed"
        shutil.rmtree(root / "a")


def test_a_rename_between_directories_is_kept_or_lost_whole(tmp_path):
    seen = set()
    for seed in SEEDS_FOR_LAYER:
        root = tmp_path / f"s{seed}"
        (root / "from").mkdir(parents=True)
        (root / "to").mkdir()
        (root / "from" / "x").write_bytes(b"x")
        with FaultFS(root, seed=seed) as disk:
            os.rename(root / "from" / "x", root / "to" / "x")
            sync_dir(root / "from")  # one side synced is not enough
            disk.cut_power()
        where = ((root / "from" / "x").exists(), (root / "to" / "x").exists())
        assert where in ((True, False), (False, True))
        seen.add(where)
    assert len(seen) == 2


def test_cut_after_k_stops_the_code_at_that_operation(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    with FaultFS(root) as disk:
        for name in ("one", "two", "three"):
            durable_write(root / name, name.encode())
    per_write = len(disk.ops) // 3
    assert [op.kind for op in disk.ops[:per_write]] == [
        "create",
        "write",
        "sync",
        "rename",
        "dirsync",
    ]
    shutil.rmtree(root)
    root.mkdir()
    with FaultFS(root) as disk:
        disk.cut_after(per_write + 3)  # the second write's fsync: not yet renamed
        with pytest.raises(PowerCut):
            for name in ("one", "two", "three"):
                durable_write(root / name, name.encode())
        assert disk.power_is_off
        with pytest.raises(PowerCut):  # the machine is off: nothing more happens
            os.mkdir(root / "later")
        assert len(disk.ops) == per_write + 3
        assert not (root / "later").exists()
        disk.cut_power()
        assert not disk.power_is_off
        os.mkdir(root / "after-reboot")  # the layer carries on with the disk as it is
    assert read(root / "one") == b"one"
    assert read(root / "two") is None
    assert sorted(os.listdir(root)) in (
        ["after-reboot", "one"],
        [".tmp-two", "after-reboot", "one"],
    )


def test_descriptors_relative_paths_and_removed_trees_are_followed(tmp_path):
    root = tmp_path / "store"
    (root / "tree" / "deep").mkdir(parents=True)
    (root / "tree" / "deep" / "leaf").write_bytes(b"leaf")
    with FaultFS(root) as disk:
        shutil.rmtree(root / "tree")  # unlink and rmdir relative to directory descriptors
        kinds = sorted(op.kind for op in disk.ops)
        assert kinds == ["rmdir", "rmdir", "unlink"]
        assert {op.path for op in disk.ops} == {"tree", "tree/deep", "tree/deep/leaf"}
        fd = os.open(root / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(fd, b"first ")
        os.fsync(fd)
        os.write(fd, b"second")
        os.ftruncate(fd, 6)  # cut the unsynced tail again
        os.close(fd)
        sync_dir(root)
        assert "remove tree" not in disk.unsynced()  # synced with the root
        disk.cut_power()
    assert read(root / "log") == b"first "
    assert not (root / "tree").exists()
    assert not disk.unmodelled


def test_only_one_layer_at_a_time_and_outside_paths_are_left_alone(tmp_path):
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    real_open = os.open
    with FaultFS(inside) as disk:
        with pytest.raises(RuntimeError), FaultFS(outside):
            pass
        write_file(outside / "x", b"x", sync_file=True)
        assert disk.ops == []
    assert os.open is real_open  # every patched function is back
    assert read(outside / "x") == b"x"
