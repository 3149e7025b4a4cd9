"""Cause mayhem: damage a real graph's store on purpose and check what the user sees.

Each test starts from a copy of one pristine store: a thread of a real
``StateGraph`` that ran six steps and then failed in a parallel superstep, so
its newest checkpoint has pending writes (one successful task, one error). One
channel (``rare``) is set by the input and changed once, and two channels
(``left``, ``right``) keep their input value for most of the run: many
checkpoints then share one record holding their values.

After the damage, for both backends (files, memory):

* ``verify()`` names exactly the damaged records, and exactly the checkpoints
  they make unusable (worked out independently, from the undamaged checkpoints'
  channel versions);
* ``get_tuple`` / ``list`` do not raise, return exactly the checkpoints that are
  still usable, and each tuple equals the undamaged store's tuple for the same
  checkpoint id (a damaged pending-writes batch is left out, nothing else);
* an explicit ``checkpoint_id`` that is unusable falls back to its nearest
  usable ancestor;
* the damaged records end up in ``quarantine/`` with a reason;
* the graph resumes to the same final state as an undamaged resume, and only
  tasks whose writes were lost run again.
"""

from __future__ import annotations

import operator
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START, StateGraph
from logtools import LogView, append_entry, lose_parity, view_log
from quarantinetools import quarantine_contents
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import MemoryStorage, VerifiedSaver
from langgraph_checkpoint_verified.storage.log.entries import (
    DELETE,
    ENTRY_MAGIC,
    HEADER_SIZE,
    PUT,
    encode_entry,
)

STEPS = 6
THREAD = {"configurable": {"thread_id": "mayhem"}}
THREAD_DIR = "threads/mayhem"
INPUT = {"count": 0, "trace": [], "rare": "r", "left": "", "right": ""}
BACKENDS = ["files", "memory"]


class State(TypedDict):
    count: int
    trace: Annotated[list, operator.add]
    rare: str
    left: str
    right: str


class Workflow:
    """A graph that loops ``STEPS`` times, then fans out to two nodes and joins.

    ``right`` fails while ``fail_right`` is set, once ``left_stored`` is (see
    ``run_until_failure``); every node execution is counted.
    """

    def __init__(self) -> None:
        self.runs = {"step": 0, "left": 0, "right": 0, "finish": 0}
        self.fail_right = False
        self.left_stored = threading.Event()

    def build(self, saver: VerifiedSaver):
        def step(state):
            self.runs["step"] += 1
            count = state["count"] + 1
            update: dict[str, Any] = {"count": count, "trace": [count]}
            if count == 4:
                update["rare"] = state["rare"] + "-changed"
            return update

        def route(state):
            return "step" if state["count"] < STEPS else ["left", "right"]

        def left(state):
            self.runs["left"] += 1
            return {"left": f"L{state['count']}", "trace": [100]}

        def right(state):
            self.runs["right"] += 1
            if self.fail_right:
                assert self.left_stored.wait(timeout=120), "left's writes were never stored"
                raise RuntimeError("right fails")
            return {"right": f"R{state['count']}", "trace": [200]}

        def finish(state):
            self.runs["finish"] += 1
            return {"trace": [-1]}

        builder = StateGraph(State)
        builder.add_node("step", step)
        builder.add_node("left", left)
        builder.add_node("right", right)
        builder.add_node("finish", finish)
        builder.add_edge(START, "step")
        builder.add_conditional_edges("step", route, ["step", "left", "right"])
        builder.add_edge(["left", "right"], "finish")
        builder.add_edge("finish", END)
        return builder.compile(checkpointer=saver)


