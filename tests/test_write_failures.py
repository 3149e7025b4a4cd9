"""A full disk or a revoked permission at each step of an append and of a compaction.

An append to a thread's log (``LogAppender.append``) goes: open the log,
``flock`` it, cut a torn tail left by a crashed writer (``ftruncate``), one
``pwrite`` of the new entries into the room at the log's end (after a ``pwrite``
of new room, when they outgrow it), one ``fdatasync``. A compaction (``compact``,
the last step of ``prune`` and ``delete_for_runs``) goes: open a unique temp
file, write the live entries, ``fsync``, ``replace`` it over the log, ``fsync``
the thread's directory. Each of those calls is made to fail, once, with
``ENOSPC`` or ``EACCES`` (``ENOLCK`` for ``flock``, the error a lock can really
meet); a write is also cut short (half the entries written, then ``ENOSPC``).
Then:

* the call raises ``StoreWriteError`` naming the log, the errno, and what to do;
* the store stays readable and everything acknowledged before is intact
  (``verify().ok``, every earlier checkpoint loads exactly as before);
* half-written entries are a torn tail: readers ignore it, and the next
  successful append cuts it off, so the log is whole entries and room;
* no temp file is left behind;
* the same call succeeds once the disk is back;
* a graph whose run hits the failure raises, and a later run resumes to the
  same final state as a run that never failed.
"""

from __future__ import annotations

import errno
import fcntl
import operator
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import StoreWriteError, VerifiedSaver
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.keys import TEMP_PREFIX
from langgraph_checkpoint_verified.storage.files import RecordFileStorage
from langgraph_checkpoint_verified.storage.log import commits
from langgraph_checkpoint_verified.storage.log.entries import DELETE, PUT, encode_entry, scan
from langgraph_checkpoint_verified.storage.log.file_storage import LOG_NAME, RETIRED_NAME
from langgraph_checkpoint_verified.storage.log.room import all_zeros

THREAD_ID = "disk-full"
THREAD = {"configurable": {"thread_id": THREAD_ID}}
RETIRED_KEY = f"{keys.thread_prefix(THREAD_ID)}/{RETIRED_NAME}"
STEPS = 5
ERRNOS = [errno.ENOSPC, errno.EACCES]


class State(TypedDict):
    count: int
    trace: Annotated[list, operator.add]


def build_graph(saver: VerifiedSaver, runs: list[int]):
    def step(state):
        runs.append(state["count"] + 1)
        return {"count": state["count"] + 1, "trace": [state["count"] + 1]}

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["count"] < STEPS else END)
    return builder.compile(checkpointer=saver)


FINAL = {"count": STEPS, "trace": list(range(1, STEPS + 1))}


# -- the faults ------------------------------------------------------------------------


def path_of(target) -> str:
    """The path a call is about: its path argument, or the file its descriptor is open on."""
    if isinstance(target, int):
        try:
            return os.readlink(f"/proc/self/fd/{target}")
        except OSError:
            return ""
    return os.fspath(target)


def is_log(path: str) -> bool:
    return os.path.basename(path) == LOG_NAME


def is_temp(path: str) -> bool:
    return os.path.basename(path).startswith(TEMP_PREFIX)


def thread_dir(root: Path) -> str:
    return str(root / keys.thread_prefix(THREAD_ID))


