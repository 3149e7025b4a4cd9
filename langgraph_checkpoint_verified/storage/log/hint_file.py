"""A log's hint (``log.hint``): how a process opens a long thread's log from it, and when
and how the hint is written again (its format: ``storage.log.entries``).

A hint is only a shortcut: not synced, written whole or not at all, ignored unless it
names the log it stands beside, and never needed to read the log right.
"""

from __future__ import annotations

import builtins
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from langgraph_checkpoint_verified.storage.base import FILE_MODE
from langgraph_checkpoint_verified.storage.files import (
    copy_range,
    discard_temp,
    temp_path,
    write_all_at,
)
from langgraph_checkpoint_verified.storage.log.entries import (
    CHECKSUM_SIZE,
    HEADER_SIZE,
    LOG_TAIL_SIZE,
    HintIndex,
    HintPiece,
    KeptBlock,
    decode_hint_index,
    encode_hint_parts,
)
from langgraph_checkpoint_verified.storage.log.key_directory import (
    HintedDirectory,
    KeyDirectory,
    LastHint,
)
from langgraph_checkpoint_verified.storage.log.tail import read_tail
from langgraph_checkpoint_verified.storage.log.thread_log import DamagedEntry, ThreadLog

HINT_NAME = "log.hint"
HINT_AFTER_BYTES = 256 * 1024
"""A process that appended, caught up with or read this much of a log past its hint, and a
quarter of the hint's size, leaves a new hint for the next one (``hint_due``); a reader
that scanned many small entries, sooner (``hint_pays_off``)."""
HINT_AFTER_ENTRIES = 32
"""What writing a hint costs beside its size, in entries a reader scans past the hint (a
file made, written and renamed: as long as scanning some 32 entries takes). Small entries
(a chat's steps) cost a reader per entry more than per byte: see ``hint_pays_off``."""
HINT_BYTES_PER_ENTRY = 8 * 1024
"""Bytes of hint written in about the time a reader scans one entry past it (a hint is
rewritten whole: the blocks kept are copied, the others encoded; an entry is checked and
taken into the key directory): some 1.6 µs per KB of hint against 10 to 20 µs an entry."""
HINT_REWRITE_COST = 4
"""How many bytes of hint a writer may write per byte it appends to the log."""


def read_hint(log: ThreadLog, fd: int, rescan: Callable[[bool], KeyDirectory]) -> None:
    """Take the key directory of the log open as ``fd`` from its hint, if the hint is
    intact and of this log: its index now, its blocks as they are used
    (``HintedDirectory``; ``rescan`` reads the directory again if one cannot be)."""
    path = f"{log.directory}/{HINT_NAME}"
    try:
        hint_fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        hint_stat, index = _hint_index(hint_fd, fd, os.fstat(fd).st_size)
    except OSError:
        index = None
    finally:
        os.close(hint_fd)
    if index is None:
        return  # stale (the log was compacted since) or damaged: read the log itself
    log.index = HintedDirectory(
        path,
        (hint_stat.st_ino, hint_stat.st_size),
        index,
        rescan,
    )
    log.end = log.hint_end = index.end
    log.hint_size = hint_stat.st_size


def _hint_index(
    hint_fd: int, log_fd: int, log_size: int
) -> tuple[os.stat_result, HintIndex | None]:
    """The ``fstat`` of the hint open as ``hint_fd``, and its index if it is intact and
    names the log open as ``log_fd`` within its first ``log_size`` bytes."""
    hint_stat = os.fstat(hint_fd)
    index = decode_hint_index(
        lambda size, offset: os.pread(hint_fd, size, offset),
        lambda end: os.pread(log_fd, LOG_TAIL_SIZE, end - LOG_TAIL_SIZE),
        log_size,
        size=hint_stat.st_size,
    )
    return hint_stat, index


