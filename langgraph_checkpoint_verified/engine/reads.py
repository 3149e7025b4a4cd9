"""Reading verified records: a checkpoint with its values, its pending writes, and names.

Everything a read needs below LangGraph's contract: the record of a checkpoint
(verified, or the one decoded from these very bytes before), each channel's
value from the record holding it and the chain of records it extends, the
pending writes recorded for the checkpoint, and the ids and namespaces of a
thread, from the names of its records (a record's header only for a name too
long to hold its id). Damage is reported to the ``DamageReporter`` and raised
as ``Unusable``; what to return instead (a fallback, ``None``, an error in
strict mode) is the saver's to decide.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from langgraph.checkpoint.base import SerializerProtocol, writes_sort_key

from langgraph_checkpoint_verified.engine.damage import DamageReporter
from langgraph_checkpoint_verified.engine.decoded_values import DecodedValues
from langgraph_checkpoint_verified.engine.record_cache import RecordCache
from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import Codec, RecordKind
from langgraph_checkpoint_verified.records.kinds import (
    VALUE_FULL,
    CheckpointRecord,
    StoredValue,
    Typed,
    WritesRecord,
    decode_checkpoint,
    decode_writes,
)
from langgraph_checkpoint_verified.records.values import (
    PartsCache,
    ValueParts,
    ValueUnavailable,
    value_parts,
)
from langgraph_checkpoint_verified.storage.base import Storage

PARENT_UNKNOWN = "\0unknown"
"""``Unusable.parent`` when nothing trustworthy says who the parent was."""


class Unusable(Exception):
    """Internal: a checkpoint cannot be returned (its record or a dependency is bad).

    ``parent`` is its parent's id as a verified header says it (``None``: it has
    none), or ``PARENT_UNKNOWN``.
    """

    def __init__(self, reason: str, *, parent: str | None = PARENT_UNKNOWN) -> None:
        super().__init__(reason)
        self.reason = reason
        self.parent = parent


_MAINTENANCE_RETRIES = 8
"""Reads again of a checkpoint that prune or delete_for_runs rewrote under the reader."""
_FALLBACK_BATCH = 16
"""Checkpoint names asked for at once past the newest (then four times as many, and so on)."""


def _identity(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> dict[str, str]:
    """The identity fields a checkpoint's record must carry."""
    return {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}


