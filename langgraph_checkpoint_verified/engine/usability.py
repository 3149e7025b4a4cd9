"""Which checkpoints of a thread can load, and why the others cannot.

``scan_records`` reads a thread's records once and checks each (frame, digests,
that it is where its identity says); ``judge`` says what that means, reading and
writing nothing: the damaged records, the checkpoints no read can return (their
own record damaged, or a record holding a value they need, or missing), where
reads fall back to instead, and what repair may move aside.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langgraph_checkpoint_verified.engine.core import Engine
from langgraph_checkpoint_verified.engine.damage import Damage, kind_name
from langgraph_checkpoint_verified.engine.verify_report import (
    MISSING,
    ORPHANED,
    UnusableCheckpoint,
)
from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records import keys as record_keys
from langgraph_checkpoint_verified.records.format import Codec, RecordKind
from langgraph_checkpoint_verified.records.kinds import (
    CheckpointRecord,
    canonical_key,
    decode_checkpoint,
    decode_writes,
)
from langgraph_checkpoint_verified.storage.base import Storage

Owner = tuple[str, str, str]
"""A checkpoint: (thread_id, checkpoint_ns, checkpoint_id)."""


@dataclass
class RecordsScan:
    """What one pass over some records found; reading them has no other effect."""

    records_checked: int = 0
    damaged: dict[str, tuple[RecordDamagedError, bytes]] = field(default_factory=dict)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)
    checkpoints: dict[Owner, CheckpointRecord] = field(default_factory=dict)
    writes: dict[Owner, list[tuple[str, dict[str, str]]]] = field(default_factory=dict)


@dataclass
class Findings:
    """What a scan means: what to report, and what repair may move."""

    damaged: list[Damage] = field(default_factory=list)
    unusable: list[UnusableCheckpoint] = field(default_factory=list)
    orphans: list[Damage] = field(default_factory=list)
    doomed: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    @property
    def needs_repair(self) -> bool:
        in_place = any(not d.reason.startswith(MISSING) for d in self.damaged)
        return in_place or bool(self.orphans or self.doomed)


def scan_records(
    engine: Engine, keys: list[str], tick: Callable[[], None] | None = None
) -> RecordsScan:
    storage: Storage = engine.storage
    codec: Codec = engine.codec
    scan = RecordsScan()
    for key in keys:
        data = storage.read(key)
        if data is not None:
            scan.records_checked += 1
            try:
                header = codec.read_header(data)
                scan.headers[key] = header.identity
                expected_key = canonical_key(header.kind, header.identity)
                if expected_key != key:
                    raise RecordDamagedError(
                        f"record belongs at {expected_key} (moved, swapped or copied in)"
                    )
                if header.kind is RecordKind.CHECKPOINT:
                    record = decode_checkpoint(codec, data)
                    owner = (record.thread_id, record.checkpoint_ns, record.checkpoint_id)
                    scan.checkpoints[owner] = record
                elif header.kind is RecordKind.WRITES:
                    writes = decode_writes(codec, data, {})
                    owner = (writes.thread_id, writes.checkpoint_ns, writes.checkpoint_id)
                    scan.writes.setdefault(owner, []).append((key, header.identity))
                else:
                    codec.decode(data, header.kind, None)
            except RecordDamagedError as exc:
                scan.damaged[key] = (exc, data)
        if tick is not None:
            tick()
    return scan


@dataclass(frozen=True)
class _State:
    """Whether a checkpoint's record can be used, and if not, why (``why`` completes
    "checkpoint X, ...")."""

    kind: str  # "ok", "damaged", "quarantined" or "missing"
    why: str = ""


def judge(engine: Engine, scan: RecordsScan, quarantined: dict[str, dict[str, Any]]) -> Findings:
    """What ``scan`` means: the damage and unusable checkpoints to report, and what
    repair may move. Nothing is read or written."""
    return _Judgement(engine, scan, quarantined).findings()


class _Judgement:
    """One ``judge``: the steps, in order, of ``findings``, and what they share.

    ``quarantined``: the quarantine's reasons, by the key each record was moved from.
    """

    def __init__(
        self, engine: Engine, scan: RecordsScan, quarantined: dict[str, dict[str, Any]]
    ) -> None:
        self.engine = engine
        self.storage: Storage = engine.storage
        self.scan = scan
        self.quarantined = quarantined
        self.out = Findings()
        self.damaged_owners: dict[Owner, str] = {}  # checkpoint -> its damaged record's key
        self.known: dict[tuple[str, str], set[str]] = {}
        """Every checkpoint id of a namespace, whatever its state: a read that cannot tell
        a checkpoint's parent takes the next older one, and so does ``resume_from``."""
        self.blocked: dict[Owner, tuple[str, str]] = {}  # -> (key that is why, reason)
        self.usable: set[Owner] = set()
        self.reported_missing: set[str] = set()
        self.resumes: dict[Owner, str | None] = {}  # every checkpoint a walk passed

    def findings(self) -> Findings:
        self.damaged_records()
        self.blocked_checkpoints()
        for owner, key in sorted(self.damaged_owners.items()):
            self.unusable(
                owner,
                key,
                f"its record is damaged ({self.scan.damaged[key][0].reason})",
                "repair moves it aside, with its pending writes; {meanwhile}",
                repairable=True,
            )
        self.unloadable_checkpoints()
        self.orphaned_writes()
        return self.out

    # -- the steps -----------------------------------------------------------------

    def damaged_records(self) -> None:
        """Each damaged record, and the checkpoints whose own record it is."""
        for key, (error, _) in self.scan.damaged.items():
            self.out.damaged.append(
                Damage(
                    key,
                    self.storage.location(key),
                    error.reason,
                    kind_name(key),
                    self.scan.headers.get(key),
                )
            )
            owner = checkpoint_of_key(key)
            if owner is not None and key.endswith(record_keys.CHECKPOINT_SUFFIX):
                self.damaged_owners[owner] = key
        for owner in [*self.scan.checkpoints, *self.damaged_owners]:
            self.known.setdefault(owner[:2], set()).add(owner[2])

    def blocked_checkpoints(self) -> None:
        """The verified checkpoints that cannot load: a value they need is not there."""
        for owner, record in sorted(self.scan.checkpoints.items()):
            problem = _blocker(self.scan.checkpoints, owner, record, self.state)
            if problem is not None:
                holder = (*owner[:2], problem[0])
                self.blocked[owner] = (record_keys.checkpoint_key(*holder), problem[1])
                if self.state(holder).kind == "missing":
                    self.missing(holder, f"holds channel values of checkpoint {owner[2]}")
        self.usable = set(self.scan.checkpoints) - set(self.blocked)

    def unloadable_checkpoints(self) -> None:
        """Report the blocked checkpoints. One that can never load is moved aside by
        repair, unless delta channels may be rebuilt through it: their history walk
        reads an ancestor's writes and values even when the ancestor itself cannot load."""
        with_blocked = {owner[:2] for owner in self.blocked}
        delta_namespaces = {
            owner[:2]
            for owner in self.usable
            if owner[:2] in with_blocked
            and self.engine.serde.loads_typed(self.scan.checkpoints[owner].metadata).get(
                "counters_since_delta_snapshot"
            )
        }
        for owner, (because_of, reason) in sorted(self.blocked.items()):
            if owner[:2] in delta_namespaces:
                advice = (
                    "repair leaves it, as delta channels of this namespace may be rebuilt "
                    "through it: prune the thread to keep only its newest usable checkpoint; "
                    "until then {meanwhile}"
                )
            else:
                self.out.doomed.setdefault(owner[:2], set()).add(owner[2])
                advice = "repair moves it aside, or prune the thread; until then {meanwhile}"
            self.unusable(owner, because_of, reason, advice, owner[:2] not in delta_namespaces)

    def orphaned_writes(self) -> None:
        """Pending writes whose checkpoint no read can return: quarantined or missing."""
        for owner, writes in sorted(self.scan.writes.items()):
            current = self.state(owner)
            if current.kind in ("ok", "damaged"):
                continue  # its checkpoint's own writes: they go where it goes
            if current.kind == "missing" and not self.writes_without_checkpoint(owner):
                continue
            for writes_key, identity in writes:
                orphan = Damage(
                    writes_key,
                    self.storage.location(writes_key),
                    f"{ORPHANED}pending writes of checkpoint {owner[2]}, {current.why}; no "
                    f"read can use them",
                    "writes",
                    identity,
                )
                self.out.orphans.append(orphan)
                if current.kind == "quarantined":
                    self.out.damaged.append(orphan)

    def writes_without_checkpoint(self, owner: Owner) -> bool:
        """Report pending writes stored for a checkpoint that does not exist; whether they
        are orphans. Never stored, or deleted: LangGraph stores a step's writes while the
        put of its checkpoint may still be running (durability="async"), so only a newer
        checkpoint stored since tells them from writes in flight."""
        self.missing(owner, "pending writes exist for it")
        newer = any(c > owner[2] for c in self.known.get(owner[:2], ()))
        self.unusable(
            owner,
            record_keys.checkpoint_key(*owner),
            "its record does not exist, yet pending writes were stored for it",
            "repair moves its pending writes aside (its put failed, or the record was "
            "deleted); {meanwhile}"
            if newer
            else "its put failed, or is still running (a step's writes are stored while "
            "its checkpoint is put): while a graph runs on this thread there is nothing "
            "to do; once a newer checkpoint is stored, repair moves these writes aside",
            repairable=newer,
        )
        return newer

    # -- what the steps share ----------------------------------------------------------

    def state(self, owner: Owner) -> _State:
        key = record_keys.checkpoint_key(*owner)
        if owner in self.scan.checkpoints:
            return _State("ok")
        if owner in self.damaged_owners:
            return _State(
                "damaged", f"whose record is damaged ({self.scan.damaged[key][0].reason})"
            )
        if key in self.quarantined:
            return _State(
                "quarantined", f"which was quarantined ({self.quarantined[key].get('reason')})"
            )
        return _State("missing", "which does not exist")

    def missing(self, owner: Owner, why: str) -> None:
        """Report a checkpoint that does not exist (once), ``why`` it matters."""
        key = record_keys.checkpoint_key(*owner)
        if key not in self.reported_missing:
            self.reported_missing.add(key)
            self.out.damaged.append(
                Damage(key, self.storage.location(key), f"{MISSING}{why}", "checkpoint", None)
            )

    def parent_of(self, owner: Owner) -> str | None:
        """As the read path finds it: the record, else a header or quarantine note that
        still names it, else the next older checkpoint."""
        record = self.scan.checkpoints.get(owner)
        if record is not None:
            return record.parent_checkpoint_id
        key = record_keys.checkpoint_key(*owner)
        identity = (
            self.scan.headers.get(key) or (self.quarantined.get(key) or {}).get("identity") or {}
        )
        if identity.get("checkpoint_id") == owner[2]:
            return identity.get("parent_checkpoint_id") or None
        older = [c for c in self.known.get(owner[:2], ()) if c < owner[2]]
        return max(older) if older else None

    def resume_from(self, owner: Owner) -> str | None:
        """The checkpoint reads fall back to instead of ``owner``; every checkpoint the
        walk passed gets the same answer."""
        passed = {owner}
        current = self.parent_of(owner)
        found = None
        while current is not None and (*owner[:2], current) not in passed:
            ancestor = (*owner[:2], current)
            if ancestor in self.usable or ancestor in self.resumes:
                found = current if ancestor in self.usable else self.resumes[ancestor]
                break
            passed.add(ancestor)
            current = self.parent_of(ancestor)
        self.resumes.update(dict.fromkeys(passed, found))
        return found

    def unusable(
        self, owner: Owner, because_of: str, reason: str, advice: str, repairable: bool
    ) -> None:
        found = self.resume_from(owner)
        meanwhile = (
            f"reads fall back to {found}"
            if found is not None
            else "no older checkpoint loads, so the thread starts again from step 0"
        )
        self.out.unusable.append(
            UnusableCheckpoint(
                *owner,
                because_of=because_of,
                reason=reason,
                resume_from=found,
                advice=advice.format(meanwhile=meanwhile),
                repairable=repairable,
            )
        )


