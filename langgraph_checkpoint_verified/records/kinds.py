"""What is inside each kind of record, and how to check it once decoded.

Pure functions over ``Codec``: structures in, bytes out, and back. A record
that verifies but does not have the expected shape is still damage (a
``RecordDamagedError``), never a ``KeyError`` from deep inside the saver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph_checkpoint_verified.errors import NewerFormatError, RecordDamagedError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import Codec, RecordKind, pack, unpack

CONTENT_VERSION = 1
VALUE_FULL = 0
"""Encoding of a channel value stored whole."""
VALUE_EXTEND = 1
"""Encoding of a list stored as the items it gained since a base value (see ``records.values``)."""
VALUE_WINDOW = 2
"""Encoding of a list stored as a base value less its first items, plus the items it gained:
a window that slides (``trim_messages``, ``RemoveMessage`` of the oldest messages)."""
_KNOWN_ENCODINGS = (VALUE_FULL, VALUE_EXTEND, VALUE_WINDOW)

EMPTY_TYPE = "empty"
"""Serializer type tag of a channel that has a version but no value."""

Typed = tuple[str, bytes]


@dataclass(frozen=True)
class StoredValue:
    """One channel value as a checkpoint record holds it.

    Attributes:
        version: The channel version it is the value of.
        encoding: ``VALUE_FULL``, ``VALUE_EXTEND`` or ``VALUE_WINDOW``.
        typed: The serialized value, or for the other two the items appended.
        base: For ``VALUE_EXTEND`` and ``VALUE_WINDOW``: (checkpoint id of the
            record holding the base value, the base's version, how many items the
            base has).
        start: For ``VALUE_WINDOW``: how many of the base's first items the value
            leaves out (at least 1); 0 otherwise.
    """

    version: Any
    encoding: int
    typed: Typed
    base: tuple[str, Any, int] | None = None
    start: int = 0


@dataclass
class CheckpointRecord:
    """A decoded checkpoint record.

    Attributes:
        thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id: Its identity.
        checkpoint: The serialized checkpoint without ``channel_values``.
        metadata: The serialized metadata.
        values: Channel values stored in this record, by channel.
        refs: For every channel of the checkpoint: (version, id of the checkpoint
            whose record holds the value).
        since_full: How many checkpoints up the parent chain the nearest one is
            that holds all of its own values (0: this one does).
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: Typed
    metadata: Typed
    values: dict[str, StoredValue]
    refs: dict[str, tuple[Any, str]]
    since_full: int = 0

    def identity(self) -> dict[str, str]:
        return checkpoint_identity(
            self.thread_id, self.checkpoint_ns, self.checkpoint_id, self.parent_checkpoint_id
        )


def checkpoint_identity(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str, parent_checkpoint_id: str | None
) -> dict[str, str]:
    return {
        "thread_id": thread_id,
        "checkpoint_ns": checkpoint_ns,
        "checkpoint_id": checkpoint_id,
        "parent_checkpoint_id": parent_checkpoint_id or "",
    }


def encode_checkpoint(
    codec: Codec, record: CheckpointRecord, *, uncompressed_below: int = 0
) -> bytes:
    content = {
        "v": CONTENT_VERSION,
        "checkpoint": list(record.checkpoint),
        "metadata": list(record.metadata),
        "values": {ch: _pack_value(stored) for ch, stored in record.values.items()},
        "refs": {ch: [version, holder] for ch, (version, holder) in record.refs.items()},
        "since_full": record.since_full,
    }
    return codec.encode(
        RecordKind.CHECKPOINT,
        record.identity(),
        pack(content),
        uncompressed_below=uncompressed_below,
    )


