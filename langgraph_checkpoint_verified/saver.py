"""``VerifiedSaver``: LangGraph's checkpointer contract over verified records.

This module knows LangGraph's semantics (checkpoints, channel versions,
pending writes, threads and namespaces) and what to return when a record is
damaged. Reading and verifying records is ``_reads``, the value chain
``_values``, thread maintenance ``_maintenance``; it knows nothing about bytes
(see ``_format`` and ``_records``) or paths (see ``_keys`` and ``_storage``).

Every operation is written once, synchronously. Each ``a*`` twin makes one
crossing to a worker thread (``asyncio.to_thread``), so the event loop never
waits on a disk; on an object store it runs the same core on the event loop
instead, each request awaited through the store's async API (``_async_bridge``).
"""

from __future__ import annotations

import asyncio
import builtins
import os
import random
import threading
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import TracebackType
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
)

from langgraph_checkpoint_verified import (
    _delta_history,
    _keys,
    _maintenance,
    _marker,
    _tool_records,
)
from langgraph_checkpoint_verified._async_bridge import run_core
from langgraph_checkpoint_verified._config import PARENT_UNKNOWN as _PARENT_UNKNOWN
from langgraph_checkpoint_verified._config import Unusable as _Unusable
from langgraph_checkpoint_verified._config import config as _config
from langgraph_checkpoint_verified._config import config_parts as _config_parts
from langgraph_checkpoint_verified._decoded_values import DecodedValues
from langgraph_checkpoint_verified._format import (
    DEFAULT_COMPRESSION_LEVEL,
    Codec,
)
from langgraph_checkpoint_verified._keys import NORMAL_WRITES_SLOT
from langgraph_checkpoint_verified._log import FileStorage
from langgraph_checkpoint_verified._object_storage import ObjectStorage
from langgraph_checkpoint_verified._reads import RecordReader
from langgraph_checkpoint_verified._record_cache import RecordCache
from langgraph_checkpoint_verified._records import (
    EMPTY_TYPE,
    VALUE_FULL,
    CheckpointRecord,
    StoredValue,
    Typed,
    WritesRecord,
    encode_checkpoint,
    encode_writes,
)
from langgraph_checkpoint_verified._storage import MemoryStorage, Storage
from langgraph_checkpoint_verified._values import (
    DEFAULT_MAX_CHAIN,
    ListMemory,
    PartsCache,
    is_empty,
    load_value,
)
from langgraph_checkpoint_verified.errors import (
    CheckpointDamagedError,
    RecordDamagedError,
    VerifiedSaverError,
)
from langgraph_checkpoint_verified.recovery import (
    Damage,
    DamageReporter,
    RecoveryStats,
    VerifyReport,
    verify_store,
)

T = TypeVar("T")

_ALLOWLIST_CLONES = 64
"""``with_allowlist`` clones kept per saver (a graph and each subgraph ask for one)."""


_ASYNC_LIST_BATCH = 64


