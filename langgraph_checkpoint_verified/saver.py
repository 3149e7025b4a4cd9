"""``VerifiedSaver``: LangGraph's checkpointer contract over the engine.

This module knows LangGraph's contract (``BaseCheckpointSaver``): it reads the
config it is given, checks its arguments, and hands each call to the
``Engine``, which reads, verifies, falls back past damage and writes. It knows
nothing about bytes (``records``) or where they live (``storage``).

Every operation is written once, synchronously. Each ``a*`` twin makes one
crossing (``Engine.run_async``): to a worker thread for files and memory, so
the event loop never waits on a disk; on an object store the same core runs
on the event loop, each request awaited through the store's async API.
"""

from __future__ import annotations

import builtins
import os
import random
import threading
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
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

from langgraph_checkpoint_verified.engine import (
    DamageReporter,
    Engine,
    delta_history,
    maintenance,
    sweeper,
    tool_records,
)
from langgraph_checkpoint_verified.engine.configs import config as _config
from langgraph_checkpoint_verified.engine.configs import config_parts as _config_parts
from langgraph_checkpoint_verified.engine.damage import Damage, RecoveryStats
from langgraph_checkpoint_verified.engine.opening import ClosedOnExit, open_records
from langgraph_checkpoint_verified.engine.retention import (
    RetentionPolicy,
    SweepReport,
    sweep_threads,
)
from langgraph_checkpoint_verified.engine.sweeper import Sweeper
from langgraph_checkpoint_verified.engine.verify import verify_store
from langgraph_checkpoint_verified.engine.verify_report import VerifyReport
from langgraph_checkpoint_verified.errors import VerifiedSaverError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import DEFAULT_COMPRESSION_LEVEL, Codec
from langgraph_checkpoint_verified.storage import MemoryStorage, Storage

_ALLOWLIST_CLONES = 64
"""``with_allowlist`` clones kept per saver (a graph and each subgraph ask for one)."""


_ASYNC_LIST_BATCH = 64


