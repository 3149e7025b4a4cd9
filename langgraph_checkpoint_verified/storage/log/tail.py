"""Reading a log past what a process knows of it: the entries appended since, then the
room, a torn tail, or damage (LevelDB keeps its log reader apart from its writer too).

``read_tail`` reads from an offset to the file's size, checks every entry, rebuilds
from the parity what fails its checks where it can, and says where the intact part
ends and whether only room follows it (``storage.log.room``). It changes nothing:
``LogReader`` takes what it found into the key directory and reports the damage.
"""

from __future__ import annotations

import builtins
import os
from dataclasses import dataclass

from langgraph_checkpoint_verified.storage.log.entries import (
    CHECKSUM_SIZE,
    DamagedSpan,
    Entry,
    entry_checksum,
    scan,
)
from langgraph_checkpoint_verified.storage.log.parity import BLOCK_SIZE
from langgraph_checkpoint_verified.storage.log.redundancy import (
    ParityFile,
    patch,
    rebuilt_blocks,
)
from langgraph_checkpoint_verified.storage.log.room import all_zeros

TAIL_WINDOW = 64 * 1024
"""How much of a log past what is known is read first: the entries appended since, and
enough of the room after them to see it is room (the rest of it is not read)."""


@dataclass(frozen=True)
class Tail:
    """What ``read_tail`` found from where it started reading (``base``)."""

    data: bytes
    """The bytes read (rebuilt from parity where they could be)."""
    entries: builtins.list[Entry]
    damaged: builtins.list[DamagedSpan]
    end: int
    """Where the intact part ends, in ``data``."""
    room: bool
    """Whether only room follows ``end``."""
    healed: builtins.list[int]
    """Log offsets of the blocks rebuilt from parity."""


def read_tail(
    fd: int, parity: ParityFile, base: int, size: int, *, window: bool, far: bool = False
) -> Tail:
    """What the log open as ``fd`` holds from ``base`` to ``size``: rebuilt from parity
    where it fails its checks, and told apart from the room and from a torn tail.

    ``window``: the log had room after ``base`` when last read, so it is read a window
    at a time (``TAIL_WINDOW``, then twice as much each time) until intact entries end
    in room: the rest of the room is not read. Anything else found on the way (damage,
    a torn write) has the whole of it read. ``far``: the entries may end far past
    ``base`` (a hint's coverage): the first window reaches where the parity's records
    do, which is about where the entries synced end (``ParityFile.extent``).
    """
    scans = _Scans()
    if window:
        first = TAIL_WINDOW
        if far:
            # past the last stripe with a record by a block: room seen, if it is there
            first = max(first, parity.extent() + BLOCK_SIZE - base)
        up_to_room = _read_up_to_room(fd, parity, base, size, first, scans)
        if up_to_room is not None:
            return up_to_room
    data = os.pread(fd, size - base, base)
    entries, damaged, end = scans.scan(data)
    cut: int | None = None
    if _trailing(entries, damaged, data):
        # Entries complete by their headers but failing their checksums, then only
        # room: an append overwriting the room right now, a write a power cut tore
        # there, or entries synced once and damaged since. Only the last had their
        # parity written (after their sync): asked first, then the bytes read again.
        synced = parity.covers_beyond(base + _trailing(entries, damaged, data)[0].offset)
        data = os.pread(fd, size - base, base)
        entries, damaged, end = scans.scan(data)
        doubtful = _trailing(entries, damaged, data)
        if doubtful and (synced is False or (synced is None and _unfinished(data, doubtful))):
            cut = doubtful[0].offset  # never synced: a torn tail, from there on
    room = cut is None and all_zeros(data, end)
    if room and end < len(data) and parity.covers_beyond(base + end):
        room = False  # zeros where synced bytes were: lost blocks, not room
    healed: builtins.list[int] = []
    if [d for d in damaged if cut is None or d.offset < cut] or not (room or cut):
        # Damage, or what looks like a torn tail, which bit rot in the last entry's
        # header looks like too, or lost blocks: rebuilt from parity where they can
        # be, and read again.
        suspect = [(base + d.offset, base + d.end) for d in damaged]
        suspect.append((base + end, base + len(data)))
        stripes = parity.heal(fd, suspect)
        if stripes:
            healed = rebuilt_blocks(data, base, stripes)
            data = patch(data, base, stripes)
            entries, damaged, end = scan(data)
            room = cut is None and all_zeros(data, end)
    if cut is not None:
        damaged, end = [d for d in damaged if d.offset < cut], cut
    return Tail(data, entries, damaged, end, room=room, healed=healed)


class _Scans:
    """``scan`` of the bytes read from ``base``, done once for bytes read again unchanged:
    a tail holding damage is read several times (a window, the whole of it, again after
    asking the parity), and scanning damage checks each entry more than once."""

    def __init__(self) -> None:
        self._last: tuple[bytes, tuple[builtins.list[Entry], builtins.list[DamagedSpan], int]]
        self._last = (b"", ([], [], 0))

    def scan(
        self, data: bytes, start: int = 0
    ) -> tuple[builtins.list[Entry], builtins.list[DamagedSpan], int]:
        if start == 0 and data == self._last[0]:
            return self._last[1]
        found = scan(data, start)
        if start == 0:
            self._last = (data, found)
        return found


def _read_up_to_room(
    fd: int, parity: ParityFile, base: int, size: int, window: int, scans: _Scans
) -> Tail | None:
    """The intact entries from ``base`` and the room after them, read a window at a time
    (``window`` bytes, then twice as much each time); ``None`` if anything but intact
    entries and room is found."""
    data = b""
    entries: builtins.list[Entry] = []
    end = 0
    while len(data) < size - base:
        data += os.pread(fd, min(window, size - base - len(data)), base + len(data))
        found, damaged, end = scans.scan(data, end)  # from the entry the last window cut
        if damaged:
            return None
        entries += found
        if end < len(data) and all_zeros(data, end):
            if parity.covers_beyond(base + end) is False:
                return Tail(data, entries, [], end, room=True, healed=[])
            return None
        window *= 2
    return None


def _trailing(
    entries: builtins.list[Entry], damaged: builtins.list[DamagedSpan], data: bytes
) -> builtins.list[DamagedSpan]:
    """The damaged spans after the last intact entry, if nothing but zeros follows them."""
    after = entries[-1].end if entries else 0
    spans = [span for span in damaged if span.offset >= after]
    return spans if spans and all_zeros(data, spans[-1].end) else []


def _unfinished(data: bytes, spans: builtins.list[DamagedSpan]) -> bool:
    """Whether the last span is a write that never reached its end: its checksum, the
    last bytes an entry's one write puts down, is not yet written whole. Either it is
    still the room's zeros (a finished entry's is zero once in 2**32), or it holds the
    first bytes of the entry's own checksum and zeros after them (the write stopped
    inside it: damage looks like that only if it zeroed exactly the checksum's last
    bytes). What tells a torn write from damage when the parity cannot say (a sidecar
    lost in the same power cut: it is not synced)."""
    span = spans[-1]
    stored = data[span.end - CHECKSUM_SIZE : span.end]
    written = len(stored.rstrip(b"\0"))
    if written == 0:
        return True
    if written == CHECKSUM_SIZE:
        return False
    whole = entry_checksum(memoryview(data)[span.offset : span.end - CHECKSUM_SIZE])
    return stored[:written] == whole[:written]
