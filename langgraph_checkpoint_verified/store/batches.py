"""What one batch of memory changes holds, pure: content in, versions out.

A ``VerifiedStore`` writes each ``batch`` call's changes to the namespaces of one
first label as one record (kind ``STORE_BATCH``, identity ``store_label`` and
``store_batch``, its name), appended to that label's log. The record's content,
msgpack, compressed by the frame with the rest::

    {"v": 1,
     "puts":    [[namespace, key, created_us, updated_us, ttl, expires_at,
                  value_type, value_bytes, {field: float64 bytes}], ...],
     "deletes": [[namespace, key], ...],
     "touches": [[namespace, key, version, expires_at], ...]}

A put's version is ``<batch name>/<its position in puts>``; a touch (a TTL
refreshed by a read) names the version it extends and is ignored by any other.
Within a batch, touches apply first, then deletes, then puts; batches apply in
the order of their names. Compaction writes the live items again as batches of
puts alone (``pack``), their expiry with every touch folded in.

Nothing here reads a file: ``decode_batch`` takes content a codec has verified
and turns any surprise in its shape into ``RecordDamagedError``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records.format import pack, unpack
from langgraph_checkpoint_verified.store.filters import is_number

CONTENT_VERSION = 1
PACK_ITEMS = 256
"""Most items compaction puts in one batch: one damaged batch costs at most this many."""
PACK_BYTES = 256 * 1024
"""Most content bytes (before compression) compaction puts in one batch."""


@dataclass
class ItemVersion:
    """One version of an item, as a batch holds it (its value still serialized).

    Attributes:
        namespace: The item's namespace.
        key: Its key.
        version: ``<batch name>/<position>``: what a touch names.
        created_at: Microseconds since the epoch (kept across updates).
        updated_at: Microseconds since the epoch.
        ttl: Its time to live in minutes, as put; ``None``: it never expires.
        expires_at: Seconds since the epoch (absolute), touches folded in; ``None``: never.
        value: ``(type, bytes)`` of the store's serializer.
        vectors: Its embeddings by field path, as float64 bytes.
        decoded: Filled in by the store.
    """

    namespace: tuple[str, ...]
    key: str
    version: str
    created_at: int
    updated_at: int
    ttl: float | None
    expires_at: float | None
    value: tuple[str, bytes]
    vectors: dict[str, bytes] = field(default_factory=dict)
    decoded: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    """The value deserialized once for filters (never handed out: callers get copies)."""

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


@dataclass(frozen=True)
class Touch:
    """A TTL extended by a read: of ``version`` of an item, to ``expires_at``."""

    namespace: tuple[str, ...]
    key: str
    version: str
    expires_at: float


@dataclass
class Batch:
    """The changes of one batch record, in the order they apply."""

    touches: list[Touch] = field(default_factory=list)
    deletes: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    puts: list[ItemVersion] = field(default_factory=list)


def vector_bytes(vector: Iterable[float]) -> bytes:
    """A vector as a batch stores it: little-endian float64s.

    Example:
        >>> vector_floats(vector_bytes([1.0, -0.5]))
        [1.0, -0.5]
    """
    values = [float(x) for x in vector]
    return struct.pack(f"<{len(values)}d", *values)


def vector_floats(data: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(data) // 8}d", data))


def encode_batch(batch: Batch) -> bytes:
    """The content of a batch record (what the codec frames and compresses).

    Example:
        >>> item = ItemVersion(("u",), "k", "", 1, 2, None, None, ("json", b"{}"))
        >>> decoded = decode_batch("b1", encode_batch(Batch(puts=[item])))
        >>> decoded.puts[0].version, decoded.puts[0].value
        ('b1/0', ('json', b'{}'))
    """
    return pack(
        {
            "v": CONTENT_VERSION,
            "puts": [
                [
                    list(p.namespace),
                    p.key,
                    p.created_at,
                    p.updated_at,
                    p.ttl,
                    p.expires_at,
                    p.value[0],
                    p.value[1],
                    p.vectors,
                ]
                for p in batch.puts
            ],
            "deletes": [[list(namespace), key] for namespace, key in batch.deletes],
            "touches": [[list(t.namespace), t.key, t.version, t.expires_at] for t in batch.touches],
        }
    )


def decode_batch(name: str, content: bytes) -> Batch:
    """The changes in verified ``content`` of the batch ``name``; a surprise is damage."""
    body = unpack(content)
    if not isinstance(body, dict) or body.get("v") != CONTENT_VERSION:
        raise RecordDamagedError("store batch has an unexpected shape or version")
    puts, deletes, touches = body.get("puts"), body.get("deletes"), body.get("touches")
    if not isinstance(puts, list) or not isinstance(deletes, list) or not isinstance(touches, list):
        raise RecordDamagedError("store batch lacks its puts, deletes or touches")
    batch = Batch()
    for row in touches:
        if not isinstance(row, list) or len(row) != 4 or not is_number(row[3]):
            raise RecordDamagedError("store batch holds a malformed touch")
        batch.touches.append(Touch(_labels(row[0]), _text(row[1]), _text(row[2]), float(row[3])))
    for row in deletes:
        if not isinstance(row, list) or len(row) != 2:
            raise RecordDamagedError("store batch holds a malformed delete")
        batch.deletes.append((_labels(row[0]), _text(row[1])))
    for position, row in enumerate(puts):
        batch.puts.append(_put(f"{name}/{position}", row))
    return batch


def pack_items(items: Iterable[ItemVersion]) -> list[list[ItemVersion]]:
    """Live items cut into batches for compaction: at most ``PACK_ITEMS`` items and
    about ``PACK_BYTES`` bytes of values and vectors each, in the order given."""
    packs: list[list[ItemVersion]] = []
    current: list[ItemVersion] = []
    size = 0
    for item in items:
        weight = len(item.value[1]) + sum(len(v) for v in item.vectors.values()) + 64
        if current and (len(current) >= PACK_ITEMS or size + weight > PACK_BYTES):
            packs.append(current)
            current, size = [], 0
        current.append(item)
        size += weight
    if current:
        packs.append(current)
    return packs


def _put(version: str, row: Any) -> ItemVersion:
    if not isinstance(row, list) or len(row) != 9:
        raise RecordDamagedError("store batch holds a malformed put")
    namespace, key, created, updated, ttl, expires_at, type_, blob, vectors = row
    if not isinstance(created, int) or not isinstance(updated, int):
        raise RecordDamagedError("store item times are not integers")
    if (ttl is not None and not is_number(ttl)) or (
        expires_at is not None and not is_number(expires_at)
    ):
        raise RecordDamagedError("store item expiry is not a number")
    if not isinstance(type_, str) or not isinstance(blob, bytes):
        raise RecordDamagedError("store item value is not a (type, bytes) pair")
    if not isinstance(vectors, Mapping) or not all(
        isinstance(path, str) and isinstance(v, bytes) and len(v) % 8 == 0
        for path, v in vectors.items()
    ):
        raise RecordDamagedError("store item vectors are not float64 bytes")
    return ItemVersion(
        namespace=_labels(namespace),
        key=_text(key),
        version=version,
        created_at=created,
        updated_at=updated,
        ttl=ttl,
        expires_at=expires_at,
        value=(type_, blob),
        vectors=dict(vectors),
    )


def _labels(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(p, str) for p in value):
        raise RecordDamagedError("store batch names a namespace that is not a list of strings")
    return tuple(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise RecordDamagedError("store batch holds a key or version that is not a string")
    return value
