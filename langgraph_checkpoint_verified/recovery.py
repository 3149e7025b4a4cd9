"""What happens to damage: it is reported, moved aside, counted and never used.

``DamageReporter`` is the one place every damaged record found by the saver
passes through: it logs to the ``langgraph_checkpoint_verified`` logger, calls
the user's ``on_corruption`` callback, quarantines the record (moves it under
``quarantine/`` with a reason record beside it; nothing is deleted), and keeps
counters. ``verify_store`` scans a whole store (or one thread) and returns a
``VerifyReport``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from langgraph_checkpoint_verified._format import Codec, RecordKind
from langgraph_checkpoint_verified._storage import QUARANTINE_PREFIX, Storage
from langgraph_checkpoint_verified.errors import RecordDamagedError

logger = logging.getLogger("langgraph_checkpoint_verified")


@dataclass(frozen=True)
class Damage:
    """One damaged record.

    Attributes:
        key: The record's key in the store (``threads/.../x.ckpt``).
        location: Where it was (file path or ``memory:`` key).
        reason: Which check failed.
        kind: ``"checkpoint"``, ``"writes"``, ``"tool_result"``... when known.
        identity: What the record says it is, when its header still verifies.
        quarantined_to: Where it was moved, if it was quarantined.
    """

    key: str
    location: str
    reason: str
    kind: str | None = None
    identity: dict[str, str] | None = None
    quarantined_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RecoveryStats:
    """Counters of what recovery did since the saver was created.

    Attributes:
        damaged_records: Damaged records found on read paths.
        unreadable_records: Records the store could not read (an ``OSError``
            such as EIO or EACCES); treated as unusable, never moved.
        quarantined_records: Records moved aside.
        fallbacks: Reads that returned an older checkpoint than the one asked for
            (or than the newest one) because of damage.
        restarts_from_scratch: Reads that found checkpoints but none that verified.
    """

    damaged_records: int = 0
    unreadable_records: int = 0
    quarantined_records: int = 0
    fallbacks: int = 0
    restarts_from_scratch: int = 0


def kind_name(key: str) -> str | None:
    if key.endswith(".ckpt"):
        return "checkpoint"
    if key.endswith(".wr"):
        return "writes"
    if key.endswith(".result"):
        return "tool_result"
    if key.endswith(".intent"):
        return "tool_intent"
    return None


class DamageReporter:
    """Reports, counts and quarantines damage found while reading.

    Args:
        storage: The store the records live in.
        codec: Used to read what a damaged record's header still says, and to
            write the reason record.
        on_corruption: Called with each ``Damage``; exceptions it raises are
            logged and otherwise ignored, so a faulty callback cannot turn a
            recoverable read into a failure.
        quarantine: ``False`` only reports and counts; nothing is moved.
    """

    def __init__(
        self,
        storage: Storage,
        codec: Codec,
        *,
        on_corruption: Callable[[Damage], Any] | None = None,
        quarantine: bool = True,
    ) -> None:
        self.storage = storage
        self.codec = codec
        self.on_corruption = on_corruption
        self.quarantine_enabled = quarantine
        self.stats = RecoveryStats()
        self._lock = threading.Lock()

    def damaged(self, key: str, error: RecordDamagedError, data: bytes | None) -> Damage:
        """Handle one damaged record found at ``key`` (``data`` is what was read)."""
        identity = None
        if data is not None:
            try:
                identity = self.codec.read_header(data).identity
            except RecordDamagedError:
                identity = None
        damage = Damage(
            key=key,
            location=self.storage.location(key),
            reason=error.reason,
            kind=kind_name(key),
            identity=identity,
        )
        with self._lock:
            self.stats.damaged_records += 1
        if self.quarantine_enabled and data is not None:
            moved_to = self._quarantine(damage, data)
            if moved_to is not None:
                damage = replace(damage, quarantined_to=moved_to)
        logger.warning(
            "damaged %s record %s: %s%s",
            damage.kind or "unknown",
            damage.location,
            damage.reason,
            f" (quarantined to {damage.quarantined_to})" if damage.quarantined_to else "",
        )
        self._notify(damage)
        return damage

    def unreadable(self, key: str, error: OSError) -> Damage:
        """Handle a record that could not be read at all: report it, never move it."""
        damage = Damage(
            key=key,
            location=self.storage.location(key),
            reason=f"cannot read: {error.strerror or error}",
            kind=kind_name(key),
        )
        with self._lock:
            self.stats.unreadable_records += 1
        logger.warning("unreadable %s record %s: %s", damage.kind, damage.location, damage.reason)
        self._notify(damage)
        return damage

    def fallback(self, description: str) -> None:
        with self._lock:
            self.stats.fallbacks += 1
        logger.warning("falling back: %s", description)

    def quarantined_reason(self, key: str) -> dict[str, Any] | None:
        """The reason record of ``key`` if it was quarantined earlier, else ``None``.

        Lets a later read tell a record that was moved aside (damage: fall back)
        from one that never existed. Scans the quarantine, so it is only for
        the rare path where a named record is absent.
        """
        for name in self.storage.list(QUARANTINE_PREFIX):
            if not name.endswith(".reason"):
                continue
            data = self.storage.read(f"{QUARANTINE_PREFIX}/{name}")
            if data is None:
                continue
            try:
                content = self.codec.decode(
                    data, RecordKind.QUARANTINE_REASON, {"original_key": key}
                )
                reason = json.loads(content)
            except (RecordDamagedError, ValueError):
                continue
            if isinstance(reason, dict):
                return reason
        return None

    def quarantined_under(self, prefix: str) -> dict[str, dict[str, Any]]:
        """The reason records of every quarantined record whose key starts with ``prefix``.

        Keyed by original key. One scan of the quarantine, for a reader that
        must know what was moved aside from a whole subtree: a moved
        pending-writes record leaves no trace where it was.
        """
        found: dict[str, dict[str, Any]] = {}
        for name in self.storage.list(QUARANTINE_PREFIX):
            if not name.endswith(".reason"):
                continue
            try:
                data = self.storage.read(f"{QUARANTINE_PREFIX}/{name}")
            except OSError:
                continue
            if data is None:
                continue
            try:
                header, content = self.codec.decode_with_header(data, RecordKind.QUARANTINE_REASON)
                reason = json.loads(content)
            except (RecordDamagedError, ValueError):
                continue
            original_key = header.identity.get("original_key", "")
            if original_key.startswith(prefix) and isinstance(reason, dict):
                found[original_key] = reason
        return found

    def restart_from_scratch(self, thread_id: str, checkpoint_ns: str) -> None:
        with self._lock:
            self.stats.restarts_from_scratch += 1
        logger.warning(
            "no checkpoint of thread %r (namespace %r) verifies; it starts again from step 0",
            thread_id,
            checkpoint_ns,
        )

    def _quarantine(self, damage: Damage, data: bytes) -> str | None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        base = f"{QUARANTINE_PREFIX}/{stamp}-{secrets.token_hex(6)}"
        if not self.storage.move_aside(damage.key, f"{base}.record"):
            return None  # someone else moved it first
        moved = self.storage.read(f"{base}.record")
        if moved is not None and moved != data:
            # The file was replaced between our read and the move (a concurrent
            # writer): what we moved is not what we judged. Put it back, unless a
            # still newer record is there by now: that one must not be overwritten,
            # and the one we moved is older than it anyway.
            if not self.storage.move_aside(f"{base}.record", damage.key, replace=False):
                logger.info("left superseded record %s in quarantine", damage.key)
            return None
        reason = {
            "original_key": damage.key,
            "original_location": damage.location,
            "reason": damage.reason,
            "kind": damage.kind,
            "identity": damage.identity,
            "quarantined_at": time.time(),
        }
        try:
            # Not durable (no fsync), like the move: a machine crash that undoes
            # the move leaves the damage where the next read finds it again; one
            # that loses only this note leaves the record aside but unexplained,
            # so a read naming that checkpoint treats it as absent, not damaged.
            self.storage.write(
                f"{base}.reason",
                self.codec.encode(
                    RecordKind.QUARANTINE_REASON,
                    {"original_key": damage.key},
                    json.dumps(reason, sort_keys=True).encode(),
                ),
                durable=False,
            )
        except Exception:  # the damaged bytes are already safe aside; the note is a bonus
            logger.exception("could not write the quarantine reason for %s", damage.key)
        with self._lock:
            self.stats.quarantined_records += 1
        return self.storage.location(f"{base}.record")

    def _notify(self, damage: Damage) -> None:
        if self.on_corruption is None:
            return
        try:
            self.on_corruption(damage)
        except Exception:
            logger.exception("on_corruption callback raised; ignored")


@dataclass
class UnusableCheckpoint:
    """A checkpoint that cannot be returned, and the damaged record that is why."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    because_of: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class VerifyReport:
    """What ``VerifiedSaver.verify`` found.

    Attributes:
        records_checked: How many records were read and checked.
        checkpoints_checked: How many of those were checkpoints.
        damaged: Every damaged record.
        unusable_checkpoints: Checkpoints that cannot be returned, because their
            own record or a record they depend on (a channel value stored
            in another checkpoint's record) is damaged or missing.
        repaired: Whether damaged records were quarantined.
    """

    records_checked: int = 0
    checkpoints_checked: int = 0
    damaged: list[Damage] = field(default_factory=list)
    unusable_checkpoints: list[UnusableCheckpoint] = field(default_factory=list)
    repaired: bool = False

    @property
    def ok(self) -> bool:
        """True when nothing is damaged and every checkpoint is usable."""
        return not self.damaged and not self.unusable_checkpoints

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records_checked": self.records_checked,
            "checkpoints_checked": self.checkpoints_checked,
            "damaged": [d.to_dict() for d in self.damaged],
            "unusable_checkpoints": [u.to_dict() for u in self.unusable_checkpoints],
            "repaired": self.repaired,
        }


