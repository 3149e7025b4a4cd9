"""Writing a thread's records: checkpoints that store only what changed, and pending writes.

A checkpoint record holds the values of the channels that changed at its step
and refers to the records holding the others; a list that extends its previous
version is stored as the items it gained (``records.values``). Every record is
one ``Storage.write``: on files, one log entry and one sync.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    SerializerProtocol,
)

from langgraph_checkpoint_verified.engine.reads import RecordReader, Unusable
from langgraph_checkpoint_verified.engine.record_cache import RecordCache
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import Codec
from langgraph_checkpoint_verified.records.kinds import (
    EMPTY_TYPE,
    VALUE_FULL,
    CheckpointRecord,
    StoredValue,
    Typed,
    WritesRecord,
    encode_checkpoint,
    encode_writes,
)
from langgraph_checkpoint_verified.records.values import ListMemory, PartsCache
from langgraph_checkpoint_verified.storage.base import Storage


class CheckpointWriter:
    """Encodes and stores checkpoints and pending writes for one engine.

    Args:
        storage: Where the records go.
        codec: Frames each record.
        reader: Reads a parent's record, and stored writes to merge with.
        records: Told of each checkpoint record written, so reads trust it.
        lists: The last list stored per channel (the next put stores what it gained).
        parts: The serialized parts of lists, kept so reading them back walks no chain.
        full_snapshot_every: Every this many checkpoints along a chain, one holds all its values.
    """

    def __init__(
        self,
        storage: Storage,
        codec: Codec,
        reader: RecordReader,
        records: RecordCache,
        lists: ListMemory,
        parts: PartsCache,
        full_snapshot_every: int,
    ) -> None:
        self.storage = storage
        self.codec = codec
        self.reader = reader
        self.records = records
        self.lists = lists
        self.parts = parts
        self.full_snapshot_every = full_snapshot_every
        # a store may keep small records uncompressed (memory: zstd costs more than it saves)
        self.uncompressed_below: int = getattr(storage, "uncompressed_below", 0)

    # -- checkpoints ---------------------------------------------------------

    def put_checkpoint(
        self,
        serde: SerializerProtocol,
        thread_id: str,
        checkpoint_ns: str,
        parent_id: str | None,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> None:
        """Store a checkpoint durably (the caller holds the thread's lock, shared)."""
        checkpoint_id = checkpoint["id"]
        body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        channel_values: dict[str, Any] = checkpoint.get("channel_values") or {}
        parent = (
            self.parent_record(thread_id, checkpoint_ns, parent_id)
            if parent_id and parent_id != checkpoint_id  # a re-put must not refer to itself
            else None
        )
        full = parent is None or parent.since_full + 1 >= self.full_snapshot_every
        parent_refs = parent.refs if parent is not None else {}
        holders: dict[str, Any] = {}
        values: dict[str, StoredValue] = {}
        refs: dict[str, tuple[Any, str]] = {}
        for channel, version in {**checkpoint["channel_versions"], **new_versions}.items():
            inherited = parent_refs.get(channel)
            if channel in new_versions or inherited is None or inherited[0] != version:
                inherited = None  # a new value, or one the parent does not hold
            if inherited is not None and not full:
                refs[channel] = inherited
                continue
            where = (thread_id, checkpoint_ns, channel)
            if channel in channel_values:
                stored = self.lists.encode(
                    where,
                    version,
                    checkpoint_id,
                    channel_values[channel],
                    parent_refs.get(channel),
                    serde,
                )
                self.reader.decoded.written(serde, stored.typed)
                if type(channel_values[channel]) is list:
                    self._remember_parts(where, checkpoint_id, stored)
            elif inherited is not None:
                # A value the checkpoint has without carrying it in channel_values (a
                # DeltaChannel's last snapshot): a full record copies it from its holder.
                found = self._inherited_value(thread_id, checkpoint_ns, inherited, channel, holders)
                if found is None:
                    refs[channel] = inherited
                    continue  # its holder is unusable: never store a guess in its place
                stored = found
            else:
                self.lists.forget(where)
                stored = StoredValue(version, VALUE_FULL, (EMPTY_TYPE, b""))
            values[channel] = stored
            refs[channel] = (version, checkpoint_id)
        record = CheckpointRecord(
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            parent_checkpoint_id=parent_id,
            checkpoint=serde.dumps_typed(body),
            metadata=serde.dumps_typed(metadata),
            values=values,
            refs=refs,
            since_full=0 if full or parent is None else parent.since_full + 1,
        )
        self.write_checkpoint_record(record)

    def write_checkpoint_record(self, record: CheckpointRecord) -> None:
        """Store a checkpoint record (new or rewritten) and trust it for later reads."""
        key = keys.checkpoint_key(record.thread_id, record.checkpoint_ns, record.checkpoint_id)
        data = encode_checkpoint(self.codec, record, uncompressed_below=self.uncompressed_below)
        self.storage.write(key, data)
        self.records.remember(record, data, self.storage.written_stamp(key))

    def parent_record(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> CheckpointRecord | None:
        """The parent's record (refs and chain position), or ``None`` if it cannot be read.

        ``None`` makes the new checkpoint hold every value itself.
        """
        key = keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
        stamp = self.storage.stamp(key)
        if stamp is None:
            return None
        cached = self.records.summary((thread_id, checkpoint_ns, checkpoint_id), stamp)
        if cached is not None:
            return cached
        try:
            return self.reader.read_checkpoint(key, thread_id, checkpoint_ns, checkpoint_id, stamp)
        except Unusable:
            return None

    def _remember_parts(
        self, where: tuple[str, str, str], holder_id: str, stored: StoredValue
    ) -> None:
        """Keep a list's parts, so that reading it back does not walk its chain."""
        if stored.base is None:
            self.parts.put(where, holder_id, stored.version, [(stored.typed, None, 0)])
            return
        base_id, base_version, base_count = stored.base
        base_parts = self.parts.get(where, base_id, base_version)
        if base_parts is not None:
            part = (stored.typed, base_count, stored.start)
            self.parts.put(where, holder_id, stored.version, [*base_parts, part])

    def _inherited_value(
        self,
        thread_id: str,
        checkpoint_ns: str,
        ref: tuple[Any, str],
        channel: str,
        holders: dict[str, Any],
    ) -> StoredValue | None:
        """The stored value ``ref`` points to, or ``None`` if its holder is unusable."""
        version, holder_id = ref
        if holder_id not in holders:
            key = keys.checkpoint_key(thread_id, checkpoint_ns, holder_id)
            try:
                holder = self.reader.read_checkpoint(key, thread_id, checkpoint_ns, holder_id)
            except Unusable:
                holder = None
            holders[holder_id] = holder.values if holder is not None else {}
        stored: StoredValue | None = holders[holder_id].get(channel)
        if stored is None or stored.version != version:
            return None
        return stored

    # -- pending writes ------------------------------------------------------

    def put_writes(
        self,
        serde: SerializerProtocol,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        """Store a task's writes durably, linked to a checkpoint (see ``VerifiedSaver``)."""
        batches: dict[str, list[tuple[int, str, Typed]]] = {}
        for idx, (channel, value) in enumerate(writes):
            special = WRITES_IDX_MAP.get(channel)
            typed = serde.dumps_typed(value)
            if special is not None:
                # one write per special kind: the last one wins, within a call as across
                # calls (InMemorySaver and SqliteSaver key it by (task_id, index) too)
                batches[str(special)] = [(special, channel, typed)]
            else:
                batches.setdefault(keys.NORMAL_WRITES_SLOT, []).append((idx, channel, typed))
        records = [
            WritesRecord(
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=checkpoint_id,
                task_id=task_id,
                slot=slot,
                task_path=task_path,
                writes=batch,
            )
            for slot, batch in batches.items()
        ]
        thread_lock = keys.thread_prefix(thread_id)
        # shared, like put: prune and delete_for_runs must not remove a checkpoint's
        # writes directory while this call writes into it
        with self.storage.lock(thread_lock, exclusive=False):
            to_merge = [record for record in records if not self._store_writes_record(record)]
        if to_merge:
            # Adding to a task's stored writes is read, merge, rewrite: two callers
            # doing it at once would each rewrite without the other's additions.
            # Alone (exclusive), each merge sees the one before it.
            with self.storage.lock(thread_lock, exclusive=True):
                for record in to_merge:
                    self._merge_writes_record(record)

    def _store_writes_record(self, record: WritesRecord) -> bool:
        """Store a batch; ``False`` if the task's regular writes exist and must be merged."""
        key = keys.writes_key(*_writes_owner(record), record.task_id, record.slot)
        replace = record.slot != keys.NORMAL_WRITES_SLOT
        data = encode_writes(self.codec, record, uncompressed_below=self.uncompressed_below)
        return self.storage.write(key, data, replace=replace)

    def _merge_writes_record(self, record: WritesRecord) -> None:
        """Keep the regular writes already stored for the task and add those at new indices."""
        key = keys.writes_key(*_writes_owner(record), record.task_id, record.slot)
        stored = self.reader.read_writes(key, *_writes_owner(record))
        if stored is not None:
            known = {idx for idx, _, _ in stored.writes}
            added = [write for write in record.writes if write[0] not in known]
            if not added:
                return  # a retried call: everything is stored already
            record.writes = stored.writes + added
            record.task_path = stored.task_path
        self.storage.write(
            key, encode_writes(self.codec, record, uncompressed_below=self.uncompressed_below)
        )


def _writes_owner(record: WritesRecord) -> tuple[str, str, str]:
    return record.thread_id, record.checkpoint_ns, record.checkpoint_id