def _blocker(
    checkpoints: dict[Owner, CheckpointRecord],
    owner: Owner,
    record: CheckpointRecord,
    state: Callable[[Owner], _State],
) -> tuple[str, str] | None:
    """Why a verified checkpoint cannot load: (id of the checkpoint that is why, reason)."""
    thread_id, checkpoint_ns, checkpoint_id = owner
    lost: dict[str, list[str]] = {}  # holder id -> channels whose value it should hold
    for channel, (version, holder_id) in sorted(record.refs.items()):
        holder = record if holder_id == checkpoint_id else checkpoints.get((*owner[:2], holder_id))
        if holder is None:
            lost.setdefault(holder_id, []).append(channel)
            continue
        stored = holder.values.get(channel)
        if stored is None or stored.version != version:
            return holder_id, (
                f"checkpoint {holder_id} holds no value of channel {channel!r} at version "
                f"{version!r}"
            )
        broken_base = _broken_base(checkpoints, thread_id, checkpoint_ns, channel, stored)
        if broken_base is not None:
            why = state((*owner[:2], broken_base)).why or "which does not hold it"
            return broken_base, (
                f"the value of channel {channel!r} extends one kept in checkpoint "
                f"{broken_base}, {why}"
            )
    if not lost:
        return None
    holder_id, channels = next(iter(lost.items()))
    names = ", ".join(repr(channel) for channel in channels)
    kept = (
        f"the value of channel {names} is"
        if len(channels) == 1
        else f"the values of channels {names} are"
    )
    return holder_id, f"{kept} in checkpoint {holder_id}, {state((*owner[:2], holder_id)).why}"