def verify_store(
    saver: Any,
    prefix: str,
    *,
    repair: bool,
    progress: Callable[[int, int], Any] | None,
) -> VerifyReport:
    """Check every record under ``prefix`` of ``saver``'s store; see ``VerifiedSaver.verify``."""
    from langgraph_checkpoint_verified import _keys
    from langgraph_checkpoint_verified._records import (
        CheckpointRecord,
        canonical_key,
        decode_checkpoint,
        decode_writes,
    )

    storage: Storage = saver.storage
    codec: Codec = saver.codec
    report = VerifyReport(repaired=repair)
    keys = list(storage.walk(prefix))
    checkpoints: dict[tuple[str, str, str], CheckpointRecord] = {}
    with_writes: set[tuple[str, str, str]] = set()

    def found_damage(key: str, error: RecordDamagedError, data: bytes | None) -> None:
        if repair and data is not None:
            damage = saver.reporter.damaged(key, error, data)
        else:
            identity = None
            if data is not None:
                with contextlib.suppress(RecordDamagedError):
                    identity = codec.read_header(data).identity
            damage = Damage(key, storage.location(key), error.reason, kind_name(key), identity)
        report.damaged.append(damage)
        owner = checkpoint_of_key(key)
        if owner is not None and key.endswith(_keys.CHECKPOINT_SUFFIX):
            report.unusable_checkpoints.append(UnusableCheckpoint(*owner, because_of=key))

    for done, key in enumerate(keys, start=1):
        data = storage.read(key)
        if data is None:
            continue
        report.records_checked += 1
        try:
            header = codec.read_header(data)
            expected_key = canonical_key(header.kind, header.identity)
            if expected_key != key:
                raise RecordDamagedError(
                    f"record belongs at {expected_key} (moved, swapped or copied in)"
                )
            if header.kind is RecordKind.CHECKPOINT:
                record = decode_checkpoint(codec, data)
                checkpoints[(record.thread_id, record.checkpoint_ns, record.checkpoint_id)] = record
            elif header.kind is RecordKind.WRITES:
                writes = decode_writes(codec, data, {})
                with_writes.add((writes.thread_id, writes.checkpoint_ns, writes.checkpoint_id))
            else:
                codec.decode(data, header.kind, None)
        except RecordDamagedError as exc:
            found_damage(key, exc, data)
        if progress is not None:
            progress(done, len(keys))

    damaged_keys = {d.key for d in report.damaged}
    reported_missing: set[str] = set()

    def missing(owner: tuple[str, str, str], why: str) -> str:
        key = _keys.checkpoint_key(*owner)
        if key not in damaged_keys and key not in reported_missing:
            reported_missing.add(key)
            report.damaged.append(
                Damage(key, storage.location(key), f"missing: {why}", "checkpoint", None)
            )
        return key

    for owner in sorted(with_writes):
        if owner not in checkpoints:
            key = missing(owner, "pending writes exist for it")
            if key not in damaged_keys:
                report.unusable_checkpoints.append(UnusableCheckpoint(*owner, because_of=key))
    for (thread_id, checkpoint_ns, checkpoint_id), record in sorted(checkpoints.items()):
        report.checkpoints_checked += 1
        for channel, (version, holder_id) in sorted(record.refs.items()):
            holder = (
                record
                if holder_id == checkpoint_id
                else checkpoints.get((thread_id, checkpoint_ns, holder_id))
            )
            stored = holder.values.get(channel) if holder is not None else None
            if stored is not None and stored.version == version:
                broken_base = _broken_base(checkpoints, thread_id, checkpoint_ns, channel, stored)
                if broken_base is None:
                    continue
                holder, holder_id = None, broken_base  # the chain is what is missing
            holder_key = _keys.checkpoint_key(thread_id, checkpoint_ns, holder_id)
            if holder is None and holder_key not in damaged_keys:
                missing(
                    (thread_id, checkpoint_ns, holder_id),
                    f"holds channel values of checkpoint {checkpoint_id}",
                )
            report.unusable_checkpoints.append(
                UnusableCheckpoint(thread_id, checkpoint_ns, checkpoint_id, because_of=holder_key)
            )
            break
    return report


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
    from langgraph_checkpoint_verified import _keys

    parts = key.split("/")
    if len(parts) != 6 or parts[0] != "threads" or parts[2] != "ns" or parts[4] != "checkpoints":
        return None
    thread_id = _keys.decode_segment(parts[1])
    checkpoint_ns = _keys.decode_segment(parts[3])
    checkpoint_id = _keys.checkpoint_id_of(parts[5])
    if thread_id is None or checkpoint_ns is None or checkpoint_id is None:
        return None
    return thread_id, checkpoint_ns, checkpoint_id