class VerifiedSaver(BaseCheckpointSaver[str], ClosedOnExit):
    """A LangGraph checkpointer that verifies everything it reads.

    Checkpoints, channel values and pending writes are stored as records
    (zstd-compressed from 2 KB on disk), each framed with its identity and
    checksums that are checked before anything is decompressed or deserialized. Damaged
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
        compression_level: zstd level for new records that are compressed (1 to 22):
            on disk, a checkpoint or writes record from 2 KB of content (smaller ones
            are kept as they are); on object storage, every record.
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
            for a machine that reads the list for the first time. A list that
            also loses its first items (a window of the latest messages) is
            stored as the items it dropped and gained, and whole again after at
            most 4 such versions.

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

    _serde: SerializerProtocol = BaseCheckpointSaver.serde

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
        retention: RetentionPolicy | None = None,
        sweep_interval: timedelta | float = timedelta(hours=1),
        sweep_limit: int | None = None,
        on_sweep: Callable[[SweepReport], Any] | None = None,
    ) -> None:
        super().__init__(serde=serde)
        storage, codec, reporter = open_records(
            path,
            storage,
            owner="VerifiedSaver",
            key=key,
            fsync=fsync,
            compression_level=compression_level,
            on_corruption=on_corruption,
            quarantine=quarantine,
        )
        self.engine = Engine(
            storage,
            self.serde,
            codec,
            reporter,
            strict=strict,
            full_snapshot_every=full_snapshot_every,
            list_chain_limit=list_chain_limit,
        )
        # with_allowlist's clones, one per allowlist
        self._allowlisted: dict[frozenset[Any], VerifiedSaver] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.retention = retention
        self.sweeper: Sweeper | None = None
        if retention is not None:
            self._start_sweeper(retention, sweep_interval, sweep_limit, on_sweep)

    def _start_sweeper(
        self,
        policy: RetentionPolicy,
        interval: timedelta | float,
        limit: int | None,
        on_sweep: Callable[[SweepReport], Any] | None,
    ) -> None:
        if not isinstance(policy, RetentionPolicy):
            raise TypeError(f"retention must be a RetentionPolicy, got {type(policy).__name__}")
        seconds = interval.total_seconds() if isinstance(interval, timedelta) else interval
        engine = self.engine  # not the saver: the sweeper may outlive this saver

        def sweep_now() -> SweepReport:
            return sweep_threads(engine, policy, limit=limit)

        async def asweep_now() -> SweepReport:
            return await engine.run_async(sweep_now)

        self._sweeper_key = _store_key(engine.storage)
        self.sweeper = sweeper.acquire(
            self._sweeper_key,
            lambda: sweeper.Sweeper(sweep_now, asweep_now, seconds, on_sweep=on_sweep),
        )

    @property  # type: ignore[override]
    def serde(self) -> SerializerProtocol:
        """The serializer of checkpoints, metadata, values and writes."""
        return self._serde

    @serde.setter
    def serde(self, serde: SerializerProtocol) -> None:
        # Set by BaseCheckpointSaver, by its with_allowlist on a shallow copy, and by
        # the LangGraph server for JS graphs: the engine (shared with copies) is not
        # changed, this saver gets a view of it that uses the new serializer.
        self._serde = serde
        engine: Engine | None = vars(self).get("engine")
        if engine is not None:
            self.engine = engine.with_serde(serde)

    @property
    def storage(self) -> Storage:
        """Where the records live (``FileStorage``, ``MemoryStorage``, ``ObjectStorage``...)."""
        return self.engine.storage

    @property
    def codec(self) -> Codec:
        """Frames and verifies every record (with the store's key, if it has one)."""
        return self.engine.codec

    @property
    def reporter(self) -> DamageReporter:
        """Where every damaged record found is reported, counted and quarantined."""
        return self.engine.reporter

    @property
    def strict(self) -> bool:
        """Whether reads raise ``CheckpointDamagedError`` instead of falling back."""
        return self.engine.strict

    @property
    def full_snapshot_every(self) -> int:
        """Every this many checkpoints along a chain, one stores all its channel values."""
        return self.engine.full_snapshot_every

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
            made._allowlisted = {}  # noqa: SLF001 (a clone of this class: its own allowlist)
            made.sweeper = None  # the background sweeper is this saver's, stopped by its close
        with self._lock:
            if len(self._allowlisted) >= _ALLOWLIST_CLONES:
                self._allowlisted.pop(next(iter(self._allowlisted)))
            return self._allowlisted.setdefault(key, made)

    def close(self) -> None:
        """Release the saver and the files it keeps open. Idempotent; later calls raise
        ``VerifiedSaverError``. A saver dropped without it (one per request, say) lets
        go of them as it goes: it holds no reference cycle, so in CPython that is when
        the last reference to it goes, as with a ``sqlite3`` connection. A retention
        sweeper is the exception: it runs until ``close``."""
        if not self._closed and self.sweeper is not None:
            sweeper.release(self._sweeper_key, self.sweeper)
        self._closed = True
        with self._lock:
            clones = builtins.list(self._allowlisted.values())
        for clone in clones:
            clone.close()
        # a storage shared with another saver (or a running sweeper) opens them again
        self.engine.storage.close_idle()

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
        if checkpoint_id is not None:
            return self.engine.checkpoint_or_ancestor(thread_id, checkpoint_ns, checkpoint_id)
        return self.engine.latest_valid_checkpoint(thread_id, checkpoint_ns)

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
        if config is None:
            thread_ids, checkpoint_ns, checkpoint_id = None, None, None
        else:
            thread_id, _, checkpoint_id = _config_parts(config)
            thread_ids = [thread_id]
            checkpoint_ns = config["configurable"].get("checkpoint_ns")
        yield from self.engine.list_checkpoints(
            thread_ids,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            metadata_filter=filter,
            before_id=get_checkpoint_id(before) if before else None,
            limit=limit,
        )

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
        self.engine.put_checkpoint(
            thread_id,
            checkpoint_ns,
            parent_id,
            checkpoint,
            get_checkpoint_metadata(config, metadata),
            new_versions,
        )
        return _config(thread_id, checkpoint_ns, checkpoint["id"])

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
        keys.require_text(task_id, "task_id")
        keys.require_text(task_path, "task_path")
        self.engine.put_writes(thread_id, checkpoint_ns, checkpoint_id, writes, task_id, task_path)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions as ``InMemorySaver`` makes them: a zero-padded counter and a random tail."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

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
        tool_records.put_tool_record(
            self.engine,
            thread_id,
            checkpoint_ns,
            tool_call_id,
            kind,
            fingerprint=fingerprint,
            value=value,
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
        return tool_records.get_tool_record(
            self.engine, thread_id, checkpoint_ns, tool_call_id, kind, damaged=damaged
        )

    def delete_tool_record(
        self, thread_id: str, checkpoint_ns: str, tool_call_id: str, kind: str
    ) -> None:
        """Remove one tool-call record (missing is fine)."""
        self._check_open()
        tool_records.delete_tool_record(self.engine, thread_id, checkpoint_ns, tool_call_id, kind)

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
        await self.engine.run_async(
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
        return await self.engine.run_async(
            self.get_tool_record, thread_id, checkpoint_ns, tool_call_id, kind
        )

    async def adelete_tool_record(
        self, thread_id: str, checkpoint_ns: str, tool_call_id: str, kind: str
    ) -> None:
        """Async twin of ``delete_tool_record``."""
        await self.engine.run_async(
            self.delete_tool_record, thread_id, checkpoint_ns, tool_call_id, kind
        )

    # -- managing threads --------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and tool record of a thread."""
        self._check_open()
        maintenance.delete_thread(self.engine, thread_id)

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
        maintenance.delete_for_runs(self.engine, run_ids)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: ``"keep_latest"`` keeps the newest verified checkpoint per namespace
        (with its pending writes, rewritten to hold all its values); ``"delete"`` (or
        ``"delete_all"``, the LangGraph server's word for it) removes all.

        Each thread changes in one step (one compaction of its records): on files and
        in memory a crash leaves it as it was or pruned, never in between.

        ``DeltaChannel``: a delta channel stores only its writes between
        snapshots, so its value at the kept checkpoint is rebuilt from
        ancestors. For each channel named in the kept checkpoint's
        ``counters_since_delta_snapshot`` metadata, ``"keep_latest"`` also keeps
        every ancestor the history walk reads (back to the channel's nearest
        snapshot), with its pending writes: the kept checkpoint rebuilds the
        same value after pruning. If that walk meets damage, the thread is
        left as it is and ``CheckpointDamagedError`` is raised (threads listed
        before it are already pruned): pruning past the damage would turn an
        error into a silently shortened value.

        Tool-call records are kept (a resume from the kept checkpoint may need them).
        """
        self._check_open()
        maintenance.prune(self.engine, thread_ids, strategy=strategy)

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
        maintenance.copy_thread(self.engine, source_thread_id, target_thread_id)

    def sweep(
        self,
        policy: RetentionPolicy | None = None,
        *,
        dry_run: bool = False,
        limit: int | None = None,
        now: datetime | None = None,
    ) -> SweepReport:
        """Expire and trim threads as ``policy`` says (the saver's ``retention`` by default).

        Each thread is judged by its checkpoints' times (``ts``): expired when
        idle longer than ``policy.idle`` or older than ``policy.max_age``, then
        deleted or kept to its newest checkpoints (``policy.on_expiry``); others
        are trimmed to their newest ``policy.keep_last`` checkpoints per
        namespace. A thread is changed under its lock, and only if no
        checkpoint was written to it since it was judged (else it is skipped:
        it is in use); the change is one compaction, so on files and in memory
        a crash leaves it as it was or as the policy says. A thread waiting at
        an ``interrupt()`` keeps what its resume needs (its newest checkpoint,
        pending writes and tool-call records).

        Args:
            policy: What to expire and keep; defaults to the saver's ``retention``.
            dry_run: Change nothing; the report says exactly what a sweep would do.
            limit: Change at most this many threads (the rest are reported skipped).
            now: The time to judge by (default: now, UTC).

        Returns:
            A ``SweepReport``.

        Example:
            >>> from datetime import datetime, timedelta, timezone
            >>> saver = VerifiedSaver.in_memory()
            >>> checkpoint = {"v": 1, "id": "1", "ts": "2026-01-01T00:00:00+00:00",
            ...               "channel_values": {}, "channel_versions": {}, "versions_seen": {}}
            >>> _ = saver.put({"configurable": {"thread_id": "old"}}, checkpoint, {}, {})
            >>> policy = RetentionPolicy(idle=timedelta(days=30))
            >>> saver.sweep(policy, now=datetime(2026, 3, 1, tzinfo=timezone.utc)).threads_deleted
            ['old']
        """
        self._check_open()
        policy = policy or self.retention
        if policy is None:
            raise ValueError(
                "sweep needs a RetentionPolicy: pass one, or VerifiedSaver(retention=...)"
            )
        return sweep_threads(self.engine, policy, dry_run=dry_run, limit=limit, now=now)

    async def asweep(
        self,
        policy: RetentionPolicy | None = None,
        *,
        dry_run: bool = False,
        limit: int | None = None,
        now: datetime | None = None,
    ) -> SweepReport:
        """Async twin of ``sweep``."""
        return await self.engine.run_async(
            self.sweep, policy, dry_run=dry_run, limit=limit, now=now
        )

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
        thread_id, checkpoint_ns, checkpoint_id = _config_parts(config)
        return delta_history.delta_channel_history(
            self.engine, thread_id, checkpoint_ns, checkpoint_id, channels
        )

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        """Async twin of ``get_delta_channel_history``."""
        return await self.engine.run_async(
            self.get_delta_channel_history, config=config, channels=channels
        )

    # -- integrity ---------------------------------------------------------

    def verify(
        self,
        thread_id: str | None = None,
        *,
        repair: bool = False,
        progress: Callable[[int, int], Any] | None = None,
    ) -> VerifyReport:
        """Check every record of the store (or of one thread) and report damage.

        The whole store is every thread's records, every block of every thread's
        log against its parity (``report.healed``, ``report.unprotected_bytes``),
        and the memory store's items and the node cache's entries kept beside them.

        Args:
            thread_id: Only this thread; ``None`` for the whole store.
            repair: Write blocks rebuilt from a log's parity back in place, add the
                parity a log lacks, and move aside (quarantine) every record no
                read can use any more: damaged records, the pending writes of a
                quarantined checkpoint, and checkpoints that can never load, after
                the checkpoints that still load are rewritten to hold the values
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
            "threads" if thread_id is None else keys.thread_prefix(keys.as_thread_id(thread_id))
        )
        return verify_store(self.engine, prefix, repair=repair, progress=progress)

    async def averify(
        self,
        thread_id: str | None = None,
        *,
        repair: bool = False,
        progress: Callable[[int, int], Any] | None = None,
    ) -> VerifyReport:
        """Async twin of ``verify``."""
        return await self.engine.run_async(self.verify, thread_id, repair=repair, progress=progress)

    # -- async twins ---------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async twin of ``get_tuple``."""
        return await self.engine.run_async(self.get_tuple, config)

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

        while batch := await self.engine.run_async(next_batch):
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
        return await self.engine.run_async(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async twin of ``put_writes``."""
        await self.engine.run_async(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async twin of ``delete_thread``."""
        await self.engine.run_async(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async twin of ``delete_for_runs``."""
        await self.engine.run_async(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async twin of ``copy_thread``."""
        await self.engine.run_async(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async twin of ``prune``."""
        await self.engine.run_async(self.prune, thread_ids, strategy=strategy)

    def _check_open(self) -> None:
        if self._closed:
            raise VerifiedSaverError(
                f"{self!r} is closed; open a new VerifiedSaver on the same store to continue"
            )


def _store_key(storage: Storage) -> str:
    """Names a store across savers in this process: one sweeper per store."""
    if isinstance(storage, MemoryStorage):
        return f"memory:{id(storage)}"  # each in_memory() saver has a store of its own
    return f"{type(storage).__name__}:{storage.location('threads')}"


def _check_checkpoint(checkpoint: Any) -> None:
    if not isinstance(checkpoint, dict):
        raise TypeError(f"checkpoint must be a dict, got {type(checkpoint).__name__}")
    if not checkpoint.get("id"):
        raise ValueError("checkpoint['id'] must be a non-empty string")
    keys.require_text(checkpoint["id"], "checkpoint['id']")
    if not isinstance(checkpoint.get("channel_versions"), dict):
        raise ValueError("checkpoint['channel_versions'] must be a dict")
