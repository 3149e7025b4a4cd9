"""``VerifiedStore``: LangGraph's long-term memory store (``BaseStore``) on verified records.

The items of every namespace whose first label is ``<label>`` live in one log,
``memories/<label>/`` (``store.logs``): each ``batch`` call's changes to them
are one record (``store.batches``) holding the new versions (value serialized
by the store's ``serde``, times, TTL, embedding vectors), the deletions and
the TTL refreshes, so a ``put`` is one append and one sync on a file store,
whose logs heal a damaged block from their parity. A process keeps the newest
version of each item in memory, built from the batches that verify and brought
up to date from the ones written since, so a ``get`` costs a dictionary look-up
and a search reads only its first label's items.

A batch that does not verify is reported, counted and quarantined by a
``DamageReporter``, exactly as the saver and the cache do, and each item it
changed reads as its newest earlier version that verifies, or as missing.

This is a face over ``storage``, ``records`` and the engine's damage reporting
and sweeper; it does not use the saver, so a graph can have a store without a
checkpointer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import logging
import os
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
)

from langgraph_checkpoint_verified.engine.damage import Damage, RecoveryStats
from langgraph_checkpoint_verified.engine.opening import ClosedOnExit, open_records
from langgraph_checkpoint_verified.engine.sweeper import Sweeper
from langgraph_checkpoint_verified.errors import (
    RecordDamagedError,
    StoreWriteError,
    VerifiedSaverError,
)
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import DEFAULT_COMPRESSION_LEVEL
from langgraph_checkpoint_verified.storage import MemoryStorage, Storage
from langgraph_checkpoint_verified.storage.crossing import run_off_loop
from langgraph_checkpoint_verified.store.batches import (
    Batch,
    ItemVersion,
    Touch,
    vector_bytes,
    vector_floats,
)
from langgraph_checkpoint_verified.store.filters import matches_filter, namespace_matches
from langgraph_checkpoint_verified.store.legacy import move_into_logs
from langgraph_checkpoint_verified.store.logs import ItemKey, LabelItems, MemoryLogs
from langgraph_checkpoint_verified.store.operations import (
    checked_ops,
    last_puts,
    namespace_of,
    ttl_config,
)
from langgraph_checkpoint_verified.store.vectors import VectorTable, tokenized_fields

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.engine.verify_report import VerifyReport

T = TypeVar("T")

logger = logging.getLogger("langgraph_checkpoint_verified")

_DEFAULT_SWEEP_INTERVAL_MINUTES = 5.0


@dataclass(frozen=True)
class StoredItem:
    """One memory as the store keeps it: what an export holds and an import restores.

    Attributes:
        namespace: The item's namespace.
        key: Its key.
        value: Its value (a dict).
        created_at: When it was first put (an update keeps it).
        updated_at: When it was last put.
        ttl: Its time to live in minutes, as put (``None``: it never expires).
        expires_at: When it expires, in seconds since the epoch, a refresh on
            read included (``None``: never).
        vectors: Its embeddings, by field path (empty without an index).
    """

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    ttl: float | None = None
    expires_at: float | None = None
    vectors: dict[str, list[float]] = field(default_factory=dict)


class VerifiedStore(BaseStore, ClosedOnExit):
    """LangGraph's long-term memory store, kept as verified records.

    Pass it to ``graph.compile(store=...)``: nodes reach it through
    ``get_store()`` or an ``InjectedStore`` argument, and it takes the place of
    ``InMemoryStore``, ``SqliteStore`` or ``PostgresStore``. It can share its
    directory (or bucket) with a ``VerifiedSaver`` and a ``VerifiedCache``: its
    items live under ``memories/``, beside ``threads/`` and ``cache/``, and share
    the store marker and the quarantine.

    Every batch of changes is verified (checksums or, with ``key``, MACs, and
    that the record is the batch its name says, not a copy of another) before
    anything in it is used. A damaged batch is never used: it is reported,
    counted in ``stats`` and moved under ``quarantine/``, and every item it
    changed reads as its newest earlier version that verifies (kept until the
    label's log is compacted), or as missing.

    Operations of one ``batch`` see the store as it was before the batch: reads
    (get, search, list_namespaces) run first, then the puts, of which the last
    for each item wins, as in ``InMemoryStore``.

    Search results without a ``query`` come newest first (``updated_at``
    descending, then by namespace and key), as in LangGraph's SQL stores; with a
    ``query`` they come best score first, and items with no vector after them.

    Args:
        path: Directory of the store (created if missing), or
            ``"s3://bucket/prefix"`` for a bucket (``ObjectStorage``, the ``[s3]``
            extra). Omit it and pass ``storage=``, or use ``VerifiedStore.in_memory()``.
        storage: A ``Storage`` implementation to use instead of files.
        index: Semantic search: ``{"dims": ..., "embed": ..., "fields": [...]}``
            (LangGraph's ``IndexConfig``); ``embed`` is an ``Embeddings``, a
            function or an async function from texts to vectors.
        ttl: Expiry: ``{"default_ttl": minutes, "refresh_on_read": bool,
            "sweep_interval_minutes": minutes}`` (LangGraph's ``TTLConfig``).
        serde: Serializer of the item values (any ``SerializerProtocol``, e.g.
            ``EncryptedSerializer``). Defaults to LangGraph's ``JsonPlusSerializer``.
        key: Secret bytes (16 to 64). Checksums become keyed MACs: items not
            written with this key are rejected as damage. A store shared with a
            saver takes the saver's key.
        fsync: ``True`` (the default) makes every acknowledged ``put`` survive
            power loss. ``False`` is faster and survives process crashes only.
        compression_level: zstd level for new records (1 to 22).
        on_corruption: Called with a ``Damage`` for each damaged record found.
        quarantine: ``False`` reports damage without moving records aside, and reads
            the items of a store of the older layout (``store/``) where they are
            instead of moving them into ``memories/``.

    Example:
        >>> import tempfile
        >>> from langgraph.graph import StateGraph, START
        >>> from langgraph.config import get_store
        >>> from typing_extensions import TypedDict
        >>> class State(TypedDict):
        ...     user: str
        ...     visits: int
        >>> def count_visit(state: State) -> State:
        ...     store, ns = get_store(), ("visits", state["user"])
        ...     seen = store.get(ns, "count")
        ...     visits = (seen.value["n"] if seen else 0) + 1
        ...     store.put(ns, "count", {"n": visits})
        ...     return {"visits": visits}
        >>> builder = StateGraph(State)
        >>> _ = builder.add_node("count_visit", count_visit)
        >>> _ = builder.add_edge(START, "count_visit")
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     graph = builder.compile(store=VerifiedStore(directory))
        ...     _ = graph.invoke({"user": "ada", "visits": 0})
        ...     graph.invoke({"user": "ada", "visits": 0})["visits"]
        2
    """

    supports_ttl: bool = True

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        storage: Storage | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        serde: SerializerProtocol | None = None,
        key: bytes | None = None,
        fsync: bool = True,
        compression_level: int = DEFAULT_COMPRESSION_LEVEL,
        on_corruption: Callable[[Damage], Any] | None = None,
        quarantine: bool = True,
    ) -> None:
        self.ttl_config = ttl_config(ttl)
        self.index_config: IndexConfig | None = IndexConfig(**index) if index else None
        self.embeddings = None
        self._fields: list[tuple[str, list[str] | str]] = []
        if index:
            if "embed" not in index:
                raise TypeError("index needs 'embed': an Embeddings, or a function of texts")
            self.embeddings = ensure_embeddings(index["embed"])
            self._fields = tokenized_fields(index.get("fields") or ["$"])
        self.storage, self.codec, self.reporter = open_records(
            path,
            storage,
            owner="VerifiedStore",
            key=key,
            fsync=fsync,
            compression_level=compression_level,
            on_corruption=on_corruption,
            quarantine=quarantine,
        )
        self.serde: SerializerProtocol = serde if serde is not None else JsonPlusSerializer()
        self.logs = MemoryLogs(self.storage, self.codec, self.reporter)
        try:
            # a store that moves nothing aside (quarantine=False, as read-only commands
            # open it) reads an older layout's items in place instead
            move_into_logs(self.logs, move=quarantine)
        except (StoreWriteError, OSError) as exc:
            # a read-only store of the older layout: its items stay where they are
            logger.warning("could not move the items under store/ into memories/: %s", exc)
        self._sweeper: Sweeper | None = None
        self._sweeper_done: concurrent.futures.Future[None] | None = None
        self._closed = False

    @classmethod
    def in_memory(cls, **kwargs: Any) -> VerifiedStore:
        """A store holding the same verified records in memory (an ``InMemoryStore`` drop-in).

        Example:
            >>> store = VerifiedStore.in_memory()
            >>> store.put(("users", "ada"), "prefs", {"theme": "dark"})
            >>> store.get(("users", "ada"), "prefs").value
            {'theme': 'dark'}
        """
        return cls(storage=MemoryStorage(), **kwargs)

    @classmethod
    def from_conn_string(cls, conn_string: str | os.PathLike[str], **kwargs: Any) -> VerifiedStore:
        """Open a store by path (``":memory:"`` for memory), for ``with`` or ``async with``.

        Mirrors ``SqliteStore.from_conn_string``; the store is closed when the
        block ends.

        Example:
            >>> with VerifiedStore.from_conn_string(":memory:") as store:
            ...     store.put(("ns",), "k", {"v": 1})
            ...     store.get(("ns",), "k").value
            {'v': 1}
        """
        if not isinstance(conn_string, (str, os.PathLike)):
            raise TypeError(f"conn_string must be a path, got {type(conn_string).__name__}")
        if conn_string == ":memory:":
            return cls.in_memory(**kwargs)
        return cls(conn_string, **kwargs)

    @property
    def stats(self) -> RecoveryStats:
        """Counters of damaged and unreadable records found, and records quarantined."""
        return self.reporter.stats

    def verify(self, *, repair: bool = False) -> VerifyReport:
        """Check every item and TTL refresh record of the store, and report damage.

        Each record's frame, digests and identity (it must be the record of the
        key it is stored at) are checked; no value is deserialized. A damaged
        item is what a read would report and then treat as missing.
        ``VerifiedSaver.verify()`` on the same directory checks these records
        too, with the checkpoints and the cache entries.

        Args:
            repair: Move each damaged record aside (under ``quarantine/``, with
                its reason), as a read that finds it does; the item then reads
                as missing, and a later ``verify()`` passes. Nothing is moved
                when the store was opened with ``quarantine=False``.

        Returns:
            A ``VerifyReport`` naming each damaged record (kind ``store_item``
            or ``store_touch``) and where repair moved it.

        Example:
            >>> store = VerifiedStore.in_memory()
            >>> store.put(("users",), "ada", {"theme": "dark"})
            >>> [batch] = store.storage.walk("memories")
            >>> store.storage.records[batch] = b"junk"
            >>> [d.kind for d in store.verify().damaged]
            ['store_batch']
            >>> store.verify(repair=True).damaged[0].quarantined_to is not None
            True
            >>> store.verify().ok, VerifiedStore(storage=store.storage).get(("users",), "ada")
            (True, None)
        """
        from langgraph_checkpoint_verified.engine.verify import verify_records

        self._check_open()
        with self.logs.lock:
            report = verify_records(
                self.storage,
                self.codec,
                self.reporter,
                (keys.MEMORIES_PREFIX, keys.STORE_PREFIX),
                repair=repair,
            )
            if repair:
                self.logs.forget()  # what was moved aside no longer counts
            return report

    def stored_items(self, namespace_prefix: tuple[str, ...] = ()) -> Iterator[StoredItem]:
        """Every live item under ``namespace_prefix`` as it is kept: times, TTL, expiry, vectors.

        What an export of the store holds. Items come by namespace, then key.
        Nothing is refreshed; damaged items are reported and left out (and
        quarantined, unless the store was opened with ``quarantine=False``),
        expired ones left out.

        Example:
            >>> store = VerifiedStore.in_memory()
            >>> store.put(("users", "ada"), "prefs", {"theme": "dark"}, ttl=60)
            >>> [(i.namespace, i.key, i.value, i.ttl) for i in store.stored_items()]
            [(('users', 'ada'), 'prefs', {'theme': 'dark'}, 60)]
        """
        self._check_open()
        now = time.time()
        with self.logs.lock:
            found = sorted(
                self._live_under(tuple(namespace_prefix), now),
                key=lambda item: (item.namespace, item.key),
            )
        for item in found:
            yield StoredItem(
                namespace=item.namespace,
                key=item.key,
                value=self._value(item),
                created_at=_time(item.created_at),
                updated_at=_time(item.updated_at),
                ttl=item.ttl,
                expires_at=item.expires_at,
                vectors={path: vector_floats(v) for path, v in item.vectors.items()},
            )

    def restore_items(self, items: Iterable[StoredItem]) -> None:
        """Write items exactly as given (times, TTL, expiry and vectors kept), as an import does.

        An item already at the same namespace and key is replaced. Unlike
        ``put``, nothing is embedded and nothing is stamped with the time now,
        so memories copied from another store (``stored_items``) keep their
        history, their expiry and their place in similarity searches.

        Example:
            >>> source, copy = VerifiedStore.in_memory(), VerifiedStore.in_memory()
            >>> source.put(("users",), "ada", {"theme": "dark"})
            >>> copy.restore_items(source.stored_items())
            >>> copy.get(("users",), "ada") == source.get(("users",), "ada")
            True
        """
        self._check_open()
        batches: dict[str, Batch] = {}
        for item in items:
            namespace = namespace_of(item.namespace)
            if not namespace:
                raise InvalidNamespaceError("a store namespace has at least one label")
            keys.require_text(item.key, "store key")
            if not isinstance(item.value, Mapping):
                raise TypeError(f"a store value is a dict, got {type(item.value).__name__}")
            batches.setdefault(namespace[0], Batch()).puts.append(
                ItemVersion(
                    namespace=namespace,
                    key=item.key,
                    version="",
                    created_at=_micros(item.created_at),
                    updated_at=_micros(item.updated_at),
                    ttl=item.ttl,
                    expires_at=item.expires_at,
                    value=self.serde.dumps_typed(dict(item.value)),
                    vectors={path: vector_bytes(v) for path, v in item.vectors.items()},
                )
            )
        with self.logs.lock:
            for label, batch in batches.items():
                self.logs.write(label, batch)

    # -- BaseStore -----------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` and return their results in the same order.

        ``get``, ``put``, ``delete``, ``search`` and ``list_namespaces`` (and
        their ``a*`` twins) all come here through ``BaseStore``. Reads see the
        store as it was before the batch; then the puts are written, the last
        one for each item winning.

        Example:
            >>> from langgraph.store.base import GetOp, PutOp
            >>> store = VerifiedStore.in_memory()
            >>> store.batch([PutOp(("ns",), "k", {"v": 1}), GetOp(("ns",), "k")])
            [None, None]
            >>> store.batch([GetOp(("ns",), "k")])[0].value
            {'v': 1}
        """
        self._check_open()
        ops = checked_ops(ops)
        texts, queries = self._to_embed(ops)
        vectors = (
            self.embeddings.embed_documents([text for text, _ in texts])
            if texts and self.embeddings
            else []
        )
        query_vectors = {q: self.embeddings.embed_query(q) for q in queries if self.embeddings}
        return self._run(ops, texts, vectors, query_vectors)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch``, with embeddings awaited and the storage work off the event loop."""
        self._check_open()
        ops = checked_ops(ops)
        texts, queries = self._to_embed(ops)
        vectors = (
            await self.embeddings.aembed_documents([text for text, _ in texts])
            if texts and self.embeddings
            else []
        )
        query_vectors: dict[str, list[float]] = {}
        if queries and self.embeddings:
            found = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
            query_vectors = dict(zip(queries, found, strict=False))
        return await self._run_async(self._run, ops, texts, vectors, query_vectors)

    # -- TTL -------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete every expired item now; return how many were deleted.

        Expired items are never returned even before a sweep: sweeping only
        frees their space. A damaged item found on the way is reported.

        Example:
            >>> store = VerifiedStore.in_memory()
            >>> store.put(("ns",), "gone", {"v": 1}, ttl=0)
            >>> store.put(("ns",), "kept", {"v": 2})
            >>> store.sweep_ttl()
            1
        """
        self._check_open()
        now = time.time()
        deleted = 0
        with self.logs.lock:
            for label in self.logs.labels():
                deleted += self.logs.delete_expired(label, now)
        return deleted

    async def asweep_ttl(self) -> int:
        """``sweep_ttl``, off the event loop."""
        return await self._run_async(self.sweep_ttl)

    def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep expired items every ``sweep_interval_minutes`` in the background.

        Runs as a task on the running event loop if there is one, else on a
        daemon thread (the engine's ``Sweeper``); the first sweep runs at once.
        The interval defaults to the TTL config's ``sweep_interval_minutes``,
        then to 5 minutes. Without a TTL config nothing is started.

        Returns:
            A future that is done when the sweeper stops (``stop_ttl_sweeper``,
            ``close``); cancelling it stops the sweeper too.
        """
        self._check_open()
        if self._sweeper_done is not None and not self._sweeper_done.done():
            return self._sweeper_done
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.ttl_config:
            done.set_result(None)
            return done
        minutes = float(
            sweep_interval_minutes
            or self.ttl_config.get("sweep_interval_minutes")
            or _DEFAULT_SWEEP_INTERVAL_MINUTES
        )
        self._sweeper = Sweeper(self.sweep_ttl, self.asweep_ttl, minutes * 60)
        self._sweeper_done = done
        done.add_done_callback(lambda f: self.stop_ttl_sweeper() if f.cancelled() else None)
        self._sweeper.start()
        return done

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the background sweeper, after the sweep in progress if any.

        Returns:
            ``True`` (the sweeper is stopped, or was not running). ``timeout`` is
            accepted for ``SqliteStore``'s signature; a thread is joined.
        """
        sweeper, done = self._sweeper, self._sweeper_done
        self._sweeper = self._sweeper_done = None
        if sweeper is not None:
            sweeper.stop()
        if done is not None and not done.done():
            done.set_result(None)
        return True

    # -- opening and closing ---------------------------------------------------

    def close(self) -> None:
        """Stop the sweeper and release the store and the files it keeps open. Idempotent;
        later calls raise."""
        self.stop_ttl_sweeper()
        self._closed = True
        self.storage.close_idle()

    def __repr__(self) -> str:
        return f"VerifiedStore({self.storage!r})"

    # -- inside: one batch -------------------------------------------------------

    def _to_embed(self, ops: list[Op]) -> tuple[list[tuple[str, tuple[int, str]]], list[str]]:
        """Texts to embed (with the put and vector name each is for) and distinct queries."""
        if self.embeddings is None:
            return [], []
        texts: list[tuple[str, tuple[int, str]]] = []
        for i, op in last_puts(ops).items():
            if op.value is None or op.index is False:
                continue
            fields = self._fields if op.index is None else tokenized_fields(op.index)
            for path, tokens in fields:
                found = get_text_at_path(op.value, tokens)
                # the vector names InMemoryStore gives: "path", or "path.i" for each of several
                names = [path] if len(found) == 1 else [f"{path}.{j}" for j in range(len(found))]
                texts.extend((text, (i, name)) for text, name in zip(found, names, strict=False))
        queries = sorted({op.query for op in ops if isinstance(op, SearchOp) and op.query})
        return texts, queries

    def _run(
        self,
        ops: list[Op],
        texts: list[tuple[str, tuple[int, str]]],
        vectors: list[list[float]],
        query_vectors: dict[str, list[float]],
    ) -> list[Result]:
        """The sync core of ``batch`` and ``abatch``: reads first, then the puts."""
        if len(vectors) != len(texts):
            raise ValueError(
                f"the embedding function returned {len(vectors)} vectors for {len(texts)} texts"
            )
        now = time.time()
        results: list[Result] = []
        touched: dict[ItemKey, ItemVersion] = {}
        with self.logs.lock:
            for op in ops:
                if isinstance(op, GetOp):
                    found = self._live(tuple(op.namespace), op.key, now)
                    if found is not None and op.refresh_ttl:
                        touched[(found.namespace, found.key)] = found
                    results.append(self._item(found) if found is not None else None)
                elif isinstance(op, SearchOp):
                    page = self._search(op, query_vectors.get(op.query or ""), now)
                    if op.refresh_ttl:
                        for item, _ in page:
                            touched[(item.namespace, item.key)] = item
                    results.append([self._search_item(item, score) for item, score in page])
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op, now))
                else:
                    results.append(None)
            by_put: dict[int, dict[str, list[float]]] = {}
            for (_, (i, name)), vector in zip(texts, vectors, strict=True):
                by_put.setdefault(i, {})[name] = [float(x) for x in vector]
            # refreshed before the puts: a put of the same item makes a new version,
            # which the refresh does not name
            self._refresh([item for item in touched.values() if item.ttl is not None], now)
            self._write(last_puts(ops), by_put, now)
        return results

    def _item(self, item: ItemVersion) -> Item:
        return Item(
            value=self._value(item),
            key=item.key,
            namespace=item.namespace,
            created_at=_time(item.created_at),
            updated_at=_time(item.updated_at),
        )

    def _search_item(self, item: ItemVersion, score: float | None) -> SearchItem:
        return SearchItem(
            namespace=item.namespace,
            key=item.key,
            value=self._value(item),
            created_at=_time(item.created_at),
            updated_at=_time(item.updated_at),
            score=score,
        )

    def _write(
        self, puts: dict[int, PutOp], vectors: dict[int, dict[str, list[float]]], now: float
    ) -> None:
        by_label: dict[str, list[tuple[int, PutOp]]] = {}
        for i, op in puts.items():
            by_label.setdefault(op.namespace[0], []).append((i, op))
        for label, ops in by_label.items():

            def changes(state: LabelItems, ops: list[tuple[int, PutOp]] = ops) -> Batch:
                batch = Batch()
                for i, op in ops:
                    namespace = tuple(op.namespace)
                    if op.value is None:
                        batch.deletes.append((namespace, op.key))
                        continue
                    # created_at survives an update, as in LangGraph's SQL stores; an
                    # item that expired or was damaged starts again. Judged under the
                    # label's lock: a put racing this one is seen.
                    before = state.items.get((namespace, op.key))
                    if before is not None and before.expired(now):
                        before = None
                    batch.puts.append(
                        ItemVersion(
                            namespace=namespace,
                            key=op.key,
                            version="",  # named when written
                            created_at=before.created_at if before else _now_micros(now),
                            updated_at=_now_micros(now),
                            ttl=op.ttl,
                            # absolute: a process that reads it later needs no other clock
                            expires_at=None if op.ttl is None else now + op.ttl * 60,
                            value=self.serde.dumps_typed(dict(op.value)),
                            vectors={n: vector_bytes(v) for n, v in vectors.get(i, {}).items()},
                        )
                    )
                return batch

            self.logs.update(label, changes)

    def _refresh(self, items: list[ItemVersion], now: float) -> None:
        """Extend the TTL of items just read, with a touch naming their version (never a
        rewrite: a value another process has just replaced is never put back)."""
        batches: dict[str, Batch] = {}
        for item in items:
            assert item.ttl is not None
            batches.setdefault(item.namespace[0], Batch()).touches.append(
                Touch(item.namespace, item.key, item.version, now + item.ttl * 60)
            )
        for label, batch in batches.items():
            # losing a refresh to a crash costs an earlier expiry, never a wrong value
            self.logs.write(label, batch, durable=False)

    # -- inside: reading ----------------------------------------------------------

    def _live(self, namespace: tuple[str, ...], key: str, now: float) -> ItemVersion | None:
        """The item's newest version that verifies, unless it is expired (or deleted)."""
        item = self.logs.current(namespace[0]).items.get((tuple(namespace), key))
        if item is None or item.expired(now):
            return None
        return item

    def _labels_under(self, namespace_prefix: tuple[str, ...]) -> list[str]:
        """The labels whose logs a search of ``namespace_prefix`` reads."""
        return [namespace_prefix[0]] if namespace_prefix else self.logs.labels()

    def _live_under(
        self, namespace_prefix: tuple[str, ...], now: float, states: list[LabelItems] | None = None
    ) -> Iterator[ItemVersion]:
        """Live items under ``namespace_prefix``, newest first, then by namespace and key
        (from ``states``, the labels as caught up with once, if given)."""
        if states is None:
            states = self._states(namespace_prefix)
        each = [state.newest_first(namespace_prefix) for state in states]
        merged = each[0] if len(each) == 1 else heapq.merge(*each, key=_newest_first)
        for item in merged:
            if not item.expired(now):
                yield item

    def _states(self, namespace_prefix: tuple[str, ...]) -> list[LabelItems]:
        """The items of every label a read of ``namespace_prefix`` reads, caught up with."""
        return [self.logs.current(label) for label in self._labels_under(namespace_prefix)]

    def _value(self, item: ItemVersion) -> dict[str, Any]:
        """A fresh copy of the item's value, deserialized: callers may change it."""
        value = self.serde.loads_typed(item.value)
        if not isinstance(value, dict):
            raise RecordDamagedError(f"store item {item.key!r} of {item.namespace!r} is not a dict")
        return value

    def _filter_view(self, item: ItemVersion) -> dict[str, Any]:
        """The item's value as filters see it (deserialized once, never handed out)."""
        if item.decoded is None:
            item.decoded = self._value(item)
        return item.decoded

    def _search(
        self, op: SearchOp, query_vector: list[float] | None, now: float
    ) -> list[tuple[ItemVersion, float | None]]:
        prefix = tuple(op.namespace_prefix)
        wanted = op.offset + op.limit
        if not (op.query and query_vector is not None):
            # newest first: only as many items as the page needs are looked at
            page: list[tuple[ItemVersion, float | None]] = []
            for item in self._live_under(prefix, now):
                if not op.filter or matches_filter(self._filter_view(item), op.filter):
                    page.append((item, None))
                    if len(page) >= wanted:
                        break
            return page[op.offset : wanted]
        states = self._states(prefix)  # the candidates and their scores from one look
        found = [
            item
            for item in self._live_under(prefix, now, states)
            if not op.filter or matches_filter(self._filter_view(item), op.filter)
        ]
        scores: dict[Hashable, float] = {}
        for state in states:
            if state.vector_table is None or state.vector_table[0] != state.changes:
                state.vector_table = (state.changes, VectorTable(state.items.values()))
            scores.update(state.vector_table[1].best_scores(query_vector))
        scored = [(s, scores[(s.namespace, s.key)]) for s in found if s.vectors]
        scored.sort(key=lambda pair: pair[1], reverse=True)
        ranked: list[tuple[ItemVersion, float | None]] = [
            *scored,
            *((s, None) for s in found if not s.vectors),
        ]
        return ranked[op.offset : wanted]

    def _list_namespaces(self, op: ListNamespacesOp, now: float) -> list[tuple[str, ...]]:
        namespaces = {item.namespace for item in self._live_under((), now)}
        conditions = op.match_conditions or ()
        matching = [ns for ns in namespaces if all(namespace_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            matching = list({ns[: op.max_depth] for ns in matching})
        return sorted(matching)[op.offset : op.offset + op.limit]

    async def _run_async(self, fn: Callable[..., T], *args: Any) -> T:
        return await run_off_loop(self.storage, fn, *args)

    def _check_open(self) -> None:
        if self._closed:
            raise VerifiedSaverError(
                f"{self!r} is closed; open a new VerifiedStore on the same store to continue"
            )


# -- pure helpers --------------------------------------------------------------------


def _newest_first(item: ItemVersion) -> tuple[int, tuple[str, ...], str]:
    return -item.updated_at, item.namespace, item.key


def _now_micros(now: float) -> int:
    return round(now * 1_000_000)


def _micros(moment: datetime) -> int:
    return round(moment.timestamp() * 1_000_000)


def _time(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, timezone.utc)