class Fault:
    """Stands in for ``module.name``: the ``nth`` call on a file that ``target`` accepts
    raises ``OSError(code)``. With ``short``, that call writes half its bytes and
    returns (a short write, as a filling disk gives), and the next one raises."""

    def __init__(self, module, name: str, target: Callable[[str], bool], nth: int, code: int,
                 *, short: bool = False) -> None:  # fmt: skip
        self.real = getattr(module, name)
        self.target, self.nth, self.code, self.short = target, nth, code, short
        self.calls = 0

    def __call__(self, *args, **kwargs):
        if not self.target(path_of(args[0])):
            return self.real(*args, **kwargs)
        self.calls += 1
        if self.short and self.calls == self.nth:
            data = bytes(args[1])
            return self.real(args[0], data[: len(data) // 2], *args[2:])
        if self.calls == self.nth + self.short:
            raise OSError(self.code, f"injected: {errno.errorcode[self.code]}")
        return self.real(*args, **kwargs)

    @property
    def reached(self) -> bool:
        return self.calls >= self.nth + self.short


def inject(monkeypatch, step: tuple, code: int, root: Path) -> Fault:
    name, target, nth = step[:3]
    module = fcntl if name == "flock" else os
    accepts = {"log": is_log, "temp": is_temp, "dir": lambda p: p == thread_dir(root)}[target]
    fault = Fault(module, name, accepts, nth, code, short=step[3:] == ("short",))
    monkeypatch.setattr(module, name, fault)
    return fault


# (function, the file it is called on, which such call fails[, "short"])
APPEND_STEPS = [
    ("open", "log", 1),
    ("flock", "log", 1),
    ("pwrite", "log", 1),
    ("pwrite", "log", 1, "short"),
    ("fdatasync", "log", 1),
]
# the new log is the first temp file, its parity the second; the directory is synced
# after the old parity is removed, after the new log is renamed in, and after its parity
COMPACTION_STEPS = [
    ("open", "temp", 1),
    ("write", "temp", 1),
    ("write", "temp", 1, "short"),
    ("fsync", "temp", 1),
    ("open", "temp", 2),
    ("write", "temp", 2),
    ("fsync", "temp", 2),
    ("fsync", "dir", 1),
    ("replace", "temp", 1),
    ("fsync", "dir", 2),
    ("replace", "temp", 2),
    ("fsync", "dir", 3),
]
COMPACTED_BEFORE_FAILING = {("fsync", "dir", 2), ("replace", "temp", 2), ("fsync", "dir", 3)}


def step_id(step: tuple) -> str:
    return "-".join(str(part) for part in step if part != 1)


def errnos_for(step: tuple) -> list[int]:
    return [errno.ENOLCK] if step[0] == "flock" else ERRNOS


def append_cases():
    return [
        pytest.param(step, code, id=f"{step_id(step)}-{errno.errorcode[code]}")
        for step in APPEND_STEPS
        for code in errnos_for(step)
    ]


# -- the store and what must hold ------------------------------------------------------


@pytest.fixture(scope="module")
def acknowledged(tmp_path_factory) -> Path:
    """A store with one finished thread: everything in it was acknowledged."""
    root = tmp_path_factory.mktemp("acknowledged") / "store"
    saver = VerifiedSaver(root)
    assert build_graph(saver, []).invoke({"count": 0, "trace": []}, THREAD) == FINAL
    return root


@pytest.fixture
def store(acknowledged, tmp_path) -> Path:
    target = tmp_path / "store"
    shutil.copytree(acknowledged, target)
    return target


def log_path(root: Path) -> Path:
    return Path(thread_dir(root)) / LOG_NAME


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(TEMP_PREFIX)]


def entries_end(data: bytes) -> int:
    """Where a log's intact entries end (room, zeros, may follow)."""
    entries = scan(data)[0]
    return entries[-1].end if entries else 0


def assert_whole_entries(data: bytes) -> None:
    """The log is intact entries end to end (then room): no torn tail, no damage."""
    _, damaged, end = scan(data)
    assert damaged == [] and all_zeros(data, end)


def snapshot(saver: VerifiedSaver) -> dict:
    return {t.config["configurable"]["checkpoint_id"]: t for t in saver.list(THREAD)}


def assert_intact(root: Path, before: dict, *, allow_new: set[str] = frozenset()) -> None:
    """Acknowledged data is all there and verifies; nothing half-written is visible."""
    assert temp_files(root) == []
    saver = VerifiedSaver(root)
    report = saver.verify()
    assert report.ok, report.to_dict()
    after = snapshot(saver)
    assert set(before) <= set(after) <= set(before) | allow_new
    for checkpoint_id, found in before.items():
        assert after[checkpoint_id] == found
    latest = saver.get_tuple(THREAD)
    assert latest.checkpoint["channel_values"]["count"] == STEPS or (
        latest.config["configurable"]["checkpoint_id"] in allow_new
    )
    assert saver.stats.damaged_records == 0


def assert_clear_error(raised: pytest.ExceptionInfo, code: int, root: Path) -> None:
    error = raised.value
    assert error.errno == code
    assert isinstance(error.__cause__, OSError) and error.__cause__.errno == code
    assert str(root) in error.location
    message = str(error)
    assert "could not write" in message and "Nothing was saved" in message
    assert "resume" in message


def new_checkpoint(saver: VerifiedSaver):
    """A child of the newest checkpoint that changes ``count``."""
    latest = saver.get_tuple(THREAD)
    checkpoint = {**latest.checkpoint, "id": str(uuid6(clock_seq=-2))}
    version = saver.get_next_version(checkpoint["channel_versions"]["count"], None)
    checkpoint["channel_versions"] = {**checkpoint["channel_versions"], "count": version}
    checkpoint["channel_values"] = {**checkpoint["channel_values"], "count": 99}
    metadata = {"source": "update", "step": STEPS + 1, "parents": {}}
    return latest.config, checkpoint, metadata, {"count": version}


def assert_log_after_failed_append(step: tuple, before: bytes, after: bytes) -> None:
    """What a failed append leaves in the log: nothing, a torn tail, or whole entries."""
    end = entries_end(before)
    assert all_zeros(before, end)  # the entries, then room
    if step[0] in ("open", "flock") or step == ("pwrite", "log", 1):
        assert after == before  # failed before a byte was written
    elif step[0] == "pwrite":
        # the short write: half an entry in the room, after every acknowledged entry
        # (readers take it for the torn tail it is: assert_intact)
        assert after[:end] == before[:end] and after != before
        assert scan(after)[0] == scan(before)[0]
    else:
        # fdatasync failed after the whole write: complete entries, never acknowledged
        assert after[:end] == before[:end] and entries_end(after) > end
        assert_whole_entries(after)


# -- appends ----------------------------------------------------------------------------


@pytest.mark.parametrize(("step", "code"), append_cases())
def test_put_fails_cleanly_at_each_step_of_an_append(store, monkeypatch, step, code):
    saver = VerifiedSaver(store)
    before = snapshot(saver)
    log_before = log_path(store).read_bytes()
    config, checkpoint, metadata, new_versions = new_checkpoint(saver)
    fault = inject(monkeypatch, step, code, store)
    with pytest.raises(StoreWriteError) as raised:
        saver.put(config, checkpoint, metadata, new_versions)
    assert fault.reached, "the injected failure was reached"
    monkeypatch.undo()
    assert_clear_error(raised, code, store)
    assert_log_after_failed_append(step, log_before, log_path(store).read_bytes())
    # only a failed fdatasync leaves the new entry whole in the log: it was never
    # acknowledged, and it verifies
    written_whole = step[0] == "fdatasync"
    assert_intact(store, before, allow_new={checkpoint["id"]} if written_whole else set())
    if not written_whole:
        assert checkpoint["id"] not in snapshot(VerifiedSaver(store))
        # the saver that failed does not see it either
        assert saver.get_tuple(THREAD).checkpoint["channel_values"]["count"] == STEPS

    # the disk is back: the same put succeeds, is read back, and the torn tail is gone
    saver.put(config, checkpoint, metadata, new_versions)
    reread = VerifiedSaver(store).get_tuple(THREAD)
    assert reread.config["configurable"]["checkpoint_id"] == checkpoint["id"]
    assert reread.checkpoint["channel_values"]["count"] == 99
    assert VerifiedSaver(store).verify().ok
    log_after = log_path(store).read_bytes()
    assert log_after.startswith(log_before[: entries_end(log_before)])
    assert_whole_entries(log_after)


@pytest.mark.parametrize(("step", "code"), append_cases())
@pytest.mark.parametrize("channel", ["count", "__error__"], ids=["regular", "special"])
def test_put_writes_fails_cleanly_at_each_step_of_an_append(store, monkeypatch, channel, step,
                                                            code):  # fmt: skip
    saver = VerifiedSaver(store)
    before = snapshot(saver)
    latest = saver.get_tuple(THREAD)
    log_before = log_path(store).read_bytes()
    fault = inject(monkeypatch, step, code, store)
    with pytest.raises(StoreWriteError) as raised:
        saver.put_writes(latest.config, [(channel, 7)], "task")
    assert fault.reached
    monkeypatch.undo()
    assert_clear_error(raised, code, store)
    assert_log_after_failed_append(step, log_before, log_path(store).read_bytes())
    if step[0] == "fdatasync":
        # the whole entry was written, never acknowledged: it may be read, and verifies
        checkpoint_id = latest.config["configurable"]["checkpoint_id"]
        pending = [*latest.pending_writes, ("task", channel, 7)]
        before[checkpoint_id] = latest._replace(pending_writes=pending)
    assert_intact(store, before)

    saver.put_writes(latest.config, [(channel, 7)], "task")
    pending = VerifiedSaver(store).get_tuple(THREAD).pending_writes
    assert [w for w in pending if w[0] == "task"] == [("task", channel, 7)]
    assert_whole_entries(log_path(store).read_bytes())


def tear_the_tail(root: Path) -> bytes:
    """Write half an entry into the room at the log's end, as a power cut in the middle
    of an append's ``pwrite`` can leave it."""
    key = f"{keys.thread_prefix(THREAD_ID)}/ns/-/never-acknowledged"
    torn = encode_entry(PUT, key, b"x" * 200)[:100]
    data = log_path(root).read_bytes()
    assert all_zeros(data, entries_end(data) + len(torn))
    with open(log_path(root), "r+b") as f:
        f.seek(entries_end(data))
        f.write(torn)
    return torn


@pytest.mark.parametrize("code", [*ERRNOS, errno.EIO], ids=errno.errorcode.get)
def test_a_torn_tail_that_cannot_be_cut_fails_the_append_and_is_cut_by_the_next(
    store, monkeypatch, code
):
    saver = VerifiedSaver(store)
    before = snapshot(saver)
    intact = log_path(store).read_bytes()
    end = entries_end(intact)
    torn = tear_the_tail(store)
    torn_log = log_path(store).read_bytes()
    assert torn_log == intact[:end] + torn + intact[end + len(torn) :]
    assert_intact(store, before)  # readers ignore the torn tail

    config, checkpoint, metadata, new_versions = new_checkpoint(saver)
    fault = inject(monkeypatch, ("ftruncate", "log", 1), code, store)
    with pytest.raises(StoreWriteError) as raised:
        saver.put(config, checkpoint, metadata, new_versions)
    assert fault.reached
    monkeypatch.undo()
    assert_clear_error(raised, code, store)
    # nothing was appended after the torn tail: a new entry there would be lost
    assert log_path(store).read_bytes() == torn_log
    assert_intact(store, before)

    saver.put(config, checkpoint, metadata, new_versions)
    log_after = log_path(store).read_bytes()
    assert log_after.startswith(intact[:end]) and torn not in log_after[end:]
    assert_whole_entries(log_after)
    assert VerifiedSaver(store).get_tuple(THREAD).checkpoint["id"] == checkpoint["id"]


def test_put_on_a_new_thread_fails_cleanly_when_its_new_log_cannot_be_synced_in(
    tmp_path, monkeypatch
):
    """The first append of a thread creates its log, syncs it, then fsyncs the thread's
    directory so that the log's name survives a crash: if that fsync fails, the put
    must raise ``StoreWriteError`` as every other failed step does. The entry, synced
    but never acknowledged, is a tail the next append cuts off; the same put succeeds
    once the disk is back."""
    store = tmp_path / "store"
    saver = VerifiedSaver(store)
    config = {"configurable": {"thread_id": THREAD_ID, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    metadata = {"source": "input", "step": -1, "parents": {}}
    fault = inject(monkeypatch, ("fsync", "dir", 1), errno.EIO, store)
    with pytest.raises(StoreWriteError) as raised:
        saver.put(config, checkpoint, metadata, {})
    assert fault.reached
    monkeypatch.undo()
    assert_clear_error(raised, errno.EIO, store)
    assert_whole_entries(log_path(store).read_bytes())

    saver.put(config, checkpoint, metadata, {})
    found = VerifiedSaver(store).get_tuple(config)
    assert found is not None and found.checkpoint["id"] == checkpoint["id"]
    assert VerifiedSaver(store).verify().ok
    assert_whole_entries(log_path(store).read_bytes())


# -- compaction -------------------------------------------------------------------------


@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("step", COMPACTION_STEPS, ids=step_id)
def test_prune_fails_cleanly_at_each_step_of_its_compaction(store, monkeypatch, step, code):
    saver = VerifiedSaver(store)
    latest = saver.get_tuple(THREAD)
    log_before = log_path(store).read_bytes()
    fault = inject(monkeypatch, step, code, store)
    with pytest.raises(StoreWriteError) as raised:
        saver.prune([THREAD_ID], strategy="keep_latest")
    assert fault.reached, "the injected failure was reached"
    monkeypatch.undo()
    assert_clear_error(raised, code, store)
    assert temp_files(store) == []
    # the old log (with the prune's deletions appended) or the compacted one: either
    # way whole entries, and the checkpoint prune keeps loads exactly as before
    log_after = log_path(store).read_bytes()
    assert_whole_entries(log_after)
    replaced = step[:3] in COMPACTED_BEFORE_FAILING
    assert log_after.startswith(log_before[: entries_end(log_before)]) != replaced
    for reader in (saver, VerifiedSaver(store)):
        assert reader.get_tuple(THREAD) == latest
        assert reader.verify().ok
        assert reader.stats.damaged_records == 0

    # the disk is back: the prune finishes, and the log holds only live records
    saver.prune([THREAD_ID], strategy="keep_latest")
    compacted = log_path(store).read_bytes()
    entries, damaged, end = scan(compacted)
    assert damaged == [] and end == len(compacted) < len(log_before)
    assert all(entry.kind == PUT for entry in entries)
    assert len({entry.key for entry in entries}) == len(entries)
    fresh = VerifiedSaver(store)
    assert [t.config for t in fresh.list(THREAD)] == [latest.config]
    assert fresh.get_tuple(THREAD) == latest
    assert temp_files(store) == []
    # and appending after a failed compaction works on whichever log is in place
    config, checkpoint, metadata, new_versions = new_checkpoint(saver)
    saver.put(config, checkpoint, metadata, new_versions)
    assert VerifiedSaver(store).get_tuple(THREAD).checkpoint["id"] == checkpoint["id"]


def test_a_failed_compaction_leaves_the_thread_as_it_was(store, monkeypatch):
    """A prune is one compaction with its changes in it: when the new log cannot be
    made, the old one is as it was, with every checkpoint (no deletion half made), but
    for its retirement at its end (which the next append makes void)."""
    saver = VerifiedSaver(store)
    log_before = log_path(store).read_bytes()
    listed_before = [t.config for t in saver.list(THREAD)]
    assert len(listed_before) > 1
    inject(monkeypatch, ("replace", "temp", 1), errno.ENOSPC, store)
    with pytest.raises(StoreWriteError):
        saver.prune([THREAD_ID], strategy="keep_latest")
    monkeypatch.undo()
    log_after = log_path(store).read_bytes()
    end = entries_end(log_before)
    assert log_after[:end] == log_before[:end]
    assert scan(log_after[end:])[0] == [scan(encode_entry(DELETE, RETIRED_KEY, b""))[0][0]]
    assert all_zeros(log_after, entries_end(log_after))
    assert [t.config for t in VerifiedSaver(store).list(THREAD)] == listed_before
    assert temp_files(store) == []


def refuse_unlinking_temps(monkeypatch) -> list[str]:
    """Every ``unlink`` of a temp file fails with ``EACCES`` (a store that refuses to
    remove files as well); the paths refused, in order."""
    real, refused = os.unlink, []

    def unlink(path, *args, **kwargs):
        if is_temp(path_of(path)):
            refused.append(os.fspath(path))
            raise OSError(errno.EACCES, "injected: EACCES")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    return refused


def test_a_compaction_whose_temp_files_cannot_be_removed_reports_the_first_failure(
    store, monkeypatch
):
    """The new log's sync fails, and so does removing the temp files after it: the
    error raised is the disk's (``ENOSPC``), not the cleanup's; what is left behind is
    the new log's temp file, which no reader looks at, and the thread is as it was."""
    saver = VerifiedSaver(store)
    latest = saver.get_tuple(THREAD)
    inject(monkeypatch, ("fsync", "temp", 1), errno.ENOSPC, store)
    refused = refuse_unlinking_temps(monkeypatch)
    with pytest.raises(StoreWriteError) as raised:
        saver.prune([THREAD_ID], strategy="keep_latest")
    monkeypatch.undo()
    assert_clear_error(raised, errno.ENOSPC, store)
    assert len(refused) == 2  # the new log's and its parity's (never made), both tried
    assert [str(path) for path in temp_files(store)] == refused[:1]
    for reader in (saver, VerifiedSaver(store)):
        assert reader.get_tuple(THREAD) == latest
        assert reader.verify().ok
    saver.prune([THREAD_ID], strategy="keep_latest")
    assert [t.config for t in VerifiedSaver(store).list(THREAD)] == [latest.config]


def test_a_record_file_whose_temp_file_cannot_be_removed_reports_the_first_failure(
    tmp_path, monkeypatch
):
    """The same for a record kept in a file of its own (the quarantine's, the store's
    marker): ``ENOSPC`` from its sync is what ``write`` raises, and the key is absent."""
    files = RecordFileStorage(tmp_path / "files")
    inject(monkeypatch, ("fsync", "temp", 1), errno.ENOSPC, tmp_path)
    refused = refuse_unlinking_temps(monkeypatch)
    with pytest.raises(StoreWriteError) as raised:
        files.write("quarantine/one.record", b"record")
    monkeypatch.undo()
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.__cause__.errno == errno.ENOSPC
    assert len(refused) == 1
    assert files.read("quarantine/one.record") is None
    assert list(files.list("quarantine/")) == []
    assert files.write("quarantine/one.record", b"record")
    assert files.read("quarantine/one.record") == b"record"


# -- a graph that meets a full disk -------------------------------------------------------


def assert_only_orphans(report) -> None:
    """Every record in the store verifies. LangGraph stores a step's writes while
    ``put`` of the checkpoint they belong to is still running; when that ``put``
    fails, its writes stay behind and ``verify()`` reports the checkpoint as
    missing. Nothing else may be reported."""
    for damage in report.damaged:
        assert damage.reason.startswith("missing"), damage
        assert damage.key.endswith(".ckpt")


GROUPED_SYNCS = 2
"""Syncs every run of the graph makes however its calls meet: more than ten durable
calls, at most ``commits.MAX_PASSES + 1`` of them to a sync."""


@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("nth", [1, 2, 4, 7, 9, 12])
@pytest.mark.parametrize(
    ("durability", "failing"),
    [("sync", "fdatasync"), ("async", "fdatasync"), ("sync", "short write")],
)
def test_graph_run_hitting_a_full_disk_raises_and_resumes(
    tmp_path, monkeypatch, nth, code, durability, failing
):
    """The nth append of a run fails (its sync, or its write cut short): the run raises
    ``StoreWriteError``, what is stored verifies, and the next run finishes the
    thread to the same state as a run that never failed, without running again a
    step whose checkpoint was acknowledged (a step is acknowledged once the
    checkpoint holding its result is stored)."""
    root = tmp_path / "store"
    runs: list[int] = []
    if failing == "fdatasync" and nth > GROUPED_SYNCS:
        # calls queued behind one another on the thread's lock share a sync (group
        # commit), so a run makes fewer syncs than calls, how many fewer depending on
        # how its threads meet: each call syncs on its own for the later syncs to exist
        monkeypatch.setattr(commits, "MAX_PASSES", 0)
    graph = build_graph(VerifiedSaver(root), runs)
    step = ("fdatasync", "log", nth) if failing == "fdatasync" else ("pwrite", "log", nth, "short")
    fault = inject(monkeypatch, step, code, root)
    with pytest.raises(StoreWriteError) as raised:
        graph.invoke({"count": 0, "trace": []}, THREAD, durability=durability)
    assert fault.reached
    monkeypatch.undo()
    assert raised.value.errno == code
    assert temp_files(root) == []
    saver = VerifiedSaver(root)
    report = saver.verify()
    assert_only_orphans(report)
    stopped_at = saver.get_tuple(THREAD)
    ran_before = list(runs)

    graph = build_graph(saver, runs)
    resume_input = None if stopped_at is not None else {"count": 0, "trace": []}
    result = graph.invoke(resume_input, THREAD, durability=durability)
    assert result == FINAL
    assert graph.get_state(THREAD).values == FINAL
    assert saver.stats.damaged_records == 0
    assert sorted(set(runs)) == list(range(1, STEPS + 1))
    acknowledged = stopped_at.checkpoint["channel_values"].get("count", 0) if stopped_at else 0
    assert all(runs.count(step) == 1 for step in range(1, acknowledged + 1)), (ran_before, runs)
    assert_whole_entries(log_path(root).read_bytes())
