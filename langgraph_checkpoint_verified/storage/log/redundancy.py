"""A log's parity sidecar, ``log.parity``, as one process writes, reads and scrubs it.

``storage.log.parity`` says what the sidecar holds; this module does the I/O:

* **Writing.** After each append (its ``fdatasync`` done), the records of the
  stripes it touched are written with one ``pwrite`` and no sync of their own.
  An append made without a sync in a store that syncs (a deletion, a move to the
  quarantine) is covered after the next sync instead (``defer``): a record
  written before its bytes were synced could reach the disk without them, and
  after a power cut describe bytes the log never kept, a false alarm.
  Bit rot comes later: what a crash before the page cache is flushed loses is a
  record of the stripe still being appended to, which the next append completes,
  and records written long before, which ``verify`` reports as unprotected and
  ``repair`` writes again.
* **Healing.** A reader that finds bytes of the log failing their checks asks for
  them rebuilt: each stripe they lie in is read whole, and its one damaged block,
  if it has exactly one, is rebuilt from the parity and checked against its CRC.
  The caller then checks the entries, and the records their digests, as always.
* **Scrubbing.** ``scrub`` checks every block of a log against its stripe's
  record; with ``repair`` it writes rebuilt blocks back in place (under the
  append lock, then ``fdatasync``) and writes the records of stripes that have
  none or a stale one, where the log's own entries vouch for the bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from langgraph_checkpoint_verified.storage.base import FILE_MODE
from langgraph_checkpoint_verified.storage.log.parity import (
    BLOCK_SIZE,
    HEADER_SIZE,
    RECORD_SIZE,
    STRIPE_SIZE,
    OpenStripe,
    StripeRecord,
    damaged_blocks,
    decode_covered,
    decode_record,
    encode_parity,
    parity_holds,
    rebuild,
    record_offset,
    stripe_of,
)

PARITY_SUFFIX = ".parity"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass
class _Deferred:
    """Appends to one log, one after the other, made without a sync: not covered yet."""

    ino: int
    at: int
    end: int
    parts: list[bytes]

    def followed_by(self, ino: int, at: int) -> bool:
        """Whether an append at ``at`` of the log ``ino`` comes right after these."""
        return ino == self.ino and at == self.end


class ParityFile:
    """The sidecar of one log, for as long as this process keeps that log open.

    Args:
        log_path: The log's path; the sidecar is beside it, ``<log_path>.parity``.
    """

    def __init__(self, log_path: str) -> None:
        self.path = log_path + PARITY_SUFFIX
        self._fd: int | None = None
        self._stripe: OpenStripe | None = None
        """The stripe the log ends in, as this process last wrote its record."""
        self._log_ino: int | None = None
        """The log (inode) ``_fd`` and ``_stripe`` are for."""
        self._deferred: _Deferred | None = None
        """Bytes appended without a sync, to cover after the next."""

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None
        self._stripe = None
        self._log_ino = None
        self._deferred = None  # unprotected until a scrub, or the stripe's next append

    # -- writing -----------------------------------------------------------

    def defer(self, log_ino: int, at: int, appended: bytes) -> int:
        """Note ``appended``, written at offset ``at`` of the log without a sync: the next
        ``protect``, which follows a sync, covers it first. How many bytes wait now.

        Called under the log's append lock. Bytes noted before an append that does not
        follow them (another writer appended in between) are forgotten, as is what was
        noted before the log was closed: they stay unprotected (``verify`` says so)
        until a scrub, or until an append to their stripe, which covers the stripe
        from its start.
        """
        deferred = self._deferred
        if deferred is None or not deferred.followed_by(log_ino, at):
            deferred = self._deferred = _Deferred(log_ino, at, at, [])
        deferred.parts.append(appended)
        deferred.end += len(appended)
        return deferred.end - deferred.at

    @property
    def deferred(self) -> bool:
        """Whether bytes ``defer`` noted wait for a sync."""
        return self._deferred is not None

    def protect_deferred(self, log_fd: int, log_end: int) -> None:
        """Cover what ``defer`` noted, once synced (by the caller, just now), if the log
        (``log_end`` bytes long) still ends where it did; else another writer appended
        since, and covered what it could."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None and deferred.end == log_end:
            self.protect(log_fd, deferred.ino, deferred.at, b"".join(deferred.parts))

    def protect(self, log_fd: int, log_ino: int, at: int, appended: bytes) -> None:
        """Cover ``appended``, just written at offset ``at`` of the log (``log_fd``) and
        synced, with what ``defer`` noted just before it (the same sync covered it).

        Called under the log's append lock. Best effort: a sidecar that cannot be
        written (a full disk) leaves those bytes unprotected, which ``verify``
        reports; the append itself is already durable.
        """
        deferred, self._deferred = self._deferred, None
        if deferred is not None and deferred.followed_by(log_ino, at):
            at, appended = deferred.at, b"".join([*deferred.parts, appended])
        try:
            if self._log_ino != log_ino:
                self.close()
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _CLOEXEC, FILE_MODE)
                self._log_ino = log_ino
            stripe = self._stripe
            if stripe is None or stripe.end != at:
                # first append here, or another process appended since: a stripe that
                # starts at ``at`` holds nothing yet, and needs nothing read to say so
                stripe = self._stripe = (
                    OpenStripe(stripe_of(at)) if at % STRIPE_SIZE == 0 else self._load(log_fd, at)
                )
            touched = stripe.extend(appended)
            first = touched[0].number
            os.pwrite(self._fd, b"".join(s.record() for s in touched), record_offset(first))
        except OSError:
            self.close()

    def forget_after(self, end: int) -> None:
        """Drop the records of the stripes after the one ``end`` lies in: the log was cut
        back to ``end`` (a torn tail), and what it grows into there is new bytes, which
        an old record must never be taken to describe. Durable before the log grows."""
        self._deferred = None
        try:
            fd = os.open(self.path, os.O_RDWR | _CLOEXEC)
        except FileNotFoundError:
            return
        try:
            if os.fstat(fd).st_size > record_offset(stripe_of(end) + 1):
                os.ftruncate(fd, record_offset(stripe_of(end) + 1))
                os.fdatasync(fd)
        finally:
            os.close(fd)
        self._stripe = None

    def _load(self, log_fd: int, at: int) -> OpenStripe:
        """The open stripe ending at ``at``: from its record where that still holds (the
        log's bytes are then checked against it, not trusted), else from the log."""
        number = stripe_of(at)
        start = number * STRIPE_SIZE
        data = os.pread(log_fd, at - start, start)
        record = self.record(number)
        if record is not None and record.covered <= len(data):
            rebuilt = rebuild(data, record)
            if rebuilt is not None:
                data = rebuilt.data
        return OpenStripe.from_bytes(number, data)

    def record(self, number: int) -> StripeRecord | None:
        """Stripe ``number``'s record, if the sidecar holds an intact one for this log."""
        try:
            fd = os.open(self.path, os.O_RDONLY | _CLOEXEC)
        except OSError:
            return None
        try:
            data = os.pread(fd, RECORD_SIZE, record_offset(number))
        except OSError:
            return None
        finally:
            os.close(fd)
        return decode_record(data, number)

    def extent(self) -> int:
        """Where the last stripe with a record ends in the log: about where its entries
        synced so far end (a record covers bytes once they are synced). Only a guess: the
        sidecar is not synced itself, and a crash may leave it short or long. 0 if none."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return 0
        return size // RECORD_SIZE * STRIPE_SIZE

    def create(self) -> None:
        """Make the sidecar, empty, if there is none (before its log's first append), and
        keep it open for the log made next (``bind``): its first append writes through
        this descriptor, not one opened again."""
        self.close()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _CLOEXEC, FILE_MODE)

    def bind(self, log_ino: int) -> None:
        """The log made after ``create`` is ``log_ino``: the descriptor kept is its sidecar's."""
        if self._fd is not None and self._log_ino is None:
            self._log_ino = log_ino

    def is_for(self, log_ino: int) -> bool:
        """Whether what this keeps open is the sidecar of the log ``log_ino``."""
        return self._fd is not None and self._log_ino == log_ino

    def covers_beyond(self, at: int) -> bool | None:
        """Whether the sidecar protects bytes of the log at or after offset ``at``: bytes
        synced there once (a record covers bytes only after their ``fdatasync``). ``None``
        when it cannot say: no sidecar, or no intact record of the stripe ``at`` lies
        inside (a stripe starting at ``at`` with no record has had nothing written).

        Kept open by this process's appends, the sidecar holds records written whole
        (by a ``pwrite`` no crash of a process tears; a power cut would have ended
        this one too): the record's header alone says it, and on a file system where
        each read is a round trip (FUSE, NFS), that header, written by this process,
        is read back from its page cache. Opened to answer, the whole record must be
        there: after a power cut, a record torn at the file's end is none."""
        number = stripe_of(at)
        covered: int | None = None
        if self._fd is not None:
            try:
                covered = decode_covered(
                    os.pread(self._fd, HEADER_SIZE, record_offset(number)), number
                )
            except OSError:
                covered = None
        else:
            record = self.record(number)
            covered = None if record is None else record.covered
        if covered is None:
            if at != number * STRIPE_SIZE or not os.path.exists(self.path):
                return None
            return False
        return number * STRIPE_SIZE + covered > at

    def write_records(self, records: list[tuple[int, bytes]], *, fsync: bool) -> None:
        """Write stripe records (``(stripe, record)``); synced when ``fsync``."""
        self.close()  # the open stripe may be among them: the next append reads it again
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _CLOEXEC, FILE_MODE)
        try:
            for number, record in records:
                os.pwrite(fd, record, record_offset(number))
            if fsync:
                os.fdatasync(fd)
        finally:
            os.close(fd)

    # -- healing -----------------------------------------------------------

    def heal(
        self,
        log_fd: int,
        spans: Iterable[tuple[int, int]],
        *,
        unhealable: set[int] | None = None,
    ) -> dict[int, bytes]:
        """Rebuilt stripes for the log byte ranges ``spans`` (start, end): stripe start ->
        the stripe's bytes with its damaged block rebuilt, for each stripe that had one
        and could be rebuilt. Stripes with nothing to rebuild are left out.

        ``unhealable``: stripe numbers not to try, because a read that sees the log as
        it was then already found nothing to rebuild in them; those found so now are
        added to it (a read past many damaged records in a few stripes tries each once).
        """
        numbers = sorted(
            {n for s, e in spans if e > s for n in range(stripe_of(s), stripe_of(e - 1) + 1)}
        )
        healed: dict[int, bytes] = {}
        for number in numbers:
            if unhealable is not None and number in unhealable:
                continue
            record = self.record(number)
            start = number * STRIPE_SIZE
            rebuilt = (
                None if record is None else rebuild(os.pread(log_fd, STRIPE_SIZE, start), record)
            )
            if rebuilt is not None and rebuilt.blocks:
                healed[start] = rebuilt.data
            elif unhealable is not None:
                unhealable.add(number)
        return healed