class VerifiedSaver(BaseCheckpointSaver[str], AbstractContextManager, AbstractAsyncContextManager):
    """A LangGraph checkpointer that verifies everything it reads.

    Checkpoints, channel values and pending writes are stored as
    zstd-compressed records, each framed with its identity and checksums that
    are checked before anything is decompressed or deserialized. Damaged
    records are never returned: reads fall back to the newest checkpoint that
    verifies, and the damage is quarantined and reported.

    Args:
        path: Directory of the store (created if missing), or ``"s3://bucket/prefix"``
            for a bucket several machines share (``ObjectStorage``, the ``[s3]``
            extra; endpoint and credentials from the ``AWS_*`` environment).
            Omit it and pass ``storage=`` for another backend (an
            ``ObjectStorage`` with options), or use ``VerifiedSaver.in_memory()``.
        storage: A ``Storage`` implementation to use instead of files.
        serde: Serializer for checkpoints and writes (any ``SerializerProtocol``,
            e.g. ``EncryptedSerializer``). Defaults to LangGraph's ``JsonPlusSerializer``.
        key: Secret bytes (16 to 64). Checksums become keyed MACs: records not
            written with this key are rejected as damage.
        fsync: ``True`` (the default) makes every acknowledged write survive
            power loss. ``False`` is faster and survives process crashes only.
        compression_level: zstd level for new records (1 to 22).
        strict: ``True`` makes ``get_tuple`` raise ``CheckpointDamagedError``
            instead of falling back past damage.
        on_corruption: Called with a ``Damage`` for each damaged record found.
        quarantine: ``False`` reports damage without moving files aside.
        full_snapshot_every: Every this many checkpoints along a chain, a
            checkpoint stores all its channel values, not only the changed ones.
            This bounds what one damaged record can make unusable (the
            checkpoints until the next full one) at the cost of storing the
            unchanged channels again.
        list_chain_limit: A list that only grows (a chat's messages) is stored
            as the items it gained; after this many such versions in a row it
            is stored whole again. Bounds what a read decodes and what one
            damaged record can make unusable; larger keeps the store closer to
            linear in the chat's length (whole copies cost the square of it,
            divided by this). Default: 200 on files and in memory, 16 on an
            object store, where each version in the chain is one more request
            for a machine that reads the list for the first time.

    Example:
        >>> import tempfile
        >>> from langgraph.graph import StateGraph, START
        >>> from typing_extensions import TypedDict
        >>> class State(TypedDict):
        ...     count: int
        >>> builder = StateGraph(State)
        >>> _ = builder.add_node("inc", lambda s: {"count": s["count"] + 1})
        >>> _ = builder.add_edge(START, "inc")
        >>> with tempfile.TemporaryDirectory() as store:
        ...     graph = builder.compile(checkpointer=VerifiedSaver(store))
        ...     config = {"configurable": {"thread_id": "demo"}}
        ...     graph.invoke({"count": 1}, config)
        ...     VerifiedSaver(store).get_tuple(config).checkpoint["channel_values"]
        {'count': 2}
        {'count': 2}
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        storage: Storage | None = None,
        serde: SerializerProtocol | None = None,
        key: bytes | None = None,
        fsync: bool = True,
        compression_level: int = DEFAULT_COMPRESSION_LEVEL,
        strict: bool = False,
        on_corruption: Callable[[Damage], Any] | None = None,
        quarantine: bool = True,
        full_snapshot_every: int = 50,
        list_chain_limit: int | None = None,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(full_snapshot_every, int) or full_snapshot_every < 1:
            raise ValueError(
                f"full_snapshot_every must be a positive int, got {full_snapshot_every!r}"
            )
        self.full_snapshot_every = full_snapshot_every
        if (path is None) == (storage is None):
            raise TypeError(
                "pass exactly one of a store directory (VerifiedSaver('checkpoints/')) or "
                "storage=...; VerifiedSaver.in_memory() keeps records in memory"
            )
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or PathLike, got {type(path).__name__}")
        if storage is None:
            storage = (
                ObjectStorage(path)
                if isinstance(path, str) and path.startswith("s3://")
                else FileStorage(path, fsync=fsync)  # type: ignore[arg-type]
            )
        self.storage: Storage = storage
        self.codec = Codec(key, compression_level=compression_level)
        self.strict = strict
        self.reporter = DamageReporter(
            self.storage, self.codec, on_corruption=on_corruption, quarantine=quarantine
        )
        if isinstance(self.storage, FileStorage):
            self.storage.on_damaged_span = self.reporter.damaged_span
        # Records verified (or written) here, trusted while their storage stamp is
        # unchanged: another saver may have rewritten them (prune, delete_for_runs) since.
        self._records = RecordCache()
        # The last list stored per channel, so the next put stores only what it gained.
        if list_chain_limit is None:
            list_chain_limit = getattr(self.storage, "list_chain_limit", DEFAULT_MAX_CHAIN)
        if not isinstance(list_chain_limit, int) or list_chain_limit < 0:
            raise ValueError(f"list_chain_limit must be an int >= 0, got {list_chain_limit!r}")
        self._lists = ListMemory(max_chain=list_chain_limit)
        self._parts = PartsCache()
        # Values read more than once: copied, not deserialized again.
        self._decoded = DecodedValues()
        self._reader = RecordReader(
            self.storage, self.codec, self.reporter, self._records, self._parts, self._decoded
        )
        # with_allowlist's clones, one per allowlist
        self._allowlisted: dict[frozenset[Any], VerifiedSaver] = {}
        self._lock = threading.Lock()
        self._closed = False
        _marker.check_store_marker(self)

    # -- construction ------------------------------------------------------

    @classmethod
    def in_memory(cls, **kwargs: Any) -> VerifiedSaver:
        """A saver holding the same verified records in memory (an ``InMemorySaver`` drop-in).

        Example:
            >>> saver = VerifiedSaver.in_memory()
            >>> saver.list({"configurable": {"thread_id": "none"}}).__next__()
            Traceback (most recent call last):
            ...
            StopIteration
        """
        return cls(storage=MemoryStorage(), **kwargs)

    @classmethod
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> VerifiedSaver:
        """Open a store by path (``":memory:"`` for memory), for ``with`` or ``async with``.

        Mirrors ``SqliteSaver.from_conn_string``; the saver is closed when the
        block ends.

        Example:
            >>> with VerifiedSaver.from_conn_string(":memory:") as saver:
            ...     type(saver).__name__
            'VerifiedSaver'
        """
        if not isinstance(conn_string, (str, os.PathLike)):
            raise TypeError(f"conn_string must be a path, got {type(conn_string).__name__}")
        if conn_string == ":memory:":
            return cls.in_memory(**kwargs)
        return cls(conn_string, **kwargs)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> VerifiedSaver:
        """A clone deserializing with a msgpack allowlist extended by ``extra_allowlist``.

        LangGraph asks for one at every run and state call when
        ``LANGGRAPH_STRICT_MSGPACK`` is set; the same clone (and serializer)
        answers each time, so the values it deserialized are copied, not
        deserialized again.
        """
        key = frozenset(extra_allowlist)
        with self._lock:
            clone = self._allowlisted.get(key)
        if clone is not None:
            return clone
        made = super().with_allowlist(extra_allowlist)
        assert isinstance(made, VerifiedSaver)
        if made is not self:
            made._allowlisted = {}  # its own: its allowlist extends a larger one
        with self._lock:
            if len(self._allowlisted) >= _ALLOWLIST_CLONES:
                self._allowlisted.pop(next(iter(self._allowlisted)))
            return self._allowlisted.setdefault(key, made)

    def close(self) -> None:
        """Release the saver. Idempotent; later calls raise ``VerifiedSaverError``."""
        self._closed = True
        with self._lock:
            clones = builtins.list(self._allowlisted.values())
        for clone in clones:
            clone.close()

    def __enter__(self) -> VerifiedSaver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> VerifiedSaver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VerifiedSaver({self.storage!r})"

    @property
    def stats(self) -> RecoveryStats:
        """Counters of damage found, records quarantined and fallbacks taken."""
        return self.reporter.stats

    # -- reading -----------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config``, or the thread's newest one that verifies.

        With a ``checkpoint_id`` that does not verify, the nearest ancestor that
        does is returned (its own id in ``config``), unless ``strict=True``.
        Returns ``None`` when nothing verifies, so the graph starts from step 0.
        Damage never raises here (except in strict mode).

        Example:
            >>> saver = VerifiedSaver.in_memory()
            >>> config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            >>> for n in (1, 2):
            ...     checkpoint = {"v": 1, "id": f"{n}", "ts": "", "channel_values": {"n": n},
            ...                   "channel_versions": {"n": n}, "versions_seen": {}}
            ...     config = saver.put(config, checkpoint, {"step": n}, {"n": n})
            >>> saver.get_tuple({"configurable": {"thread_id": "t"}}).checkpoint["channel_values"]
            {'n': 2}
            >>> newest = "threads/t/ns/~/checkpoints/2.ckpt"
            >>> saver.storage.records[newest] = saver.storage.records[newest][:-1] + b"?"
            >>> saver.get_tuple(config).config["configurable"]["checkpoint_id"]  # its parent
            '1'
        """
        self._check_open()
        thread_id, checkpoint_ns, checkpoint_id = _config_parts(config)
        holders: dict[str, Any] = {}
        if checkpoint_id is not None:
            return self._get_with_fallback(thread_id, checkpoint_ns, checkpoint_id, holders)
        return self._latest(thread_id, checkpoint_ns, holders)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints that verify, newest first; damaged ones are skipped and reported.

        Args:
            config: Restricts to a thread (and namespace / checkpoint id if given);
                ``None`` lists every thread.
            filter: Metadata key/values that must all match.
            before: Only checkpoints older than this config's ``checkpoint_id``.
            limit: At most this many (counted after verification).

        Example:
            >>> saver = VerifiedSaver.in_memory()
            >>> config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            >>> for n in (1, 2, 3):
            ...     checkpoint = {"v": 1, "id": f"{n}", "ts": "", "channel_values": {},
            ...                   "channel_versions": {}, "versions_seen": {}}
            ...     config = saver.put(config, checkpoint, {"step": n}, {})
            >>> [t.metadata["step"] for t in saver.list({"configurable": {"thread_id": "t"}})]
            [3, 2, 1]
            >>> [t.metadata["step"] for t in saver.list(None, filter={"step": 2})]
            [2]
        """
        self._check_open()
        yield from self._list(config, filter=filter, before=before, limit=limit, values=True)

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
        values: bool,
    ) -> Iterator[CheckpointTuple]:
        """``list``; with ``values=False`` every record is still verified (a checkpoint
        whose values do not verify is left out), but channel values and pending
        writes are not deserialized: they come back empty. For summaries."""
        if limit is not None and limit <= 0:
            return
        before_id = get_checkpoint_id(before) if before else None
        wanted_id = None
        wanted_ns = None
        if config is not None:
            thread_id, _, wanted_id = _config_parts(config)
            wanted_ns = config["configurable"].get("checkpoint_ns")
            thread_ids: Sequence[str] = [thread_id]
        else:
            thread_ids = self._reader.thread_ids()
        yielded = 0
        for thread_id in thread_ids:
            holders: dict[str, Any] = {}
            for checkpoint_id, checkpoint_ns in self._reader.thread_checkpoints(
                thread_id, wanted_ns
            ):
                if wanted_id is not None and checkpoint_id != wanted_id:
                    continue
                if before_id is not None and checkpoint_id >= before_id:
                    continue
                try:
                    found = self._load(
                        thread_id,
                        checkpoint_ns,
                        checkpoint_id,
                        holders,
                        metadata_filter=filter,
                        values=values,
                    )
                except _Unusable:
                    continue
                if found is None:
                    continue
                yield found
                yielded += 1
                if limit is not None and yielded >= limit:
                    return

    def _latest(
        self,
        thread_id: str,
        checkpoint_ns: str,
        holders: dict[str, Any],
        *,
        strict: bool | None = None,
    ) -> CheckpointTuple | None:
        strict = self.strict if strict is None else strict
        skipped: builtins.list[str] = []
        saw_any = False
        for checkpoint_id in self._reader.newest_first(thread_id, checkpoint_ns):
            saw_any = True
            try:
                found = self._load(
                    thread_id, checkpoint_ns, checkpoint_id, holders, remember_lists=True
                )
            except _Unusable as unusable:
                if strict:
                    raise CheckpointDamagedError(
                        thread_id, checkpoint_ns, checkpoint_id, unusable.reason
                    ) from None
                skipped.append(checkpoint_id)
                continue
            if found is None:
                continue
            if skipped:
                self.reporter.fallback(
                    f"thread {thread_id!r} namespace {checkpoint_ns!r}: newest checkpoint that "
                    f"verifies is {checkpoint_id} ({len(skipped)} newer skipped)"
                )
            return found
        if saw_any and skipped:
            self.reporter.restart_from_scratch(thread_id, checkpoint_ns)
        return None

    def _get_with_fallback(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, holders: dict[str, Any]
    ) -> CheckpointTuple | None:
        requested = checkpoint_id
        visited: set[str] = set()
        current: str | None = checkpoint_id
        while current is not None and current not in visited:
            visited.add(current)
            try:
                found = self._load(thread_id, checkpoint_ns, current, holders, remember_lists=True)
            except _Unusable as unusable:
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
                    _keys.checkpoint_key(thread_id, checkpoint_ns, current)
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
                    else _PARENT_UNKNOWN
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
        if parent != _PARENT_UNKNOWN:
            return parent
        # Nothing trustworthy names the parent (the header itself is gone): ids are
        # time-ordered, so the next older checkpoint is the best guess. On a thread
        # with forks it may be on another branch; the log says so.
        guess = self._predecessor(thread_id, checkpoint_ns, checkpoint_id)
        self.reporter.fallback(
            f"thread {thread_id!r} namespace {checkpoint_ns!r}: the parent of checkpoint "
            f"{checkpoint_id} is unknown (its header is damaged); trying the next older "
            f"checkpoint {guess}, which may be on another branch if the thread was forked"
        )
        return guess

    def _predecessor(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str | None:
        # Used only when a damaged record no longer says who its parent was:
        # checkpoint ids are time-ordered, so the next older one is the best guess.
        for candidate in self._reader.checkpoint_ids(thread_id, checkpoint_ns):
            if candidate < checkpoint_id:
                return candidate
        return None

    def _load(
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
        """Load one checkpoint completely, or raise ``_Unusable``; ``None`` if absent.

        ``remember_lists``: the caller is about to resume from it (``get_tuple``):
        the next put then stores only what its lists gain.
        """
        found = self._reader.read_with_values(thread_id, checkpoint_ns, checkpoint_id, holders)
        if found is None:
            return None
        record, entries = found
        metadata = self.serde.loads_typed(record.metadata)
        if metadata_filter and not all(metadata.get(k) == v for k, v in metadata_filter.items()):
            return None
        try:
            channel_values = {
                ch: load_value(self._loads_value, parts)
                for ch, parts in entries.items()
                if values and not is_empty(parts)
            }
        except RecordDamagedError as exc:
            # every record verified, yet an extension does not fit its base
            raise _Unusable(exc.reason, parent=record.parent_checkpoint_id) from None
        if remember_lists:
            for channel, value in channel_values.items():
                version, holder_id = record.refs[channel]
                depth = len(entries[channel]) - 1
                where = (thread_id, checkpoint_ns, channel)
                self._lists.remember(where, version, holder_id, value, depth)
        checkpoint: Checkpoint = {  # type: ignore[typeddict-item]
            **self.serde.loads_typed(record.checkpoint),
            "channel_values": channel_values,
        }
        return CheckpointTuple(
            config=_config(thread_id, checkpoint_ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=(
                _config(thread_id, checkpoint_ns, record.parent_checkpoint_id)
                if record.parent_checkpoint_id
                else None
            ),
            pending_writes=(
                self._reader.pending_writes(self.serde, thread_id, checkpoint_ns, checkpoint_id)
                if values
                else []
            ),
        )

    def _loads_value(self, part: Typed) -> Any:
        return self._decoded.loads(self.serde, part)

    # -- writing -----------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint durably; returns the config that names it.

        Only channels in ``new_versions`` are stored (inside this checkpoint's
        own record: one log entry per step, one sync); unchanged channels refer
        to the record that already holds them, and a list that extends its
        previous version is stored as the items it gained.
        """
        self._check_open()
        thread_id, checkpoint_ns, parent_id = _config_parts(config)
        _check_checkpoint(checkpoint)
        # shared: puts run side by side; prune and delete_for_runs, which rewrite
        # the records a put may refer to, wait for them (and they for it)
        with self.storage.lock(_keys.thread_prefix(thread_id), exclusive=False):
            return self._put_locked(
                config, thread_id, checkpoint_ns, parent_id, checkpoint, metadata, new_versions
            )

    def _put_locked(
        self,
        config: RunnableConfig,
        thread_id: str,
        checkpoint_ns: str,
        parent_id: str | None,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        checkpoint_id = checkpoint["id"]
        body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        channel_values: dict[str, Any] = checkpoint.get("channel_values") or {}
        parent = (
            self._refs_of(thread_id, checkpoint_ns, parent_id)
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
                stored = self._lists.encode(
                    where,
                    version,
                    checkpoint_id,
                    channel_values[channel],
                    parent_refs.get(channel),
                    self.serde,
                )
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
                self._lists.forget(where)
                stored = StoredValue(version, VALUE_FULL, (EMPTY_TYPE, b""))
            values[channel] = stored
            refs[channel] = (version, checkpoint_id)
        record = CheckpointRecord(
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            parent_checkpoint_id=parent_id,
            checkpoint=self.serde.dumps_typed(body),
            metadata=self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)),
            values=values,
            refs=refs,
            since_full=0 if full or parent is None else parent.since_full + 1,
        )
        key = _keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
        data = encode_checkpoint(self.codec, record)
        self.storage.write(key, data)
        self._records.remember(record, data, self.storage.written_stamp(key))
        return _config(thread_id, checkpoint_ns, checkpoint_id)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes durably, linked to the checkpoint in ``config``.

        A regular write is stored once per ``(task_id, index)``, as in
        ``InMemorySaver`` and ``SqliteSaver``: a repeated call keeps the writes
        already stored and adds only those at new indices (LangGraph saves the
        null task's writes again with the new ones appended). Special writes
        (errors, interrupts, resume values) replace the previous one of the
        same kind.
        """
        self._check_open()
        thread_id, checkpoint_ns, checkpoint_id = _config_parts(config)
        if checkpoint_id is None:
            raise ValueError(
                "put_writes needs config['configurable']['checkpoint_id']: writes belong to "
                "a checkpoint"
            )
        _keys.require_text(task_id, "task_id")
        _keys.require_text(task_path, "task_path")
        batches: dict[str, list[tuple[int, str, Typed]]] = {}
        for idx, (channel, value) in enumerate(writes):
            special = WRITES_IDX_MAP.get(channel)
            typed = self.serde.dumps_typed(value)
            if special is not None:
                # one write per special kind: the last one wins, within a call as across
                # calls (InMemorySaver and SqliteSaver key it by (task_id, index) too)
                batches[str(special)] = [(special, channel, typed)]
            else:
                batches.setdefault(NORMAL_WRITES_SLOT, []).append((idx, channel, typed))
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
        thread_lock = _keys.thread_prefix(thread_id)
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
        key = _keys.writes_key(*_writes_owner(record), record.task_id, record.slot)
        replace = record.slot != NORMAL_WRITES_SLOT
        return self.storage.write(key, encode_writes(self.codec, record), replace=replace)

    def _merge_writes_record(self, record: WritesRecord) -> None:
        """Keep the regular writes already stored for the task and add those at new indices."""
        key = _keys.writes_key(*_writes_owner(record), record.task_id, record.slot)
        stored = self._reader.read_writes(key, *_writes_owner(record))
        if stored is not None:
            known = {idx for idx, _, _ in stored.writes}
            added = [write for write in record.writes if write[0] not in known]
            if not added:
                return  # a retried call: everything is stored already
            record.writes = stored.writes + added
            record.task_path = stored.task_path
        self.storage.write(key, encode_writes(self.codec, record))

    def _remember_parts(
        self, where: tuple[str, str, str], holder_id: str, stored: StoredValue
    ) -> None:
        """Keep a list's parts, so that reading it back does not walk its chain."""
        if stored.base is None:
            self._parts.put(where, holder_id, stored.version, [(stored.typed, None)])
            return
        base_id, base_version, base_count = stored.base
        base_parts = self._parts.get(where, base_id, base_version)
        if base_parts is not None:
            self._parts.put(
                where, holder_id, stored.version, [*base_parts, (stored.typed, base_count)]
            )

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
            key = _keys.checkpoint_key(thread_id, checkpoint_ns, holder_id)
            try:
                holder = self._reader.read_checkpoint(key, thread_id, checkpoint_ns, holder_id)
            except _Unusable:
                holder = None
            holders[holder_id] = holder.values if holder is not None else {}
        stored: StoredValue | None = holders[holder_id].get(channel)
        if stored is None or stored.version != version:
            return None
        return stored

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions as ``InMemorySaver`` makes them: a zero-padded counter and a random tail."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    def _refs_of(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> CheckpointRecord | None:
        """The parent's record (refs and chain position), or ``None`` if it cannot be read.

        ``None`` makes the new checkpoint hold every value itself.
        """
        key = _keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
        stamp = self.storage.stamp(key)
        if stamp is None:
            return None
        cached = self._records.summary((thread_id, checkpoint_ns, checkpoint_id), stamp)
        if cached is not None:
            return cached
        try:
            return self._reader.read_checkpoint(key, thread_id, checkpoint_ns, checkpoint_id, stamp)
        except _Unusable:
            return None

    def _forget_thread(self, thread_id: str) -> None:
        self._lists.forget_thread(thread_id)
        self._parts.forget_thread(thread_id)
        self._records.forget_thread(thread_id)

    # -- tool-call records -------------------------------------------------

    def put_tool_record(
        self,
        thread_id: str,
        checkpoint_ns: str,
        tool_call_id: str,
        kind: str,
        *,
        fingerprint: str,
        value: Any = None,
    ) -> None:
        """Durably record a tool call's ``"intent"`` (about to run) or ``"result"``.

        Args:
            thread_id: The thread the call belongs to.
            checkpoint_ns: The namespace of the node making the call, stable across resumes.
            tool_call_id: The id of the tool call in the AI message.
            kind: ``"intent"`` or ``"result"``.
            fingerprint: Identifies the call's tool name and arguments; a rerun
                with another fingerprint does not reuse the record.
            value: What to keep (serialized with the saver's serde).
        """
        self._check_open()
        _tool_records.put_tool_record(
            self, thread_id, checkpoint_ns, tool_call_id, kind, fingerprint=fingerprint, value=value
        )

    def get_tool_record(
        self,
        thread_id: str,
        checkpoint_ns: str,
        tool_call_id: str,
        kind: str,
        *,
        damaged: Any = None,
    ) -> Any:
        """The recorded ``(fingerprint, value)`` of a tool call, or ``None``.

        A damaged record is reported and quarantined, never used: ``damaged``
        is returned instead (``None``, i.e. treated as absent, unless the
        caller must tell "never written" from "written but unreadable").
        """
        self._check_open()
        return _tool_records.get_tool_record(
            self, thread_id, checkpoint_ns, tool_call_id, kind, damaged=damaged
        )

    def delete_tool_record(
        self, thread_id: str, checkpoint_ns: str, tool_call_id: str, kind: str
    ) -> None:
        """Remove one tool-call record (missing is fine)."""
        self._check_open()
        _tool_records.delete_tool_record(self, thread_id, checkpoint_ns, tool_call_id, kind)

    async def aput_tool_record(
        self,
        thread_id: str,
        checkpoint_ns: str,
        tool_call_id: str,
        kind: str,
        *,
        fingerprint: str,
        value: Any = None,
    ) -> None:
        """Async twin of ``put_tool_record``."""
        await self._run(
            self.put_tool_record,
            thread_id,
            checkpoint_ns,
            tool_call_id,
            kind,
            fingerprint=fingerprint,
            value=value,
        )

    async def aget_tool_record(
        self, thread_id: str, checkpoint_ns: str, tool_call_id: str, kind: str
    ) -> tuple[str, Any] | None:
        """Async twin of ``get_tool_record``."""
        return await self._run(self.get_tool_record, thread_id, checkpoint_ns, tool_call_id, kind)

    async def adelete_tool_record(
        self, thread_id: str, checkpoint_ns: str, tool_call_id: str, kind: str
    ) -> None:
        """Async twin of ``delete_tool_record``."""
        await self._run(self.delete_tool_record, thread_id, checkpoint_ns, tool_call_id, kind)

    # -- managing threads --------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and tool record of a thread."""
        self._check_open()
        thread_id = _keys.as_thread_id(thread_id)
        prefix = _keys.thread_prefix(thread_id)
        if not self.storage.list(prefix) and self.storage.stamp(prefix) is None:
            return  # no such thread: do not create one just to lock it
        # exclusive: a put in progress finishes first; one waiting then finds the
        # thread gone (the lock follows the directory) and starts it afresh
        with self.storage.lock(prefix, exclusive=True):
            self.storage.delete_tree(prefix)
        self._forget_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) created by the given runs.

        Checkpoints that remain and whose channel values were stored in a
        deleted checkpoint's record are first rewritten to hold those values
        themselves, so every remaining checkpoint still loads in full.

        Warning:
            ``DeltaChannel``: deleting a run that produced ancestor pending
            writes, or the only snapshot of a delta channel, for a still-live
            thread breaks the reconstruction of that channel in the
            checkpoints after it. Their history walk ends at the first missing
            ancestor, as in ``BaseCheckpointSaver``, so the channel rebuilds
            from fewer writes without an error. Prefer ``prune``, which keeps
            the ancestors a delta channel needs.
        """
        self._check_open()
        _maintenance.delete_for_runs(self, run_ids)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: ``"keep_latest"`` keeps the newest verified checkpoint per namespace
        (with its pending writes, rewritten to hold all its values); ``"delete"`` removes all.

        ``DeltaChannel``: a delta channel stores only its writes between
        snapshots, so its value at the kept checkpoint is rebuilt from
        ancestors. For each channel named in the kept checkpoint's
        ``counters_since_delta_snapshot`` metadata, ``"keep_latest"`` also keeps
        every ancestor the history walk reads (back to the channel's nearest
        snapshot), with its pending writes: the kept checkpoint rebuilds the
        same value after pruning. If that walk meets damage, the namespace is
        left as it is and ``CheckpointDamagedError`` is raised (threads listed
        before it are already pruned): pruning past the damage would turn an
        error into a silently shortened value.

        Tool-call records are kept (a resume from the kept checkpoint may need them).
        """
        self._check_open()
        _maintenance.prune(self, thread_ids, strategy=strategy)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every verified record of a thread (checkpoints, writes, tool records) to another.

        Damaged records are not copied; they are reported and quarantined.

        Example:
            >>> saver = VerifiedSaver.in_memory()
            >>> checkpoint = {"v": 1, "id": "1", "ts": "", "channel_values": {"x": 1},
            ...               "channel_versions": {"x": 1}, "versions_seen": {}}
            >>> _ = saver.put({"configurable": {"thread_id": "a"}}, checkpoint, {}, {"x": 1})
            >>> saver.copy_thread("a", "b")
            >>> saver.get_tuple({"configurable": {"thread_id": "b"}}).checkpoint["channel_values"]
            {'x': 1}
        """
        self._check_open()
        _maintenance.copy_thread(self, source_thread_id, target_thread_id)

    # -- delta channels ----------------------------------------------------

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        """The writes and seed each ``DeltaChannel`` is rebuilt from at a checkpoint.

        LangGraph calls this when it loads a checkpoint at which a delta
        channel stored no value. The parent chain of the checkpoint in
        ``config`` (its newest one if no ``checkpoint_id`` is given) is walked
        once for all ``channels``, by exact checkpoint id. A channel's walk
        ends at the nearest ancestor holding a stored value (its snapshot,
        returned as ``seed``); the writes from there on are returned oldest
        first, each checkpoint's in ``writes_sort_key`` order. Writes stored
        at the checkpoint itself are pending for its next step and are left
        out, as in ``InMemorySaver``.

        Unlike ``get_tuple``, this never falls back past damage: LangGraph has
        already chosen the checkpoint, and for a delta channel a missing write
        is not an older value but a wrong one. So an ancestor on the walk that
        does not verify (or was quarantined), a stored value of one of these
        channels that cannot be read, or a damaged pending-writes record of an
        ancestor raises ``CheckpointDamagedError`` naming it, instead of
        returning a shortened history. A parent that does not exist at all
        (deleted by ``delete_for_runs``) ends the walk there, as in
        ``BaseCheckpointSaver``.

        Args:
            config: Names the checkpoint whose channels are rebuilt.
            channels: The delta channels to walk for.

        Returns:
            ``{"writes": [...], "seed": value}`` per channel; ``seed`` is left
            out when the walk reached the thread's first checkpoint without
            finding a stored value (the channel starts empty).

        Raises:
            CheckpointDamagedError: A record the walk needs cannot be used.

        Example:
            >>> saver = VerifiedSaver.in_memory()
            >>> config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            >>> saver.get_delta_channel_history(config=config, channels=["items"])
            {'items': {'writes': []}}
        """
        return _delta_history.delta_channel_history(self, config=config, channels=channels)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        """Async twin of ``get_delta_channel_history``."""
        return await self._run(self.get_delta_channel_history, config=config, channels=channels)

    # -- integrity ---------------------------------------------------------

    def verify(
        self,
        thread_id: str | None = None,
        *,
        repair: bool = False,
        progress: Callable[[int, int], Any] | None = None,
    ) -> VerifyReport:
        """Check every record of the store (or of one thread) and report damage.

        Args:
            thread_id: Only this thread; ``None`` for the whole store.
            repair: Move aside (quarantine) every record no read can use any
                more: damaged records, the pending writes of a quarantined
                checkpoint, and checkpoints that can never load, after the
                checkpoints that still load are rewritten to hold the values
                they kept in them. Reads return the same before and after; a
                later ``verify()`` passes, or its report says what is left and
                what to do (see docs/recovery.md).
            progress: Called as ``progress(done, total)`` while records are checked.

        Returns:
            A ``VerifyReport`` naming each damaged record and each checkpoint it
            makes unusable, with the checkpoint reads fall back to instead.

        Example:
            >>> saver = VerifiedSaver.in_memory()
            >>> checkpoint = {"v": 1, "id": "1", "ts": "", "channel_values": {},
            ...               "channel_versions": {}, "versions_seen": {}}
            >>> _ = saver.put({"configurable": {"thread_id": "t"}}, checkpoint, {}, {})
            >>> saver.storage.records["threads/t/ns/~/checkpoints/1.ckpt"] = b"junk"
            >>> report = saver.verify()
            >>> report.ok, [d.reason for d in report.damaged]
            (False, ['record is 4 bytes, shorter than the smallest record (76)'])
        """
        self._check_open()
        prefix = (
            "threads" if thread_id is None else _keys.thread_prefix(_keys.as_thread_id(thread_id))
        )
        return verify_store(self, prefix, repair=repair, progress=progress)

    async def averify(
        self,
        thread_id: str | None = None,
        *,
        repair: bool = False,
        progress: Callable[[int, int], Any] | None = None,
    ) -> VerifyReport:
        """Async twin of ``verify``."""
        return await self._run(self.verify, thread_id, repair=repair, progress=progress)

    # -- async twins ---------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if getattr(self.storage, "awaits_io", False):
            # a store reached over the network: the core runs on the event loop and
            # awaits each request (``_async_bridge``), no thread per call
            return await run_core(fn, *args, **kwargs)
        # files and memory: serializing, compressing, hashing and the disk's syncs
        # would otherwise stall the event loop
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async twin of ``get_tuple``."""
        return await self._run(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async twin of ``list``: items are produced in batches (on a worker thread for
        files and memory)."""
        iterator = self.list(config, filter=filter, before=before, limit=limit)

        def next_batch() -> builtins.list[CheckpointTuple]:
            batch = []
            for item in iterator:
                batch.append(item)
                if len(batch) >= _ASYNC_LIST_BATCH:
                    break
            return batch

        while batch := await self._run(next_batch):
            for item in batch:
                yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async twin of ``put``."""
        return await self._run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async twin of ``put_writes``."""
        await self._run(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async twin of ``delete_thread``."""
        await self._run(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async twin of ``delete_for_runs``."""
        await self._run(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async twin of ``copy_thread``."""
        await self._run(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async twin of ``prune``."""
        await self._run(self.prune, thread_ids, strategy=strategy)

    def _check_open(self) -> None:
        if self._closed:
            raise VerifiedSaverError(
                f"{self!r} is closed; open a new VerifiedSaver on the same store to continue"
            )


def _writes_owner(record: WritesRecord) -> tuple[str, str, str]:
    return record.thread_id, record.checkpoint_ns, record.checkpoint_id


def _check_checkpoint(checkpoint: Any) -> None:
    if not isinstance(checkpoint, dict):
        raise TypeError(f"checkpoint must be a dict, got {type(checkpoint).__name__}")
    if not checkpoint.get("id"):
        raise ValueError("checkpoint['id'] must be a non-empty string")
    _keys.require_text(checkpoint["id"], "checkpoint['id']")
    if not isinstance(checkpoint.get("channel_versions"), dict):
        raise ValueError("checkpoint['channel_versions'] must be a dict")
