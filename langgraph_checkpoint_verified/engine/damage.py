"""What happens to damage: it is reported, moved aside, counted and never used.

``DamageReporter`` is the one place every damaged record found by the saver
passes through: it logs to the ``langgraph_checkpoint_verified`` logger, calls
the user's ``on_corruption`` callback, quarantines the record (moves it under
``quarantine/`` with the reason why beside it; nothing is deleted), and keeps
counters. ``verify_store`` scans a whole store (or one thread) and returns a
``VerifyReport``; with ``repair`` it also moves aside every record no read can
use any more, so that the store verifies afterwards.
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records.format import Codec, RecordKind
from langgraph_checkpoint_verified.storage.base import (
    CANNOT_WRITE_ERRNOS,
    QUARANTINE_PREFIX,
    MovedAside,
    Storage,
)

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
        quarantined_to: Where it was moved, if it was quarantined: its own file, or
            ``<file>@<offset>`` when several records of one thread's log were moved
            aside together into one file (each reason in ``<base>.reasons`` gives
            the offset and length of its record's bytes).
        healed: The damaged bytes were rebuilt from the log's parity and what was
            read is intact: nothing fell back, nothing was moved.
    """

    key: str
    location: str
    reason: str
    kind: str | None = None
    identity: dict[str, str] | None = None
    quarantined_to: str | None = None
    healed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def moved_to(self, quarantined_to: str) -> Damage:
        """This damage, moved aside to ``quarantined_to`` (``dataclasses.replace`` costs a
        look at every field: a read falling back past many damaged records makes one each)."""
        return Damage(
            self.key,
            self.location,
            self.reason,
            self.kind,
            self.identity,
            quarantined_to,
            self.healed,
        )


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
        healed_blocks: Damaged 4 KB blocks of a log rebuilt from its parity on read
            (each counted once per process).
    """

    damaged_records: int = 0
    unreadable_records: int = 0
    quarantined_records: int = 0
    fallbacks: int = 0
    restarts_from_scratch: int = 0
    healed_blocks: int = 0


def kind_name(key: str) -> str | None:
    if key.endswith(".ckpt"):
        return "checkpoint"
    if key.endswith(".wr"):
        return "writes"
    if key.endswith(".result"):
        return "tool_result"
    if key.endswith(".intent"):
        return "tool_intent"
    if key.endswith(".entry"):
        return "cache_entry"
    if key.endswith(".batch"):
        return "store_batch"
    if key.endswith(".item"):
        return "store_item"
    if key.endswith(".touch"):
        return "store_touch"
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

    Attributes:
        read_only_error: The error of the last move refused because this process
            cannot write to the store (``EACCES``, ``EPERM``, ``EROFS``), or ``None``.
    """

    def __init__(
        self,
        storage: Storage,
        codec: Codec,
        *,
        on_corruption: Callable[[Damage], Any] | None = None,
        quarantine: bool = True,
    ) -> None:
        # weakly: the storage calls this reporter back (``on_healed``), and a reporter
        # holding it would make the two a cycle, freed by the garbage collector only
        # (a storage of one's own that takes no weak reference is held as it is)
        self._storage: Callable[[], Storage | None]
        try:
            self._storage = weakref.ref(storage)
        except TypeError:
            self._storage = functools.partial(_itself, storage)
        self.codec = codec
        self.on_corruption = on_corruption
        self.quarantine_enabled = quarantine
        self.stats = RecoveryStats()
        self.read_only_error: OSError | None = None
        self._lock = threading.Lock()
        self._together = threading.local()

    @property
    def storage(self) -> Storage:
        """The store the records live in (kept alive by whoever reads through it)."""
        storage = self._storage()
        assert storage is not None, "a reporter is used only through its storage's owner"
        return storage

    def damaged(self, key: str, error: RecordDamagedError, data: bytes | None) -> Damage:
        """Handle one damaged record found at ``key`` (``data`` is what was read).

        Never raises for a move that cannot be made: a store this process cannot
        write is read past all the same, and the damage stays where it is. Inside
        a ``moving_together`` block, the record is moved, logged and passed to
        ``on_corruption`` as the block ends, with the others found in it (found again
        in the block, it is the same damage, counted and reported once).
        """
        pending = getattr(self._together, "pending", None)
        if pending is None or data is None:
            return self.report_damaged(key, error, data)[0]
        if key in pending:  # read again in the same block (a holder of values, say)
            return pending[key][0]
        damage = self._found(key, error, data)
        pending[key] = (damage, data)
        return damage

    def report_damaged(
        self, key: str, error: RecordDamagedError, data: bytes | None
    ) -> tuple[Damage, OSError | None]:
        """``damaged``, and the error that kept the record from being moved, if any."""
        ((damage, refused),) = self.report_all_damaged([(key, error, data)])
        return damage, refused

    def report_all_damaged(
        self, found: Sequence[tuple[str, RecordDamagedError, bytes | None]]
    ) -> list[tuple[Damage, OSError | None]]:
        """``report_damaged`` for records found damaged together (``(key, error, data)``),
        moved aside in one move (for a store's log, one append for them all, and one
        reasons file), then reported in the order given: what ``verify(repair=True)``
        found damaged in one thread."""
        damages = [self._found(key, error, data) for key, error, data in found]
        outcomes: list[tuple[Damage, str, OSError | None]] = [(d, "", None) for d in damages]
        if self.quarantine_enabled:
            moves = [(i, data) for i, (_, _, data) in enumerate(found) if data is not None]
            if moves:
                moved = self._quarantine([(damages[i], data) for i, data in moves])
                for (i, _), result in zip(moves, moved, strict=True):
                    outcomes[i] = result
        self._report_together([(damage, outcome) for damage, outcome, _ in outcomes])
        return [(damage, refused) for damage, _, refused in outcomes]

    @contextmanager
    def moving_together(self) -> Iterator[None]:
        """Records this thread finds damaged in the block are moved aside together as it
        ends (for a store's log, one append for them all; unless quarantine is off), then
        reported together, in the order found (``_report_together``): a read falling back
        past many damaged checkpoints, one after another.

        Nested blocks are one: the outermost moves them.
        """
        if getattr(self._together, "pending", None) is not None:
            yield
            return
        pending: dict[str, tuple[Damage, bytes]] = {}
        self._together.pending = pending
        try:
            yield
        finally:
            self._together.pending = None
            if pending:
                found = list(pending.values())
                if self.quarantine_enabled:
                    moved = [(damage, outcome) for damage, outcome, _ in self._quarantine(found)]
                else:
                    moved = [(damage, "") for damage, _ in found]
                self._report_together(moved)

    def _found(self, key: str, error: RecordDamagedError, data: bytes | None) -> Damage:
        """The ``Damage`` of the record at ``key``, counted."""
        identity = error.identity  # a header that verified before the check that failed
        if identity is None and data is not None:
            try:
                identity = self.codec.read_header(data).identity
            except RecordDamagedError:
                identity = None
        with self._lock:
            self.stats.damaged_records += 1
        return Damage(
            key=key,
            location=self.storage.location(key),
            reason=error.reason,
            kind=kind_name(key),
            identity=identity,
        )

    def _report_together(self, reported: Sequence[tuple[Damage, str]]) -> None:
        """Report records found damaged together (``(damage, outcome)``, in the order
        found): a record found alone gets a warning of its own; several, one warning for
        them all (``_together``), each of them still logged at DEBUG. Every one is passed
        to ``on_corruption``."""
        if len(reported) == 1:
            self._report(*reported[0])
            return
        for damage, outcome in reported:
            self._report(damage, outcome, level=logging.DEBUG)
        if reported:
            logger.warning("%s", _together(reported))

    def _report(self, damage: Damage, outcome: str, *, level: int = logging.WARNING) -> None:
        logger.log(
            level,
            "damaged %s record %s: %s%s",
            damage.kind or "unknown",
            damage.location,
            damage.reason,
            outcome,
        )
        self._notify(damage)

    def set_aside(self, damage: Damage, data: bytes) -> tuple[Damage, OSError | None]:
        """Quarantine a record that verifies but that no read can use any more.

        For ``verify(repair=True)`` only: pending writes whose checkpoint is gone
        or can never load. ``damage.reason`` says why; it is not counted as damage
        nor passed to ``on_corruption`` (nothing was found damaged on a read).
        Returns the ``Damage`` with ``quarantined_to`` set if it was moved, and
        the error that kept it from being moved, if any.
        """
        ((damage, outcome, refused),) = self._quarantine([(damage, data)])
        logger.info(
            "set aside %s record %s: %s%s", damage.kind, damage.location, damage.reason, outcome
        )
        return damage, refused

    def keep_copy(self, damage: Damage, data: bytes) -> str:
        """Durably copy a record into the quarantine, with its reason, and return where.

        For ``verify(repair=True)``, for a checkpoint that can never load: the
        original stays until the checkpoints that still load are rewritten not to
        need it, then goes (``VerifiedSaver._remove_checkpoints``).

        Raises:
            StoreWriteError: The copy could not be written.
        """
        base = _new_quarantine_base()
        self.storage.write(f"{base}.record", data)
        self._write_reason(base, damage, durable=True)
        with self._lock:
            self.stats.quarantined_records += 1
        where = self.storage.location(f"{base}.record")
        logger.info(
            "set aside %s record %s: %s (copied to %s)",
            damage.kind,
            damage.location,
            damage.reason,
            where,
        )
        return where

    def damaged_span(
        self, location: str, reason: str, data: bytes, claimed_key: str | None, span_id: str
    ) -> bool:
        """Handle bytes between two log entries that are no entry (``storage.log``).

        They name no record a read could ask for, so nothing falls back because of
        them: they are reported, and copied byte for byte to the quarantine once
        (the log itself is only ever rewritten by compaction, which drops them).
        Returns whether they are in the quarantine (copied now, or before): the
        log's readers need not find them again.
        """
        damage = Damage(
            key=claimed_key or location,
            location=location,
            reason=f"damaged log entry: {reason}",
            kind=kind_name(claimed_key or ""),
        )
        with self._lock:
            self.stats.damaged_records += 1
        outcome = ""
        if self.quarantine_enabled:
            base = f"{QUARANTINE_PREFIX}/span-{span_id}"
            try:
                if self.storage.write(f"{base}.record", data, replace=False, durable=False):
                    self._write_reason(base, damage, durable=False)
                    with self._lock:
                        self.stats.quarantined_records += 1
                damage = damage.moved_to(self.storage.location(f"{base}.record"))
                outcome = f" (copied to {damage.quarantined_to})"
            except OSError as exc:
                outcome = f" (not copied: {exc})"
        logger.warning("damaged log entry at %s: %s%s", location, reason, outcome)
        self._notify(damage)
        return damage.quarantined_to is not None

    def healed(self, location: str, key: str | None) -> Damage:
        """Handle a damaged block of a log that was rebuilt from its parity (``storage.log``).

        What was read is intact, so nothing falls back and nothing is moved; the
        damage is reported all the same, and stays on disk until the next append to
        the log (``LogAppender``), or ``repair``, writes the rebuilt block back in
        its place.
        """
        damage = Damage(
            key=key or location,
            location=location,
            reason=(
                "damaged block rebuilt from the log's parity; "
                "the thread's next append writes it back (or repair)"
            ),
            kind=kind_name(key or ""),
            healed=True,
        )
        with self._lock:
            self.stats.healed_blocks += 1
        logger.warning(
            "damaged block at %s rebuilt from the log's parity%s",
            location,
            f" (reading {key})" if key else "",
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
        for original_key, reason in self._quarantine_reasons():
            if original_key == key:
                return reason
        return None

    def quarantined_under(self, prefix: str) -> dict[str, dict[str, Any]]:
        """The reason records of every quarantined record whose key starts with ``prefix``.

        Keyed by original key. One scan of the quarantine, for a reader that
        must know what was moved aside from a whole subtree: a moved
        pending-writes record leaves no trace where it was.
        """
        return {
            original_key: reason
            for original_key, reason in self._quarantine_reasons()
            if original_key.startswith(prefix)
        }

    def quarantined_count(self) -> int:
        """How many records the quarantine holds: one per ``.record`` file, and those
        of each ``.records`` file that its reasons name (one, if none can be read)."""
        names = self.storage.list(QUARANTINE_PREFIX)
        count = sum(1 for name in names if name.endswith(".record"))
        together = [name for name in names if name.endswith(".records")]
        if together:
            named = Counter(reason.get("record") for _, reason in self._quarantine_reasons())
            count += sum(max(1, named[name]) for name in together)
        return count

    def _quarantine_reasons(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every reason the quarantine holds, with the key of the record it explains:
        a ``.reason`` file's one, each of a ``.reasons`` file's. A reason file that
        cannot be read or does not verify explains nothing (the records stay aside)."""
        for name in self.storage.list(QUARANTINE_PREFIX):
            if name.endswith(".reason"):
                kind = RecordKind.QUARANTINE_REASON
            elif name.endswith(".reasons"):
                kind = RecordKind.QUARANTINE_REASONS
            else:
                continue
            try:
                data = self.storage.read(f"{QUARANTINE_PREFIX}/{name}")
            except OSError:
                continue
            if data is None:
                continue
            try:
                header, content = self.codec.decode_with_header(data, kind)
                found = json.loads(content)
            except (RecordDamagedError, ValueError):
                continue
            if kind is RecordKind.QUARANTINE_REASON:
                if isinstance(found, dict):
                    yield header.identity.get("original_key", ""), found
                continue
            for reason in found if isinstance(found, list) else ():
                if isinstance(reason, dict) and isinstance(reason.get("original_key"), str):
                    yield reason["original_key"], reason

    def restart_from_scratch(self, thread_id: str, checkpoint_ns: str) -> None:
        with self._lock:
            self.stats.restarts_from_scratch += 1
        logger.warning(
            "no checkpoint of thread %r (namespace %r) verifies; it starts again from step 0",
            thread_id,
            checkpoint_ns,
        )

    def _quarantine(
        self, found: list[tuple[Damage, bytes]]
    ) -> list[tuple[Damage, str, OSError | None]]:
        """Move records aside with the reasons why: for each, its ``Damage``
        (``quarantined_to`` set if it moved), what to add to its log line, and the
        error that kept it from being moved, if any.

        One record goes to ``<base>.record``, its reason to ``<base>.reason``.
        Several found together (a read falling back past them) go, as the store
        moves them (``Storage.move_aside_unchanged``), to ``<base>.records`` back to
        back (those of a thread's log) or to ``<base>-<n>.record`` each, and their
        reasons to one ``<base>.reasons``: a file made is what moving a record aside
        costs most (tens of microseconds on a local disk, a round trip on a network
        one).

        Not durable, as the moves: a machine crash that undoes one leaves the damage
        where the next read finds it again; one that loses only a reason leaves the
        record aside but unexplained, so a read naming that checkpoint treats it as
        absent, not damaged.
        """
        base = _new_quarantine_base()
        try:
            moved = self.storage.move_aside_unchanged(
                [(damage.key, data) for damage, data in found], base
            )
        except OSError as exc:
            if exc.errno in CANNOT_WRITE_ERRNOS:
                self.read_only_error = exc
                outcome = (
                    f" (the store is read-only for this process ({exc.strerror}), "
                    f"so nothing was moved)"
                )
                return [(damage, outcome, exc) for damage, _ in found]
            outcome = f" (could not move it aside: {exc.strerror or exc}; left in place)"
            return [(damage, outcome, None) for damage, _ in found]
        results: list[tuple[Damage, str, OSError | None]] = []
        went_aside: list[tuple[Damage, MovedAside]] = []
        locations: dict[str, str] = {}  # of the files the copies went to
        for (damage, _), went in zip(found, moved, strict=True):
            if went is None:
                # someone else moved it first, or wrote a newer record there since
                results.append((damage, "", None))
                continue
            if went.key not in locations:
                locations[went.key] = self.storage.location(went.key)
            where = locations[went.key]
            if went.key.endswith(".records"):
                where = f"{where}@{went.offset}"
            damage = damage.moved_to(where)
            went_aside.append((damage, went))
            results.append((damage, f" (quarantined to {damage.quarantined_to})", None))
        if not went_aside:
            return results
        with self._lock:
            self.stats.quarantined_records += len(went_aside)
        try:
            if len(found) == 1:
                self._write_reason(base, went_aside[0][0], durable=False)
            else:
                stem = base.rsplit("/", 1)[-1]
                reasons = [
                    {
                        **self._reason(damage),
                        "record": went.key.rsplit("/", 1)[-1],
                        "offset": went.offset,
                        "length": went.length,
                    }
                    for damage, went in went_aside
                ]
                self.storage.write(
                    f"{base}.reasons",
                    self.codec.encode(
                        RecordKind.QUARANTINE_REASONS,
                        {"quarantine_move": stem},
                        json.dumps(reasons, sort_keys=True).encode(),
                    ),
                    durable=False,
                )
        except Exception:  # the damaged bytes are already safe aside; the notes are a bonus
            logger.exception(
                "could not write the quarantine reasons of %d records", len(went_aside)
            )
        return results

    def _write_reason(self, base: str, damage: Damage, *, durable: bool) -> None:
        self.storage.write(
            f"{base}.reason",
            self.codec.encode(
                RecordKind.QUARANTINE_REASON,
                {"original_key": damage.key},
                json.dumps(self._reason(damage), sort_keys=True).encode(),
            ),
            durable=durable,
        )

    @staticmethod
    def _reason(damage: Damage) -> dict[str, Any]:
        return {
            "original_key": damage.key,
            "original_location": damage.location,
            "reason": damage.reason,
            "kind": damage.kind,
            "identity": damage.identity,
            "quarantined_at": time.time(),
        }

    def _notify(self, damage: Damage) -> None:
        if self.on_corruption is None:
            return
        try:
            self.on_corruption(damage)
        except Exception:
            logger.exception("on_corruption callback raised; ignored")


def _itself(value: Any) -> Any:
    return value


def _together(reported: Sequence[tuple[Damage, str]]) -> str:
    """One line for records found damaged together: how many and of which kind, where
    the first and the last lay, why, and where they went.

    Example:
        >>> found = [Damage(f"t/{n}.ckpt", f"log@{n}", "record checksum mismatch",
        ...     kind="checkpoint", quarantined_to=f"q/x.records@{n}") for n in (90, 50)]
        >>> print(_together([(d, "") for d in found]))  # doctest: +NORMALIZE_WHITESPACE
        2 damaged checkpoint records, log@90 to log@50: record checksum mismatch;
        quarantined to q/x.records (each one logged at DEBUG)
    """
    damages = [damage for damage, _ in reported]
    kinds = Counter(damage.kind or "unknown" for damage in damages)
    of_kind = f" {next(iter(kinds))}" if len(kinds) == 1 else ""
    mixed = f" ({_counted(kinds)})" if len(kinds) > 1 else ""
    reasons = _counted(Counter(damage.reason for damage in damages))
    return (
        f"{len(damages)} damaged{of_kind} records{mixed}, {damages[0].location} to "
        f"{damages[-1].location}: {reasons}; {_where_they_went(reported)} "
        f"(each one logged at DEBUG)"
    )


def _where_they_went(reported: Sequence[tuple[Damage, str]]) -> str:
    """Where records found damaged together went: the quarantine files (not where in
    them), and for those not moved, what kept them where they were."""
    files = [
        _quarantine_file(damage.quarantined_to)
        for damage, _ in reported
        if damage.quarantined_to is not None
    ]
    kept = Counter(
        outcome.strip().removeprefix("(").removesuffix(")") or "not moved"
        for damage, outcome in reported
        if damage.quarantined_to is None
    )
    parts = []
    if files:
        distinct = list(dict.fromkeys(files))
        where = (
            distinct[0]
            if len(distinct) == 1
            else f"{len(distinct)} files, {distinct[0]} to {distinct[-1]}"
        )
        parts.append(f"quarantined to {where}" + (f" ({len(files)})" if kept else ""))
    if kept:
        parts.append(
            _counted(kept) if not files else ", ".join(f"{w} ({n})" for w, n in kept.items())
        )
    return "; ".join(parts)


def _quarantine_file(quarantined_to: str) -> str:
    """The file of a quarantine place (``<file>@<offset>`` for records moved into one)."""
    where, at, offset = quarantined_to.rpartition("@")
    return where if at and offset.isdigit() else quarantined_to


def _counted(counts: Counter[str]) -> str:
    """``"a"`` when all are ``a``, else ``"a (3), b (1)"``, most first."""
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{what} ({count})" for what, count in counts.most_common())


def _new_quarantine_base() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{QUARANTINE_PREFIX}/{stamp}-{secrets.token_hex(6)}"
