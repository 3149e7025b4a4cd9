"""The log entry: how a record is framed inside a thread's log. Bytes in, bytes out.

A thread's log is a sequence of entries, each appended whole by one ``write``::

    offset  size  field
    0       4     magic            b"LGCE"
    4       1     entry kind       1: a record stored under a key; 2: the key deleted
    5       1     reserved         0
    6       2     key length K     u16 little-endian
    8       8     data length D    u64 little-endian
    16      K     key              UTF-8, a storage key (``threads/<T>/...``)
    16+K    D     data             the record (see ``_format``); empty for a deletion
    16+K+D  4     checksum         CRC-32 (zlib) of bytes [0, 16+K+D)

The checksum only frames the entry: it tells a complete, intact entry from a
torn or overwritten one and lets a reader find the next entry after damage.
What the record says, and whose it is, is checked by the record's own BLAKE2b
digests (or MACs) and identity, as for every record.

``scan`` reads a log the way a write-ahead log is read: entries in order; an
incomplete entry at the end is a torn tail (a write cut short by a crash),
ignored and later cut off by the next writer; a damaged stretch followed by
intact entries is damage in the middle, reported with its bytes, and the scan
resynchronizes on the next entry that verifies. A last entry that is complete
by its own header but fails its checksum is damage too, not a torn tail: it
may have been acknowledged, so it is reported and kept, never cut off.
"""

from __future__ import annotations

import operator
import struct
import sys
import zlib
from array import array
from dataclasses import dataclass

import ormsgpack

from langgraph_checkpoint_verified._format import ENTRY_MAGIC

PUT = 1
DELETE = 2

_HEADER = struct.Struct("<4sBBHQ")
HEADER_SIZE = _HEADER.size  # 16
CHECKSUM_SIZE = 4
MAX_KEY_SIZE = 0xFFFF
MIN_ENTRY_SIZE = HEADER_SIZE + CHECKSUM_SIZE


@dataclass(frozen=True)
class Entry:
    """One intact entry: its kind, key, and where its data lies in the log."""

    kind: int
    key: str
    offset: int
    """Where the entry starts in the log."""
    data_offset: int
    data_size: int
    end: int
    """Where the next entry starts."""


@dataclass(frozen=True)
class DamagedSpan:
    """Bytes between two intact entries that are not an intact entry."""

    offset: int
    end: int
    key: str | None
    """The key its header names, if the header and key still parse (not verified)."""
    reason: str


def encode_entry(kind: int, key: str, data: bytes = b"") -> bytes:
    """One entry, ready to append.

    Example:
        >>> entry = encode_entry(PUT, "threads/t/x", b"record")
        >>> [(e.key, entry[e.data_offset : e.data_offset + e.data_size]) for e in scan(entry)[0]]
        [('threads/t/x', b'record')]
    """
    key_bytes = key.encode("utf-8", "surrogatepass")
    if len(key_bytes) > MAX_KEY_SIZE:
        raise ValueError(f"key of {len(key_bytes)} bytes is longer than {MAX_KEY_SIZE}")
    body = _HEADER.pack(ENTRY_MAGIC, kind, 0, len(key_bytes), len(data)) + key_bytes + data
    return body + struct.pack("<I", zlib.crc32(body))


def _entry_at(view: memoryview, offset: int) -> Entry | str:
    """The intact entry starting at ``offset``, or why there is none."""
    if len(view) - offset < MIN_ENTRY_SIZE:
        return "incomplete entry"
    magic, kind, reserved, key_size, data_size = _HEADER.unpack_from(view, offset)
    if magic != ENTRY_MAGIC:
        return "no entry starts here"
    if kind not in (PUT, DELETE) or reserved != 0:
        return f"unknown entry kind {kind}/{reserved}"
    body_end = offset + HEADER_SIZE + key_size + data_size
    if body_end + CHECKSUM_SIZE > len(view):
        return "incomplete entry"
    (stored,) = struct.unpack_from("<I", view, body_end)
    if zlib.crc32(view[offset:body_end]) != stored:
        return "entry checksum mismatch"
    key_start = offset + HEADER_SIZE
    try:
        key = bytes(view[key_start : key_start + key_size]).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return "entry key is not UTF-8"
    return Entry(
        kind=kind,
        key=key,
        offset=offset,
        data_offset=key_start + key_size,
        data_size=data_size,
        end=body_end + CHECKSUM_SIZE,
    )