class RecordReader:
    """Reads and verifies a store's records for one saver.

    Args:
        storage: Where the records are.
        codec: Verifies and decodes a record's bytes.
        reporter: Told of every damaged or unreadable record.
        records: Records decoded before, reused while their bytes are unchanged.
        parts: The serialized parts of list values read or written before.
        decoded: Values deserialized before, handed out as copies.
    """

    def __init__(
        self,
        storage: Storage,
        codec: Codec,
        reporter: DamageReporter,
        records: RecordCache,
        parts: PartsCache,
        decoded: DecodedValues,
    ) -> None:
        self.storage = storage
        self.codec = codec
        self.reporter = reporter
        self.records = records
        self.parts = parts
        self.decoded = decoded

    def read_with_values(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, holders: dict[str, Any]
    ) -> tuple[CheckpointRecord, dict[str, ValueParts]] | None:
        """A checkpoint's record and every channel's serialized value; ``None`` if absent."""
        key = keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
        attempts_left = _MAINTENANCE_RETRIES
        while True:
            found = self._read_checkpoint_data(key, thread_id, checkpoint_ns, checkpoint_id)
            if found is None:
                return None
            record, data = found
            try:
                return record, self._resolve_values(record, holders)
            except Unusable as unusable:
                # prune and delete_for_runs rewrite a checkpoint to hold its values
                # itself, then remove the records it used to refer to: a reader that
                # read it before the rewrite finds a holder gone. That is not damage:
                # read it again, as it is now.
                if attempts_left and self._bytes_now(key) != data:
                    attempts_left -= 1
                    holders.clear()
                    continue
                # this record verified: its parent is known even though a value is not
                raise Unusable(unusable.reason, parent=record.parent_checkpoint_id) from None

    def _bytes_now(self, key: str) -> bytes | None:
        try:
            return self.storage.read(key)
        except OSError:
            return None

    def read_checkpoint(
        self,
        key: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        stamp: Hashable | None = None,
    ) -> CheckpointRecord | None:
        """The verified record at ``key`` (shared: never change it), ``None`` if absent.

        ``stamp``: the key's storage stamp, if the caller took it before this read.
        """
        found = self._read_checkpoint_data(key, thread_id, checkpoint_ns, checkpoint_id, stamp)
        return None if found is None else found[0]

    def _read_checkpoint_data(
        self,
        key: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        stamp: Hashable | None = None,
    ) -> tuple[CheckpointRecord, bytes] | None:
        """``read_checkpoint``, with the bytes the record was read from."""
        data = self._read(key)
        if data is None:
            return None
        cached = self.records.record((thread_id, checkpoint_ns, checkpoint_id), data)
        if cached is not None:
            return cached, data
        try:
            record = decode_checkpoint(
                self.codec, data, _identity(thread_id, checkpoint_ns, checkpoint_id)
            )
        except RecordDamagedError as exc:
            raise self._unusable(key, exc, data, checkpoint_id) from None
        # a record rewritten between the stamp and the read is kept under the old
        # stamp, which no later read matches
        self.records.remember(record, data, stamp)
        return record, data

    def checkpoint_verifies(
        self, key: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> bool:
        """Whether the checkpoint record at ``key`` is there and verifies on its own
        (frame, digests, identity, a payload that decompresses); ``Unusable`` if not.

        What a summary counting a thread's checkpoints needs: ``read_checkpoint``
        without the parse of the record's content (its metadata, refs and values),
        and nothing kept. The content of a record whose digests verify is what its
        writer wrote; a read still parses it, and ``verify`` checks it.
        """
        data = self._read(key)
        if data is None:
            return False
        if self.records.record((thread_id, checkpoint_ns, checkpoint_id), data) is not None:
            return True
        try:
            self.codec.decode_with_header(
                data, RecordKind.CHECKPOINT, _identity(thread_id, checkpoint_ns, checkpoint_id)
            )
        except RecordDamagedError as exc:
            raise self._unusable(key, exc, data, checkpoint_id) from None
        return True

    def _unusable(
        self, key: str, error: RecordDamagedError, data: bytes, checkpoint_id: str
    ) -> Unusable:
        """Report the damaged checkpoint record at ``key``; the ``Unusable`` to raise."""
        damage = self.reporter.damaged(key, error, data)
        identity = damage.identity or {}
        # a header that verifies and is this checkpoint's still names its parent
        parent = (
            identity.get("parent_checkpoint_id") or None
            if identity.get("checkpoint_id") == checkpoint_id
            else PARENT_UNKNOWN
        )
        return Unusable(error.reason, parent=parent)

    def _read(self, key: str) -> bytes | None:
        try:
            return self.storage.read(key)
        except OSError as exc:
            # unreadable (EIO, EACCES): as unusable as damage, but not ours to move
            self.reporter.unreadable(key, exc)
            raise Unusable(f"cannot read {key}: {exc}") from None

    def _resolve_values(
        self, record: CheckpointRecord, holders: dict[str, Any]
    ) -> dict[str, ValueParts]:
        """Every channel's serialized value, from this record or the records holding them."""
        return {channel: self.resolve(record, channel, holders) for channel in record.refs}

    def resolve(
        self, record: CheckpointRecord, channel: str, holders: dict[str, Any]
    ) -> ValueParts:
        """A channel's serialized value parts (``records.values.value_parts``), or ``Unusable``."""
        version, holder_id = record.refs[channel]
        if holder_id == record.checkpoint_id:
            stored = record.values.get(channel)
        else:
            stored = self._holder_values(record, holder_id, holders).get(channel)
        if stored is None or stored.version != version:
            raise Unusable(
                f"value of channel {channel!r} at version {version!r} is missing from "
                f"checkpoint {holder_id}"
            )
        if stored.encoding == VALUE_FULL:
            return [(stored.typed, None, 0)]
        where = (record.thread_id, record.checkpoint_ns, channel)
        known = self.parts.get(where, holder_id, version)
        if known is not None:
            return known  # read (or written) before: its chain is not walked again
        try:
            parts = value_parts(
                record,
                channel,
                stored,
                lambda base_id: self._holder_values(record, base_id, holders),
                lambda base_id, base_version: self.parts.get(where, base_id, base_version),
                lambda found: self.parts.keep_bases(where, found),
            )
        except ValueUnavailable as unavailable:
            raise Unusable(unavailable.reason) from None
        self.parts.put(where, holder_id, version, parts)
        return parts

    def _holder_values(
        self, record: CheckpointRecord, holder_id: str, holders: dict[str, Any]
    ) -> dict[str, StoredValue]:
        cached = holders.get(holder_id)
        if isinstance(cached, Unusable):
            raise cached
        if cached is not None:
            return cached
        key = keys.checkpoint_key(record.thread_id, record.checkpoint_ns, holder_id)
        try:
            holder = self.read_checkpoint(key, record.thread_id, record.checkpoint_ns, holder_id)
            if holder is None:
                raise Unusable(
                    f"channel values are stored in checkpoint {holder_id}, which is missing"
                )
        except Unusable as unusable:
            dependency = Unusable(f"depends on checkpoint {holder_id}: {unusable.reason}")
            holders[holder_id] = dependency
            raise dependency from None
        if len(holders) > 256:
            holders.clear()
        holders[holder_id] = holder.values
        return holder.values

    def pending_writes(
        self, serde: SerializerProtocol, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[tuple[str, str, Any]]:
        """The checkpoint's pending writes, in LangGraph's order; damaged batches left out."""
        return [
            (task_id, channel, serde.loads_typed(typed))
            for task_id, channel, typed in self.pending_write_parts(
                thread_id, checkpoint_ns, checkpoint_id
            )
        ]

    def pending_write_parts(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        sources: list[tuple[str, bytes]] | None = None,
    ) -> list[tuple[str, str, Typed]]:
        """``pending_writes``, each value still serialized. ``sources``, when given,
        receives ``(key, bytes)`` of each record they were read from."""
        prefix = keys.writes_prefix(thread_id, checkpoint_ns, checkpoint_id)
        found: list[tuple[tuple[str, str, int], tuple[str, str, Typed]]] = []
        for name in self.storage.list(prefix):
            key = f"{prefix}/{name}"
            record = self.read_writes(key, thread_id, checkpoint_ns, checkpoint_id, sources=sources)
            if record is None:
                continue
            for idx, channel, typed in record.writes:
                found.append(
                    (
                        writes_sort_key(record.task_path, record.task_id, idx),
                        (record.task_id, channel, typed),
                    )
                )
        found.sort(key=lambda item: item[0])
        return [write for _, write in found]

    def read_writes(
        self,
        key: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        *,
        dropped: list[tuple[str, str]] | None = None,
        sources: list[tuple[str, bytes]] | None = None,
    ) -> WritesRecord | None:
        """The writes record at ``key``; ``None`` if absent, damaged or unreadable.

        ``dropped``, when given, receives ``(key, reason)`` for each record left
        out because it is damaged or unreadable, so a caller that cannot do
        without it (the delta-channel walk) can tell it from one never written.
        ``sources``, when given, receives ``(key, bytes)`` of the record returned.
        """
        try:
            data = self.storage.read(key)
        except OSError as exc:
            self.reporter.unreadable(key, exc)  # left out, like damage: only that task reruns
            if dropped is not None:
                dropped.append((key, f"cannot read: {exc}"))
            return None
        if data is None:
            return None
        try:
            record = decode_writes(
                self.codec,
                data,
                {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": checkpoint_id,
                },
            )
            expected_key = keys.writes_key(
                thread_id, checkpoint_ns, checkpoint_id, record.task_id, record.slot
            )
            if expected_key != key:
                raise RecordDamagedError(
                    f"record belongs at {expected_key}, found at {key} (moved or swapped)"
                )
        except RecordDamagedError as exc:
            # a damaged batch is left out: only that task runs again
            self.reporter.damaged(key, exc, data)
            if dropped is not None:
                dropped.append((key, exc.reason))
            return None
        if sources is not None:
            sources.append((key, data))
        return record

    def newest_first(self, thread_id: str, checkpoint_ns: str) -> Iterator[str]:
        """Checkpoint ids of one namespace, newest first, listing no more of them than
        asked for (past the newest, a fallback) where the store can."""
        prefix = keys.checkpoints_prefix(thread_id, checkpoint_ns)
        greatest = self.storage.greatest_name(prefix)
        # An id LangGraph makes is its own name, and a name with no escape in it is
        # greater than every name of a smaller id: that name is the newest checkpoint.
        newest = keys.checkpoint_id_of(greatest) if greatest and "~" not in greatest else None
        if newest is None:
            yield from _newest_first_of(self._unsorted_checkpoint_ids(thread_id, checkpoint_ns))
            return
        yield newest
        # a fallback: the next newest, a few names at a time (most damage is at the end:
        # a torn tail, the last writes before a crash), every id once names fail to say
        yielded = {newest}
        count = _FALLBACK_BATCH
        while True:
            names = self.storage.greatest_names(prefix, count)
            ids, others = keys.split_checkpoint_names(names)
            if others or any(len(i) != len(newest) for i in ids):
                break  # ids of plain names of one length sort as their names do, only
            for checkpoint_id in ids:
                if checkpoint_id not in yielded:
                    yielded.add(checkpoint_id)
                    yield checkpoint_id
            if len(names) != count:
                return  # every name: fewer than asked for, or a store that lists them all
            count *= 4
        yield from (i for i in self.checkpoint_ids(thread_id, checkpoint_ns) if i not in yielded)

    def checkpoint_ids(self, thread_id: str, checkpoint_ns: str) -> list[str]:
        """Checkpoint ids of one namespace, newest first, from names alone (no file is read)."""
        ids = self._unsorted_checkpoint_ids(thread_id, checkpoint_ns)
        ids.sort(reverse=True)
        return ids

    def _unsorted_checkpoint_ids(self, thread_id: str, checkpoint_ns: str) -> list[str]:
        prefix = keys.checkpoints_prefix(thread_id, checkpoint_ns)
        ids, others = keys.split_checkpoint_names(self.storage.list(prefix))
        for name in others:
            checkpoint_id = keys.checkpoint_id_of(name)
            if checkpoint_id is None and name.endswith(keys.CHECKPOINT_SUFFIX):
                checkpoint_id = self._id_from_header(f"{prefix}/{name}")
            if checkpoint_id is not None:
                ids.append(checkpoint_id)
        return ids

    def _id_from_header(self, key: str) -> str | None:
        # long ids are stored under a hashed name; the record's header says which id it is
        try:
            data = self.storage.read(key)
        except OSError as exc:
            self.reporter.unreadable(key, exc)
            return None
        if data is None:
            return None
        try:
            return self.codec.read_header(data).identity.get("checkpoint_id")
        except RecordDamagedError as exc:
            self.reporter.damaged(key, exc, data)
            return None

    def thread_checkpoints(
        self, thread_id: str, checkpoint_ns: str | None
    ) -> list[tuple[str, str]]:
        namespaces = [checkpoint_ns] if checkpoint_ns is not None else self.namespaces(thread_id)
        pairs = [(cid, ns) for ns in namespaces for cid in self.checkpoint_ids(thread_id, ns)]
        pairs.sort(key=lambda pair: pair[0], reverse=True)
        return pairs

    def namespaces(self, thread_id: str) -> list[str]:
        prefix = keys.namespaces_prefix(thread_id)
        namespaces = []
        for name in self.storage.list(prefix):
            ns = keys.decode_segment(name)
            if ns is None:
                ns = self._identity_field_under(f"{prefix}/{name}", "checkpoint_ns")
            if ns is not None:
                namespaces.append(ns)
        return sorted(namespaces)

    def thread_ids(self) -> list[str]:
        thread_ids = []
        for name in self.storage.list("threads"):
            thread_id = keys.decode_segment(name)
            if thread_id is None:
                thread_id = self._identity_field_under(f"threads/{name}", "thread_id")
            if thread_id is not None:
                thread_ids.append(thread_id)
        return sorted(thread_ids)

    def _identity_field_under(self, prefix: str, field: str) -> str | None:
        for key in self.storage.walk(prefix):
            try:
                data = self.storage.read(key)
            except OSError as exc:
                self.reporter.unreadable(key, exc)
                continue
            if data is None:
                continue
            try:
                return self.codec.read_header(data).identity[field]
            except (RecordDamagedError, KeyError):
                continue
        return None


def _newest_first_of(ids: list[str]) -> Iterator[str]:
    """``ids`` newest first (as ``sorted(ids, reverse=True)``), sorting only if asked for more
    than the newest: a read of the latest checkpoint rarely needs a second one, and
    sorting a long thread's ids cost more than reading its newest record.

    Example:
        >>> list(_newest_first_of(["b", "c", "a", "c"]))
        ['c', 'c', 'b', 'a']
    """
    if not ids:
        return
    yield max(ids)
    yield from sorted(ids, reverse=True)[1:]
