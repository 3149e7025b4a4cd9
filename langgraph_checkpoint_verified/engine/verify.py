"""Checking a whole store (or one thread) and repairing what no read can use.

``verify_store`` scans every record, judges what each damaged record makes
unusable (a checkpoint whose values or parent chain run through it), and
returns a ``VerifyReport``; with ``repair`` it also moves aside every record
no read can use any more, after rewriting the checkpoints that still load so
that they no longer depend on it.

A whole store holds more than threads: the batches of ``VerifiedStore``'s memory
logs (``memories/``) and the node cache entries of ``VerifiedCache`` (``cache/``).
Those records stand alone (no record refers to another), so checking one is
its frame, digests and identity, and repairing one is moving it aside, as a
read that finds it damaged does; ``verify_records`` does that for them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from langgraph_checkpoint_verified.engine import maintenance
from langgraph_checkpoint_verified.engine.core import Engine
from langgraph_checkpoint_verified.engine.damage import (
    CANNOT_WRITE_ERRNOS,
    Damage,
    DamageReporter,
    kind_name,
)
from langgraph_checkpoint_verified.errors import RecordDamagedError, StoreWriteError
from langgraph_checkpoint_verified.records import keys as record_keys
from langgraph_checkpoint_verified.records.format import Codec, RecordKind
from langgraph_checkpoint_verified.records.kinds import (
    CheckpointRecord,
    canonical_key,
    decode_checkpoint,
    decode_writes,
)
from langgraph_checkpoint_verified.storage.base import QUARANTINE_PREFIX, Storage
from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage


@dataclass
class UnusableCheckpoint:
    """A checkpoint that cannot be returned, why, and what a person can do about it.

    Attributes:
        thread_id, checkpoint_ns, checkpoint_id: The checkpoint.
        because_of: Key of the record that is why: its own, or the one holding a
            channel value it needs.
        reason: What is wrong with that record, in words.
        resume_from: The checkpoint reads return instead (its nearest ancestor
            that loads), or ``None``: the thread starts again from step 0.
        advice: What to do about it.
        repairable: Whether ``verify(repair=True)`` moves it aside.
        quarantined_to: Where repair moved it, if it did.
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    because_of: str
    reason: str = ""
    resume_from: str | None = None
    advice: str = ""
    repairable: bool = False
    quarantined_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HealedBlock:
    """A 4 KB block of a thread's log that failed its CRC and was rebuilt from the parity.

    Attributes:
        location: ``<log path>@<offset>``.
        written_back: Whether repair wrote the rebuilt block in its place.
    """

    location: str
    written_back: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class VerifyReport:
    """What ``VerifiedSaver.verify`` found (and, with ``repair=True``, did).

    Attributes:
        records_checked: How many records were read and checked.
        checkpoints_checked: How many of those were checkpoints.
        store_records_checked: How many were records of a ``VerifiedStore``
            (its batches, ``memories/<label>/<name>.batch``, and items of the
            older layout under ``store/``), damaged ones included; a whole
            store's verification checks them, one thread's does not.
        cache_entries_checked: How many were node cache entries of a
            ``VerifiedCache`` (``cache/.../<key>.entry``), damaged ones included.
        damaged: Every damaged record, every record that is missing although
            others need it, and every orphaned pending-writes record (its
            checkpoint was quarantined: no read can use it).
        unusable_checkpoints: Checkpoints that cannot be returned, because their
            own record or a record they depend on (a channel value stored
            in another checkpoint's record) is damaged, quarantined or missing.
        repaired: Whether repair was asked for.
        rewritten: Keys of the checkpoints repair rewrote to hold channel values
            themselves, before it moved aside the records they kept them in.
        read_only: Repair was asked for but this process cannot write to the
            store (permissions, a read-only mount): what was not moved yet stays.
        healed: Damaged blocks of logs (threads, memories) that the logs' parity rebuilds, so
            that no record in them is lost; reads are served the rebuilt bytes,
            and repair writes them back.
        unprotected_bytes: Bytes of logs that no intact parity covers (a
            store written before logs had parity, a lost parity record): one
            damaged block there costs its records. Repair adds the parity, where
            the log's own entries verify.
        protected_bytes: Bytes repair added parity for.
    """

    records_checked: int = 0
    checkpoints_checked: int = 0
    store_records_checked: int = 0
    cache_entries_checked: int = 0
    damaged: list[Damage] = field(default_factory=list)
    unusable_checkpoints: list[UnusableCheckpoint] = field(default_factory=list)
    repaired: bool = False
    rewritten: list[str] = field(default_factory=list)
    read_only: bool = False
    healed: list[HealedBlock] = field(default_factory=list)
    unprotected_bytes: int = 0
    protected_bytes: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is damaged (or every damaged block is written back healed)
        and every checkpoint is usable."""
        return (
            not self.damaged
            and not self.unusable_checkpoints
            and all(h.written_back for h in self.healed)
        )

    @property
    def needs_repair(self) -> bool:
        """Whether ``verify(repair=True)`` would change something: move damage that is
        still in place, write healed blocks back, or add missing parity."""
        return (
            any(d.quarantined_to is None and not d.reason.startswith(MISSING) for d in self.damaged)
            or any(u.repairable and u.quarantined_to is None for u in self.unusable_checkpoints)
            or any(not h.written_back for h in self.healed)
            or self.unprotected_bytes > 0
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records_checked": self.records_checked,
            "checkpoints_checked": self.checkpoints_checked,
            "store_records_checked": self.store_records_checked,
            "cache_entries_checked": self.cache_entries_checked,
            "damaged": [d.to_dict() for d in self.damaged],
            "unusable_checkpoints": [u.to_dict() for u in self.unusable_checkpoints],
            "repaired": self.repaired,
            "rewritten": list(self.rewritten),
            "read_only": self.read_only,
            "healed": [h.to_dict() for h in self.healed],
            "unprotected_bytes": self.unprotected_bytes,
            "protected_bytes": self.protected_bytes,
        }


MISSING = "missing: "
"""How the reason of a record that is not there, although others need it, starts."""
ORPHANED = "orphaned: "
"""How the reason of pending writes whose checkpoint is gone (or can never load) starts."""

Owner = tuple[str, str, str]
"""A checkpoint: (thread_id, checkpoint_ns, checkpoint_id)."""

WHOLE_STORE = "threads"
"""The prefix ``VerifiedSaver.verify()`` passes for a whole store: then the records
of the memory store and the node cache are checked too."""
STANDALONE_PREFIXES = (
    record_keys.MEMORIES_PREFIX,
    record_keys.STORE_PREFIX,
    record_keys.CACHE_PREFIX,
)
"""Where the records live that no other record refers to: the memory store's batches
(and items of its older layout), node cache entries."""


@dataclass
class _Scan:
    """What one pass over some records found; reading them has no other effect."""

    records_checked: int = 0
    damaged: dict[str, tuple[RecordDamagedError, bytes]] = field(default_factory=dict)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)
    checkpoints: dict[Owner, CheckpointRecord] = field(default_factory=dict)
    writes: dict[Owner, list[tuple[str, dict[str, str]]]] = field(default_factory=dict)


@dataclass
class _Findings:
    """What a scan means: what to report, and what repair may move."""

    damaged: list[Damage] = field(default_factory=list)
    unusable: list[UnusableCheckpoint] = field(default_factory=list)
    orphans: list[Damage] = field(default_factory=list)
    doomed: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    @property
    def needs_repair(self) -> bool:
        in_place = any(not d.reason.startswith(MISSING) for d in self.damaged)
        return in_place or bool(self.orphans or self.doomed)


def verify_store(
    engine: Engine,
    prefix: str,
    *,
    repair: bool,
    progress: Callable[[int, int], Any] | None,
) -> VerifyReport:
    """Check every record under ``prefix`` of ``engine``'s store; see ``VerifiedSaver.verify``.

    Every record is read once, without locks. With ``repair``, each thread with
    something to move is then locked exclusively (as ``prune`` does: no put runs
    meanwhile), read again and repaired: damaged records are quarantined;
    pending writes no read can use any more are moved aside; checkpoints that
    still load are rewritten not to need the ones that never can, which are
    then moved aside with their pending writes.
    """
    storage: Storage = engine.storage
    reporter: DamageReporter = engine.reporter
    report = VerifyReport(repaired=repair)
    keys = list(storage.walk(prefix))
    standalone = (
        [key for where in STANDALONE_PREFIXES for key in storage.walk(where)]
        if prefix == WHOLE_STORE
        else []
    )
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(keys) + len(standalone))

    if isinstance(storage, FileStorage):
        # first, so that what parity heals is written back before records are judged
        for logs in (prefix, record_keys.MEMORIES_PREFIX) if standalone else (prefix,):
            _scrub_logs(storage, logs, report, repair=repair and reporter.quarantine_enabled)
    quarantined = reporter.quarantined_under(f"{prefix}/")
    for thread, thread_keys in _by_thread(keys):
        scan = _scan(engine, thread_keys, tick)
        report.records_checked += scan.records_checked
        report.checkpoints_checked += len(scan.checkpoints)
        findings = _judge(engine, scan, quarantined)
        # once refused (a read-only store), the rest is reported as it is
        repairing = repair and reporter.quarantine_enabled and not report.read_only
        if repairing and findings.needs_repair:
            findings = _repair(engine, prefix, thread, thread_keys, report)
        report.damaged.extend(findings.damaged)
        report.unusable_checkpoints.extend(findings.unusable)
    _check_standalone(engine.codec, reporter, standalone, report, repair=repair, tick=tick)
    if isinstance(storage, FileStorage):
        _check_damaged_bytes(engine, storage, prefix, report, repair=repair)
    return report


def verify_records(
    storage: Storage,
    codec: Codec,
    reporter: DamageReporter,
    prefixes: tuple[str, ...] = STANDALONE_PREFIXES,
    *,
    repair: bool = False,
    progress: Callable[[int, int], Any] | None = None,
) -> VerifyReport:
    """Check the memory items and cache entries under ``prefixes``; see ``VerifiedStore.verify``.

    For a face that has no engine: ``VerifiedStore`` and ``VerifiedCache`` keep
    their ``storage``, ``codec`` and ``reporter``, which is all it needs. The
    records are standalone (no record refers to another), so there are no
    unusable checkpoints to judge: each damaged record is reported and, with
    ``repair``, moved aside exactly as a read that finds it does.

    Args:
        storage: Where the records are.
        codec: Their frame (keyed or not).
        reporter: Moves damage aside, unless it was made with ``quarantine=False``.
        prefixes: ``memories`` and ``store`` (the memory store's records), ``cache``
            (cache entries), or all.
        repair: Quarantine each damaged record.
        progress: Called as ``progress(done, total)`` while records are checked.

    Returns:
        A ``VerifyReport`` naming each damaged record.

    Example:
        >>> from langgraph_checkpoint_verified.engine.damage import DamageReporter
        >>> from langgraph_checkpoint_verified.storage import MemoryStorage
        >>> storage, codec = MemoryStorage(), Codec()
        >>> storage.write("memories/users/1764000000000000000-00aa11.batch", b"junk")
        True
        >>> report = verify_records(storage, codec, DamageReporter(storage, codec))
        >>> report.ok, [(d.kind, d.key) for d in report.damaged]
        (False, [('store_batch', 'memories/users/1764000000000000000-00aa11.batch')])
    """
    report = VerifyReport(repaired=repair)
    if isinstance(storage, FileStorage) and record_keys.MEMORIES_PREFIX in prefixes:
        _scrub_logs(
            storage,
            record_keys.MEMORIES_PREFIX,
            report,
            repair=repair and reporter.quarantine_enabled,
        )
    keys = [key for where in prefixes for key in storage.walk(where)]
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(keys))

    _check_standalone(codec, reporter, keys, report, repair=repair, tick=tick)
    return report


def _check_standalone(
    codec: Codec,
    reporter: DamageReporter,
    keys: list[str],
    report: VerifyReport,
    *,
    repair: bool,
    tick: Callable[[], None],
) -> None:
    """Check memory items, touches and cache entries; with ``repair``, move the damaged aside.

    Nothing is locked: these records are written whole, by an atomic replace or
    one ``PUT``, and never depend on each other. What is moved is what was read
    (``DamageReporter`` puts back a record replaced meanwhile), so a put racing
    the repair is never lost; a record so replaced is reported as it was found.
    """
    storage = reporter.storage
    for key in keys:
        data = storage.read(key)
        if data is not None:
            report.records_checked += 1
            if key.endswith((record_keys.BATCH_SUFFIX, record_keys.STORE_ITEM_SUFFIX)):
                report.store_records_checked += 1
            elif key.endswith(record_keys.CACHE_ENTRY_SUFFIX):
                report.cache_entries_checked += 1
            try:
                _check_standalone_record(codec, key, data)
            except RecordDamagedError as exc:
                if repair and reporter.quarantine_enabled and not report.read_only:
                    damage, refusal = reporter.report_damaged(key, exc, data)
                    report.read_only = refusal is not None
                else:
                    damage = _found_damaged(codec, storage, key, exc, data)
                report.damaged.append(damage)
        tick()


def _found_damaged(
    codec: Codec, storage: Storage, key: str, error: RecordDamagedError, data: bytes
) -> Damage:
    """The ``Damage`` of a record left in place (what its header still says, if it verifies)."""
    try:
        identity: dict[str, str] | None = codec.read_header(data).identity
    except RecordDamagedError:
        identity = None
    return Damage(key, storage.location(key), error.reason, kind_name(key), identity)


def _check_standalone_record(codec: Codec, key: str, data: bytes) -> None:
    """Verify a memory item, touch or cache entry: frame, digests, and that it is where its
    identity says. Raises ``RecordDamagedError``."""
    header = codec.read_header(data)
    expected_key = _standalone_key(header.kind, header.identity)
    if expected_key != key:
        raise RecordDamagedError(f"record belongs at {expected_key} (moved, swapped or copied in)")
    codec.decode(data, header.kind, None)


def _standalone_key(kind: RecordKind, identity: dict[str, str]) -> str:
    """Where a memory item, touch or cache entry with this identity must live."""
    try:
        if kind is RecordKind.STORE_BATCH:
            return record_keys.batch_key(identity["store_label"], identity["store_batch"])
        if kind in (RecordKind.STORE_ITEM, RecordKind.STORE_TOUCH):
            namespace = _labels(identity["store_namespace"])
            if "store_version" not in identity:  # a read needs it
                raise KeyError("store_version")
            where = (
                record_keys.store_item_key
                if kind is RecordKind.STORE_ITEM
                else record_keys.store_touch_key
            )
            return where(namespace, identity["store_key"])
        if kind is RecordKind.CACHE_ENTRY:
            namespace = _labels(identity["cache_namespace"])
            return record_keys.cache_entry_key(namespace, identity["cache_key"])
    except KeyError as exc:
        raise RecordDamagedError(f"identity lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise RecordDamagedError(f"identity names no place a record can live: {exc}") from None
    raise RecordDamagedError(
        f"a {kind.name} record does not belong under {record_keys.MEMORIES_PREFIX}/, "
        f"{record_keys.STORE_PREFIX}/ or {record_keys.CACHE_PREFIX}/"
    )


def _labels(namespace: str) -> tuple[str, ...]:
    """A namespace as an identity spells it (a JSON array of strings)."""
    labels = json.loads(namespace)
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"namespace {namespace!r:.100} is not a list of strings")
    return tuple(labels)


def _scrub_logs(storage: FileStorage, prefix: str, report: VerifyReport, *, repair: bool) -> None:
    """Check every block of the logs under ``prefix`` against their parity; with
    ``repair``, write healed blocks back and add the parity that is missing."""
    try:
        found = storage.scrub(prefix, repair=repair)
    except StoreWriteError as exc:
        if exc.errno not in CANNOT_WRITE_ERRNOS:
            raise
        report.read_only = True  # what is healed is still served healed
        found = storage.scrub(prefix, repair=False)
    for log_path, scrubbed in found:
        report.healed.extend(
            HealedBlock(f"{log_path}@{offset}", written_back=scrubbed.rewritten)
            for offset in scrubbed.healed
        )
        report.unprotected_bytes += sum(end - start for start, end in scrubbed.unprotected)
        report.protected_bytes += sum(end - start for start, end in scrubbed.protected)
    report.unprotected_bytes -= report.protected_bytes


def _check_damaged_bytes(
    engine: Engine, storage: FileStorage, prefix: str, report: VerifyReport, *, repair: bool
) -> None:
    """Report damage between log entries that names no record; with ``repair``, compact it away.

    Readers skip it already (and copied it to the quarantine when they found it);
    compaction is what removes it from the log.
    """
    reporter: DamageReporter = engine.reporter
    threads: set[str] = set()
    for found in storage.damaged_bytes(prefix):
        copy = f"{QUARANTINE_PREFIX}/span-{found.span_id}.record"
        if repair and reporter.quarantine_enabled and storage.read(copy) is None:
            reporter.damaged_span(
                found.location, found.reason, found.data, found.claimed_key, found.span_id
            )
        report.damaged.append(
            Damage(
                key=found.claimed_key or found.location,
                location=found.location,
                reason=f"damaged log entry: {found.reason}",
                kind=kind_name(found.claimed_key or ""),
                quarantined_to=storage.location(copy) if storage.read(copy) is not None else None,
            )
        )
        threads.add(found.location.rsplit("/log@", 1)[0])
    if not (repair and reporter.quarantine_enabled and threads) or report.read_only:
        return
    root = storage.location("")
    for directory in sorted(threads):
        thread_prefix = os.path.relpath(directory, root)
        try:
            with storage.lock(thread_prefix, exclusive=True):
                storage.compact(thread_prefix)
        except OSError as exc:
            if exc.errno not in CANNOT_WRITE_ERRNOS:
                raise
            report.read_only = True
            return


def _by_thread(keys: list[str]) -> list[tuple[str | None, list[str]]]:
    """``keys`` grouped by the thread directory they are in (``None``: in none)."""
    groups: dict[str | None, list[str]] = {}
    for key in keys:
        parts = key.split("/", 2)
        thread = f"{parts[0]}/{parts[1]}" if len(parts) == 3 and parts[0] == "threads" else None
        groups.setdefault(thread, []).append(key)
    return list(groups.items())


def _scan(engine: Engine, keys: list[str], tick: Callable[[], None] | None = None) -> _Scan:
    storage: Storage = engine.storage
    codec: Codec = engine.codec
    scan = _Scan()
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


def _judge(engine: Engine, scan: _Scan, quarantined: dict[str, dict[str, Any]]) -> _Findings:
    """What ``scan`` means: the damage and unusable checkpoints to report, and what
    repair may move. Nothing is read or written."""
    storage: Storage = engine.storage
    findings = _Findings()
    damaged_owners: dict[Owner, str] = {}
    for key, (error, _) in scan.damaged.items():
        findings.damaged.append(
            Damage(key, storage.location(key), error.reason, kind_name(key), scan.headers.get(key))
        )
        owner = checkpoint_of_key(key)
        if owner is not None and key.endswith(record_keys.CHECKPOINT_SUFFIX):
            damaged_owners[owner] = key
    # every checkpoint id of a namespace, whatever its state: a read that cannot tell
    # a checkpoint's parent takes the next older one, and so does resume_from
    known: dict[tuple[str, str], set[str]] = {}
    for owner in [*scan.checkpoints, *damaged_owners]:
        known.setdefault(owner[:2], set()).add(owner[2])

    def state(owner: Owner) -> _State:
        key = record_keys.checkpoint_key(*owner)
        if owner in scan.checkpoints:
            return _State("ok")
        if owner in damaged_owners:
            return _State("damaged", f"whose record is damaged ({scan.damaged[key][0].reason})")
        if key in quarantined:
            return _State(
                "quarantined", f"which was quarantined ({quarantined[key].get('reason')})"
            )
        return _State("missing", "which does not exist")

    reported_missing: set[str] = set()

    def missing(owner: Owner, why: str) -> None:
        key = record_keys.checkpoint_key(*owner)
        if key not in reported_missing:
            reported_missing.add(key)
            findings.damaged.append(
                Damage(key, storage.location(key), f"{MISSING}{why}", "checkpoint", None)
            )

    blocked: dict[Owner, tuple[str, str]] = {}  # checkpoint -> (key that is why, reason)
    for owner, record in sorted(scan.checkpoints.items()):
        problem = _blocker(scan.checkpoints, owner, record, state)
        if problem is not None:
            holder = (*owner[:2], problem[0])
            blocked[owner] = (record_keys.checkpoint_key(*holder), problem[1])
            if state(holder).kind == "missing":
                missing(holder, f"holds channel values of checkpoint {owner[2]}")
    usable = set(scan.checkpoints) - set(blocked)

    def parent_of(owner: Owner) -> str | None:
        # as the read path finds it: the record, else a header or quarantine note
        # that still names it, else the next older checkpoint
        record = scan.checkpoints.get(owner)
        if record is not None:
            return record.parent_checkpoint_id
        key = record_keys.checkpoint_key(*owner)
        identity = scan.headers.get(key) or (quarantined.get(key) or {}).get("identity") or {}
        if identity.get("checkpoint_id") == owner[2]:
            return identity.get("parent_checkpoint_id") or None
        older = [c for c in known.get(owner[:2], ()) if c < owner[2]]
        return max(older) if older else None

    resumes: dict[Owner, str | None] = {}  # every checkpoint a walk passed: same answer

    def resume_from(owner: Owner) -> str | None:
        passed = {owner}
        current = parent_of(owner)
        found = None
        while current is not None and (*owner[:2], current) not in passed:
            ancestor = (*owner[:2], current)
            if ancestor in usable or ancestor in resumes:
                found = current if ancestor in usable else resumes[ancestor]
                break
            passed.add(ancestor)
            current = parent_of(ancestor)
        resumes.update(dict.fromkeys(passed, found))
        return found

    def unusable(owner: Owner, because_of: str, reason: str, advice: str, repairable: bool) -> None:
        found = resume_from(owner)
        meanwhile = (
            f"reads fall back to {found}"
            if found is not None
            else "no older checkpoint loads, so the thread starts again from step 0"
        )
        findings.unusable.append(
            UnusableCheckpoint(
                *owner,
                because_of=because_of,
                reason=reason,
                resume_from=found,
                advice=advice.format(meanwhile=meanwhile),
                repairable=repairable,
            )
        )

    for owner, key in sorted(damaged_owners.items()):
        unusable(
            owner,
            key,
            f"its record is damaged ({scan.damaged[key][0].reason})",
            "repair moves it aside, with its pending writes; {meanwhile}",
            repairable=True,
        )

    # A checkpoint that can never load is moved aside by repair, unless delta
    # channels may be rebuilt through it: their history walk reads an ancestor's
    # writes and values even when the ancestor itself cannot load.
    with_blocked = {owner[:2] for owner in blocked}
    delta_namespaces = {
        owner[:2]
        for owner in usable
        if owner[:2] in with_blocked
        and engine.serde.loads_typed(scan.checkpoints[owner].metadata).get(
            "counters_since_delta_snapshot"
        )
    }
    for owner, (because_of, reason) in sorted(blocked.items()):
        if owner[:2] in delta_namespaces:
            advice = (
                "repair leaves it, as delta channels of this namespace may be rebuilt "
                "through it: prune the thread to keep only its newest usable checkpoint; "
                "until then {meanwhile}"
            )
        else:
            findings.doomed.setdefault(owner[:2], set()).add(owner[2])
            advice = "repair moves it aside, or prune the thread; until then {meanwhile}"
        unusable(owner, because_of, reason, advice, owner[:2] not in delta_namespaces)

    for owner, writes in sorted(scan.writes.items()):
        current = state(owner)
        if current.kind in ("ok", "damaged"):
            continue  # its checkpoint's own writes: they go where it goes
        key = record_keys.checkpoint_key(*owner)
        if current.kind == "missing":
            # Never stored, or deleted. LangGraph stores a step's writes while the put
            # of its checkpoint may still be running (durability="async"): only a
            # newer checkpoint stored since tells them from writes in flight.
            missing(owner, "pending writes exist for it")
            newer = any(c > owner[2] for c in known.get(owner[:2], ()))
            unusable(
                owner,
                key,
                "its record does not exist, yet pending writes were stored for it",
                "repair moves its pending writes aside (its put failed, or the record was "
                "deleted); {meanwhile}"
                if newer
                else "its put failed, or is still running (a step's writes are stored while "
                "its checkpoint is put): while a graph runs on this thread there is nothing "
                "to do; once a newer checkpoint is stored, repair moves these writes aside",
                repairable=newer,
            )
            if not newer:
                continue
        for writes_key, identity in writes:
            orphan = Damage(
                writes_key,
                storage.location(writes_key),
                f"{ORPHANED}pending writes of checkpoint {owner[2]}, {current.why}; no read "
                f"can use them",
                "writes",
                identity,
            )
            findings.orphans.append(orphan)
            if current.kind == "quarantined":
                findings.damaged.append(orphan)
    return findings


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


def _repair(
    engine: Engine, prefix: str, thread: str | None, keys: list[str], report: VerifyReport
) -> _Findings:
    """Repair one thread (``keys`` if it is ``None``: records in no thread); what to
    report: what was found, each entry saying where it went."""
    if thread is None:
        return _repair_locked(engine, f"{prefix}/", lambda: keys, report)
    # exclusive, as prune: no put runs meanwhile, so what is judged stays true
    with engine.storage.lock(thread, exclusive=True):
        return _repair_locked(
            engine, f"{thread}/", lambda: list(engine.storage.walk(thread)), report
        )


def _repair_locked(
    engine: Engine, scope: str, current_keys: Callable[[], list[str]], report: VerifyReport
) -> _Findings:
    storage: Storage = engine.storage
    reporter: DamageReporter = engine.reporter
    first = _judge(engine, _scan(engine, current_keys()), reporter.quarantined_under(scope))

    # 1. Damage in place is quarantined, as a read would.
    moved: dict[str, Damage] = {}
    scan = _scan(engine, [d.key for d in first.damaged if not d.reason.startswith(MISSING)])
    for key, (error, data) in scan.damaged.items():
        moved[key], refusal = reporter.report_damaged(key, error, data)
        if refusal is not None:
            report.read_only = True
            return _as_done(first, first, moved, {})

    # 2. Judged again with the damage aside: what no read can ever use is moved aside.
    scan = _scan(engine, current_keys())
    now = _judge(engine, scan, reporter.quarantined_under(scope))
    set_aside: dict[str, str] = {}

    def move(damage: Damage) -> bool:
        """Move one intact record aside; ``False`` if the store cannot be written."""
        data = storage.read(damage.key)
        if data is None:
            return True
        moved_damage, refusal = reporter.set_aside(damage, data)
        if moved_damage.quarantined_to is not None:
            set_aside[damage.key] = moved_damage.quarantined_to
        if refusal is not None:
            report.read_only = True
        return refusal is None

    try:
        for orphan in now.orphans:
            if orphan not in now.damaged:
                now.damaged.append(orphan)  # a missing checkpoint's: reported only as moved
            if not move(orphan):
                return _as_done(first, now, moved, set_aside)
        reasons = {(u.thread_id, u.checkpoint_ns, u.checkpoint_id): u.reason for u in now.unusable}
        for (thread_id, checkpoint_ns), doomed in sorted(now.doomed.items()):
            for checkpoint_id in sorted(doomed):
                owner = (thread_id, checkpoint_ns, checkpoint_id)
                for writes_key, identity in scan.writes.get(owner, ()):
                    orphan = Damage(
                        writes_key,
                        storage.location(writes_key),
                        f"{ORPHANED}pending writes of checkpoint {checkpoint_id}, which can "
                        f"never load ({reasons[owner]}); no read can use them",
                        "writes",
                        identity,
                    )
                    now.damaged.append(orphan)
                    if not move(orphan):
                        return _as_done(first, now, moved, set_aside)
                # Copied, not moved: the checkpoints that still load may keep values in
                # it, and are rewritten to hold them before the original goes.
                key = record_keys.checkpoint_key(*owner)
                record_bytes = storage.read(key)
                if record_bytes is not None:
                    set_aside[key] = reporter.keep_copy(
                        Damage(
                            key,
                            storage.location(key),
                            f"unusable: {reasons[owner]}",
                            "checkpoint",
                            scan.headers.get(key),
                        ),
                        record_bytes,
                    )
            records = {
                owner[2]: record
                for owner, record in scan.checkpoints.items()
                if owner[:2] == (thread_id, checkpoint_ns)
            }
            stamps = {
                cid: storage.stamp(record_keys.checkpoint_key(thread_id, checkpoint_ns, cid))
                for cid in records
                if cid not in doomed
            }
            maintenance.remove_checkpoints(engine, thread_id, checkpoint_ns, records, set(doomed))
            for cid, stamp in stamps.items():
                key = record_keys.checkpoint_key(thread_id, checkpoint_ns, cid)
                if storage.stamp(key) != stamp:
                    report.rewritten.append(key)
    except StoreWriteError as exc:
        if exc.errno not in CANNOT_WRITE_ERRNOS:
            raise
        report.read_only = True
    return _as_done(first, now, moved, set_aside)


def _as_done(
    first: _Findings, now: _Findings, moved: dict[str, Damage], set_aside: dict[str, str]
) -> _Findings:
    """What repair found and did: the damage it quarantined (and the checkpoints whose
    own record that was), then what it judged with the damage aside, each entry
    saying where it went."""

    def own_damage(unusable: UnusableCheckpoint) -> bool:
        return unusable.because_of == _owner_key(unusable) and unusable.because_of in moved

    damaged = [*moved.values()]
    damaged.extend(
        replace(d, quarantined_to=set_aside.get(d.key)) for d in now.damaged if d.key not in moved
    )
    unusable = [
        replace(u, quarantined_to=moved[u.because_of].quarantined_to)
        for u in first.unusable
        if own_damage(u)
    ]
    unusable.extend(
        replace(u, quarantined_to=set_aside.get(_owner_key(u)))
        for u in now.unusable
        if not own_damage(u)
    )
    return _Findings(damaged=damaged, unusable=unusable)


def _owner_key(unusable: UnusableCheckpoint) -> str:
    return record_keys.checkpoint_key(
        unusable.thread_id, unusable.checkpoint_ns, unusable.checkpoint_id
    )


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
    from langgraph_checkpoint_verified.records import keys as record_keys

    parts = key.split("/")
    if len(parts) != 6 or parts[0] != "threads" or parts[2] != "ns" or parts[4] != "checkpoints":
        return None
    thread_id = record_keys.decode_segment(parts[1])
    checkpoint_ns = record_keys.decode_segment(parts[3])
    checkpoint_id = record_keys.checkpoint_id_of(parts[5])
    if thread_id is None or checkpoint_ns is None or checkpoint_id is None:
        return None
    return thread_id, checkpoint_ns, checkpoint_id