def _declared_end(view: memoryview, offset: int) -> int | None:
    """Where the entry at ``offset`` ends by its own header, if the header reads."""
    if len(view) - offset < HEADER_SIZE:
        return None
    magic, _, _, key_size, data_size = _HEADER.unpack_from(view, offset)
    if magic != ENTRY_MAGIC:
        return None
    return offset + HEADER_SIZE + key_size + data_size + CHECKSUM_SIZE


def _claimed_key(view: memoryview, offset: int) -> str | None:
    """The key a damaged entry's header claims, if it still reads as one."""
    if len(view) - offset < HEADER_SIZE:
        return None
    magic, _, _, key_size, _ = _HEADER.unpack_from(view, offset)
    key_start = offset + HEADER_SIZE
    if magic != ENTRY_MAGIC or key_start + key_size > len(view):
        return None
    try:
        return bytes(view[key_start : key_start + key_size]).decode("utf-8")
    except UnicodeDecodeError:
        return None


def scan(data: bytes | memoryview, start: int = 0) -> tuple[list[Entry], list[DamagedSpan], int]:
    """Every intact entry of ``data[start:]``, the damaged spans, and where the intact log ends.

    The end is where the last intact entry ends: anything after it is a torn
    tail, never reported as damage (a writer may be appending it right now).

    Example:
        >>> log = encode_entry(PUT, "a", b"1") + b"junk" + encode_entry(PUT, "b", b"2")
        >>> entries, damaged, end = scan(log + b"LGCE torn")
        >>> [e.key for e in entries], [(d.offset, d.end) for d in damaged], end == len(log)
        (['a', 'b'], [(22, 26)], True)
    """
    raw = bytes(data)
    view = memoryview(raw)
    entries: list[Entry] = []
    damaged: list[DamagedSpan] = []
    offset = start
    end = start
    while offset < len(view):
        found = _entry_at(view, offset)
        if isinstance(found, Entry):
            entries.append(found)
            offset = end = found.end
            continue
        following = _next_entry(raw, view, offset + 1)
        if following is None:
            if found == "entry checksum mismatch" and _declared_end(view, offset) == len(view):
                # Complete, yet wrong: not a write cut short but damage to the last
                # entry, which may have been acknowledged. Reported, never cut off.
                damaged.append(DamagedSpan(offset, len(view), _claimed_key(view, offset), found))
                end = len(view)
            break  # otherwise nothing intact after it: a torn tail
        damaged.extend(_split(raw, view, offset, following.offset, found))
        offset = following.offset
    return entries, damaged, end


def _split(raw: bytes, view: memoryview, start: int, end: int, reason: str) -> list[DamagedSpan]:
    """A damaged stretch as the entries it still shows: one span from each header that
    reads (and names a key) to the next, so each damaged record is named on its own."""
    starts = [start]
    at = raw.find(ENTRY_MAGIC, start + 1, end)
    while at != -1:
        declared = _declared_end(view, at)
        if declared is not None and declared <= end and _claimed_key(view, at) is not None:
            starts.append(at)
        at = raw.find(ENTRY_MAGIC, at + 1, end)
    spans = []
    for first, (left, right) in enumerate(zip(starts, [*starts[1:], end], strict=True)):
        why = reason if first == 0 else _why_not(view, left)
        spans.append(DamagedSpan(offset=left, end=right, key=_claimed_key(view, left), reason=why))
    return spans


def _why_not(view: memoryview, offset: int) -> str:
    found = _entry_at(view, offset)
    return found if isinstance(found, str) else "entry checksum mismatch"


def _next_entry(raw: bytes, view: memoryview, offset: int) -> Entry | None:
    """The first intact entry at or after ``offset`` (resynchronization)."""
    while True:
        found_at = raw.find(ENTRY_MAGIC, offset)
        if found_at < 0:
            return None
        found = _entry_at(view, found_at)
        if isinstance(found, Entry):
            return found
        offset = found_at + 1


