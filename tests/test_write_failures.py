"""A full disk or a revoked permission at each step of a durable write.

``FileStorage.write`` goes: open a unique temp file, write, fsync, close,
``replace`` (or ``link`` for first-writer-wins records), then open and fsync
the directory. Each of those calls is made to fail, once, with ``ENOSPC`` or
``EACCES``. Then:

* ``put`` / ``put_writes`` raise ``StoreWriteError`` naming the record, the
  errno, and what to do;
* the store stays readable and everything acknowledged before is intact
  (``verify().ok``, every earlier checkpoint loads exactly as before);
* no temp file is left behind;
* the same call succeeds once the disk is back;
* a graph whose run hits the failure raises, and a later run resumes to the
  same final state as a run that never failed.
"""

from __future__ import annotations

import errno
import operator
import shutil
from pathlib import Path
from typing import Annotated

import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import StoreWriteError, VerifiedSaver, _storage
from langgraph_checkpoint_verified._keys import TEMP_PREFIX

THREAD = {"configurable": {"thread_id": "disk-full"}}
STEPS = 5

# (function, which call of it fails) for each step of one write of a new record
PUT_STEPS = [
    ("open", 1),  # the temp file
    ("write", 1),
    ("fsync", 1),  # the temp file's data
    ("replace", 1),
    ("open", 2),  # the directory, to fsync it
    ("fsync", 2),  # the directory
]
FIRST_WRITER_STEPS = [step if step[0] != "replace" else ("link", 1) for step in PUT_STEPS]
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


class FailOnce:
    """Stands in for ``os.<name>``: the ``nth`` call raises ``OSError(code)``."""

    def __init__(self, real, nth: int, code: int) -> None:
        self.real, self.nth, self.code, self.calls = real, nth, code, 0

    def __call__(self, *args, **kwargs):
        if args and str(args[0]).endswith(f"/{_storage.LOCK_NAME}"):
            # the thread lock is not a step of the write: a lock file that cannot be
            # opened for writing is opened read-only (see FileStorage.lock)
            return self.real(*args, **kwargs)
        self.calls += 1
        if self.calls == self.nth:
            raise OSError(self.code, f"injected: {errno.errorcode[self.code]}")
        return self.real(*args, **kwargs)


def inject(monkeypatch, name: str, nth: int, code: int) -> FailOnce:
    failing = FailOnce(getattr(_storage.os, name), nth, code)
    monkeypatch.setattr(_storage.os, name, failing)
    return failing


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


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(TEMP_PREFIX)]


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


@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize(("name", "nth"), PUT_STEPS)
def test_put_fails_cleanly_at_each_step(store, monkeypatch, name, nth, code):
    saver = VerifiedSaver(store)
    before = snapshot(saver)
    config, checkpoint, metadata, new_versions = new_checkpoint(saver)
    failing = inject(monkeypatch, name, nth, code)
    with pytest.raises(StoreWriteError) as raised:
        saver.put(config, checkpoint, metadata, new_versions)
    assert failing.calls >= nth, "the injected failure was reached"
    monkeypatch.undo()
    assert_clear_error(raised, code, store)
    # only a failure after the rename (the directory fsync) may leave the new,
    # complete record in place: it was never acknowledged, and it verifies
    after_rename = (name, nth) in {("open", 2), ("fsync", 2)}
    assert_intact(store, before, allow_new={checkpoint["id"]} if after_rename else set())
    if not after_rename:
        assert checkpoint["id"] not in snapshot(VerifiedSaver(store))

    # the disk is back: the same put succeeds and is read back
    saver.put(config, checkpoint, metadata, new_versions)
    reread = VerifiedSaver(store).get_tuple(THREAD)
    assert reread.config["configurable"]["checkpoint_id"] == checkpoint["id"]
    assert reread.checkpoint["channel_values"]["count"] == 99
    assert VerifiedSaver(store).verify().ok


@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize(
    ("channel", "steps"),
    [("count", FIRST_WRITER_STEPS), ("__error__", PUT_STEPS)],
    ids=["regular", "special"],
)
def test_put_writes_fails_cleanly_at_each_step(store, monkeypatch, channel, steps, code):
    for name, nth in steps:
        saver = VerifiedSaver(store)
        before = snapshot(saver)
        latest = saver.get_tuple(THREAD)
        task_id = f"task-{name}-{nth}"
        failing = inject(monkeypatch, name, nth, code)
        with pytest.raises(StoreWriteError) as raised:
            saver.put_writes(latest.config, [(channel, 7)], task_id)
        assert failing.calls >= nth
        monkeypatch.undo()
        assert_clear_error(raised, code, store)
        after_rename = (name, nth) in {("open", 2), ("fsync", 2)}
        pending = VerifiedSaver(store).get_tuple(THREAD).pending_writes
        if not after_rename:
            assert_intact(store, before)
            assert not [w for w in pending if w[0] == task_id]
        else:
            assert temp_files(store) == [] and VerifiedSaver(store).verify().ok
        saver.put_writes(latest.config, [(channel, 7)], task_id)
        pending = VerifiedSaver(store).get_tuple(THREAD).pending_writes
        assert [w for w in pending if w[0] == task_id] == [(task_id, channel, 7)]


def assert_only_orphans(report) -> None:
    """Every record in the store verifies. LangGraph stores a step's writes while
    ``put`` of the checkpoint they belong to is still running; when that ``put``
    fails, its writes stay behind and ``verify()`` reports the checkpoint as
    missing. Nothing else may be reported."""
    for damage in report.damaged:
        assert damage.reason.startswith("missing"), damage
        assert damage.key.endswith(".ckpt")


@pytest.mark.parametrize("code", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("nth", [1, 2, 4, 7, 9, 12])
@pytest.mark.parametrize("durability", ["sync", "async"])
def test_graph_run_hitting_a_full_disk_raises_and_resumes(
    tmp_path, monkeypatch, nth, code, durability
):
    """The nth fsync of a run fails: the run raises ``StoreWriteError``, what is
    stored verifies, and the next run finishes the thread to the same state as a
    run that never failed, without running again a step whose checkpoint was
    acknowledged (a step is acknowledged once the checkpoint holding its
    result is stored)."""
    root = tmp_path / "store"
    runs: list[int] = []
    graph = build_graph(VerifiedSaver(root), runs)
    failing = inject(monkeypatch, "fsync", nth, code)
    with pytest.raises(StoreWriteError) as raised:
        graph.invoke({"count": 0, "trace": []}, THREAD, durability=durability)
    assert failing.calls >= nth
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