class Store:
    """One store under test, with raw access to its records for doing damage.

    The memory backend's records are replaced as they are. The files backend
    keeps every record of the thread in one log (``threads/<T>/log``): damage is
    done to the log's bytes, as a disk or a stray program would do it (see
    ``damage_record``).
    """

    def __init__(self, backend: str, root: Path | None, records: dict[str, bytes] | None):
        self.backend = backend
        self.root = root
        self.memory = None
        if backend == "memory":
            self.memory = MemoryStorage()
            self.memory.records.update(records or {})
        self.damage_seen: list = []
        self.written: dict[str, bytes] = {}
        """key -> the bytes a read of it now returns (what the quarantine must keep)."""

    def saver(self, **options: Any) -> VerifiedSaver:
        """A new saver on this store (as a new process would open it)."""
        if self.memory is not None:
            return VerifiedSaver(
                storage=self.memory, on_corruption=self.damage_seen.append, **options
            )
        return VerifiedSaver(
            self.root, fsync=False, on_corruption=self.damage_seen.append, **options
        )

    # -- the files backend's log ---------------------------------------------------

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / THREAD_DIR / "log"

    def log(self) -> LogView:
        data = self.log_path.read_bytes() if self.log_path.exists() else b""
        return view_log(data, THREAD_DIR)

    def write_log(self, data: bytes) -> None:
        """Replace the log with ``data``, as a program writing the format by hand would:
        without the parity, which describes the log it was written with."""
        lose_parity(self.log_path)
        self.log_path.write_bytes(data)

    def append_entry(self, kind: int, key: str, data: bytes = b"") -> None:
        """Append an intact entry, as a stray program with the format at hand could."""
        append_entry(self.log_path, encode_entry(kind, key, data))

    def span_name(self, offset: int) -> str:
        """How damage between entries that names no key is reported: the log and an offset."""
        return f"{self.log_path}@{offset}"

    # -- records ---------------------------------------------------------------------

    def record_keys(self) -> list[str]:
        if self.memory is not None:
            return sorted(k for k in self.memory.records if k.startswith("threads/"))
        return sorted(self.log().directory)

    def read(self, key: str) -> bytes:
        if self.memory is not None:
            return self.memory.records[key]
        data = self.log().read(key)
        assert data is not None, f"{key} is not in the log"
        return data

    def overwrite(self, key: str, data: bytes) -> None:
        """Replace the record: a new intact entry for the key on files (a stray writer)."""
        self.written[key] = data
        if self.memory is not None:
            self.memory.records[key] = data
        else:
            self.append_entry(PUT, key, data)

    def damage_in_place(self, key: str, change: Callable[[bytes], bytes]) -> bool:
        """Change the record's bytes where they lie (files: same length, inside the log).

        Returns ``False`` if the damage made a torn tail on files (the record's
        entry was the last one): the record is then gone, not damaged.
        """
        if self.memory is not None:
            self.overwrite(key, change(self.read(key)))
            return True
        before = self.log()
        entry = before.entry(key)
        data = before.data[entry.data_offset : entry.data_offset + entry.data_size]
        changed = change(data)
        assert len(changed) == len(data) and changed != data
        damaged = (
            before.data[: entry.data_offset]
            + changed
            + before.data[entry.data_offset + len(data) :]
        )
        self.write_log(damaged)
        after = self.log()
        if after.end <= entry.offset:
            assert key not in after.directory
            return False
        self.written[key] = after.read(key)  # the whole damaged entry, up to the next one
        return True

    def delete(self, key: str) -> None:
        """Remove the record: a tombstone appended for it on files (a stray delete)."""
        if self.memory is not None:
            del self.memory.records[key]
        else:
            self.append_entry(DELETE, key)

    def quarantine(self, codec) -> dict[str, tuple[bytes, dict]]:
        """original key -> (the bytes moved aside, the reason record)."""
        if self.memory is not None:
            names = {k: v for k, v in self.memory.records.items() if k.startswith("quarantine/")}
        else:
            directory = self.root / "quarantine"
            names = {
                f"quarantine/{p.name}": p.read_bytes()
                for p in (directory.iterdir() if directory.is_dir() else [])
            }
        return quarantine_contents(names, codec)


@dataclass
class Pristine:
    """The undamaged store and everything known about it."""

    backend: str
    root: Path | None
    records: dict[str, bytes] | None
    ids: list[str]  # newest first
    parent: dict[str, str | None]
    versions: dict[str, dict[str, Any]]
    tuples: dict[str, Any]
    identity_of_key: dict[str, dict[str, str]]
    final_values: dict[str, Any] = field(default_factory=dict)
    resume_runs: dict[str, int] = field(default_factory=dict)
    other_thread_log: bytes = b""
    """Files only: the log of the same run on another thread (``elsewhere``)."""

    def copy(self, tmp_path: Path) -> Store:
        if self.backend == "memory":
            return Store("memory", None, dict(self.records))
        target = tmp_path / "store"
        shutil.copytree(self.root, target)
        return Store("files", target, None)

    def checkpoint_key(self, checkpoint_id: str) -> str:
        return next(
            k
            for k, ident in self.identity_of_key.items()
            if k.endswith(".ckpt") and ident["checkpoint_id"] == checkpoint_id
        )

    def writes_keys(self, checkpoint_id: str) -> list[str]:
        return sorted(
            k
            for k, ident in self.identity_of_key.items()
            if k.endswith(".wr") and ident["checkpoint_id"] == checkpoint_id
        )

    def id_at_step(self, step: int) -> str:
        return next(i for i in self.ids if self.tuples[i].metadata["step"] == step)

    def holders(self, checkpoint_id: str) -> set[str]:
        """Checkpoints whose records hold this checkpoint's channel values.

        A value not changed at a step lives in the record of the checkpoint
        where its current version first appeared along the parent chain.
        """
        found = set()
        for channel, version in self.versions[checkpoint_id].items():
            holder = self.first_holder(checkpoint_id, channel, version)
            found.add(holder)
            # A list that extends its previous version is stored as the items it
            # gained: the previous version's record is needed too, and so on back.
            value = self.tuples[holder].checkpoint["channel_values"].get(channel)
            while isinstance(value, list) and (parent := self.parent[holder]):
                base = self.first_holder(parent, channel, self.versions[parent].get(channel))
                base_value = self.tuples[base].checkpoint["channel_values"].get(channel)
                if not isinstance(base_value, list) or value[: len(base_value)] != base_value:
                    break
                found.add(base)
                holder, value = base, base_value
        return found

    def first_holder(self, checkpoint_id: str, channel: str, version: object) -> str:
        """Where ``version`` of ``channel`` first appeared along the parent chain."""
        holder = checkpoint_id
        while (parent := self.parent[holder]) and self.versions[parent].get(channel) == version:
            holder = parent
        return holder

    def unusable(self, damaged_checkpoints: set[str]) -> set[str]:
        return {i for i in self.ids if self.holders(i) & damaged_checkpoints}


