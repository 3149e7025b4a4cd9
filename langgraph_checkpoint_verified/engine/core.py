"""``Engine``: threads of verified records, the one API every face of the package uses.

The engine owns a store (``Storage``), the codec that frames and verifies its
records, the serializer of their values, the ``DamageReporter`` that every
damaged record passes through, and the caches that make reading a record
twice cheap. It reads a thread's newest checkpoint that verifies (falling back
past damage), a checkpoint or its nearest ancestor that verifies, lists
checkpoints, and writes checkpoints and pending writes.

Everything is written once, synchronously; ``run_async`` is the one crossing
the async faces make, so no face ever blocks an event loop. Thread maintenance
(``maintenance``), ``DeltaChannel`` histories (``delta_history``), tool-call
records (``tool_records``) and ``verify``/``repair`` (``verify``) are modules of
functions over an ``Engine``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
)

from langgraph_checkpoint_verified.engine.configs import config
from langgraph_checkpoint_verified.engine.damage import DamageReporter
from langgraph_checkpoint_verified.engine.decoded_values import DecodedValues
from langgraph_checkpoint_verified.engine.newest import CheckpointParts, NewestCheckpoints
from langgraph_checkpoint_verified.engine.reads import PARENT_UNKNOWN, RecordReader, Unusable
from langgraph_checkpoint_verified.engine.record_cache import RecordCache
from langgraph_checkpoint_verified.engine.writes import CheckpointWriter
from langgraph_checkpoint_verified.errors import CheckpointDamagedError, RecordDamagedError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import Codec
from langgraph_checkpoint_verified.records.values import (
    DEFAULT_MAX_CHAIN,
    WINDOW_CHAIN,
    ListMemory,
    PartsCache,
    ValueParts,
    is_empty,
)
from langgraph_checkpoint_verified.storage.base import Storage
from langgraph_checkpoint_verified.storage.crossing import run_off_loop
from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage

T = TypeVar("T")


class Engine:
    """Reads and writes the verified records of a store's threads.

    Args:
        storage: Where the records live.
        serde: Serializes channel values, checkpoints, metadata and writes.
        codec: Frames and verifies each record (its key, if any, makes checksums MACs).
        reporter: Reports, counts and quarantines every damaged record found.
            (``engine.opening.open_records`` makes the three, its marker checked.)
        strict: Reads raise ``CheckpointDamagedError`` instead of falling back.
        full_snapshot_every: Every this many checkpoints along a chain, one
            stores all its values (bounds what one damaged record can cost).
        list_chain_limit: A growing list is stored whole again after this many
            extensions in a row; ``None`` takes the storage's own default.

    Example:
        >>> from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
        >>> from langgraph_checkpoint_verified.storage import MemoryStorage
        >>> storage, codec = MemoryStorage(), Codec(None)
        >>> engine = Engine(storage, JsonPlusSerializer(), codec, DamageReporter(storage, codec))
        >>> checkpoint = {"v": 1, "id": "1", "ts": "", "channel_values": {"n": 1},
        ...               "channel_versions": {"n": 1}, "versions_seen": {}}
        >>> engine.put_checkpoint("t", "", None, checkpoint, {"step": 0}, {"n": 1})
        >>> engine.latest_valid_checkpoint("t", "").checkpoint["channel_values"]
        {'n': 1}
    """

    def __init__(
        self,
        storage: Storage,
        serde: SerializerProtocol,
        codec: Codec,
        reporter: DamageReporter,
        *,
        strict: bool = False,
        full_snapshot_every: int = 50,
        list_chain_limit: int | None = None,
    ) -> None:
        if not isinstance(full_snapshot_every, int) or full_snapshot_every < 1:
            raise ValueError(
                f"full_snapshot_every must be a positive int, got {full_snapshot_every!r}"
            )
        if list_chain_limit is None:
            list_chain_limit = getattr(storage, "list_chain_limit", DEFAULT_MAX_CHAIN)
        if not isinstance(list_chain_limit, int) or list_chain_limit < 0:
            raise ValueError(f"list_chain_limit must be an int >= 0, got {list_chain_limit!r}")
        self.storage = storage
        self.serde = serde
        self.codec = codec
        self.reporter = reporter
        self.strict = strict
        if isinstance(storage, FileStorage):
            storage.on_damaged_span = reporter.damaged_span
            storage.on_healed = reporter.healed
        # Records verified (or written) here, trusted while their storage stamp is
        # unchanged: another process may have rewritten them (prune, delete_for_runs) since.
        self.records = RecordCache()
        # The last list stored per channel, so the next put stores only what it gained.
        self.lists = ListMemory(
            max_chain=list_chain_limit,
            window_chain=getattr(storage, "window_chain_limit", WINDOW_CHAIN),
        )
        self.parts = PartsCache()
        # Values read more than once, or written here and read: copied, not deserialized again.
        self.decoded = DecodedValues()
        # The newest checkpoint read per thread and namespace, while the thread is unchanged.
        self.newest = NewestCheckpoints()
        self.reader = RecordReader(storage, codec, reporter, self.records, self.parts, self.decoded)
        self.writer = CheckpointWriter(
            storage, codec, self.reader, self.records, self.lists, self.parts, full_snapshot_every
        )

    @property
    def full_snapshot_every(self) -> int:
        return self.writer.full_snapshot_every

    def with_serde(self, serde: SerializerProtocol) -> Engine:
        """The same store, records and caches, (de)serializing values with ``serde``."""
        clone = copy.copy(self)
        clone.serde = serde
        return clone

    async def run_async(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one synchronous engine operation from async code, off the event loop's back.

        One crossing per call (``storage.crossing.run_off_loop``): a worker thread for
        files and memory; for S3, the store's own event loop thread, each request awaited.
        """
        return await run_off_loop(self.storage, fn, *args, **kwargs)

    # -- names -----------------------------------------------------------------

    def thread_ids(self) -> list[str]:
        """Every thread of the store."""
        return self.reader.thread_ids()

    def namespaces(self, thread_id: str) -> list[str]:
        """The checkpoint namespaces of a thread."""
        return self.reader.namespaces(thread_id)

    def checkpoint_ids(self, thread_id: str, checkpoint_ns: str) -> list[str]:
        """A namespace's checkpoint ids, newest first (whether or not they verify)."""
        return self.reader.checkpoint_ids(thread_id, checkpoint_ns)

    # -- reading ---------------------------------------------------------------

    def latest_valid_checkpoint(
        self,
        thread_id: str,
        checkpoint_ns: str,
        *,
        strict: bool | None = None,
        holders: dict[str, Any] | None = None,
        values: bool = True,
    ) -> CheckpointTuple | None:
        """The newest checkpoint of a namespace that verifies; ``None`` if none does.

        Newer ones that do not verify are skipped and reported (in strict mode,
        the first raises ``CheckpointDamagedError``). ``values=False`` verifies as
        much (every record its values are kept in) but deserializes no channel
        value and no pending write, as ``list_checkpoints`` does: for summaries.
        """
        # one look at the log for the stamp and every read after it (both see the
        # thread as it was then): on a new thread, one lookup of a log that is not there
        with self.storage.consistent_reads(keys.thread_prefix(thread_id)):
            return self._latest_valid(thread_id, checkpoint_ns, strict, holders, values)

    def _latest_valid(
        self,
        thread_id: str,
        checkpoint_ns: str,
        strict: bool | None,
        holders: dict[str, Any] | None,
        values: bool,
    ) -> CheckpointTuple | None:
        prefix = keys.thread_prefix(thread_id)
        # the newest read before, its parts used again while the thread is unchanged
        stamp = self.storage.thread_stamp(prefix) if values and holders is None else None
        if stamp is not None:
            kept = self.newest.get(thread_id, checkpoint_ns, stamp)
            if kept is not None and self._still_reads_as(kept):
                try:
                    return self.assemble(kept, remember_lists=True)
                except Unusable:
                    pass  # read it all again, as if never read
        strict = self.strict if strict is None else strict
        holders = {} if holders is None else holders
        skipped: list[str] = []
        saw_any = False
        found: CheckpointTuple | None = None
        # the damaged checkpoints skipped are moved aside together, then reported
        with self.reporter.moving_together():
            for checkpoint_id in self.reader.newest_first(thread_id, checkpoint_ns):
                saw_any = True
                try:
                    parts = self._read_parts(
                        thread_id, checkpoint_ns, checkpoint_id, holders, keep=stamp is not None
                    )
                    found = (
                        None
                        if parts is None
                        else self.assemble(parts, remember_lists=values, values=values)
                    )
                except Unusable as unusable:
                    if strict:
                        raise CheckpointDamagedError(
                            thread_id, checkpoint_ns, checkpoint_id, unusable.reason
                        ) from None
                    skipped.append(checkpoint_id)
                    continue
                if parts is None or found is None:
                    continue
                if not skipped and stamp is not None and parts.sources is not None:
                    self.newest.put(thread_id, checkpoint_ns, stamp, parts)
                break
        if found is not None and skipped:
            self.reporter.fallback(
                f"thread {thread_id!r} namespace {checkpoint_ns!r}: newest checkpoint that "
                f"verifies is {found.checkpoint['id']} ({len(skipped)} newer skipped)"
            )
        elif found is None and saw_any and skipped:
            self.reporter.restart_from_scratch(thread_id, checkpoint_ns)
        return found

    def _read_parts(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        holders: dict[str, Any],
        *,
        keep: bool,
    ) -> CheckpointParts | None:
        """A checkpoint's verified parts (record, values, pending writes); ``None`` if absent.
        ``keep``: with the records they were read from, to be kept and used again."""
        found = self.reader.read_with_values(thread_id, checkpoint_ns, checkpoint_id, holders)
        if found is None:
            return None
        record, entries = found
        if not keep:
            return CheckpointParts(record, entries, None, None)
        sources: list[tuple[str, bytes]] = []
        writes = self.reader.pending_write_parts(thread_id, checkpoint_ns, checkpoint_id, sources)
        # the records read directly (the checkpoint's own, those holding its values), as
        # every read of it reads them again; ``None``: one is not kept, nor is the read
        for holder_id in {checkpoint_id, *(holder for _, holder in record.refs.values())}:
            data = self.records.bytes_of((thread_id, checkpoint_ns, holder_id))
            if data is None:
                return CheckpointParts(record, entries, writes, None)
            sources.append((keys.checkpoint_key(thread_id, checkpoint_ns, holder_id), data))
        return CheckpointParts(record, entries, writes, tuple(sources))

    def _still_reads_as(self, kept: CheckpointParts) -> bool:
        """Whether every record ``kept`` was read from still holds the bytes verified then:
        if not (damage since, a rewrite), the read that follows finds, heals and reports."""
        assert kept.sources is not None
        try:
            return self.storage.still_holds(kept.sources)
        except OSError:
            return False

    def checkpoint_or_ancestor(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> CheckpointTuple | None:
        """The checkpoint asked for, or its nearest ancestor that verifies.

        ``None`` when it never existed, or when no ancestor verifies. In strict
        mode, damage raises ``CheckpointDamagedError`` instead of falling back.
        """
        with self.storage.consistent_reads(keys.thread_prefix(thread_id)):
            holders: dict[str, Any] = {}
            requested = checkpoint_id
            visited: set[str] = set()
            current: str | None = checkpoint_id
            while current is not None and current not in visited:
                visited.add(current)
                try:
                    found = self.load(
                        thread_id, checkpoint_ns, current, holders, remember_lists=True
                    )
                except Unusable as unusable:
                    if self.strict:
                        raise CheckpointDamagedError(
                            thread_id, checkpoint_ns, current, unusable.reason
                        ) from None
                    current = self._parent_for_fallback(
                        thread_id, checkpoint_ns, current, unusable.parent
                    )
                    continue
                if found is None:
                    moved = self.reporter.quarantined_reason(
                        keys.checkpoint_key(thread_id, checkpoint_ns, current)
                    )
                    if moved is None and current == requested:
                        return None  # never existed: not damage
                    if self.strict:
                        raise CheckpointDamagedError(
                            thread_id,
                            checkpoint_ns,
                            current,
                            f"quarantined: {moved.get('reason')}" if moved else "missing",
                        )
                    identity = (moved or {}).get("identity") or {}
                    parent = (
                        identity.get("parent_checkpoint_id") or None
                        if identity.get("checkpoint_id") == current
                        else PARENT_UNKNOWN
                    )
                    current = self._parent_for_fallback(thread_id, checkpoint_ns, current, parent)
                    continue
                if current != requested:
                    self.reporter.fallback(
                        f"thread {thread_id!r} namespace {checkpoint_ns!r}: checkpoint {requested} "
                        f"does not verify; returning its ancestor {current}"
                    )
                return found
            self.reporter.restart_from_scratch(thread_id, checkpoint_ns)
            return None

    def _parent_for_fallback(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, parent: str | None
    ) -> str | None:
        if parent != PARENT_UNKNOWN:
            return parent
        # Nothing trustworthy names the parent (the header itself is gone): ids are
        # time-ordered, so the next older checkpoint is the best guess. On a thread
        # with forks it may be on another branch; the log says so.
        guess = next(
            (c for c in self.reader.checkpoint_ids(thread_id, checkpoint_ns) if c < checkpoint_id),
            None,
        )
        self.reporter.fallback(
            f"thread {thread_id!r} namespace {checkpoint_ns!r}: the parent of checkpoint "
            f"{checkpoint_id} is unknown (its header is damaged); trying the next older "
            f"checkpoint {guess}, which may be on another branch if the thread was forked"
        )
        return guess

    def count_own_records(self, thread_id: str, checkpoint_ns: str) -> tuple[int, int]:
        """How many of a namespace's checkpoint records verify on their own, and how many not.

        Each record's frame, digests and identity are checked as every read checks
        them (``RecordReader.checkpoint_verifies``); its content is not parsed, and
        the records its channel values are kept in are not read, so a checkpoint
        counted here may still be unusable (``verify`` finds those). Nothing is
        deserialized or kept. Damage is reported as reads report it. A record
        deleted since its name was listed is in neither count.
        """
        verified = damaged = 0
        for checkpoint_id in self.reader.checkpoint_ids(thread_id, checkpoint_ns):
            key = keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
            try:
                there = self.reader.checkpoint_verifies(
                    key, thread_id, checkpoint_ns, checkpoint_id
                )
            except Unusable:
                damaged += 1
                continue
            verified += there
        return verified, damaged

    def list_checkpoints(
        self,
        thread_ids: Sequence[str] | None,
        *,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        metadata_filter: dict[str, Any] | None = None,
        before_id: str | None = None,
        limit: int | None = None,
        values: bool = True,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints that verify, newest first per thread; damaged ones are skipped.

        Args:
            thread_ids: These threads (``None``: every thread of the store).
            checkpoint_ns: Only this namespace (``None``: every one).
            checkpoint_id: Only this checkpoint.
            metadata_filter: Metadata key/values that must all match.
            before_id: Only checkpoints older than this id.
            limit: At most this many (counted after verification).
            values: ``False`` still verifies every record (a checkpoint whose
                values do not verify is left out) but deserializes no channel
                value and no pending write: they come back empty. For summaries.
        """
        if limit is not None and limit <= 0:
            return
        yielded = 0
        for thread_id in self.reader.thread_ids() if thread_ids is None else thread_ids:
            holders: dict[str, Any] = {}
            for found_id, found_ns in self.reader.thread_checkpoints(thread_id, checkpoint_ns):
                if checkpoint_id is not None and found_id != checkpoint_id:
                    continue
                if before_id is not None and found_id >= before_id:
                    continue
                try:
                    found = self.load(
                        thread_id,
                        found_ns,
                        found_id,
                        holders,
                        metadata_filter=metadata_filter,
                        values=values,
                    )
                except Unusable:
                    continue
                if found is None:
                    continue
                yield found
                yielded += 1
                if limit is not None and yielded >= limit:
                    return

    def load(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        holders: dict[str, Any],
        *,
        metadata_filter: dict[str, Any] | None = None,
        remember_lists: bool = False,
        values: bool = True,
    ) -> CheckpointTuple | None:
        """Load one checkpoint completely, or raise ``Unusable``; ``None`` if absent.

        ``holders`` keeps the records read for values, for the next load of the
        same thread. ``remember_lists``: the caller is about to resume from it
        (``get_tuple``): the next put then stores only what its lists gain.
        """
        found = self.reader.read_with_values(thread_id, checkpoint_ns, checkpoint_id, holders)
        if found is None:
            return None
        record, entries = found
        return self.assemble(
            CheckpointParts(record, entries, None, None),
            metadata_filter=metadata_filter,
            remember_lists=remember_lists,
            values=values,
        )

    def assemble(
        self,
        parts: CheckpointParts,
        *,
        metadata_filter: dict[str, Any] | None = None,
        remember_lists: bool = False,
        values: bool = True,
    ) -> CheckpointTuple | None:
        """The ``CheckpointTuple`` of verified parts, every value deserialized anew (or
        copied from a kept decode); ``None`` if its metadata does not match. Pending
        writes not read yet (``parts.writes`` is ``None``) are read here, if ``values``."""
        record, entries = parts.record, parts.entries
        thread_id, checkpoint_ns = record.thread_id, record.checkpoint_ns
        metadata = self.serde.loads_typed(record.metadata)
        if metadata_filter and not all(metadata.get(k) == v for k, v in metadata_filter.items()):
            return None
        try:
            channel_values = {
                ch: self.load_value(value_parts)
                for ch, value_parts in entries.items()
                if values and not is_empty(value_parts)
            }
        except RecordDamagedError as exc:
            # every record verified, yet an extension does not fit its base
            raise Unusable(exc.reason, parent=record.parent_checkpoint_id) from None
        if remember_lists:
            for channel, value in channel_values.items():
                version, holder_id = record.refs[channel]
                where = (thread_id, checkpoint_ns, channel)
                self.lists.remember(where, version, holder_id, value, entries[channel])
        checkpoint: Checkpoint = {  # type: ignore[typeddict-item]
            **self.serde.loads_typed(record.checkpoint),
            "channel_values": channel_values,
        }
        if not values:
            pending_writes = []
        elif parts.writes is None:
            pending_writes = self.reader.pending_writes(
                self.serde, thread_id, checkpoint_ns, record.checkpoint_id
            )
        else:
            pending_writes = [(t, c, self.serde.loads_typed(typed)) for t, c, typed in parts.writes]
        return CheckpointTuple(
            config=config(thread_id, checkpoint_ns, record.checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=(
                config(thread_id, checkpoint_ns, record.parent_checkpoint_id)
                if record.parent_checkpoint_id
                else None
            ),
            pending_writes=pending_writes,
        )

    def load_value(self, parts: ValueParts) -> Any:
        """A value from its serialized parts, deserialized (or copied from kept decodes)."""
        return self.decoded.load(self.serde, parts)

    # -- writing ---------------------------------------------------------------

    def put_checkpoint(
        self,
        thread_id: str,
        checkpoint_ns: str,
        parent_id: str | None,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> None:
        """Store a checkpoint durably: its changed values, and references for the rest."""
        # shared: puts run side by side; prune and delete_for_runs, which rewrite
        # the records a put may refer to, wait for them (and they for it)
        with self.storage.lock(keys.thread_prefix(thread_id), exclusive=False):
            self.writer.put_checkpoint(
                self.serde,
                thread_id,
                checkpoint_ns,
                parent_id,
                checkpoint,
                metadata,
                new_versions,
            )

    def put_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes durably, linked to a checkpoint."""
        self.writer.put_writes(
            self.serde, thread_id, checkpoint_ns, checkpoint_id, writes, task_id, task_path
        )

    def forget_thread(self, thread_id: str) -> None:
        """Drop what the caches hold of a thread (after its records were rewritten)."""
        self.lists.forget_thread(thread_id)
        self.newest.forget_thread(thread_id)
        self.parts.forget_thread(thread_id)
        self.records.forget_thread(thread_id)
