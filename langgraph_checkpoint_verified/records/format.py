"""The record frame: bytes in, bytes out. No files, no savers.

Every stored thing is one self-describing, self-checking record::

    offset  size  field
    0       4     magic            b"LGCV"
    4       1     format version   1
    5       1     record kind      see ``RecordKind``
    6       1     flags            bit 0: digests are keyed (BLAKE2b MAC);
                                   bit 1: the payload is the content, not compressed
    7       1     reserved         0
    8       4     identity length  u32 little-endian
    12      8     payload length   u64 little-endian (compressed bytes)
    20      8     content length   u64 little-endian (bytes after decompression)
    28      I     identity         msgpack map of strings (what and whose)
    28+I    16    header digest    BLAKE2b-128 over bytes [0, 28+I)
    44+I    P     payload          one zstd frame with its content checksum on,
                                   or (bit 1) the content itself: then P equals U
    44+I+P  32    record digest    BLAKE2b-256 over bytes [0, 44+I+P)

The header digest lets a reader trust the identity (and so say what a damaged
record was) even when its payload is damaged. The record digest covers
everything. Both are checked, and the identity compared with what the caller
expected, before a single byte is decompressed or deserialized. With a key
both digests are keyed BLAKE2b, i.e. MACs: records not written with the key
are rejected.

A small record's content is stored as it is (flag bit 1): compressing a few
hundred bytes costs more time than the bytes it saves are worth, and the two
digests verify a stored payload whether or not it is compressed. Which
records are small enough is the writer's choice (``Codec.encode``'s
``uncompressed_below``); every reader reads both.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import hmac
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ormsgpack
import zstandard

from langgraph_checkpoint_verified.errors import RecordDamagedError

MAGIC = b"LGCV"
ENTRY_MAGIC = b"LGCE"
"""The magic of a log entry (``storage.log.entries``), which frames a record in a thread's log."""
FORMAT_VERSION = 1
FLAG_KEYED = 0x01
FLAG_UNCOMPRESSED = 0x02
"""The payload is the content itself (``P == U``), not a zstd frame."""
_KNOWN_FLAGS = FLAG_KEYED | FLAG_UNCOMPRESSED

_FIXED = struct.Struct("<4sBBBBIQQ")
HEADER_SIZE = _FIXED.size  # 28
HEADER_DIGEST_SIZE = 16
RECORD_DIGEST_SIZE = 32
MIN_RECORD_SIZE = HEADER_SIZE + HEADER_DIGEST_SIZE + RECORD_DIGEST_SIZE

MAX_IDENTITY_SIZE = 1 << 20
# A declared size above this is damage, not data: it is refused before any
# buffer of that size is allocated.
DEFAULT_MAX_CONTENT_SIZE = 1 << 31

DEFAULT_COMPRESSION_LEVEL = 3


class RecordKind(enum.IntEnum):
    """What a record holds. The value is the byte stored at offset 5."""

    CHECKPOINT = 1
    WRITES = 2
    TOOL_RESULT = 3
    TOOL_INTENT = 4
    QUARANTINE_REASON = 5
    STORE_MARKER = 6
    CACHE_ENTRY = 7
    STORE_ITEM = 8
    STORE_TOUCH = 9
    STORE_BATCH = 10
    QUARANTINE_REASONS = 11


@dataclass(frozen=True)
class Header:
    """The verified head of a record: its kind and identity."""

    kind: RecordKind
    identity: dict[str, str]
    keyed: bool


@functools.lru_cache(maxsize=8)
def _compression_parameters(level: int) -> zstandard.ZstdCompressionParameters:
    """zstd's parameters for ``level`` (immutable, shared by every codec of that level)."""
    return zstandard.ZstdCompressionParameters.from_level(
        level, write_checksum=True, write_content_size=True
    )


_COMPRESSORS: dict[int, list[zstandard.ZstdCompressor]] = {}
_DECOMPRESSORS: list[zstandard.ZstdDecompressor] = []
"""zstd contexts, shared by every codec of the process. A context is not thread-safe,
and making one costs more than a small record (~14 µs a compressor, ~13 µs a
decompressor): each call takes one from its pool and gives it back. They are pooled,
not kept per thread, as LangGraph runs saver calls on executor threads that live for
one invoke, nor per codec, as a server opens a saver (and so a codec) per request.
A context keeps no data between calls, only its parameters: compressors are pooled
by level, decompressors all together. ``list.pop`` and ``list.append`` are atomic:
no lock is needed to share a pool."""


def _compressor_pool(level: int) -> list[zstandard.ZstdCompressor]:
    return _COMPRESSORS.setdefault(level, [])