def run_until_failure(saver: VerifiedSaver, thread: dict) -> None:
    """Run the workflow until ``right`` fails, after ``left``'s writes are stored.

    A task's failure ends its superstep without waiting for the others: a ``left``
    still running then (a busy machine) finishes after the run, when its writes can no
    longer be stored, and the newest checkpoint lacks the writes every test expects.
    """
    workflow = Workflow()
    workflow.fail_right = True
    put_writes = saver.put_writes

    def noting_left(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        put_writes(config, writes, task_id, task_path)
        if ("trace", [100]) in writes:  # left's (the input writes "left" too)
            workflow.left_stored.set()

    saver.put_writes = noting_left  # type: ignore[method-assign]
    graph = workflow.build(saver)
    with pytest.raises(RuntimeError, match="right fails"):
        graph.invoke(INPUT, thread)


def in_fixed_order(view: LogView, codec, left_task: str) -> bytes:
    """The same entries, each checkpoint followed by its pending writes, ``left``'s last.

    The saver's order depends on thread timing (a step's writes may be stored
    before its checkpoint); a fixed order makes "the last entry" the same in
    every run: the newest checkpoint's ``left`` writes.
    """

    def order(entry) -> tuple:
        identity = codec.read_header(view.read(entry.key)).identity
        is_left = identity.get("task_id") == left_task
        return (identity["checkpoint_id"], entry.key.endswith(".wr"), is_left, entry.key)

    entries = sorted(view.directory.values(), key=order)
    return b"".join(encode_entry(PUT, e.key, view.read(e.key)) for e in entries)


def build_pristine(backend: str, base: Path) -> Pristine:
    root = base / f"pristine-{backend}"
    store = Store(backend, root if backend == "files" else None, None)
    saver = store.saver()
    run_until_failure(saver, THREAD)
    tuples = {t.config["configurable"]["checkpoint_id"]: t for t in saver.list(THREAD)}
    ids = sorted(tuples, reverse=True)
    assert len(ids) == STEPS + 2
    newest = tuples[ids[0]]
    left_task = next(task for task, channel, _ in newest.pending_writes if channel == "left")
    other_thread_log = b""
    if backend == "files":
        store.write_log(in_fixed_order(store.log(), saver.codec, left_task))
        assert store.log().entries[-1].key.split("/")[-1].startswith(left_task)
        other = Store("files", base / "other-thread", None)
        run_until_failure(other.saver(), {"configurable": {"thread_id": "elsewhere"}})
        other_thread_log = (other.root / "threads" / "elsewhere" / "log").read_bytes()
    assert store.saver().verify().ok
    identity_of_key = {
        k: saver.codec.read_header(store.read(k)).identity for k in store.record_keys()
    }
    pristine = Pristine(
        backend=backend,
        root=root if backend == "files" else None,
        records=dict(store.memory.records) if store.memory is not None else None,
        ids=ids,
        parent={
            i: t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
            for i, t in tuples.items()
        },
        versions={i: dict(t.checkpoint["channel_versions"]) for i, t in tuples.items()},
        tuples=tuples,
        identity_of_key=identity_of_key,
        other_thread_log=other_thread_log,
    )
    # the reference: an undamaged resume, on a copy
    reference = pristine.copy(base / f"reference-{backend}")
    workflow = Workflow()
    final = workflow.build(reference.saver()).invoke(None, THREAD)
    pristine.final_values = final
    pristine.resume_runs = dict(workflow.runs)
    assert final["trace"] == [1, 2, 3, 4, 5, 6, 100, 200, -1]
    assert pristine.resume_runs == {"step": 0, "left": 0, "right": 1, "finish": 1}
    return pristine


@pytest.fixture(scope="module")
def pristine_stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("mayhem")
    return {backend: build_pristine(backend, base) for backend in BACKENDS}


@pytest.fixture(params=BACKENDS)
def pristine(request, pristine_stores) -> Pristine:
    return pristine_stores[request.param]


# -- what the user must see ----------------------------------------------------


def same_as_undamaged(pristine: Pristine, found, lost_tasks: set[str]) -> None:
    checkpoint_id = found.config["configurable"]["checkpoint_id"]
    twin = pristine.tuples[checkpoint_id]
    assert found.config == twin.config
    assert found.checkpoint == twin.checkpoint
    assert found.metadata == twin.metadata
    assert found.parent_config == twin.parent_config
    assert found.pending_writes == [w for w in twin.pending_writes if w[0] not in lost_tasks]


def check_damage(
    pristine: Pristine,
    store: Store,
    *,
    damaged_keys: set[str],
    damaged_checkpoints: set[str],
    lost_writes: dict[str, set[str]] | None = None,
    quarantined: bool = True,
    silent: bool = False,
    moved_keys: set[str] | None = None,
) -> None:
    """Everything the module docstring promises, for one damaged store.

    Args:
        damaged_keys: What ``verify()`` must name.
        damaged_checkpoints: Checkpoints whose own record is damaged or gone.
        lost_writes: checkpoint id -> task ids whose pending writes are damaged.
        quarantined: Whether the damaged keys exist to be moved aside.
        silent: The records are gone without a trace (a torn tail of the log:
            a write cut short, not damage; or the whole log deleted): nothing is
            reported, and they read as never stored.
        moved_keys: The damaged keys that reads come to and quarantine, if not all.
    """
    lost_writes = lost_writes or {}
    quarantined = quarantined and not silent
    moved_keys = damaged_keys if moved_keys is None else moved_keys
    unusable = pristine.unusable(damaged_checkpoints)
    usable = [i for i in pristine.ids if i not in unusable]

    report = store.saver().verify()
    assert {d.key for d in report.damaged} == damaged_keys
    assert {u.checkpoint_id for u in report.unusable_checkpoints} == (set() if silent else unusable)
    assert report.ok is silent
    assert not store.damage_seen, "verify() without repair reports; it moves nothing"

    def check_reads(saver: VerifiedSaver) -> None:
        for requested in pristine.ids:
            config = {"configurable": {**THREAD["configurable"], "checkpoint_id": requested}}
            found = saver.get_tuple(config)
            older = [i for i in usable if i <= requested]
            if not older or (requested in damaged_checkpoints and not quarantined):
                # nothing usable left, or a deleted id: as if it had never existed
                assert found is None
                continue
            assert found.config["configurable"]["checkpoint_id"] == older[0]
            same_as_undamaged(pristine, found, lost_writes.get(older[0], set()))
        latest = saver.get_tuple(THREAD)
        if not usable:
            assert latest is None
        else:
            assert latest.config["configurable"]["checkpoint_id"] == usable[0]
            same_as_undamaged(pristine, latest, lost_writes.get(usable[0], set()))
        listed = list(saver.list(THREAD))
        assert [t.config["configurable"]["checkpoint_id"] for t in listed] == usable
        for found in listed:
            checkpoint_id = found.config["configurable"]["checkpoint_id"]
            same_as_undamaged(pristine, found, lost_writes.get(checkpoint_id, set()))

    saver = store.saver()
    check_reads(saver)
    if quarantined:
        assert saver.stats.damaged_records >= 1
        assert saver.stats.quarantined_records == len(moved_keys)
        assert {d.key for d in store.damage_seen} == moved_keys
        moved = store.quarantine(saver.codec)
        assert set(moved) == moved_keys
        for key, (data, reason) in moved.items():
            assert data == store.written[key], "the damaged bytes are kept, unchanged"
            assert reason["reason"]
            assert reason["original_key"] == key
        assert not set(store.record_keys()) & moved_keys
    # a deleted newest checkpoint leaves nothing to fall back from: it is simply not there
    if silent:
        assert saver.stats.damaged_records == saver.stats.fallbacks == 0
        assert not store.damage_seen
        assert not store.quarantine(saver.codec)
    present = [i for i in pristine.ids if quarantined or i not in damaged_checkpoints]
    if usable[:1] != present[:1]:
        assert saver.stats.fallbacks >= 1
    if not usable and not silent:
        assert saver.stats.restarts_from_scratch >= 1

    # the same answers again, from a new saver, once the damage is aside
    check_reads(store.saver())

    workflow = Workflow()
    graph = workflow.build(store.saver())
    resumed = graph.invoke(None if usable else INPUT, THREAD)
    assert resumed == pristine.final_values
    assert graph.get_state(THREAD).values == pristine.final_values
    expected_runs = dict(pristine.resume_runs)
    if usable and usable[0] == pristine.ids[0]:
        # only the tasks whose pending writes were lost run again
        expected_runs["left"] += task_of(pristine, "left") in lost_writes.get(usable[0], set())
        assert workflow.runs == expected_runs
    else:
        # resumed from an older checkpoint: its own pending writes are used, the
        # steps after it run again, and no more
        resumed_at = pristine.tuples[usable[0]].metadata["step"] if usable else -1
        assert workflow.runs["step"] == STEPS - resumed_at - 1
        assert workflow.runs["right"] == workflow.runs["left"] == workflow.runs["finish"] == 1


def task_of(pristine: Pristine, node: str) -> str:
    newest = pristine.tuples[pristine.ids[0]]
    return next(task for task, channel, _ in newest.pending_writes if channel == node)


# -- damage ----------------------------------------------------------------------


def flip_bit(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :]


def zero_block(data: bytes) -> bytes:
    start = (len(data) // 2) // 512 * 512
    return data[:start] + b"\0" * min(512, len(data) - start) + data[start + 512 :]


CORRUPTIONS = {
    "bit_flip": flip_bit,
    "truncate_to_zero": lambda data: b"",
    "zero_512_block": zero_block,
    "append_junk": lambda data: data + b"junk" * 5,
    "truncate_half": lambda data: data[: len(data) // 2],
}
IN_PLACE = {
    "bit_flip": flip_bit,
    "truncate_to_zero": lambda data: bytes(len(data)),
    "zero_512_block": zero_block,
}
"""On files, how each corruption is done inside the log, keeping its length."""


def damage_record(store: Store, key: str, corruption: str) -> bool:
    """Apply ``corruption`` to one record; ``False`` if on files it made a torn tail instead.

    Memory: the record's bytes are replaced. Files: a flip, a zeroed block and
    "truncate to zero" (every data byte zeroed) change the entry's data where it
    lies, so its checksum fails and the reader returns the damaged entry for the
    key; done to the last entry, that is a torn tail (the record is gone, not
    damaged). Appending junk or cutting a record in half cannot be done in
    place: they are a new intact entry holding the changed bytes, as a stray
    program rewriting the record would leave.
    """
    if store.memory is not None or corruption not in IN_PLACE:
        store.overwrite(key, CORRUPTIONS[corruption](store.read(key)))
        return True
    return store.damage_in_place(key, IN_PLACE[corruption])


def check_record_damage(pristine: Pristine, store: Store, key: str, damaged: bool) -> None:
    """``check_damage`` for one record damaged (or, if not ``damaged``, lost with a torn tail)."""
    identity = pristine.identity_of_key[key]
    if key.endswith(".ckpt"):
        expected: dict[str, Any] = {"damaged_checkpoints": {identity["checkpoint_id"]}}
    else:
        expected = {
            "damaged_checkpoints": set(),
            "lost_writes": {identity["checkpoint_id"]: {identity["task_id"]}},
        }
    if damaged:
        check_damage(pristine, store, damaged_keys={key}, **expected)
    else:
        check_damage(
            pristine, store, damaged_keys=set(), quarantined=False, silent=True, **expected
        )


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_newest_checkpoint_damaged(pristine, tmp_path, corruption):
    store = pristine.copy(tmp_path)
    newest = pristine.ids[0]
    key = pristine.checkpoint_key(newest)
    assert damage_record(store, key, corruption)
    check_damage(pristine, store, damaged_keys={key}, damaged_checkpoints={newest})


@pytest.mark.parametrize("step", [0, 4])
def test_shared_channel_value_record_damaged(pristine, tmp_path, step):
    """Step 0 holds ``left``/``right`` for every later checkpoint; step 4 holds ``rare``."""
    store = pristine.copy(tmp_path)
    holder = pristine.id_at_step(step)
    sharing = pristine.unusable({holder})
    assert len(sharing) >= 3, "the value record is shared by several checkpoints"
    key = pristine.checkpoint_key(holder)
    assert damage_record(store, key, "bit_flip")
    check_damage(pristine, store, damaged_keys={key}, damaged_checkpoints={holder})


@pytest.mark.parametrize("corruption", ["bit_flip", "truncate_to_zero", "truncate_half"])
@pytest.mark.parametrize("node", ["left", "right"])
def test_pending_writes_damaged(pristine, tmp_path, node, corruption):
    """On files ``left``'s writes are the log's last entry: damaged in place it is still a
    complete entry, so it is damage (reported), never taken for a torn tail."""
    store = pristine.copy(tmp_path)
    newest = pristine.ids[0]
    task = task_of(pristine, node if node == "left" else "__error__")
    (key,) = [
        k for k in pristine.writes_keys(newest) if pristine.identity_of_key[k]["task_id"] == task
    ]
    damaged = damage_record(store, key, corruption)
    assert damaged
    check_record_damage(pristine, store, key, damaged)


def test_every_record_damaged_in_turn(pristine, tmp_path):
    """Each record of the store, alone, damaged with each kind of corruption in turn."""
    kinds = sorted(CORRUPTIONS)
    keys = sorted(pristine.identity_of_key)
    assert len(keys) > 2 * STEPS
    for n, key in enumerate(keys):
        for corruption in dict.fromkeys([kinds[n % len(kinds)], "bit_flip"]):
            store = pristine.copy(tmp_path / f"{n}-{corruption}")
            damaged = damage_record(store, key, corruption)
            try:
                check_record_damage(pristine, store, key, damaged)
            except AssertionError as exc:
                raise AssertionError(f"{corruption} of {key}: {exc}") from exc


def test_two_checkpoint_records_swapped(pristine, tmp_path):
    store = pristine.copy(tmp_path)
    a, b = pristine.id_at_step(2), pristine.id_at_step(5)
    key_a, key_b = pristine.checkpoint_key(a), pristine.checkpoint_key(b)
    data_a, data_b = store.read(key_a), store.read(key_b)
    store.overwrite(key_a, data_b)
    store.overwrite(key_b, data_a)
    check_damage(pristine, store, damaged_keys={key_a, key_b}, damaged_checkpoints={a, b})


def test_two_writes_records_swapped(pristine, tmp_path):
    store = pristine.copy(tmp_path)
    a, b = pristine.id_at_step(1), pristine.id_at_step(3)
    (key_a,), (key_b,) = pristine.writes_keys(a), pristine.writes_keys(b)
    data_a, data_b = store.read(key_a), store.read(key_b)
    store.overwrite(key_a, data_b)
    store.overwrite(key_b, data_a)
    lost = {
        a: {pristine.identity_of_key[key_a]["task_id"]},
        b: {pristine.identity_of_key[key_b]["task_id"]},
    }
    check_damage(
        pristine, store, damaged_keys={key_a, key_b}, damaged_checkpoints=set(), lost_writes=lost
    )


@pytest.mark.parametrize("older_step", [-1, 3])
def test_older_copy_restored_over_newer_checkpoint(pristine, tmp_path, older_step):
    """A valid, older record copied over a newer one's name (a restore from backup gone wrong)."""
    store = pristine.copy(tmp_path)
    newer = pristine.ids[0]
    older_key = pristine.checkpoint_key(pristine.id_at_step(older_step))
    newer_key = pristine.checkpoint_key(newer)
    store.overwrite(newer_key, store.read(older_key))
    check_damage(pristine, store, damaged_keys={newer_key}, damaged_checkpoints={newer})


def test_newest_checkpoint_deleted(pristine, tmp_path):
    """A deleted record is not there to quarantine; its pending writes give it away."""
    store = pristine.copy(tmp_path)
    newest = pristine.ids[0]
    key = pristine.checkpoint_key(newest)
    store.delete(key)
    check_damage(
        pristine, store, damaged_keys={key}, damaged_checkpoints={newest}, quarantined=False
    )


def test_shared_value_record_deleted(pristine, tmp_path):
    store = pristine.copy(tmp_path)
    holder = pristine.id_at_step(4)
    key = pristine.checkpoint_key(holder)
    store.delete(key)
    check_damage(
        pristine, store, damaged_keys={key}, damaged_checkpoints={holder}, quarantined=False
    )


def test_damage_is_reported_once_and_strict_mode_raises(pristine, tmp_path):
    from langgraph_checkpoint_verified import CheckpointDamagedError

    store = pristine.copy(tmp_path)
    newest = pristine.ids[0]
    key = pristine.checkpoint_key(newest)
    assert damage_record(store, key, "bit_flip")
    strict = store.saver(strict=True)
    with pytest.raises(CheckpointDamagedError) as raised:
        strict.get_tuple(THREAD)
    assert raised.value.checkpoint_id == newest
    saver = store.saver()
    assert saver.get_tuple(THREAD).config["configurable"]["checkpoint_id"] == pristine.ids[1]
    assert saver.get_tuple(THREAD).config["configurable"]["checkpoint_id"] == pristine.ids[1]
    assert len(store.damage_seen) == 1
    assert store.damage_seen[0].key == key
    assert store.damage_seen[0].kind == "checkpoint"
    if store.memory is not None:
        # on files the reader returns the whole damaged entry: no record header to read
        assert store.damage_seen[0].identity["checkpoint_id"] == newest


# -- damage only a log can suffer (files) --------------------------------------------


@pytest.fixture
def pristine_files(pristine_stores) -> Pristine:
    return pristine_stores["files"]


def cut_points(size: int, key_size: int) -> list[int]:
    """Where to cut an entry of ``size`` bytes: its start, inside each field, its last byte."""
    points = {0, 1, 4, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + key_size // 2}
    points |= {HEADER_SIZE + key_size + 1, (HEADER_SIZE + key_size + size) // 2, size - 4}
    points.add(size - 1)
    return sorted(p for p in points if 0 <= p < size)


@pytest.mark.parametrize("which", ["last entry", "newest checkpoint"])
def test_torn_tail_is_not_damage(pristine_files, tmp_path, which):
    """The log cut inside an entry (a crash mid-append): the records from there on were
    never stored; nothing is reported, and the next put cuts the torn bytes off.

    The last entry is ``left``'s writes: the newest checkpoint is returned without them.
    Cut inside the newest checkpoint's entry, its writes go too: the previous one is returned.
    """
    pristine = pristine_files
    original = pristine.copy(tmp_path / "original").log()
    newest = pristine.ids[0]
    key = original.entries[-1].key if which == "last entry" else pristine.checkpoint_key(newest)
    entry = original.entry(key)
    points = cut_points(entry.end - entry.offset, len(key.encode()))
    assert len(points) >= 8
    for cut in points:
        store = pristine.copy(tmp_path / str(cut))
        store.write_log(original.data[: entry.offset + cut])
        try:
            if which == "last entry":
                check_record_damage(pristine, store, key, damaged=False)
            else:
                check_damage(
                    pristine,
                    store,
                    damaged_keys=set(),
                    damaged_checkpoints={newest},
                    quarantined=False,
                    silent=True,
                )
            after = store.log()
            assert after.whole, "the torn bytes are cut"
            assert after.data[: entry.offset] == original.data[: entry.offset]
        except AssertionError as exc:
            raise AssertionError(f"log cut {cut} bytes into {key}: {exc}") from exc


@pytest.mark.parametrize("junk", [b"junk" * 5, ENTRY_MAGIC + b"\1\0\xff", b"\0" * 700])
def test_junk_appended_at_the_end_is_a_torn_tail(pristine_files, tmp_path, junk):
    store = pristine_files.copy(tmp_path)
    original = store.log()
    store.write_log(original.data + junk)
    check_damage(pristine_files, store, damaged_keys=set(), damaged_checkpoints=set(), silent=True)
    after = store.log()
    assert after.whole and after.data.startswith(original.written)
    if junk.strip(b"\0"):  # zeros are room: only bytes that are not must be gone
        assert junk not in after.data[len(original.written) :]


@pytest.mark.parametrize("at", ["first", "newest checkpoint", "last"])
def test_junk_inserted_between_entries(pristine_files, tmp_path, at):
    """Bytes that are no entry, between two entries: reported, copied aside once, never read."""
    pristine = pristine_files
    store = pristine.copy(tmp_path)
    original = store.log()
    before = {
        "first": original.entries[1],
        "newest checkpoint": original.entry(pristine.checkpoint_key(pristine.ids[0])),
        "last": original.entries[-1],
    }[at]
    junk = b"not an entry " * 40
    damaged_log = original.data[: before.offset] + junk + original.data[before.offset :]
    store.write_log(damaged_log)
    span = store.span_name(before.offset)

    for reader in range(2):  # a second saver (another process) reads the same log
        store.damage_seen.clear()
        saver = store.saver()
        for checkpoint_id in pristine.ids:
            config = {"configurable": {**THREAD["configurable"], "checkpoint_id": checkpoint_id}}
            same_as_undamaged(pristine, saver.get_tuple(config), set())
        same_as_undamaged(pristine, saver.get_tuple(THREAD), set())
        listed = list(saver.list(THREAD))
        assert [t.config["configurable"]["checkpoint_id"] for t in listed] == pristine.ids
        # the first reader reports it, once, and copies it aside: from then on the log's
        # hint covers it, and the next process reads past it (the log still holds it until
        # compaction, and verify, which reads the whole log, names it)
        assert [d.key for d in store.damage_seen] == ([span] if reader == 0 else [])
        assert saver.stats.fallbacks == 0
        moved = store.quarantine(saver.codec)
        assert set(moved) == {span}, "copied aside once"
        assert moved[span][0] == junk
        assert moved[span][1]["reason"]

    workflow = Workflow()
    graph = workflow.build(store.saver())
    assert graph.invoke(None, THREAD) == pristine.final_values
    assert workflow.runs == pristine.resume_runs

    # what verify() says of it, on a copy no reader has seen yet
    fresh = pristine.copy(tmp_path / "fresh")
    fresh.write_log(damaged_log)
    report = fresh.saver().verify()
    assert {d.key for d in report.damaged} == {fresh.span_name(before.offset)}
    assert not report.ok


@pytest.mark.parametrize("step", [1, 4])
def test_damage_across_an_entry_boundary(pristine_files, tmp_path, step):
    """Bytes overwritten from a checkpoint's data into its writes' entry header.

    The scan resynchronizes on the entry after the writes: the checkpoint's key
    (its header is intact) reads back as the damaged stretch and is reported;
    its writes went with it (their header is gone), and are kept in the copy.
    """
    pristine = pristine_files
    store = pristine.copy(tmp_path)
    original = store.log()
    checkpoint_id = pristine.id_at_step(step)
    key = pristine.checkpoint_key(checkpoint_id)
    (writes_key,) = pristine.writes_keys(checkpoint_id)
    entry, writes = original.entry(key), original.entry(writes_key)
    assert entry.end == writes.offset
    start, stop = entry.data_offset + entry.data_size // 2, writes.offset + HEADER_SIZE // 2
    store.write_log(original.data[:start] + b"\xa5" * (stop - start) + original.data[stop:])
    damaged = store.log()
    assert writes_key not in damaged.directory
    store.written[key] = damaged.read(key)
    assert len(store.written[key]) == writes.end - entry.offset
    check_damage(pristine, store, damaged_keys={key}, damaged_checkpoints={checkpoint_id})


def test_whole_log_deleted(pristine_files, tmp_path):
    """Nothing is left to tell: the thread starts again from step 0."""
    store = pristine_files.copy(tmp_path)
    store.log_path.unlink()
    check_damage(
        pristine_files,
        store,
        damaged_keys=set(),
        damaged_checkpoints=set(pristine_files.ids),
        quarantined=False,
        silent=True,
    )


def rekeyed(pristine: Pristine, codec, log: bytes, thread_key: str) -> bytes:
    """Another thread's log with every entry under this thread's key for the same record."""
    view = view_log(log, thread_key)

    def place(identity_of_key: dict[str, dict[str, str]], ids: list[str]) -> dict:
        order = sorted(ids)
        return {
            (order.index(ident["checkpoint_id"]), key.rsplit("/", 1)[1].split(".", 1)[1]): key
            for key, ident in identity_of_key.items()
        }

    theirs = {key: codec.read_header(view.read(key)).identity for key in view.directory}
    their_ids = sorted({ident["checkpoint_id"] for ident in theirs.values()})
    ours = place(pristine.identity_of_key, pristine.ids)
    mapping = {place(theirs, their_ids)[at]: ours[at] for at in ours}
    assert len(mapping) == len(ours) == len(theirs)
    return b"".join(encode_entry(PUT, mapping[e.key], view.read(e.key)) for e in view.entries)


def test_log_of_another_thread_under_this_threads_keys(pristine_files, tmp_path):
    """Every record's identity says another thread: all damage, a restart from step 0.

    Reads come to the checkpoints only (none loads, so no pending writes are
    read) and quarantine them; ``verify()`` names every record.
    """
    pristine = pristine_files
    store = pristine.copy(tmp_path)
    codec = store.saver().codec
    store.write_log(rekeyed(pristine, codec, pristine.other_thread_log, "threads/elsewhere"))
    store.written = {key: store.read(key) for key in store.record_keys()}
    check_damage(
        pristine,
        store,
        damaged_keys=set(pristine.identity_of_key),
        damaged_checkpoints=set(pristine.ids),
        moved_keys={pristine.checkpoint_key(i) for i in pristine.ids},
    )


def test_log_of_another_thread_copied_over(pristine_files, tmp_path):
    """The file copied as it is: its entries name the other thread's keys.

    None of this thread's records is left, and the other thread's must not be
    taken for them: nothing is returned and the thread starts again. That the
    log holds entries that are not this thread's is damage, and ``verify()``
    says so.
    """
    pristine = pristine_files
    store = pristine.copy(tmp_path)
    store.write_log(pristine.other_thread_log)
    saver = store.saver()
    assert saver.get_tuple(THREAD) is None
    assert list(saver.list(THREAD)) == []
    for checkpoint_id in pristine.ids:
        config = {"configurable": {**THREAD["configurable"], "checkpoint_id": checkpoint_id}}
        assert saver.get_tuple(config) is None
    workflow = Workflow()
    assert workflow.build(store.saver()).invoke(INPUT, THREAD) == pristine.final_values
    assert workflow.runs == {"step": STEPS, "left": 1, "right": 1, "finish": 1}
    assert not store.saver().verify().ok, "entries of another thread in this thread's log"