def patch(data: bytes, base: int, stripes: dict[int, bytes]) -> bytes:
    """``data`` (log bytes from offset ``base``) with the rebuilt ``stripes`` laid over it."""
    out = bytearray(data)
    end = base + len(data)
    for start, stripe in stripes.items():
        lo, hi = max(start, base), min(start + len(stripe), end)
        if lo < hi:
            out[lo - base : hi - base] = stripe[lo - start : hi - start]
    return bytes(out)


def rebuilt_blocks(data: bytes, base: int, stripes: dict[int, bytes]) -> list[int]:
    """Log offsets of the blocks that differ between ``data`` (from ``base``) and ``stripes``."""
    changed = []
    for start, stripe in stripes.items():
        for offset in range(start, start + len(stripe), BLOCK_SIZE):
            lo = max(offset, base)
            hi = min(offset + BLOCK_SIZE, start + len(stripe), base + len(data))
            if lo < hi and data[lo - base : hi - base] != stripe[lo - start : hi - start]:
                changed.append(offset)
    return changed


def write_parity_file(temp: str, log: bytes, *, fsync: bool) -> None:
    """The whole sidecar of a log holding ``log``, written to the new file ``temp`` (synced
    when ``fsync``), for the caller to rename into place; ``temp`` is gone if this fails."""
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, FILE_MODE)
    try:
        data = memoryview(encode_parity(log))
        while data:
            data = data[os.write(fd, data) :]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(temp)
        raise
    os.close(fd)