def _broken_base(
    checkpoints: dict[tuple[str, str, str], Any],
    thread_id: str,
    checkpoint_ns: str,
    channel: str,
    stored: Any,
) -> str | None:
    """The id of the first base an extended value's chain cannot reach, or ``None``."""
    seen: set[str] = set()
    while stored.base is not None:
        base_id, base_version, _ = stored.base
        base_record = checkpoints.get((thread_id, checkpoint_ns, base_id))
        base = base_record.values.get(channel) if base_record is not None else None
        if base is None or base.version != base_version or base_id in seen:
            return str(base_id)
        seen.add(base_id)
        stored = base
    return None


def checkpoint_of_key(key: str) -> tuple[str, str, str] | None:
    """(thread_id, checkpoint_ns, checkpoint_id) a checkpoint key stands for, if decodable."""
    parts = key.split("/")
    if len(parts) != 6 or parts[0] != "threads" or parts[2] != "ns" or parts[4] != "checkpoints":
        return None
    thread_id = record_keys.decode_segment(parts[1])
    checkpoint_ns = record_keys.decode_segment(parts[3])
    checkpoint_id = record_keys.checkpoint_id_of(parts[5])
    if thread_id is None or checkpoint_ns is None or checkpoint_id is None:
        return None
    return thread_id, checkpoint_ns, checkpoint_id
