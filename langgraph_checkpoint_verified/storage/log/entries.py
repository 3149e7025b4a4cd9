"""The log entry: how a record is framed inside a thread's log. Bytes in, bytes out.

A thread's log is a sequence of entries, each appended whole by one ``write``::

    offset  size  field
    0       4     magic            b"LGCE"
    4       1     entry kind       1: a record stored under a key; 2: the key deleted
    5       1     reserved         0
    6       2     key length K     u16 little-endian
    8       8     data length D    u64 little-endian
    16      K     key              UTF-8, a storage key (``threads/<T>/...``)
    16+K    D     data             the record (see ``records.format``); empty for a deletion
    16+K+D  4     checksum         CRC-32 (zlib) of bytes [0, 16+K+D)

The checksum only frames the entry: it tells a complete, intact entry from a
torn or overwritten one and lets a reader find the next entry after damage.
What the record says, and whose it is, is checked by the record's own BLAKE2b
digests (or MACs) and identity, as for every record.

``scan`` reads a log the way a write-ahead log is read: entries in order; an
incomplete entry at the end is a torn tail (a write cut short by a crash),
ignored and later cut off by the next writer; a damaged stretch followed by
intact entries is damage in the middle, reported with its bytes, and the scan
resynchronizes on the next entry that verifies. Entries at the end that are
complete by their own headers but fail their checksums are damage too, not a
torn tail: they were written whole and may have been acknowledged, so they are
reported and kept, never cut off; only what follows them can be a torn tail.
"""

from __future__ import annotations

import operator
import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import ormsgpack

from langgraph_checkpoint_verified.records.format import ENTRY_MAGIC
from langgraph_checkpoint_verified.storage.log.room import zeros_start

PUT = 1
DELETE = 2

_HEADER = struct.Struct("<4sBBHQ")
HEADER_SIZE = _HEADER.size  # 16
CHECKSUM_SIZE = 4
MAX_KEY_SIZE = 0xFFFF
MIN_ENTRY_SIZE = HEADER_SIZE + CHECKSUM_SIZE


class Entry(NamedTuple):
    """One intact entry: its kind, key, and where its data lies in the log (a tuple: a
    scan makes one per entry, opening a thread many)."""

    kind: int
    key: str
    offset: int
    """Where the entry starts in the log."""
    data_offset: int
    data_size: int
    end: int
    """Where the next entry starts."""


_CHECKSUM = struct.Struct("<I")
_new_entry = tuple.__new__
"""Makes an ``Entry`` from its fields in order, without ``Entry.__new__``'s keywords."""


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
    return body + entry_checksum(body)


def entry_checksum(body: bytes | memoryview) -> bytes:
    """The checksum that ends an entry whose bytes before it are ``body``.

    Example:
        >>> entry = encode_entry(DELETE, "threads/t/x")
        >>> entry_checksum(entry[:-CHECKSUM_SIZE]) == entry[-CHECKSUM_SIZE:]
        True
    """
    return _CHECKSUM.pack(zlib.crc32(body))


def entry_is_intact(entry: bytes) -> bool:
    """Whether ``entry``, read whole where the key directory says an entry lies, is intact:
    its checksum, over its header, key and data, holds (a read's check; the header's
    fields were checked when the entry was first scanned, or are covered by this).

    Example:
        >>> entry = encode_entry(PUT, "threads/t/x", b"record")
        >>> entry_is_intact(entry), entry_is_intact(entry[:-1] + b"?")
        (True, False)
    """
    return len(entry) >= MIN_ENTRY_SIZE and zlib.crc32(
        memoryview(entry)[:-CHECKSUM_SIZE]
    ) == int.from_bytes(entry[-CHECKSUM_SIZE:], "little")


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
    (stored,) = _CHECKSUM.unpack_from(view, body_end)
    if zlib.crc32(view[offset:body_end]) != stored:
        return "entry checksum mismatch"
    key_start = offset + HEADER_SIZE
    try:
        key = str(view[key_start : key_start + key_size], "utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return "entry key is not UTF-8"
    return _new_entry(
        Entry, (kind, key, offset, key_start + key_size, data_size, body_end + CHECKSUM_SIZE)
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

    The end is where the last intact entry ends, or the last entry complete by its
    own header after it: anything after that is a torn tail, never reported as
    damage (a writer may be appending it right now).

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
    # no entry starts in the zeros data ends with: a search for the next one stops there
    zeros = None
    # why each entry header met while resynchronizing is not an intact entry's, so that
    # naming the damaged entries does not check them again
    failed: dict[int, str] = {}
    while offset < len(view):
        found = _entry_at(view, offset)
        if isinstance(found, Entry):
            entries.append(found)
            offset = end = found.end
            continue
        if zeros is None:
            zeros = zeros_start(raw)
        following = _next_entry(raw, view, offset + 1, zeros, failed)
        if following is None:
            # Nothing intact after it. Entries complete by their own headers were
            # written whole, and may have been acknowledged: damage, reported and
            # never cut off. What follows them (an incomplete entry, or bytes that
            # start none) is a write cut short: a torn tail.
            complete = _complete_run_end(view, offset)
            if complete > offset:
                damaged.extend(_split(raw, view, offset, complete, found, failed))
                end = complete
            break
        damaged.extend(_split(raw, view, offset, following.offset, found, failed))
        entries.append(following)  # checked already: on from the entry after it
        offset = end = following.end
    return entries, damaged, end


def _complete_run_end(view: memoryview, offset: int) -> int:
    """Where the run of entries complete by their own headers, from ``offset``, ends."""
    while True:
        declared = _declared_end(view, offset)
        if declared is None or declared > len(view):
            return offset
        offset = declared


def _split(
    raw: bytes, view: memoryview, start: int, end: int, reason: str, failed: dict[int, str]
) -> list[DamagedSpan]:
    """A damaged stretch as the entries it still shows: one span from each header that
    reads (and names a key) to the next, so each damaged record is named on its own
    (``failed``: why the entries checked before were not intact, by offset)."""
    starts = [(start, _claimed_key(view, start))]
    at = raw.find(ENTRY_MAGIC, start + 1, end)
    while at != -1:
        declared = _declared_end(view, at)
        if declared is not None and declared <= end:
            key = _claimed_key(view, at)
            if key is not None:
                starts.append((at, key))
        at = raw.find(ENTRY_MAGIC, at + 1, end)
    spans = []
    for first, ((left, key), right) in enumerate(
        zip(starts, [at for at, _ in starts[1:]] + [end], strict=True)
    ):
        why = reason if first == 0 else failed.get(left) or _why_not(view, left)
        spans.append(DamagedSpan(offset=left, end=right, key=key, reason=why))
    return spans


def _why_not(view: memoryview, offset: int) -> str:
    found = _entry_at(view, offset)
    return found if isinstance(found, str) else "entry checksum mismatch"


def _next_entry(
    raw: bytes, view: memoryview, offset: int, limit: int, failed: dict[int, str]
) -> Entry | None:
    """The first intact entry at or after ``offset`` and starting before ``limit``
    (resynchronization); why each header met before it is not one goes to ``failed``."""
    while True:
        found_at = raw.find(ENTRY_MAGIC, offset, limit)
        if found_at < 0:
            return None
        found = _entry_at(view, found_at)
        if isinstance(found, Entry):
            return found
        failed[found_at] = found
        offset = found_at + 1


# -- hints -----------------------------------------------------------------------------

HINT_MAGIC = b"LGCH"
HINT_VERSION = 4
HINT_BLOCK_KEYS = 256
"""Keys per block: a reader decodes the blocks it needs, not the whole hint."""
_HINT_HEADER = struct.Struct("<4sB3x8sQ")
LOG_TAIL_SIZE = 8
"""How many of the log's bytes, those just before where a hint ends, the hint holds: a
hint is of a log whose bytes there are the same (its last entry's checksum and data)."""
_HINT_FOOTER = struct.Struct("<QQI4s")
_HINT_FOOTER_MAGIC = b"LGCI"
HINT_MIN_SIZE = _HINT_HEADER.size + _HINT_FOOTER.size


@dataclass(frozen=True)
class HintIndex:
    """What a reader takes from a hint when it opens it: its coverage and its blocks."""

    end: int
    """How many bytes of the log the hint covers."""
    first_keys: list[str]
    """The smallest key of each block, in order: block ``i`` holds the keys from
    ``first_keys[i]`` up to (not including) ``first_keys[i + 1]``."""
    blocks: list[tuple[int, int, int]]
    """Each block's offset in the hint file, size, and CRC-32."""


@dataclass(frozen=True)
class KeptBlock:
    """A block of an earlier hint of the same log, carried into a new hint as it is: no
    key in its range changed since (``encode_hint_parts``'s ``parts``)."""

    first_key: str
    offset: int
    size: int
    """Where the block lies in the earlier hint file: copied from there, not decoded."""
    crc: int
    """The block's CRC-32, as the index of the hint it comes from holds it (checked when
    the block is read, as any block)."""


HintPiece = bytes | tuple[int, int]
"""A stretch of a hint to write: bytes, or ``(offset, size)`` of the earlier hint file to
copy as they are (its carried blocks)."""


def encode_hint(log_tail: bytes, end: int, entries: list[tuple[str, int, int]]) -> bytes:
    """A saved key directory: which entry data of the log each key holds.

    The hint names its log by content, not by file: ``log_tail`` is the log's
    ``LOG_TAIL_SIZE`` bytes just before ``end``, the checksum that closes the
    last entry covered and the data before it. A log copied, restored from a
    backup or rewritten byte for byte keeps its hint; a log compacted since, or
    whose covered bytes were lost in a crash, no longer ends that way there.

    Keys are sorted and cut into blocks of ``HINT_BLOCK_KEYS``, so that a
    reader finds a key, or the greatest key under a prefix, by reading the
    index and one block, whatever the number of keys (an SSTable's index
    block and data blocks). Layout (integers little-endian):

    * header: magic ``LGCH``, version (u8), 3 reserved bytes, the log's tail
      (8 bytes), how many bytes of the log the hint covers (u64);
    * the blocks, each a msgpack array ``[keys, positions]``: the block's keys
      in order, and a bin of two u64 per key, its record's data offset and size;
    * the index, a msgpack array ``[first_keys, blocks]``: each block's first
      key, and a bin of three u64 per block, its offset, size and CRC-32;
    * footer: the index's offset (u64) and size (u64), a CRC-32 of the header
      and the index (u32), magic ``LGCI``.

    Example:
        >>> tail = b"\\x01" * LOG_TAIL_SIZE
        >>> hint = encode_hint(tail, 100, [("threads/t/y", 80, 20), ("threads/t/x", 16, 60)])
        >>> index = decode_hint_index(hint, lambda end: tail, log_size=120)
        >>> index.first_keys, hint_block(hint, index, 0)
        (['threads/t/x'], [('threads/t/x', (16, 60)), ('threads/t/y', (80, 20))])
        >>> decode_hint_index(hint, lambda end: bytes(8), log_size=120) is None  # another log
        True
    """
    pieces, _ = encode_hint_parts(log_tail, end, [sorted(entries)])
    return b"".join(pieces)  # type: ignore[arg-type]  # no block carried: bytes only


def encode_hint_parts(
    log_tail: bytes, end: int, parts: Sequence[KeptBlock | Sequence[tuple[str, int, int]]]
) -> tuple[list[HintPiece], HintIndex]:
    """``encode_hint`` of the hint's blocks in key order: blocks of an earlier hint of
    this log carried as they are (``KeptBlock``: rewriting a long log's hint then
    decodes and encodes only the blocks whose keys changed, and copies the others from
    the earlier file), and runs of sorted entries between them, cut into blocks.

    Returns the hint as pieces to write in order (adjacent carried blocks are one
    copy), and the index a reader of it decodes.
    """
    if len(log_tail) != LOG_TAIL_SIZE:
        raise ValueError(f"a hint names its log by {LOG_TAIL_SIZE} bytes, not {len(log_tail)}")
    header = _HINT_HEADER.pack(HINT_MAGIC, HINT_VERSION, log_tail, end)
    written: list[HintPiece] = [header]
    offset = len(header)
    first_keys: list[str] = []
    spans = array("Q")

    def add(first_key: str, block: bytes, crc: int) -> None:
        nonlocal offset
        first_keys.append(first_key)
        spans.extend((offset, len(block), crc))
        written.append(block)
        offset += len(block)

    for part in parts:
        if isinstance(part, KeptBlock):
            first_keys.append(part.first_key)
            spans.extend((offset, part.size, part.crc))
            last = written[-1]
            if isinstance(last, tuple) and last[0] + last[1] == part.offset:
                written[-1] = (last[0], last[1] + part.size)  # one copy for adjacent blocks
            else:
                written.append((part.offset, part.size))
            offset += part.size
            continue
        for start in range(0, len(part), HINT_BLOCK_KEYS):
            chunk = part[start : start + HINT_BLOCK_KEYS]
            positions = array("Q")
            for _, data_offset, data_size in chunk:
                positions.extend((data_offset, data_size))
            keys = [key for key, _, _ in chunk]
            block = ormsgpack.packb([keys, _little_endian(positions).tobytes()])
            add(keys[0], block, zlib.crc32(block))
    index = ormsgpack.packb([first_keys, _little_endian(array("Q", spans)).tobytes()])
    footer = _HINT_FOOTER.pack(
        offset, len(index), zlib.crc32(index, zlib.crc32(header)), _HINT_FOOTER_MAGIC
    )
    blocks = list(zip(spans[0::3], spans[1::3], spans[2::3], strict=True))
    return [*written, index + footer], HintIndex(end, first_keys, blocks)


def decode_hint_index(
    data: bytes | Callable[[int, int], bytes],
    log_tail: Callable[[int], bytes],
    log_size: int,
    size: int = -1,
) -> HintIndex | None:
    """The hint's coverage and block index, or ``None`` if it is damaged or not of this log.

    ``data`` is the hint's bytes, or a function reading ``(size, offset)`` of a
    hint file of ``size`` bytes: only the header, the footer and the index are read.
    ``log_tail(end)`` reads the log's ``LOG_TAIL_SIZE`` bytes just before ``end``,
    once the hint is otherwise found sound and within the log's ``log_size``.
    """
    read = _reader(data)
    if size < 0:
        size = len(data)  # type: ignore[arg-type]
    if size < HINT_MIN_SIZE:
        return None
    header = read(_HINT_HEADER.size, 0)
    footer = read(_HINT_FOOTER.size, size - _HINT_FOOTER.size)
    if len(header) != _HINT_HEADER.size or len(footer) != _HINT_FOOTER.size:
        return None
    magic, version, tail, end = _HINT_HEADER.unpack(header)
    index_offset, index_size, stored, footer_magic = _HINT_FOOTER.unpack(footer)
    if (
        magic != HINT_MAGIC
        or footer_magic != _HINT_FOOTER_MAGIC
        or version != HINT_VERSION
        or not LOG_TAIL_SIZE <= end <= log_size
        or index_offset + index_size != size - _HINT_FOOTER.size
    ):
        return None
    index = read(index_size, index_offset)
    if len(index) != index_size or zlib.crc32(index, zlib.crc32(header)) != stored:
        return None
    try:
        first_keys, packed = ormsgpack.unpackb(index)
        spans = _little_endian(array("Q", packed))
        if (
            type(first_keys) is not list
            or len(spans) != 3 * len(first_keys)
            or not all(type(key) is str for key in first_keys)
            or first_keys != sorted(first_keys)
            or any(o + n > index_offset for o, n in zip(spans[0::3], spans[1::3], strict=True))
        ):
            return None
    except (ValueError, TypeError, ormsgpack.MsgpackDecodeError):
        return None
    if log_tail(end) != tail:
        return None  # another log now (compacted since), or the bytes it covered are gone
    blocks = list(zip(spans[0::3], spans[1::3], spans[2::3], strict=True))
    return HintIndex(end, first_keys, blocks)


def hint_block(
    data: bytes | Callable[[int, int], bytes], index: HintIndex, number: int
) -> list[tuple[str, tuple[int, int]]] | None:
    """Block ``number``'s keys, each with its record's (data offset, data size), in order;
    ``None`` if the block does not verify or does not fit the index."""
    found = hint_block_columns(data, index, number)
    if found is None:
        return None
    keys, offsets, sizes = found
    return list(zip(keys, zip(offsets, sizes, strict=True), strict=True))


def hint_block_columns(
    data: bytes | Callable[[int, int], bytes], index: HintIndex, number: int
) -> tuple[list[str], Sequence[int], Sequence[int]] | None:
    """``hint_block`` as columns: the keys, their data offsets, their data sizes."""
    offset, size, crc = index.blocks[number]
    block = _reader(data)(size, offset)
    if len(block) != size or zlib.crc32(block) != crc:
        return None
    upper = index.first_keys[number + 1] if number + 1 < len(index.first_keys) else None
    try:
        keys, packed = ormsgpack.unpackb(block)
        numbers = _little_endian(array("Q", packed))
        offsets, sizes = numbers[0::2], numbers[1::2]
        if (
            type(keys) is not list
            or not keys
            or len(numbers) != 2 * len(keys)
            or keys[0] != index.first_keys[number]
            or (upper is not None and keys[-1] >= upper)
            or keys != sorted(keys)
            or not _all_end_by(offsets, sizes, index.end)
        ):
            return None
    except (ValueError, TypeError, ormsgpack.MsgpackDecodeError):
        return None
    return keys, offsets, sizes


def _all_end_by(offsets: Sequence[int], sizes: Sequence[int], limit: int) -> bool:
    """Whether every ``offset + size`` is at most ``limit``: the sum of the two maximums
    bounds them all, and settles it unless it is past ``limit``."""
    if max(offsets) + max(sizes) <= limit:
        return True
    return max(map(operator.add, offsets, sizes)) <= limit


def _reader(data: bytes | Callable[[int, int], bytes]) -> Callable[[int, int], bytes]:
    if callable(data):
        return data
    return lambda size, offset: data[offset : offset + size]


def _little_endian(numbers: array[int]) -> array[int]:
    """``numbers`` with their bytes in little-endian order (swapped in place if needed)."""
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers
