"""``verify`` -> ``repair`` -> ``verify`` converges: after repair a store verifies, or
says precisely what a person must do.

The rule: a record that no read can ever use again is moved aside by repair,
byte for byte with a reason, like damage. That is a damaged record; the pending
writes of a checkpoint that was quarantined (orphans: nothing reads them); and a
checkpoint whose channel values were in a damaged, quarantined or missing record
(it can never load). Checkpoints that still load and kept a value in a record
that is moved aside are first rewritten to hold it themselves, as ``prune``
does. What reads return is the same before and after repair; repair only makes
it explicit. Left alone, with advice: writes whose checkpoint may still be being
put, and checkpoints a delta channel may be rebuilt through.

Every store is written by a real ``StateGraph``: an echo chat (a message list
and a turn counter; two turns on thread ``alpha``, one on ``beta``), or a
ping-pong loop whose two nodes take turns changing one integer each, so that
every checkpoint keeps the other integer in its parent's record::

    step  1  left   a=1
    step  2  right  b=10    keeps a in step 1
    step  3  left   a=2     keeps b in step 2
    step  4  right  b=20    keeps a in step 3
    ...

Which checkpoints a damaged record makes unusable depends on how values are
stored, so what reads return is taken from the damaged store itself, read
without moving anything, and compared with what they return after repair.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import pytest
from echo_graph import build_graph as build_chat
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from quarantinetools import quarantine_contents
from test_cli import checkpoint_entry, located
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import CheckpointDamagedError, MemoryStorage, VerifiedSaver
from langgraph_checkpoint_verified.engine.damage import Damage
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.kinds import decode_checkpoint

CONSOLE_SCRIPT = Path(sys.prefix) / "bin" / "langgraph-verified"
BACKENDS = ["files", "memory"]
ALPHA = {"configurable": {"thread_id": "alpha"}}


def chat(saver: VerifiedSaver) -> None:
    graph = build_chat(saver)
    for thread_id, texts in {"alpha": ["hi", "how are you?"], "beta": ["hello"]}.items():
        for text in texts:
            graph.invoke({"messages": [("user", text)]}, {"configurable": {"thread_id": thread_id}})


class PingPong(TypedDict):
    a: int
    b: int


def build_ping_pong(checkpointer: Any) -> Any:
    builder = StateGraph(PingPong)
    builder.add_node("left", lambda state: {"a": state["a"] + 1})
    builder.add_node("right", lambda state: {"b": state["b"] + 10})
    builder.add_edge(START, "left")
    builder.add_edge("left", "right")
    builder.add_conditional_edges(
        "right", lambda state: "left" if state["a"] < 3 else END, ["left", END]
    )
    return builder.compile(checkpointer=checkpointer)


def ping_pong(saver: VerifiedSaver) -> None:
    graph = build_ping_pong(saver)
    graph.invoke({"a": 0, "b": 0}, ALPHA)
    graph.invoke({"a": 0, "b": 0}, {"configurable": {"thread_id": "beta"}})


GRAPHS = {"chat": (chat, build_chat), "ping-pong": (ping_pong, build_ping_pong)}


class Store:
    """One store on one backend; ``saver()`` opens it again (same records)."""

    def __init__(self, backend: str, root: Path, graph: str = "chat") -> None:
        self.root = root
        self.memory = MemoryStorage() if backend == "memory" else None
        self.graph = graph
        GRAPHS[graph][0](self.saver())
        self.steps = {
            item.metadata["step"]: item.config["configurable"]["checkpoint_id"]
            for item in self.saver().list(ALPHA)
        }

    def saver(self, **kwargs: Any) -> VerifiedSaver:
        if self.memory is not None:
            return VerifiedSaver(storage=self.memory, **kwargs)
        return VerifiedSaver(self.root, fsync=False, **kwargs)

    def build_graph(self) -> Any:
        return GRAPHS[self.graph][1](self.saver())

    def records(self) -> dict[str, bytes]:
        storage = self.saver(quarantine=False).storage
        return {key: storage.read(key) for key in storage.walk("threads")}  # type: ignore[misc]

    def checkpoint_key(self, step: int) -> str:
        return keys.checkpoint_key("alpha", "", self.steps[step])

    def writes_keys(self, step: int) -> list[str]:
        prefix = keys.writes_prefix("alpha", "", self.steps[step])
        return sorted(f"{prefix}/{name}" for name in self.saver().storage.list(prefix))

    def overwrite(self, key: str, data: bytes) -> None:
        self.saver().storage.write(key, data)

    def quarantine(self) -> dict[str, tuple[bytes, dict[str, Any]]]:
        """Original key -> (the bytes moved aside, their reason record)."""
        saver = self.saver(quarantine=False)
        files = {key: saver.storage.read(key) for key in saver.storage.walk("quarantine")}
        return quarantine_contents(files, saver.codec)

    def reads(self) -> dict[str, Any]:
        """What every read returns, without moving anything: the tuples ``list`` yields
        and, for each checkpoint id the thread ever had, what ``get_tuple`` returns."""
        saver = self.saver(quarantine=False)

        def summary(item: Any) -> Any:
            if item is None:
                return None
            return (
                item.config,
                item.checkpoint,
                item.metadata,
                item.parent_config,
                item.pending_writes,
            )

        return {
            "list": [summary(item) for item in saver.list(ALPHA)],
            "usable": [item.metadata["step"] for item in saver.list(ALPHA)],
            "latest": summary(saver.get_tuple(ALPHA)),
            "by_id": {
                step: summary(
                    saver.get_tuple({"configurable": {"thread_id": "alpha", "checkpoint_id": cid}})
                )
                for step, cid in self.steps.items()
            },
        }


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return Store(request.param, tmp_path / "store")


JUNK = b"junk" * 40


def damage_checkpoint(step: int) -> Callable[[Store], None]:
    return lambda store: store.overwrite(store.checkpoint_key(step), JUNK)


def damage_writes(step: int) -> Callable[[Store], None]:
    return lambda store: store.overwrite(store.writes_keys(step)[0], JUNK)


CASES = {
    # graph, damage, a checkpoint the damage leaves unusable besides its own
    "mid-thread checkpoint with pending writes": ("chat", 2, "checkpoint"),
    "value-holding checkpoint others refer to": ("chat", 1, "checkpoint"),
    "checkpoint with pending writes others refer to": ("chat", 0, "checkpoint"),
    "writes record": ("chat", 3, "writes"),
    "checkpoint others refer to, with a survivor to rewrite": ("ping-pong", 2, "checkpoint"),
}


def damaged_store(case: str, backend: str, root: Path) -> Store:
    graph, step, what = CASES[case]
    store = Store(backend, root, graph)
    if "pending writes" in case or what == "writes":
        assert store.writes_keys(step), "the damaged step has pending writes"
    (damage_checkpoint if what == "checkpoint" else damage_writes)(step)(store)
    return store


def converges(store: Store) -> dict[str, Any]:
    """verify (damage) -> repair -> verify (ok) -> repair (nothing to do); what was moved."""
    before = store.records()
    report = store.saver().verify()
    assert not report.ok

    saver = store.saver()
    repaired = saver.verify(repair=True)
    assert repaired.repaired
    after = store.saver().verify()
    assert after.ok, after.to_dict()
    again = store.saver().verify(repair=True)
    assert again.ok and again.damaged == [] and again.unusable_checkpoints == []

    # nothing is lost: every record that left the thread is in quarantine, byte for
    # byte, with a reason; every record still there is as it was, or rewritten
    moved = store.quarantine()
    now = store.records()
    assert set(before) == set(now) | set(moved)
    assert not set(now) & set(moved)
    for key, (data, reason) in moved.items():
        assert data == before[key]
        assert reason["original_key"] == key and reason["reason"]
    assert saver.stats.quarantined_records == len(moved)
    rewritten = {key for key in now if now[key] != before[key]}
    assert set(repaired.rewritten) == rewritten
    return {"report": report, "repaired": repaired, "moved": moved, "rewritten": rewritten}


# -- the Python API ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_repair_verify_converges_and_reads_do_not_change(
    tmp_path: Path, case: str, backend: str
) -> None:
    store = damaged_store(case, backend, tmp_path / "store")
    reads = store.reads()
    assert reads["latest"] is not None

    converges(store)
    # repair made explicit what reads already did: they return the same, to the byte
    assert store.reads() == reads
    # and the thread carries on from the checkpoint reads return
    graph = store.build_graph()
    if store.graph == "chat":
        turns = reads["latest"][1]["channel_values"].get("turns", 0)
        result = graph.invoke({"messages": [("user", "still there?")]}, ALPHA)
        assert result["turns"] == turns + 1
        assert [m.content for m in result["messages"]][-2:] == [
            "still there?",
            "echo: still there?",
        ]
    else:
        assert graph.invoke({"a": 2, "b": 0}, ALPHA) == {"a": 3, "b": 10}
    assert store.saver().verify().ok


def test_a_quarantined_checkpoint_s_pending_writes_are_moved_with_a_reason(store: Store) -> None:
    damage_checkpoint(2)(store)
    orphans = store.writes_keys(2)
    assert orphans
    result = converges(store)
    for key in orphans:
        reason = result["moved"][key][1]
        assert reason["kind"] == "writes"
        assert reason["reason"].startswith(
            f"orphaned: pending writes of checkpoint {store.steps[2]}, which was quarantined"
        )
    assert store.checkpoint_key(2) in result["moved"]


def test_the_damaged_records_of_a_thread_are_moved_aside_in_one_move(store: Store) -> None:
    """Repair moves what it finds damaged in a thread as a read falling back past it
    does: together, so the records share one reasons file (and, in a log, one append
    of their deletions and one file of their copies), each named by it, each copied
    byte for byte."""
    damaged = [store.checkpoint_key(1), store.checkpoint_key(2)]
    for step in (1, 2):
        damage_checkpoint(step)(store)
    result = converges(store)
    saver = store.saver(quarantine=False)
    names = list(saver.storage.walk("quarantine"))
    (reasons,) = [name for name in names if name.endswith(".reasons")]
    move = reasons.rsplit("/", 1)[-1].removesuffix(".reasons")
    together = quarantine_contents(
        {name: saver.storage.read(name) for name in names if move in name}, saver.codec
    )
    assert sorted(together) == damaged
    reported = {d.key: d for d in result["repaired"].damaged}
    for key in damaged:
        assert together[key][0] == JUNK == result["moved"][key][0]
        assert together[key][1]["reason"] == reported[key].reason
        reason = together[key][1]
        copy = saver.storage.location(f"quarantine/{reason['record']}")
        # a log's records share one file of copies: each is named with where it starts
        if reason["record"].endswith(".records"):
            copy = f"{copy}@{reason['offset']}"
        assert reported[key].quarantined_to == copy


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoints_that_can_never_load_are_moved_after_the_ones_that_can_hold_their_values(
    tmp_path: Path, backend: str
) -> None:
    """Step 3 keeps b in step 2, so it can never load once step 2 is damaged; step 4
    still loads but keeps a in step 3: it is rewritten to hold a, then step 3 goes."""
    store = Store(backend, tmp_path / "store", "ping-pong")
    damage_checkpoint(2)(store)
    report = store.saver().verify()
    unusable = {u.checkpoint_id: u for u in report.unusable_checkpoints}
    assert set(unusable) == {store.steps[2], store.steps[3]}
    entry = unusable[store.steps[3]]
    assert entry.because_of == store.checkpoint_key(2)
    assert entry.reason == (
        f"the value of channel 'b' is in checkpoint {store.steps[2]}, whose record is damaged "
        "(bad magic b'junk', expected b'LGCV')"
    )
    # a read of step 3 falls back to its nearest ancestor that loads: step 1
    assert entry.resume_from == store.steps[1]
    fell_back = store.saver(quarantine=False).get_tuple(
        {"configurable": {"thread_id": "alpha", "checkpoint_id": store.steps[3]}}
    )
    assert fell_back.config["configurable"]["checkpoint_id"] == entry.resume_from
    assert entry.advice == (
        f"repair moves it aside, or prune the thread; until then reads fall back to "
        f"{store.steps[1]}"
    )
    assert entry.repairable

    writes_of_3 = store.writes_keys(3)
    orphans = {*store.writes_keys(2), *writes_of_3}
    assert writes_of_3
    result = converges(store)
    assert set(result["moved"]) == {store.checkpoint_key(2), store.checkpoint_key(3), *orphans}
    assert result["rewritten"] == {store.checkpoint_key(4)}
    saver = store.saver()
    record = decode_checkpoint(saver.codec, saver.storage.read(store.checkpoint_key(4)))
    assert record.refs["a"][1] == store.steps[4]
    moved_3 = result["moved"][store.checkpoint_key(3)][1]
    # judged once the damage was aside
    assert moved_3["reason"] == (
        f"unusable: the value of channel 'b' is in checkpoint {store.steps[2]}, which was "
        "quarantined (bad magic b'junk', expected b'LGCV')"
    )
    assert moved_3["identity"]["parent_checkpoint_id"] == store.steps[2]
    for key in writes_of_3:
        assert result["moved"][key][1]["reason"].startswith(
            f"orphaned: pending writes of checkpoint {store.steps[3]}, which can never load"
        )


def test_after_a_read_quarantined_a_checkpoint_verify_names_what_repair_moves(
    store: Store,
) -> None:
    """Reads move damage aside on their own; verify then reports the orphaned writes
    and the checkpoints left unusable, never a 'missing' record that repair cannot move."""
    damage_checkpoint(0)(store)
    reads = store.reads()
    reader = store.saver()
    list(reader.list(ALPHA))
    assert reader.stats.quarantined_records == 1

    report = store.saver().verify()
    assert not report.ok
    assert not [d for d in report.damaged if d.reason.startswith("missing")]
    assert {d.key for d in report.damaged} == set(store.writes_keys(0))
    assert all(d.kind == "writes" and d.reason.startswith("orphaned") for d in report.damaged)
    skipped = set(store.steps) - set(reads["usable"]) - {0}
    assert skipped, "later checkpoints depend on step 0"
    assert {u.checkpoint_id for u in report.unusable_checkpoints} == {
        store.steps[step] for step in skipped
    }
    for entry in report.unusable_checkpoints:
        assert "quarantined" in entry.reason
        # resume_from is where a read of it falls back to
        step = next(s for s, cid in store.steps.items() if cid == entry.checkpoint_id)
        assert reads["by_id"][step][0]["configurable"]["checkpoint_id"] == entry.resume_from
    store.saver().verify(repair=True)
    assert store.saver().verify().ok
    assert store.reads() == reads


def test_prune_keep_latest_clears_checkpoints_that_depend_on_a_quarantined_record(
    store: Store,
) -> None:
    damage_checkpoint(1)(store)
    list(store.saver().list(ALPHA))  # a read quarantines step 1
    report = store.saver().verify()
    assert report.unusable_checkpoints
    assert all("prune" in entry.advice for entry in report.unusable_checkpoints)
    store.saver().prune(["alpha"])
    after = store.saver().verify()
    # what prune leaves behind is the quarantined checkpoint's writes: repair moves them
    assert after.unusable_checkpoints == []
    assert {d.key for d in after.damaged} == set(store.writes_keys(1))
    store.saver().verify(repair=True)
    assert store.saver().verify().ok


def test_orphaned_writes_left_by_prune_are_reported_and_repaired(store: Store) -> None:
    damage_checkpoint(0)(store)
    list(store.saver().list(ALPHA))  # a read quarantines step 0; its writes stay behind
    store.saver().prune(["alpha"])
    report = store.saver().verify()
    assert {d.key for d in report.damaged} == set(store.writes_keys(0))
    assert report.unusable_checkpoints == []
    store.saver().verify(repair=True)
    assert store.saver().verify().ok


def test_writes_of_a_checkpoint_not_stored_yet_are_left_alone(store: Store) -> None:
    """With durability="async" LangGraph stores a step's writes while the put of their
    checkpoint is still running: writes of a checkpoint newer than every stored one may
    be in flight. Repair leaves them, and says what to do; once the thread has moved on,
    they are orphans and repair moves them."""
    saver = store.saver()
    latest = saver.get_tuple(ALPHA)
    assert latest is not None
    in_flight = {
        "configurable": {"thread_id": "alpha", "checkpoint_ns": "", "checkpoint_id": str(uuid6())}
    }
    saver.put_writes(in_flight, [("messages", "x")], "task")
    writes = keys.writes_prefix("alpha", "", in_flight["configurable"]["checkpoint_id"])

    repaired = store.saver().verify(repair=True)
    assert not repaired.ok
    (entry,) = repaired.unusable_checkpoints
    assert entry.checkpoint_id == in_flight["configurable"]["checkpoint_id"]
    assert entry.quarantined_to is None
    assert "still running" in entry.advice
    assert store.saver().storage.list(writes)

    store.build_graph().invoke({"messages": [("user", "again")]}, ALPHA)
    store.saver().verify(repair=True)
    assert store.saver().verify().ok
    assert not store.saver().storage.list(writes)


def test_repair_holds_the_thread_lock_only_where_it_changes_something(
    tmp_path: Path,
) -> None:
    store = Store("files", tmp_path / "store")
    damage_checkpoint(1)(store)
    saver = store.saver()
    taken = []
    real_lock = saver.storage.lock

    @contextmanager
    def recording_lock(prefix: str, *, exclusive: bool) -> Any:
        taken.append((prefix, exclusive))
        with real_lock(prefix, exclusive=exclusive):
            yield

    saver.storage.lock = recording_lock  # type: ignore[method-assign]
    saver.verify()
    assert taken == []
    saver.verify(repair=True)
    assert taken == [(keys.thread_prefix("alpha"), True)]


# -- the console script -------------------------------------------------------------------


def console(*argv: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *map(str, argv)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_console_script_converges(tmp_path: Path, case: str) -> None:
    store = damaged_store(case, "files", tmp_path / "store")

    found = console("verify", store.root)
    assert found.returncode == 1, found.stdout + found.stderr
    assert found.stdout.splitlines()[-1] == (
        f"run `langgraph-verified repair {store.root}` to move the damage to quarantine/"
    )
    repaired = console("repair", store.root)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert repaired.stdout.splitlines()[-1] == "the store verifies now"
    assert "not moved" not in repaired.stdout
    clean = console("verify", store.root)
    assert (clean.returncode, clean.stderr) == (0, ""), clean.stdout
    assert clean.stdout.splitlines()[-1] == "ok: every record verifies"
    again = console("repair", store.root)
    assert (again.returncode, again.stdout.splitlines()[-1]) == (0, "nothing to repair")


def test_the_console_script_names_what_repair_moved_and_rewrote(tmp_path: Path) -> None:
    store = Store("files", tmp_path / "store", "ping-pong")
    damage_checkpoint(2)(store)
    found = console("verify", store.root, "--thread", "alpha")
    assert found.returncode == 1
    lines = found.stdout.splitlines()
    at = lines.index(f"  thread 'alpha'  namespace (root)  {store.steps[3]}")
    assert lines[at + 1].strip().startswith("the value of channel 'b' is in checkpoint")
    assert lines[at + 2].strip() == (
        f"repair moves it aside, or prune the thread; until then reads fall back to "
        f"{store.steps[1]}"
    )

    damaged_at = located(*checkpoint_entry(store.root, store.steps[2]))
    repaired = console("repair", store.root, "--thread", "alpha")
    assert repaired.returncode == 0, repaired.stdout
    lines = repaired.stdout.splitlines()
    assert f"moved {damaged_at}" in lines
    # where exactly: test_cli.test_repair_names_where_it_moved_a_record_from
    assert [line for line in lines if line.startswith("moved ") and store.steps[3] in line]
    # rewritten, then the log compacted: where the record is now
    assert f"rewrote {located(*checkpoint_entry(store.root, store.steps[4]))}" in lines
    quarantine = store.saver().storage.location("quarantine")
    assert lines[-2:] == [
        f"quarantined {len(store.quarantine())} record(s) under {quarantine}",
        "the store verifies now",
    ]


# -- delta channels -------------------------------------------------------------------------


def extend(state: list, batches: list[list]) -> list:
    out = list(state)
    for batch in batches:
        out.extend(batch)
    return out


class DeltaState(TypedDict):
    items: Annotated[list, DeltaChannel(extend, snapshot_frequency=4)]
    count: int
    until: int


def build_delta(checkpointer: Any) -> Any:
    """Two parallel nodes append to a delta channel, a join counts; as in test_delta_channels."""
    builder = StateGraph(DeltaState)
    builder.add_node("left", lambda state: {"items": [f"L{state['count']}"]})
    builder.add_node("right", lambda state: {"items": [f"R{state['count']}"]})
    builder.add_node("join", lambda state: {"count": state["count"] + 1})
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge(["left", "right"], "join")
    builder.add_conditional_edges(
        "join",
        lambda state: ["left", "right"] if state["count"] < state["until"] else END,
        ["left", "right", END],
    )
    return builder.compile(checkpointer=checkpointer)


def test_repair_keeps_the_checkpoints_a_delta_channel_is_rebuilt_through(tmp_path: Path) -> None:
    """Step 6 holds ``count`` for steps 7 to 9, which can then never load; but the
    newest checkpoint's ``items`` is rebuilt by walking back through them to the
    snapshot at step 7. Repair moves the damage and leaves them, and says so."""
    root = tmp_path / "store"
    graph = build_delta(VerifiedSaver(root))
    graph.invoke({"items": ["in"], "count": 0, "until": 3}, ALPHA)
    graph.invoke({"items": ["more"], "until": 5}, ALPHA)
    steps = {
        item.metadata["step"]: item.config["configurable"]["checkpoint_id"]
        for item in VerifiedSaver(root).list(ALPHA)
    }
    newest = VerifiedSaver(root).get_tuple(ALPHA)
    assert "items" not in newest.checkpoint["channel_values"], "rebuilt from its ancestors"
    VerifiedSaver(root).storage.write(keys.checkpoint_key("alpha", "", steps[6]), JUNK)
    looking = build_delta(VerifiedSaver(root, quarantine=False))
    state = looking.get_state(ALPHA)
    assert state.config["configurable"]["checkpoint_id"] == steps[max(steps)]

    report = VerifiedSaver(root).verify()
    kept = {u.checkpoint_id: u for u in report.unusable_checkpoints if u.checkpoint_id != steps[6]}
    assert set(kept) >= {steps[7]}
    for entry in kept.values():
        assert not entry.repairable
        assert entry.advice.startswith("repair leaves it, as delta channels")
        assert "prune the thread" in entry.advice

    repaired = VerifiedSaver(root).verify(repair=True)
    assert [d.key for d in repaired.damaged if d.quarantined_to and d.kind == "checkpoint"] == [
        keys.checkpoint_key("alpha", "", steps[6])
    ]
    storage = VerifiedSaver(root).storage
    for checkpoint_id in kept:
        assert storage.read(keys.checkpoint_key("alpha", "", checkpoint_id)) is not None
    assert build_delta(VerifiedSaver(root)).get_state(ALPHA).values == state.values
    after = VerifiedSaver(root).verify()
    assert {u.checkpoint_id for u in after.unusable_checkpoints} == set(kept)
    assert not after.needs_repair and after.damaged == []

    # they are needed: moved aside, the newest checkpoint's items could not be rebuilt
    saver = VerifiedSaver(root)
    key = keys.checkpoint_key("alpha", "", steps[7])
    as_if_moved = Damage(key, saver.storage.location(key), "unusable", "checkpoint", None)
    assert saver.reporter.set_aside(as_if_moved, saver.storage.read(key))[0].quarantined_to
    with pytest.raises(CheckpointDamagedError):
        build_delta(saver).get_state(ALPHA)
