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

import json
import operator
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import MemoryStorage, VerifiedSaver
from langgraph_checkpoint_verified._format import RecordKind

STEPS = 6
THREAD = {"configurable": {"thread_id": "mayhem"}}
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

    ``right`` fails while ``fail_right`` is set; every node execution is counted.
    """

    def __init__(self) -> None:
        self.runs = {"step": 0, "left": 0, "right": 0, "finish": 0}
        self.fail_right = False

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
    """One store under test, with raw access to its records for doing damage."""

    def __init__(self, backend: str, root: Path | None, records: dict[str, bytes] | None):
        self.backend = backend
        self.root = root
        self.memory = None
        if backend == "memory":
            self.memory = MemoryStorage()
            self.memory.records.update(records or {})
        self.damage_seen: list = []
        self.written: dict[str, bytes] = {}

    def saver(self) -> VerifiedSaver:
        """A new saver on this store (as a new process would open it)."""
        if self.memory is not None:
            return VerifiedSaver(storage=self.memory, on_corruption=self.damage_seen.append)
        return VerifiedSaver(self.root, fsync=False, on_corruption=self.damage_seen.append)

    def record_keys(self) -> list[str]:
        if self.memory is not None:
            return sorted(k for k in self.memory.records if k.startswith("threads/"))
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in (self.root / "threads").rglob("*")
            if p.is_file() and not p.name.startswith(".")  # records, not the thread lock files
        )

    def read(self, key: str) -> bytes:
        if self.memory is not None:
            return self.memory.records[key]
        return (self.root / key).read_bytes()

    def overwrite(self, key: str, data: bytes) -> None:
        """Replace the bytes in place, as a disk or a stray program would."""
        self.written[key] = data
        if self.memory is not None:
            self.memory.records[key] = data
        else:
            with open(self.root / key, "r+b") as f:
                f.truncate(0)
                f.write(data)

    def delete(self, key: str) -> None:
        if self.memory is not None:
            del self.memory.records[key]
        else:
            (self.root / key).unlink()

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
        found = {}
        for name, data in names.items():
            if not name.endswith(".reason"):
                continue
            reason = json.loads(codec.decode(data, RecordKind.QUARANTINE_REASON, None))
            moved = names[name[: -len(".reason")] + ".record"]
            found[reason["original_key"]] = (moved, reason)
        assert len(names) == 2 * len(found), f"every quarantined record has a reason: {names}"
        return found


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


def build_pristine(backend: str, base: Path) -> Pristine:
    root = base / f"pristine-{backend}"
    store = Store(backend, root if backend == "files" else None, None)
    saver = store.saver()
    workflow = Workflow()
    workflow.fail_right = True
    graph = workflow.build(saver)
    with pytest.raises(RuntimeError, match="right fails"):
        graph.invoke(INPUT, THREAD)
    tuples = {t.config["configurable"]["checkpoint_id"]: t for t in saver.list(THREAD)}
    ids = sorted(tuples, reverse=True)
    assert len(ids) == STEPS + 2
    assert saver.verify().ok
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
) -> None:
    """Everything the module docstring promises, for one damaged store.

    Args:
        damaged_keys: What ``verify()`` must name.
        damaged_checkpoints: Checkpoints whose own record is damaged or gone.
        lost_writes: checkpoint id -> task ids whose pending writes are damaged.
        quarantined: Whether the damaged keys exist to be moved aside.
    """
    lost_writes = lost_writes or {}
    unusable = pristine.unusable(damaged_checkpoints)
    usable = [i for i in pristine.ids if i not in unusable]

    report = store.saver().verify()
    assert {d.key for d in report.damaged} == damaged_keys
    assert {u.checkpoint_id for u in report.unusable_checkpoints} == unusable
    assert not report.ok
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
        assert saver.stats.quarantined_records == len(damaged_keys)
        assert {d.key for d in store.damage_seen} == damaged_keys
        moved = store.quarantine(saver.codec)
        assert set(moved) == damaged_keys
        for key, (data, reason) in moved.items():
            assert data == store.written[key], "the damaged bytes are kept, unchanged"
            assert reason["reason"]
            assert reason["original_key"] == key
        assert not set(store.record_keys()) & damaged_keys
    # a deleted newest checkpoint leaves nothing to fall back from: it is simply not there
    present = [i for i in pristine.ids if quarantined or i not in damaged_checkpoints]
    if usable[:1] != present[:1]:
        assert saver.stats.fallbacks >= 1
    if not usable:
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


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_newest_checkpoint_damaged(pristine, tmp_path, corruption):
    store = pristine.copy(tmp_path)
    newest = pristine.ids[0]
    key = pristine.checkpoint_key(newest)
    store.overwrite(key, CORRUPTIONS[corruption](store.read(key)))
    check_damage(pristine, store, damaged_keys={key}, damaged_checkpoints={newest})


@pytest.mark.parametrize("step", [0, 4])
def test_shared_channel_value_record_damaged(pristine, tmp_path, step):
    """Step 0 holds ``left``/``right`` for every later checkpoint; step 4 holds ``rare``."""
    store = pristine.copy(tmp_path)
    holder = pristine.id_at_step(step)
    sharing = pristine.unusable({holder})
    assert len(sharing) >= 3, "the value record is shared by several checkpoints"
    key = pristine.checkpoint_key(holder)
    store.overwrite(key, flip_bit(store.read(key)))
    check_damage(pristine, store, damaged_keys={key}, damaged_checkpoints={holder})


@pytest.mark.parametrize("corruption", ["bit_flip", "truncate_to_zero"])
@pytest.mark.parametrize("node", ["left", "right"])
def test_pending_writes_damaged(pristine, tmp_path, node, corruption):
    store = pristine.copy(tmp_path)
    newest = pristine.ids[0]
    task = task_of(pristine, node if node == "left" else "__error__")
    (key,) = [
        k for k in pristine.writes_keys(newest) if pristine.identity_of_key[k]["task_id"] == task
    ]
    store.overwrite(key, CORRUPTIONS[corruption](store.read(key)))
    check_damage(
        pristine, store, damaged_keys={key}, damaged_checkpoints=set(), lost_writes={newest: {task}}
    )


def test_every_record_damaged_in_turn(pristine, tmp_path):
    """Each record of the store, alone, damaged with each kind of corruption in turn."""
    kinds = sorted(CORRUPTIONS)
    keys = sorted(pristine.identity_of_key)
    assert len(keys) > 2 * STEPS
    for n, key in enumerate(keys):
        store = pristine.copy(tmp_path / str(n))
        corruption = kinds[n % len(kinds)]
        store.overwrite(key, CORRUPTIONS[corruption](store.read(key)))
        identity = pristine.identity_of_key[key]
        try:
            if key.endswith(".ckpt"):
                check_damage(
                    pristine,
                    store,
                    damaged_keys={key},
                    damaged_checkpoints={identity["checkpoint_id"]},
                )
            else:
                check_damage(
                    pristine,
                    store,
                    damaged_keys={key},
                    damaged_checkpoints=set(),
                    lost_writes={identity["checkpoint_id"]: {identity["task_id"]}},
                )
        except AssertionError as exc:
            raise AssertionError(f"{corruption} of {key}: {exc}") from exc


def test_two_checkpoint_files_swapped(pristine, tmp_path):
    store = pristine.copy(tmp_path)
    a, b = pristine.id_at_step(2), pristine.id_at_step(5)
    key_a, key_b = pristine.checkpoint_key(a), pristine.checkpoint_key(b)
    data_a, data_b = store.read(key_a), store.read(key_b)
    store.overwrite(key_a, data_b)
    store.overwrite(key_b, data_a)
    check_damage(pristine, store, damaged_keys={key_a, key_b}, damaged_checkpoints={a, b})


def test_two_writes_files_swapped(pristine, tmp_path):
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
    store.overwrite(key, flip_bit(store.read(key)))
    if store.memory is not None:
        strict = VerifiedSaver(
            storage=store.memory, strict=True, on_corruption=store.damage_seen.append
        )
    else:
        strict = VerifiedSaver(
            store.root, fsync=False, strict=True, on_corruption=store.damage_seen.append
        )
    with pytest.raises(CheckpointDamagedError) as raised:
        strict.get_tuple(THREAD)
    assert raised.value.checkpoint_id == newest
    saver = store.saver()
    assert saver.get_tuple(THREAD).config["configurable"]["checkpoint_id"] == pristine.ids[1]
    assert saver.get_tuple(THREAD).config["configurable"]["checkpoint_id"] == pristine.ids[1]
    assert len(store.damage_seen) == 1
    assert store.damage_seen[0].key == key
    assert store.damage_seen[0].kind == "checkpoint"
    assert store.damage_seen[0].identity["checkpoint_id"] == newest