def hint_due(log: ThreadLog) -> bool:
    """Whether the key directory is worth saving again: the log has grown past its
    hint by ``HINT_AFTER_BYTES`` and by a ``HINT_REWRITE_COST``-th of the hint's size,
    so that rewriting the hint costs at most that many bytes per byte appended, and
    what a process opening the thread scans after the hint stays within that."""
    if log.holds_damage():
        return False  # no hint is left for a log with damage: do not try at every append
    if log.damage_settled:
        return True  # the damage was moved aside: readers need not read past it again
    return log.end - log.hint_end >= max(HINT_AFTER_BYTES, log.hint_size // HINT_REWRITE_COST)


def hint_pays_off(log: ThreadLog, scanned: int, *, healed: bool = False) -> bool:
    """Whether a process that scanned ``scanned`` entries past the log's hint to open it
    should write a new hint: once its scans of that stretch of log cost more than
    writing the hint does.

    A reader cannot know how many others will open the thread before its writer's next
    hint (``hint_due`` keeps what each scans within its bound), so a process pays for a
    hint only once it has paid as much in scanning: no process opening a thread pays
    more than twice what its scan alone costs, the ones that follow a writer which
    stopped between two hints pay a scan each, and a process that opens the thread
    again (a new saver on the same store) writes the hint as soon as its scans add up
    to it. A hint far bigger than the log's tail (a long thread) is not rewritten for
    a few dozen entries; a log with no hint yet gets one once its scan is worth it. A
    scan that ``healed`` blocks from the parity (each stripe read whole and rebuilt)
    cost far more than its entries, and would cost every reader after it as much until
    a writer's append writes them back: the hint pays at once.
    """
    hint_cost = HINT_AFTER_ENTRIES + log.hint_size // HINT_BYTES_PER_ENTRY
    stretch = (log.path, log.ino, log.hint_end)
    with _scans_lock:
        scans = _scans.pop(stretch, 0) + scanned
        if healed or scans >= hint_cost:
            return True
        _scans[stretch] = scans
        while len(_scans) > _SCANS_KEPT:
            _scans.popitem(last=False)
    return False


_SCANS_KEPT = 1024
"""Stretches of logs past their hints this process scanned and left no hint for: the
threads it opened lately."""
_scans: OrderedDict[tuple[str, int | None, int], int] = OrderedDict()
"""(log path, inode, where its hint ends) -> entries this process scanned past it."""
_scans_lock = threading.Lock()


def write_hint(log: ThreadLog) -> None:
    """Save the key directory beside the log, so the next process reads less of it.

    Only a shortcut: not synced, written whole or not at all (temp file,
    rename), and ignored unless it names the current log. A log with damage that
    still stands (``ThreadLog.holds_damage``), or record files in it, gets none: those
    are found by reading it. A record whose entry is damaged is named where its data
    lies (``_damaged_data``): whoever reads it from the hint finds it damaged, as a
    record damaged after its hint was written.
    """
    if log.holds_damage() or log.fd is None or log.end < LOG_TAIL_SIZE:
        return
    log.damage_settled = False  # tried once: from now on, as the log grows
    directory = log.index
    # the blocks of the hint the directory was last read from or written to that hold
    # no key changed since are carried as they are, copied from that file: only the
    # blocks whose keys changed are encoded again
    earlier = _open_earlier_hint(directory)
    if earlier is None and directory.follow_replaced_hint():
        # another process's hint in place of that one: read on from it, and copy from it
        earlier = _open_earlier_hint(directory)
    elif earlier is None:
        earlier = _follow_hint_at_path(log)
    try:
        carried = directory.hint_parts() if earlier is not None else None
        parts = _encodable([sorted(directory.items())] if carried is None else carried)
        if parts is None:
            log.hint_end = log.end  # not again before the log has grown as much again
            return
        temp = temp_path(log.directory)
        made = False
        try:
            log_tail = os.pread(log.fd, LOG_TAIL_SIZE, log.end - LOG_TAIL_SIZE)
            pieces, index = encode_hint_parts(log_tail, log.end, parts)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            made = True
            try:
                size = _write_pieces(fd, pieces, earlier)
                written = os.fstat(fd)
            finally:
                os.close(fd)
            os.replace(temp, f"{log.directory}/{HINT_NAME}")
        except OSError:
            # a read-only store, a full disk: no hint, nothing lost (and on a store that
            # refuses every change, no temp file made, nor one to remove)
            if made:
                discard_temp(temp)
            return
    finally:
        if earlier is not None:
            os.close(earlier)
    log.hint_end, log.hint_size = log.end, size
    # the next hint starts from this one (a directory partly read from the old one reads
    # on from it: the old one is gone)
    directory.hinted(f"{log.directory}/{HINT_NAME}", (written.st_ino, written.st_size), index)


def _encodable(parts: builtins.list[Any]) -> builtins.list[Any] | None:
    """``hint_parts`` (or all the items) as ``encode_hint_parts`` takes them; ``None`` if
    a key is held by something a hint cannot name (damage, a record file)."""
    encodable: builtins.list[Any] = []
    for part in parts:
        if isinstance(part, KeptBlock):
            encodable.append(part)
            continue
        entries = []
        for key, where in part:
            if isinstance(where, DamagedEntry):
                where = _damaged_data(key, where)
            if not isinstance(where, tuple):
                return None
            entries.append((key, where[0], where[1]))
        encodable.append(entries)
    return encodable


def _damaged_data(key: str, damaged: DamagedEntry) -> tuple[int, int] | None:
    """Where the data of ``key``'s damaged entry lies, as its header (which still names
    the key) lays it out: a read of the key there checks the entry and the record, and
    finds them damaged. ``None`` if the damaged stretch is too short to hold any."""
    key_size = len(key.encode("utf-8", "surrogatepass"))
    data_offset = damaged.offset + HEADER_SIZE + key_size
    data_size = damaged.offset + len(damaged.data) - CHECKSUM_SIZE - data_offset
    return (data_offset, data_size) if data_size >= 0 else None


def _open_earlier_hint(directory: KeyDirectory) -> int | None:
    """The hint file the directory was last read from or written to, open, if it is
    still that file; ``None`` otherwise (every key is then encoded anew)."""
    last = directory.last_hint
    if last is None:
        return None
    try:
        fd = os.open(last.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        identity: tuple[int, int] | None = (st.st_ino, st.st_size)
    except OSError:
        identity = None
    if identity != last.identity:
        os.close(fd)  # replaced since (another process's hint): not the blocks it names
        return None
    return fd


def _follow_hint_at_path(log: ThreadLog) -> int | None:
    """For a directory holding every key (it reads no hint's blocks) whose last hint is
    gone, or was never there: the hint at the path now (another process's), open, and
    taken as its last hint (``_hint_to_follow``); ``None`` (every key encoded) if there is
    none, or it cannot be followed."""
    log_fd = log.fd
    directory = log.index
    if log_fd is None or (
        isinstance(directory, HintedDirectory) and directory.unread_hint() is not None
    ):
        return None  # a block not read yet would be encoded from the keys it lacks
    path = f"{log.directory}/{HINT_NAME}"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        last = _hint_to_follow(log, log_fd, fd, path)
    except OSError:
        last = None
    if last is None:
        os.close(fd)
        return None
    directory.last_hint = last
    return fd


def _hint_to_follow(log: ThreadLog, log_fd: int, fd: int, path: str) -> LastHint | None:
    """The hint open as ``fd``, as a last hint to copy blocks from, if it names the log,
    covers no more of it than this process has read, and leaves at most a hint's worth
    of it after (read, to find the keys changed since: past that, encoding every key
    costs less). Its blocks holding those keys are changed; the others hold what the
    directory holds."""
    st, index = _hint_index(fd, log_fd, log.end)
    if index is None or log.end - index.end > max(st.st_size, HINT_AFTER_BYTES):
        return None
    after = read_tail(log_fd, log.parity, index.end, log.end, window=False)
    if after.damaged or index.end + after.end != log.end:
        return None  # not the log as this process read it
    last = LastHint(path, (st.st_ino, st.st_size), index.first_keys, index.blocks)
    for entry in after.entries:
        last.touch(entry.key)
    return last


def _write_pieces(fd: int, pieces: builtins.list[HintPiece], earlier: int | None) -> int:
    """Write a hint's pieces in order at ``fd``, the carried ones copied from ``earlier``;
    the hint's size."""
    offset = 0
    for piece in pieces:
        if isinstance(piece, tuple):
            assert earlier is not None
            copy_range(earlier, piece[0], piece[1], fd, offset)
            offset += piece[1]
        else:
            write_all_at(fd, piece, offset)
            offset += len(piece)
    return offset