def decode_checkpoint(
    codec: Codec, data: bytes, expected: dict[str, str] | None = None
) -> CheckpointRecord:
    header, content = codec.decode_with_header(data, RecordKind.CHECKPOINT)
    identity = header.identity
    if expected is not None:
        for field, value in expected.items():
            if identity.get(field) != value:
                raise RecordDamagedError(
                    f"identity mismatch on {field}: expected {value!r},"
                    f" found {identity.get(field)!r}"
                )
    body = unpack(content)
    try:
        if body["v"] != CONTENT_VERSION:
            if type(body["v"]) is int and body["v"] > CONTENT_VERSION:
                raise NewerFormatError(f"checkpoint content version {body['v']}")
            raise RecordDamagedError(f"unknown checkpoint content version {body['v']!r}")
        values = {_str(ch): _unpack_value(packed) for ch, packed in body["values"].items()}
        return CheckpointRecord(
            thread_id=identity["thread_id"],
            checkpoint_ns=identity["checkpoint_ns"],
            checkpoint_id=identity["checkpoint_id"],
            parent_checkpoint_id=identity["parent_checkpoint_id"] or None,
            checkpoint=_typed(body["checkpoint"]),
            metadata=_typed(body["metadata"]),
            values=values,
            refs={
                _str(ch): (version, _str(holder)) for ch, (version, holder) in body["refs"].items()
            },
            since_full=int(body.get("since_full", 0)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RecordDamagedError(f"checkpoint content has an unexpected shape: {exc!r}") from None


def _pack_value(stored: StoredValue) -> list[Any]:
    packed = [stored.version, stored.encoding, stored.typed[0], stored.typed[1]]
    if stored.base is not None:
        packed.extend(stored.base)
    if stored.encoding == VALUE_WINDOW:
        packed.append(stored.start)
    return packed


def _unpack_value(packed: Any) -> StoredValue:
    version, encoding, type_, blob, *base = packed
    typed = (_str(type_), _bytes(blob))
    if encoding == VALUE_FULL and not base:
        return StoredValue(version, VALUE_FULL, typed)
    if encoding == VALUE_EXTEND and len(base) == 3:
        holder, base_version, count = base
        return StoredValue(
            version, VALUE_EXTEND, typed, (_str(holder), base_version, _count(count))
        )
    if encoding == VALUE_WINDOW and len(base) == 4:
        holder, base_version, count, start = base
        if _count(start) == 0 or start > _count(count):
            raise ValueError(f"window start {start!r} in a base of {count!r} items")
        return StoredValue(
            version, VALUE_WINDOW, typed, (_str(holder), base_version, count), start=start
        )
    if type(encoding) is int and encoding not in _KNOWN_ENCODINGS and encoding > 0:
        # the record verified: a writer that knows more encodings than this reader
        raise NewerFormatError(f"value encoding {encoding}")
    raise RecordDamagedError(f"value encoding {encoding} with {len(base)} base fields is unknown")


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"item count {value!r}")
    return value


@dataclass
class WritesRecord:
    """One batch of pending writes of one task (one ``put_writes`` call, or one special write)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    slot: str
    task_path: str
    writes: list[tuple[int, str, Typed]]

    def identity(self) -> dict[str, str]:
        return writes_identity(
            self.thread_id, self.checkpoint_ns, self.checkpoint_id, self.task_id, self.slot
        )


def writes_identity(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str, slot: str
) -> dict[str, str]:
    return {
        "thread_id": thread_id,
        "checkpoint_ns": checkpoint_ns,
        "checkpoint_id": checkpoint_id,
        "task_id": task_id,
        "slot": slot,
    }


def encode_writes(codec: Codec, record: WritesRecord, *, uncompressed_below: int = 0) -> bytes:
    content = {
        "v": CONTENT_VERSION,
        "task_path": record.task_path,
        "writes": [[idx, ch, typed[0], typed[1]] for idx, ch, typed in record.writes],
    }
    return codec.encode(
        RecordKind.WRITES, record.identity(), pack(content), uncompressed_below=uncompressed_below
    )


def decode_writes(codec: Codec, data: bytes, expected: dict[str, str]) -> WritesRecord:
    header, content = codec.decode_with_header(data, RecordKind.WRITES)
    identity = header.identity
    for field, value in expected.items():
        if identity.get(field) != value:
            raise RecordDamagedError(
                f"identity mismatch on {field}: expected {value!r}, found {identity.get(field)!r}"
            )
    body = unpack(content)
    try:
        return WritesRecord(
            thread_id=identity["thread_id"],
            checkpoint_ns=identity["checkpoint_ns"],
            checkpoint_id=identity["checkpoint_id"],
            task_id=identity["task_id"],
            slot=identity["slot"],
            task_path=_str(body["task_path"]),
            writes=[
                (int(idx), _str(ch), (_str(type_), _bytes(blob)))
                for idx, ch, type_, blob in body["writes"]
            ],
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # int(inf): Overflow
        raise RecordDamagedError(f"writes content has an unexpected shape: {exc!r}") from None


def pack_typed(typed: Typed) -> bytes:
    """Content of a tool record: one serialized value."""
    return pack({"v": CONTENT_VERSION, "type": typed[0], "data": typed[1]})


def unpack_typed(content: bytes) -> Typed:
    body = unpack(content)
    try:
        return _str(body["type"]), _bytes(body["data"])
    except (KeyError, TypeError) as exc:
        raise RecordDamagedError(f"tool record has an unexpected shape: {exc!r}") from None


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected str, found {type(value).__name__}")
    return value


def _bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"expected bytes, found {type(value).__name__}")
    return value


def _typed(value: Any) -> Typed:
    type_, blob = value
    return _str(type_), _bytes(blob)


def canonical_key(kind: RecordKind, identity: dict[str, str]) -> str:
    """Where a record with this identity must live; anywhere else it is misplaced."""
    try:
        if kind is RecordKind.CHECKPOINT:
            return keys.checkpoint_key(
                identity["thread_id"], identity["checkpoint_ns"], identity["checkpoint_id"]
            )
        if kind is RecordKind.WRITES:
            return keys.writes_key(
                identity["thread_id"],
                identity["checkpoint_ns"],
                identity["checkpoint_id"],
                identity["task_id"],
                identity["slot"],
            )
        if kind in (RecordKind.TOOL_RESULT, RecordKind.TOOL_INTENT):
            return keys.tool_record_key(
                identity["thread_id"],
                identity["checkpoint_ns"],
                identity["tool_call_id"],
                "result" if kind is RecordKind.TOOL_RESULT else "intent",
            )
    except KeyError as exc:
        raise RecordDamagedError(f"identity lacks {exc.args[0]!r}") from None
    raise RecordDamagedError(f"a {kind.name} record does not belong under threads/")