class Codec:
    """Encodes and decodes records; holds the optional key and zstd settings.

    Args:
        key: Secret bytes. When given, both digests are keyed BLAKE2b MACs and
            records written without this key fail verification.
        compression_level: zstd level for new records.
        max_content_size: Largest decompressed payload accepted, in bytes.

    Example:
        >>> codec = Codec()
        >>> frame = codec.encode(RecordKind.WRITES, {"thread_id": "t"}, b"hello")
        >>> codec.decode(frame, RecordKind.WRITES, {"thread_id": "t"})
        b'hello'
    """

    def __init__(
        self,
        key: bytes | None = None,
        *,
        compression_level: int = DEFAULT_COMPRESSION_LEVEL,
        max_content_size: int = DEFAULT_MAX_CONTENT_SIZE,
    ) -> None:
        if key is not None and not isinstance(key, (bytes, bytearray)):
            raise TypeError(f"key must be bytes, got {type(key).__name__}")
        if key is not None and not 16 <= len(key) <= 64:
            raise ValueError(f"key must be 16 to 64 bytes long, got {len(key)}")
        self.key = bytes(key) if key is not None else None
        self.compression_level = compression_level
        self.max_content_size = max_content_size
        self._compressor_params = _compression_parameters(compression_level)
        self._compressors = _compressor_pool(compression_level)
        self._decompressors = _DECOMPRESSORS
        # A BLAKE2b state with the key and personalization already absorbed:
        # copying it costs less than setting them up again for every digest.
        self._header_hash = hashlib.blake2b(
            digest_size=HEADER_DIGEST_SIZE, key=self.key or b"", person=b"lgcv-header"
        )
        self._record_hash = hashlib.blake2b(
            digest_size=RECORD_DIGEST_SIZE, key=self.key or b"", person=b"lgcv-record"
        )
        # What encoding and verifying cost, counted (not timed): tests pin them down.
        # Threads encoding at once may miss a count.
        self.digests = 0
        """How many digests this codec computed (header and record digests alike)."""
        self.compressions = 0
        """How many payloads this codec compressed with zstd."""

    def _compress(self, content: bytes) -> bytes:
        try:
            compressor = self._compressors.pop()
        except IndexError:
            compressor = zstandard.ZstdCompressor(compression_params=self._compressor_params)
        try:
            self.compressions += 1
            return compressor.compress(content)
        finally:
            self._compressors.append(compressor)

    def _decompress(self, payload: memoryview, content_size: int) -> bytes:
        try:
            decompressor = self._decompressors.pop()
        except IndexError:
            decompressor = zstandard.ZstdDecompressor()
        try:
            return decompressor.decompress(payload, max_output_size=content_size)
        finally:
            self._decompressors.append(decompressor)

    # -- digests ---------------------------------------------------------

    def _header_digest(self, data: bytes | memoryview) -> bytes:
        self.digests += 1
        state = self._header_hash.copy()
        state.update(data)
        return state.digest()

    def _record_digest(self, data: bytes | memoryview) -> bytes:
        self.digests += 1
        state = self._record_hash.copy()
        state.update(data)
        return state.digest()

    # -- encode ----------------------------------------------------------

    def encode(
        self,
        kind: RecordKind,
        identity: Mapping[str, str],
        content: bytes,
        *,
        uncompressed_below: int = 0,
    ) -> bytes:
        """Frame ``content`` as a record of ``kind`` belonging to ``identity``.

        Content shorter than ``uncompressed_below`` bytes is stored as it is
        (flag bit 1) instead of as a zstd frame; it is verified just the same.
        """
        identity_bytes = encode_identity(identity)
        if len(content) < uncompressed_below:
            return self._frame(kind, identity_bytes, content, len(content), compressed=False)
        payload = self._compress(content)
        return self._frame(kind, identity_bytes, payload, len(content))

    def reframe(self, data: bytes, kind: RecordKind, identity: Mapping[str, str]) -> bytes:
        """Give an already verified record a new identity without recompressing.

        Used to copy a record to another thread: the compressed payload is kept,
        the identity and both digests are new.
        """
        _, payload, content_size = self._verified_payload(data, kind, None)
        compressed = not data[6] & FLAG_UNCOMPRESSED
        return self._frame(
            kind, encode_identity(identity), bytes(payload), content_size, compressed=compressed
        )

    def _frame(
        self,
        kind: RecordKind,
        identity_bytes: bytes,
        payload: bytes,
        content_size: int,
        *,
        compressed: bool = True,
    ) -> bytes:
        flags = FLAG_KEYED if self.key else 0
        if not compressed:
            flags |= FLAG_UNCOMPRESSED
        head = _FIXED.pack(
            MAGIC,
            FORMAT_VERSION,
            int(kind),
            flags,
            0,
            len(identity_bytes),
            len(payload),
            content_size,
        )
        head += identity_bytes
        header_digest = self._header_digest(head)
        # the record digest covers head, header digest and payload: hashed in place,
        # so the payload is copied once, into the record
        self.digests += 1
        state = self._record_hash.copy()
        state.update(head)
        state.update(header_digest)
        state.update(payload)
        return b"".join((head, header_digest, payload, state.digest()))

    # -- decode ----------------------------------------------------------

    @staticmethod
    def keyed_flag(data: bytes) -> bool | None:
        """Whether a record claims to be keyed (flag byte), without verifying anything."""
        if len(data) < HEADER_SIZE or data[:4] != MAGIC:
            return None
        return bool(data[6] & FLAG_KEYED)

    @staticmethod
    def decompressed_size(data: bytes) -> int | None:
        """How long a record would be with its payload decompressed, from what its
        header declares (``P`` and ``U``), without verifying anything; ``None`` if it
        does not start as a record.

        Example:
            >>> record = Codec().encode(RecordKind.WRITES, {"k": "v"}, b"a" * 1000)
            >>> len(record) < 200, Codec.decompressed_size(record) - len(record) > 800
            (True, True)
        """
        if len(data) < HEADER_SIZE or data[:4] != MAGIC:
            return None
        *_, payload_size, content_size = _FIXED.unpack_from(data)
        return len(data) - payload_size + content_size

    def read_header(self, data: bytes) -> Header:
        """Verify and return the header alone (magic, kind, identity).

        Succeeds even when the payload is damaged, so a reader can say what a
        damaged record was. Raises ``RecordDamagedError`` otherwise.
        """
        header, _ = self._parse(data, check_record_digest=False)
        return header

    def decode(
        self,
        data: bytes,
        kind: RecordKind,
        expected_identity: Mapping[str, str] | None,
    ) -> bytes:
        """Verify ``data`` completely and return the decompressed content.

        Args:
            data: The record's bytes, exactly as stored.
            kind: The kind the caller expects.
            expected_identity: Fields the record's identity must carry with
                exactly these values; ``None`` skips the identity comparison.

        Raises:
            RecordDamagedError: On any mismatch; the reason says which check failed.
        """
        return self.decode_with_header(data, kind, expected_identity)[1]

    def decode_with_header(
        self,
        data: bytes,
        kind: RecordKind,
        expected_identity: Mapping[str, str] | None = None,
    ) -> tuple[Header, bytes]:
        """Verify ``data`` completely; return its header and decompressed content."""
        header, payload, content_size = self._verified_payload(data, kind, expected_identity)
        if data[6] & FLAG_UNCOMPRESSED:
            return header, bytes(payload)  # its size was checked against U with the flags
        # zstd allocates the size its own frame header declares, whatever
        # max_output_size says: that size must be the one we already bounded.
        try:
            frame_size = zstandard.frame_content_size(payload)
        except zstandard.ZstdError as exc:
            raise RecordDamagedError(f"payload is not a zstd frame: {exc}") from None
        if frame_size != content_size:
            raise RecordDamagedError(
                f"zstd frame declares {frame_size} bytes, header says {content_size}"
            )
        try:
            content = self._decompress(payload, content_size)
        except zstandard.ZstdError as exc:
            raise RecordDamagedError(f"payload does not decompress: {exc}") from None
        if len(content) != content_size:
            raise RecordDamagedError(
                f"payload decompressed to {len(content)} bytes, header says {content_size}"
            )
        return header, content

    def _verified_payload(
        self,
        data: bytes,
        kind: RecordKind,
        expected_identity: Mapping[str, str] | None,
    ) -> tuple[Header, memoryview, int]:
        header, (payload, content_size) = self._parse(data, check_record_digest=True)
        if header.kind is not kind:
            raise RecordDamagedError(
                f"record kind is {header.kind.name}, expected {kind.name}",
                identity=header.identity,
            )
        if expected_identity is not None:
            for field, expected in expected_identity.items():
                found = header.identity.get(field)
                if found != expected:
                    raise RecordDamagedError(
                        f"identity mismatch on {field}: expected {expected!r}, found {found!r}",
                        identity=header.identity,
                    )
        return header, payload, content_size

    def _parse(
        self, data: bytes, *, check_record_digest: bool
    ) -> tuple[Header, tuple[memoryview, int]]:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"record must be bytes, got {type(data).__name__}")
        view = memoryview(data)
        if len(view) < MIN_RECORD_SIZE:
            raise RecordDamagedError(
                f"record is {len(view)} bytes, shorter than the smallest record ({MIN_RECORD_SIZE})"
            )
        magic, version, kind_byte, flags, reserved, identity_size, payload_size, content_size = (
            _FIXED.unpack_from(view, 0)
        )
        if magic == ENTRY_MAGIC:
            # what a key reads back as when its log entry fails its own checksum
            raise RecordDamagedError(
                "its log entry is damaged (entry checksum mismatch): the record in it is not read"
            )
        if magic != MAGIC:
            raise RecordDamagedError(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
        if version != FORMAT_VERSION:
            raise RecordDamagedError(
                f"format version {version} is not supported (this reader knows {FORMAT_VERSION})"
            )
        if reserved != 0 or flags & ~_KNOWN_FLAGS:
            raise RecordDamagedError(f"unknown flags {flags:#x}/{reserved:#x}")
        keyed = bool(flags & FLAG_KEYED)
        if keyed != bool(self.key):
            raise RecordDamagedError(
                "record was written with a key and no key was given"
                if keyed
                else "record was written without a key but a key is required"
            )
        if identity_size > MAX_IDENTITY_SIZE:
            raise RecordDamagedError(f"identity size {identity_size} exceeds {MAX_IDENTITY_SIZE}")
        if content_size > self.max_content_size:
            raise RecordDamagedError(
                f"declared content size {content_size} exceeds the limit {self.max_content_size}"
            )
        if flags & FLAG_UNCOMPRESSED and payload_size != content_size:
            raise RecordDamagedError(
                f"uncompressed payload of {payload_size} bytes, header says {content_size}"
            )
        expected_total = MIN_RECORD_SIZE + identity_size + payload_size
        if len(view) != expected_total:
            raise RecordDamagedError(
                f"record is {len(view)} bytes, header declares {expected_total}"
            )
        header_end = HEADER_SIZE + identity_size
        stored_header_digest = view[header_end : header_end + HEADER_DIGEST_SIZE]
        if not hmac.compare_digest(self._header_digest(view[:header_end]), stored_header_digest):
            raise RecordDamagedError("header checksum mismatch")
        try:
            kind = RecordKind(kind_byte)
        except ValueError:
            raise RecordDamagedError(f"unknown record kind {kind_byte}") from None
        identity = decode_identity(bytes(view[HEADER_SIZE:header_end]))
        header = Header(kind=kind, identity=identity, keyed=keyed)
        payload_start = header_end + HEADER_DIGEST_SIZE
        body_end = payload_start + payload_size
        if check_record_digest and not hmac.compare_digest(
            self._record_digest(view[:body_end]), view[body_end:]
        ):
            raise RecordDamagedError("record checksum mismatch", identity=identity)
        return header, (view[payload_start:body_end], content_size)


def encode_identity(identity: Mapping[str, str]) -> bytes:
    """Identity as msgpack: a map of string to string, keys sorted."""
    for field, value in identity.items():
        if type(field) is not str or type(value) is not str:
            if not isinstance(field, str) or not isinstance(value, str):
                raise TypeError(f"identity fields must be strings, got {field!r}: {value!r}")
            # a str subclass: packed as the plain string it holds
            return encode_identity({str(k): str(v) for k, v in identity.items()})
    # ormsgpack sorts str keys by their UTF-8 bytes, which is code point order: the
    # bytes are those of ``packb(dict(sorted(identity.items())))``
    return ormsgpack.packb(identity, option=ormsgpack.OPT_SORT_KEYS)


def decode_identity(data: bytes) -> dict[str, str]:
    """Inverse of ``encode_identity``; anything else is a ``RecordDamagedError``."""
    try:
        identity = ormsgpack.unpackb(data)
    except Exception as exc:  # ormsgpack raises several types for bad input
        raise RecordDamagedError(f"identity is not valid msgpack: {exc}") from None
    if not isinstance(identity, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in identity.items()
    ):
        raise RecordDamagedError("identity is not a map of strings")
    return identity


def pack(value: Any) -> bytes:
    """Encode a record's content structure (msgpack)."""
    return ormsgpack.packb(value)


def unpack(content: bytes) -> Any:
    """Decode verified content; a structural surprise is still a typed error."""
    try:
        return ormsgpack.unpackb(content)
    except Exception as exc:
        raise RecordDamagedError(f"content is not valid msgpack: {exc}") from None