# -- scrubbing ---------------------------------------------------------------


@dataclass
class LogScrub:
    """What ``scrub`` found in one log (offsets are the log's).

    Attributes:
        healed: Blocks that failed their CRC and were rebuilt from the parity.
        rewritten: Whether those were written back in place (``repair``).
        unhealable: Blocks that failed their CRC in stripes with more than one
            damaged block (or a damaged record): left to the entries' own checks.
        unprotected: Byte ranges no intact record covers (a store written before
            the sidecar existed, a lost or damaged record, a crash before a record
            was written).
        protected: Byte ranges whose records ``repair`` wrote.
    """

    healed: list[int] = field(default_factory=list)
    rewritten: bool = False
    unhealable: list[int] = field(default_factory=list)
    unprotected: list[tuple[int, int]] = field(default_factory=list)
    protected: list[tuple[int, int]] = field(default_factory=list)


def scrub(
    log_fd: int,
    log_end: int,
    parity: ParityFile,
    *,
    vouched: Callable[[int, int], bool],
    repair: bool,
    fsync: bool,
    writable_log: Callable[[], int] | None = None,
) -> LogScrub:
    """Check every stripe of a log's intact part ``[0, log_end)`` against its record.

    ``vouched(start, end)`` says whether the log's own entries verify over those
    bytes (no damaged span in them): only then may ``repair`` write a record from
    them. With ``repair`` (called under the append lock), ``writable_log()`` gives
    an fd to write rebuilt blocks back through (not opened for appending: Linux
    ignores ``pwrite``'s offset there).
    """
    found = LogScrub()
    new_records: list[tuple[int, bytes]] = []
    for start in range(0, log_end, STRIPE_SIZE):
        number = stripe_of(start)
        size = min(STRIPE_SIZE, log_end - start)
        data = os.pread(log_fd, size, start)
        record = parity.record(number)
        if record is not None and record.covered > len(data):
            record = None  # covers bytes past the intact end: not this log's record
        rebuilt = None if record is None else rebuild(data, record)
        if record is not None and rebuilt is None:
            found.unhealable.extend(
                start + block * BLOCK_SIZE for block in damaged_blocks(data, record)
            )
            continue
        if record and rebuilt and not rebuilt.blocks and not parity_holds(data, record):
            record = rebuilt = None  # the parity itself is damaged: as good as none
        if record is None or rebuilt is None:
            found.unprotected.append((start, start + size))
            if repair and vouched(start, start + size):
                new_records.append((number, OpenStripe.from_bytes(number, data).record()))
                found.protected.append((start, start + size))
            continue
        if rebuilt.blocks and repair and writable_log is not None:
            for block in rebuilt.blocks:
                offset = block * BLOCK_SIZE
                chunk = rebuilt.data[offset : min(offset + BLOCK_SIZE, record.covered)]
                os.pwrite(writable_log(), chunk, start + offset)
            found.rewritten = True
        found.healed.extend(start + block * BLOCK_SIZE for block in rebuilt.blocks)
        if record.covered < size:
            tail = (start + record.covered, start + size)
            found.unprotected.append(tail)
            if repair and vouched(*tail):
                stripe = OpenStripe.from_bytes(number, rebuilt.data[:size])
                new_records.append((number, stripe.record()))
                found.protected.append(tail)
    if found.rewritten and fsync and writable_log is not None:
        os.fdatasync(writable_log())
    if new_records:
        parity.write_records(new_records, fsync=fsync)
    return found