# -- hints -----------------------------------------------------------------------------

HINT_MAGIC = b"LGCH"
HINT_VERSION = 2
_HINT_HEADER = struct.Struct("<4sB3xQQ")


@dataclass(frozen=True)
class HintGroup:
    """The keys of one directory in a hint: ``parent/name`` is at ``positions[i]``."""

    parent: str
    names: list[str]
    positions: list[tuple[int, int]]
    """(data offset, data size) of each name's record in the log."""


def encode_hint(log_inode: int, end: int, entries: list[tuple[str, int, int]]) -> bytes:
    """A saved key directory: which entry data of the log (``log_inode``) each key holds.

    Layout: magic ``LGCH``, version (1 byte), 3 reserved bytes, the log's inode
    (u64) and how many bytes of it the hint covers (u64), a msgpack array with
    one ``[parent, names, positions]`` per directory (its path, the names of the
    keys in it, and for each name its data offset and data size as two u64
    little-endian, packed in one bin), and a CRC-32 of everything before it.
    Grouped by directory, a hint is read into a key directory a directory at a
    time, not a key at a time.

    Example:
        >>> hint = encode_hint(7, 100, [("threads/t/x", 16, 60), ("threads/t/y", 80, 20)])
        >>> decode_hint(hint, log_inode=7, log_size=120)
        (100, [HintGroup(parent='threads/t', names=['x', 'y'], positions=[(16, 60), (80, 20)])])
        >>> decode_hint(hint, log_inode=8, log_size=120) is None  # another file now
        True
    """
    groups: dict[str, tuple[list[str], array[int]]] = {}
    for key, offset, size in entries:
        parent, _, name = key.rpartition("/")
        names, positions = groups.setdefault(parent, ([], array("Q")))
        names.append(name)
        positions.extend((offset, size))
    packed = [
        [parent, names, _little_endian(positions).tobytes()]
        for parent, (names, positions) in groups.items()
    ]
    body = _HINT_HEADER.pack(HINT_MAGIC, HINT_VERSION, log_inode, end) + ormsgpack.packb(packed)
    return body + struct.pack("<I", zlib.crc32(body))


def decode_hint(data: bytes, log_inode: int, log_size: int) -> tuple[int, list[HintGroup]] | None:
    """The hint's coverage and groups, or ``None`` if it is damaged or not of this log."""
    if len(data) < _HINT_HEADER.size + CHECKSUM_SIZE:
        return None
    (stored,) = struct.unpack_from("<I", data, len(data) - CHECKSUM_SIZE)
    if zlib.crc32(memoryview(data)[: len(data) - CHECKSUM_SIZE]) != stored:
        return None
    magic, version, inode, end = _HINT_HEADER.unpack_from(data, 0)
    if magic != HINT_MAGIC or version != HINT_VERSION or inode != log_inode or end > log_size:
        return None
    try:
        raw = ormsgpack.unpackb(data[_HINT_HEADER.size : len(data) - CHECKSUM_SIZE])
        groups = [_hint_group(*group, end=end) for group in raw]
    except (ValueError, TypeError, ormsgpack.MsgpackDecodeError):
        return None
    return end, groups


def _hint_group(parent: str, names: list[str], positions: bytes, *, end: int) -> HintGroup:
    """One group of a hint whose checksum verified; ``ValueError`` or ``TypeError`` if it
    does not make sense (written by something else)."""
    # join raises TypeError unless every name is a str
    if type(parent) is not str or type(positions) is not bytes or "/" in "".join(names):
        raise ValueError("not a hint group")
    numbers = _little_endian(array("Q", positions))
    if len(numbers) != 2 * len(names):
        raise ValueError("a position for each name")
    offsets, sizes = numbers[0::2], numbers[1::2]
    if max(map(operator.add, offsets, sizes), default=0) > end:
        raise ValueError("a record beyond the part of the log the hint covers")
    return HintGroup(parent, names, list(zip(offsets, sizes, strict=True)))


def _little_endian(numbers: array[int]) -> array[int]:
    """``numbers`` with their bytes in little-endian order (swapped in place if needed)."""
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers
