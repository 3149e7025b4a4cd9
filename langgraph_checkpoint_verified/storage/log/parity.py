"""The log's redundancy: one XOR parity block per stripe of sixteen 4 KB blocks. Pure.

A log is cut, by file offset, into stripes of ``STRIPE_BLOCKS`` blocks of
``BLOCK_SIZE`` bytes. For every stripe the sidecar ``log.parity`` holds one
record at offset ``stripe * RECORD_SIZE``::

    offset  size  field
    0       4     magic            b"LGCP"
    4       1     version          1
    5       3     reserved         0
    8       8     stripe           u64: which stripe of the log
    16      4     covered          u32: how many bytes of the stripe it covers (<= 65536)
    20      64    block CRCs       16 x u32: CRC-32 of each block's covered bytes
    84      4     header CRC       u32: CRC-32 of bytes [0, 84)
    88      P     parity           XOR of the stripe's 16 blocks, each zero-padded to 4096;
                                   P = min(covered, 4096) (what follows is zeros)

The parity has no checksum of its own: a damaged parity rebuilds a block that
fails the block's CRC, so it is never used wrongly, and a scrub, which reads the
whole stripe, checks the parity against the blocks themselves.

Blocks are aligned to the log's file offsets, as a disk's sectors are, so a
lost 4 KB sector, however many small entries it held, is one lost block of one
stripe, and one flipped bit is one damaged block. A block whose CRC no longer
matches is rebuilt as the parity XOR the stripe's other blocks; the rebuilt
block must match its CRC, and the entries in it must then pass their own
checksums and the records their digests: a rebuild never invents data. Two
damaged blocks in one stripe cannot be rebuilt (the damage is then handled as
it would be without parity).

Everything is over the ``covered`` first bytes of the stripe, zero-padded: a
stripe still being appended to is covered up to where the log ended at its
last append, and what was appended after that (by a writer that crashed before
it updated the record) is simply not covered until the next append.

A record does not name its log file: a store copied elsewhere (``cp -r``, a
backup restored) keeps its redundancy. What keeps a sidecar from ever standing
beside another log than its own is how the two are replaced together
(``FileStorage.compact``: the old sidecar is removed, durably, before the new
log is renamed in).

Example:
    >>> log = bytes(range(256)) * 40                   # 10,240 bytes: 3 blocks, one stripe
    >>> stripe = OpenStripe(0)
    >>> _ = stripe.extend(log[:5000]), stripe.extend(log[5000:])
    >>> record = decode_record(stripe.record(), number=0)
    >>> damaged = bytearray(log); damaged[4100] ^= 1
    >>> healed = rebuild(bytes(damaged), record)
    >>> healed.data == log, healed.blocks
    (True, [1])
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

BLOCK_SIZE = 4096
STRIPE_BLOCKS = 16
STRIPE_SIZE = BLOCK_SIZE * STRIPE_BLOCKS
PARITY_MAGIC = b"LGCP"
PARITY_VERSION = 1
_HEADER = struct.Struct(f"<4sB3xQI{STRIPE_BLOCKS}I")
_HEADER_CRC = struct.Struct("<I")
HEADER_SIZE = _HEADER.size + _HEADER_CRC.size  # 88
RECORD_SIZE = HEADER_SIZE + BLOCK_SIZE
_ZEROS = bytes(BLOCK_SIZE)


def stripe_of(offset: int) -> int:
    """The stripe a log offset lies in."""
    return offset // STRIPE_SIZE


def record_offset(stripe: int) -> int:
    """Where stripe ``stripe``'s record starts in ``log.parity``."""
    return stripe * RECORD_SIZE


@dataclass(frozen=True)
class StripeRecord:
    """One stripe's record, decoded and checked (see the module docstring)."""

    number: int
    covered: int
    block_crcs: tuple[int, ...]
    parity: bytes
    """``BLOCK_SIZE`` bytes."""

    def blocks_covered(self) -> int:
        """How many blocks hold covered bytes."""
        return -(-self.covered // BLOCK_SIZE)


class OpenStripe:
    """The stripe the log's end lies in, kept up to date append by append.

    ``extend`` takes the bytes appended at the stripe's end, across into the
    next stripe if they go on: call it with exactly what follows ``end``.
    """

    def __init__(self, number: int) -> None:
        self.number = number
        self.covered = 0
        self.block_crcs = [0] * STRIPE_BLOCKS
        self._parity = bytearray(BLOCK_SIZE)

    @property
    def end(self) -> int:
        """The log offset this stripe covers up to."""
        return self.number * STRIPE_SIZE + self.covered

    @classmethod
    def from_bytes(cls, number: int, data: bytes | memoryview) -> OpenStripe:
        """The state of stripe ``number`` whose first bytes are ``data``."""
        stripe = cls(number)
        stripe.extend(data)
        return stripe

    def extend(self, data: bytes | memoryview) -> list[OpenStripe]:
        """Take ``data``, appended at ``end``; the stripes it filled come back, and
        ``self`` becomes the stripe the log now ends in (returned last, with them)."""
        done: list[OpenStripe] = []
        view = memoryview(data)
        while view:
            if self.covered == STRIPE_SIZE:
                done.append(self._copy())
                self.__init__(self.number + 1)  # type: ignore[misc]
            in_block = self.covered % BLOCK_SIZE
            whole = min(len(view), STRIPE_SIZE - self.covered) // BLOCK_SIZE
            if in_block == 0 and whole:
                self._extend_blocks(view[: whole * BLOCK_SIZE])
                view = view[whole * BLOCK_SIZE :]
                continue
            take = min(len(view), BLOCK_SIZE - in_block)
            chunk = view[:take]
            # XOR over just the bytes appended (Python integers: one C loop each way)
            region = self._parity[in_block : in_block + take]
            mixed = int.from_bytes(region, "little") ^ int.from_bytes(chunk, "little")
            self._parity[in_block : in_block + take] = mixed.to_bytes(take, "little")
            block = self.covered // BLOCK_SIZE
            self.block_crcs[block] = zlib.crc32(chunk, self.block_crcs[block] if in_block else 0)
            self.covered += take
            view = view[take:]
        return [*done, self]

    def _extend_blocks(self, blocks: memoryview) -> None:
        """Take whole blocks, starting at a block boundary within this stripe (a large
        append): their XOR is folded into the parity once, not block by block."""
        first = self.covered // BLOCK_SIZE
        parity = int.from_bytes(self._parity, "little")
        for number in range(len(blocks) // BLOCK_SIZE):
            block = blocks[number * BLOCK_SIZE : (number + 1) * BLOCK_SIZE]
            parity ^= int.from_bytes(block, "little")
            self.block_crcs[first + number] = zlib.crc32(block)
        self._parity[:] = parity.to_bytes(BLOCK_SIZE, "little")
        self.covered += len(blocks)

    def _copy(self) -> OpenStripe:
        copy = OpenStripe(self.number)
        copy.covered = self.covered
        copy.block_crcs = list(self.block_crcs)
        copy._parity = bytearray(self._parity)
        return copy

    def record(self) -> bytes:
        """This stripe's record, ready to write at ``record_offset``."""
        header = _HEADER.pack(
            PARITY_MAGIC, PARITY_VERSION, self.number, self.covered, *self.block_crcs
        )
        parity = self._parity[: min(self.covered, BLOCK_SIZE)]
        return b"".join((header, _HEADER_CRC.pack(zlib.crc32(header)), parity))


def encode_parity(log: bytes | memoryview) -> bytes:
    """The whole ``log.parity`` of a log holding ``log`` (written beside a compacted log).

    Example:
        >>> parity = encode_parity(b"x" * (STRIPE_SIZE + 10))
        >>> [decode_record(parity[record_offset(n):], n).covered for n in (0, 1)]
        [65536, 10]
    """
    view = memoryview(log)
    records = []
    for start in range(0, len(view), STRIPE_SIZE):
        stripe = OpenStripe.from_bytes(stripe_of(start), view[start : start + STRIPE_SIZE])
        records.append(stripe.record())
    return b"".join(records)


def decode_record(data: bytes | memoryview, number: int) -> StripeRecord | None:
    """Stripe ``number``'s record from its bytes (more may follow); ``None`` when it is
    missing, damaged, or another stripe's."""
    fields = _checked_header(data, number)
    if fields is None:
        return None
    covered, crcs = fields
    size = min(covered, BLOCK_SIZE)
    parity = bytes(data[HEADER_SIZE : HEADER_SIZE + size])
    if len(parity) != size:
        return None
    return StripeRecord(number, covered, crcs, parity + _ZEROS[size:])


def decode_covered(data: bytes | memoryview, number: int) -> int | None:
    """How many bytes of stripe ``number`` its record covers, from the record's first
    ``HEADER_SIZE`` bytes alone (its parity is not needed to say that); ``None`` when
    the header is missing, damaged, or another stripe's.

    Example:
        >>> decode_covered(OpenStripe.from_bytes(3, b"x" * 100).record()[:HEADER_SIZE], 3)
        100
    """
    fields = _checked_header(data, number)
    return None if fields is None else fields[0]


def _checked_header(data: bytes | memoryview, number: int) -> tuple[int, tuple[int, ...]] | None:
    """``(covered, block CRCs)`` of stripe ``number``'s record header, if it verifies."""
    if len(data) < HEADER_SIZE:
        return None
    header = bytes(data[: _HEADER.size])
    (stored,) = _HEADER_CRC.unpack_from(data, _HEADER.size)
    if zlib.crc32(header) != stored:
        return None
    magic, version, stripe, covered, *crcs = _HEADER.unpack(header)
    if (
        magic != PARITY_MAGIC
        or version != PARITY_VERSION
        or stripe != number
        or not 0 < covered <= STRIPE_SIZE
    ):
        return None
    return covered, tuple(crcs)


def damaged_blocks(data: bytes | memoryview, record: StripeRecord) -> list[int]:
    """The blocks of a stripe whose bytes (``data``, from the stripe's start) fail their
    CRC, over what the record covers; a block cut short by the file's end fails too."""
    view = memoryview(data)
    bad = []
    for block in range(record.blocks_covered()):
        start = block * BLOCK_SIZE
        stop = min(start + BLOCK_SIZE, record.covered)
        chunk = view[start:stop]
        if len(chunk) != stop - start or zlib.crc32(chunk) != record.block_crcs[block]:
            bad.append(block)
    return bad


def parity_holds(data: bytes | memoryview, record: StripeRecord) -> bool:
    """Whether the record's parity is the XOR of the stripe's blocks (``data``, from the
    stripe's start, every covered block intact): what a scrub checks the parity by."""
    view = memoryview(data)
    parity = 0
    for start in range(0, record.covered, BLOCK_SIZE):
        parity ^= int.from_bytes(view[start : min(start + BLOCK_SIZE, record.covered)], "little")
    return parity.to_bytes(BLOCK_SIZE, "little") == record.parity


@dataclass(frozen=True)
class Rebuilt:
    """A stripe's bytes with its damaged block rebuilt."""

    data: bytes
    """The stripe's bytes as they were written (as long as the ``data`` given)."""
    blocks: list[int]
    """The blocks that were rebuilt (none if nothing was damaged)."""


def rebuild(data: bytes | memoryview, record: StripeRecord) -> Rebuilt | None:
    """``data`` (a stripe's bytes from its start) with its one damaged block rebuilt;
    ``None`` when two or more blocks are damaged, or the rebuilt block fails its CRC
    (the parity itself is then stale or damaged).
    """
    bad = damaged_blocks(data, record)
    if not bad:
        return Rebuilt(bytes(data), [])
    if len(bad) > 1:
        return None
    (lost,) = bad
    view = memoryview(data)
    parity = int.from_bytes(record.parity, "little")
    for block in range(record.blocks_covered()):
        if block != lost:
            start = block * BLOCK_SIZE
            chunk = view[start : min(start + BLOCK_SIZE, record.covered)]
            parity ^= int.from_bytes(chunk, "little")
    start = lost * BLOCK_SIZE
    size = min(BLOCK_SIZE, record.covered - start)
    lost_bytes = parity.to_bytes(BLOCK_SIZE, "little")[:size]
    if parity >> (8 * size) or zlib.crc32(lost_bytes) != record.block_crcs[lost]:
        return None
    healed = bytearray(data)
    healed[start : start + size] = lost_bytes
    return Rebuilt(bytes(healed), [lost])


__all__ = [
    "BLOCK_SIZE",
    "HEADER_SIZE",
    "RECORD_SIZE",
    "STRIPE_SIZE",
    "OpenStripe",
    "Rebuilt",
    "StripeRecord",
    "damaged_blocks",
    "decode_covered",
    "decode_record",
    "encode_parity",
    "parity_holds",
    "rebuild",
    "record_offset",
    "stripe_of",
]
