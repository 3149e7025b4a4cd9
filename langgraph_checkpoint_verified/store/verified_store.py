"""``VerifiedStore``: LangGraph's long-term memory store (``BaseStore``) on verified records.

Each item is one record (kind ``STORE_ITEM``) at
``store/<namespace labels>/<key>.item``: its namespace, key and version in the
checksummed identity; its value (serialized by the store's ``serde``), its
times, its TTL and its embedding vectors in the zstd payload. A TTL refreshed
by a read is a second, small record (kind ``STORE_TOUCH``,
``<key>.touch``) naming the version it extends, so a read never rewrites an
item and can never put back a value another process has just replaced.

A read verifies the frame and the identity before it deserializes anything;
damage is reported, counted and quarantined by a ``DamageReporter``, exactly as
the saver and the cache do, and the item reads as missing.

This is a face over ``storage``, ``records`` and the engine's damage reporting
and sweeper; it does not use the saver, so a graph can have a store without a
checkpointer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import TracebackType
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
from langgraph_checkpoint_verified.engine.opening import open_records
from langgraph_checkpoint_verified.engine.sweeper import Sweeper
from langgraph_checkpoint_verified.errors import RecordDamagedError, VerifiedSaverError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import (
    DEFAULT_COMPRESSION_LEVEL,
    RecordKind,
    pack,
    unpack,
)
from langgraph_checkpoint_verified.storage import MemoryStorage, Storage
from langgraph_checkpoint_verified.storage.crossing import run_off_loop
from langgraph_checkpoint_verified.store.filters import matches_filter, namespace_matches
from langgraph_checkpoint_verified.store.vectors import cosine_scores, tokenized_fields

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.engine.verify import VerifyReport

T = TypeVar("T")

_CONTENT_VERSION = 1
_DEFAULT_SWEEP_INTERVAL_MINUTES = 5.0
_COMPARISONS = ("$gt", "$gte", "$lt", "$lte")


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


@dataclass
class _Stored:
    """One verified, live item as read: what a result is made of."""

    namespace: tuple[str, ...]
    key: str
    version: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    ttl: float | None
    expires_at: float | None
    vectors: dict[str, list[float]] = field(default_factory=dict)

    def item(self) -> Item:
        return Item(
            value=self.value,
            key=self.key,
            namespace=self.namespace,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )

    def search_item(self, score: float | None = None) -> SearchItem:
        return SearchItem(
            namespace=self.namespace,
            key=self.key,
            value=self.value,
            created_at=self.created_at,
            updated_at=self.updated_at,
            score=score,
        )


class VerifiedStore(BaseStore, AbstractContextManager, AbstractAsyncContextManager):
    """LangGraph's long-term memory store, kept as verified records.

    Pass it to ``graph.compile(store=...)``: nodes reach it through
    ``get_store()`` or an ``InjectedStore`` argument, and it takes the place of
    ``InMemoryStore``, ``SqliteStore`` or ``PostgresStore``. It can share its
    directory (or bucket) with a ``VerifiedSaver`` and a ``VerifiedCache``: its
    items live under ``store/``, beside ``threads/`` and ``cache/``, and share
    the store marker and the quarantine.

    Every item read is verified (checksums or, with ``key``, MACs, and that the
    item is the one asked for, not a copy of another) before its value is
    deserialized. A damaged item is never returned: it reads as missing (only
    the newest version of an item is kept), and it is reported, counted in
    ``stats`` and moved under ``quarantine/``.

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
        quarantine: ``False`` reports damage without moving records aside.

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
        self.ttl_config = _ttl_config(ttl)
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
            >>> store.storage.records["store/users/ada.item"] = b"junk"
            >>> [(d.kind, d.key) for d in store.verify().damaged]
            [('store_item', 'store/users/ada.item')]
            >>> store.verify(repair=True).damaged[0].quarantined_to is not None
            True
            >>> store.verify().ok, store.get(("users",), "ada")
            (True, None)
        """
        from langgraph_checkpoint_verified.engine.verify import verify_records

        self._check_open()
        return verify_records(
            self.storage, self.codec, self.reporter, (keys.STORE_PREFIX,), repair=repair
        )

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
        found = sorted(self._live_under(tuple(namespace_prefix), now), key=_place)
        for stored in found:
            yield StoredItem(
                namespace=stored.namespace,
                key=stored.key,
                value=stored.value,
                created_at=stored.created_at,
                updated_at=stored.updated_at,
                ttl=stored.ttl,
                expires_at=stored.expires_at,
                vectors=stored.vectors,
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
        records = []
        for item in items:
            namespace = _namespace(item.namespace)
            keys.require_text(item.key, "store key")
            if not isinstance(item.value, Mapping):
                raise TypeError(f"a store value is a dict, got {type(item.value).__name__}")
            content = {
                "v": _CONTENT_VERSION,
                "created_at": _micros(item.created_at),
                "updated_at": _micros(item.updated_at),
                "ttl": item.ttl,
                "expires_at": item.expires_at,
                "value": self.serde.dumps_typed(dict(item.value)),
                "vectors": {name: [float(x) for x in v] for name, v in item.vectors.items()},
            }
            records.append(self._item_record(namespace, item.key, content))
        self._store_records(records)

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
        ops = self._checked(ops)
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
        ops = self._checked(ops)
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
        for record_key in list(self.storage.walk(keys.STORE_PREFIX)):
            if record_key.endswith(keys.STORE_TOUCH_SUFFIX):
                item_key = record_key[: -len(keys.STORE_TOUCH_SUFFIX)] + keys.STORE_ITEM_SUFFIX
                if self.storage.read(item_key) is None:
                    self.storage.delete(record_key)  # its item is gone: nothing to extend
                continue
            if not record_key.endswith(keys.STORE_ITEM_SUFFIX):
                continue
            stored = self._read_at(record_key, None, now, live_only=False)
            if stored is not None and _expired(stored.expires_at, now):
                # Another process may put the item again between our read and this
                # delete; that put is then lost, as it would be to a sweep that ran
                # a moment later. A put of a never-expiring item is not exposed.
                self.storage.delete(record_key)
                self.storage.delete(keys.store_touch_key(stored.namespace, stored.key))
                deleted += 1
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
        """Stop the sweeper and release the store. Idempotent; later calls raise."""
        self.stop_ttl_sweeper()
        self._closed = True

    def __enter__(self) -> VerifiedStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> VerifiedStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VerifiedStore({self.storage!r})"

    # -- inside: one batch -------------------------------------------------------

    def _checked(self, ops: Iterable[Op]) -> list[Op]:
        ops = list(ops)
        for op in ops:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise TypeError(f"unknown store operation: {type(op).__name__}")
            # BaseStore's methods check labels, but ops may come to batch directly
            _validate_op_labels(op)
            if isinstance(op, (GetOp, PutOp)):
                _namespace(op.namespace)
                keys.require_text(op.key, "store key")
            if isinstance(op, PutOp) and op.value is not None:
                if not isinstance(op.value, Mapping):
                    raise TypeError(
                        f"a store value is a dict, got {type(op.value).__name__}: {op.value!r:.100}"
                    )
                if op.ttl is not None and (
                    isinstance(op.ttl, bool) or not isinstance(op.ttl, (int, float))
                ):
                    raise TypeError(f"ttl must be a number of minutes or None, got {op.ttl!r}")
        return ops

    def _to_embed(self, ops: list[Op]) -> tuple[list[tuple[str, tuple[int, str]]], list[str]]:
        """Texts to embed (with the put and vector name each is for) and distinct queries."""
        if self.embeddings is None:
            return [], []
        texts: list[tuple[str, tuple[int, str]]] = []
        for i, op in _last_puts(ops).items():
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
        touched: dict[tuple[tuple[str, ...], str], _Stored] = {}
        for op in ops:
            if isinstance(op, GetOp):
                stored = self._read(op.namespace, op.key, now)
                if stored is not None and op.refresh_ttl:
                    touched[(stored.namespace, stored.key)] = stored
                results.append(stored.item() if stored is not None else None)
            elif isinstance(op, SearchOp):
                found = self._search(op, query_vectors.get(op.query or ""), now)
                if op.refresh_ttl:
                    for stored, _ in found:
                        touched[(stored.namespace, stored.key)] = stored
                results.append([stored.search_item(score) for stored, score in found])
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op, now))
            else:
                results.append(None)
        by_put: dict[int, dict[str, list[float]]] = {}
        for (_, (i, name)), vector in zip(texts, vectors, strict=True):
            by_put.setdefault(i, {})[name] = [float(x) for x in vector]
        # refreshed before the puts: a put of the same item then deletes the touch
        self._refresh([s for s in touched.values() if s.ttl is not None], now)
        self._write(_last_puts(ops), by_put, now)
        return results

    def _write(
        self, puts: dict[int, PutOp], vectors: dict[int, dict[str, list[float]]], now: float
    ) -> None:
        records: list[tuple[str, bytes]] = []
        deletes: list[str] = []
        for i, op in puts.items():
            namespace = tuple(op.namespace)
            item_key = keys.store_item_key(namespace, op.key)
            if op.value is None:
                deletes.extend((item_key, keys.store_touch_key(namespace, op.key)))
                continue
            # created_at survives an update, as in LangGraph's SQL stores; an item
            # that expired or was damaged starts again
            before = self._read(namespace, op.key, now)
            created = _micros(before.created_at) if before is not None else _now_micros(now)
            content = {
                "v": _CONTENT_VERSION,
                "created_at": created,
                "updated_at": _now_micros(now),
                "ttl": op.ttl,
                # absolute, so a process that reads the item later needs no other clock
                "expires_at": None if op.ttl is None else now + op.ttl * 60,
                "value": self.serde.dumps_typed(dict(op.value)),
                "vectors": vectors.get(i, {}),
            }
            records.append(self._item_record(namespace, op.key, content))
        self._store_records(records)
        for key in deletes:
            self.storage.delete(key)

    def _item_record(
        self, namespace: tuple[str, ...], key: str, content: dict[str, Any]
    ) -> tuple[str, bytes]:
        """The key and bytes of a new version of an item."""
        identity = _identity(namespace, key) | {"store_version": secrets.token_hex(8)}
        return (
            keys.store_item_key(namespace, key),
            self.codec.encode(RecordKind.STORE_ITEM, identity, _pack(content)),
        )

    def _store_records(self, records: list[tuple[str, bytes]]) -> None:
        if not records:
            return
        self.storage.write_many(records)
        # a touch names the version it extends, so an old one is ignored anyway;
        # deleting it only frees its space
        for item_key, _ in records:
            self.storage.delete(item_key[: -len(keys.STORE_ITEM_SUFFIX)] + keys.STORE_TOUCH_SUFFIX)

    def _refresh(self, items: list[_Stored], now: float) -> None:
        """Extend the TTL of items just read, with a touch record each (never a rewrite)."""
        records = []
        for stored in items:
            assert stored.ttl is not None
            identity = _identity(stored.namespace, stored.key) | {"store_version": stored.version}
            content = pack({"v": _CONTENT_VERSION, "expires_at": now + stored.ttl * 60})
            records.append(
                (
                    keys.store_touch_key(stored.namespace, stored.key),
                    self.codec.encode(RecordKind.STORE_TOUCH, identity, content),
                )
            )
        if records:
            # losing a refresh to a crash costs an earlier expiry, never a wrong value
            self.storage.write_many(records, durable=False)

    # -- inside: reading ----------------------------------------------------------

    def _read(self, namespace: tuple[str, ...], key: str, now: float) -> _Stored | None:
        namespace = tuple(namespace)
        return self._read_at(
            keys.store_item_key(namespace, key), _identity(namespace, key), now, live_only=True
        )

    def _read_at(
        self,
        record_key: str,
        identity: dict[str, str] | None,
        now: float,
        *,
        live_only: bool,
    ) -> _Stored | None:
        """The verified item at ``record_key``, or ``None`` (missing, damaged, or expired)."""
        try:
            data = self.storage.read(record_key)
        except OSError as exc:
            self.reporter.unreadable(record_key, exc)
            return None
        if data is None:
            return None
        try:
            # the identity check is what rejects an item copied or renamed here
            # from another key: its bytes verify, but they say whose they are
            header, content = self.codec.decode_with_header(data, RecordKind.STORE_ITEM, identity)
            stored = _unpack_item(header.identity, content)
            if keys.store_item_key(stored.namespace, stored.key) != record_key:
                raise RecordDamagedError(
                    f"the record names item {stored.key!r} of {stored.namespace!r}, "
                    f"which lives elsewhere"
                )
            stored.value = self.serde.loads_typed(stored.value)  # type: ignore[arg-type]
            if not isinstance(stored.value, dict):
                raise RecordDamagedError("store item value is not a dict")
        except RecordDamagedError as exc:
            self.reporter.damaged(record_key, exc, data)
            return None
        if stored.ttl is not None:
            stored.expires_at = self._touched_expiry(stored)
        if live_only and _expired(stored.expires_at, now):
            return None
        return stored

    def _touched_expiry(self, stored: _Stored) -> float | None:
        """The item's expiry, extended by its touch record if that names this version."""
        touch_key = keys.store_touch_key(stored.namespace, stored.key)
        try:
            data = self.storage.read(touch_key)
        except OSError as exc:
            self.reporter.unreadable(touch_key, exc)
            return stored.expires_at
        if data is None:
            return stored.expires_at
        try:
            header, content = self.codec.decode_with_header(
                data, RecordKind.STORE_TOUCH, _identity(stored.namespace, stored.key)
            )
            body = unpack(content)
            if not isinstance(body, dict) or not _is_number(body.get("expires_at")):
                raise RecordDamagedError("store touch has an unexpected shape")
        except RecordDamagedError as exc:
            # a damaged refresh costs the item its extension, never its value
            self.reporter.damaged(touch_key, exc, data)
            return stored.expires_at
        if header.identity.get("store_version") != stored.version:
            return stored.expires_at  # it extended a version since replaced
        touched = float(body["expires_at"])
        return touched if stored.expires_at is None else max(stored.expires_at, touched)

    def _live_under(self, namespace_prefix: tuple[str, ...], now: float) -> Iterator[_Stored]:
        prefix = keys.store_namespace_prefix(tuple(namespace_prefix))
        for record_key in self.storage.walk(prefix):
            if record_key.endswith(keys.STORE_ITEM_SUFFIX):
                stored = self._read_at(record_key, None, now, live_only=True)
                if stored is not None:
                    yield stored

    def _search(
        self, op: SearchOp, query_vector: list[float] | None, now: float
    ) -> list[tuple[_Stored, float | None]]:
        found = [
            stored
            for stored in self._live_under(op.namespace_prefix, now)
            if not op.filter or matches_filter(stored.value, op.filter)
        ]
        # newest first, then by place: a stable order whatever the backend lists
        found.sort(key=lambda s: (s.namespace, s.key))
        found.sort(key=lambda s: s.updated_at, reverse=True)
        ranked: list[tuple[_Stored, float | None]]
        if op.query and query_vector is not None:
            scored = [
                (s, max(cosine_scores(query_vector, list(s.vectors.values()))))
                for s in found
                if s.vectors
            ]
            scored.sort(key=lambda pair: pair[1], reverse=True)
            ranked = [*scored, *((s, None) for s in found if not s.vectors)]
        else:
            ranked = [(s, None) for s in found]
        return ranked[op.offset : op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp, now: float) -> list[tuple[str, ...]]:
        namespaces = {stored.namespace for stored in self._live_under((), now)}
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


def _place(stored: _Stored) -> tuple[tuple[str, ...], str]:
    return stored.namespace, stored.key


def _last_puts(ops: list[Op]) -> dict[int, PutOp]:
    """The last put of each item, by its position in ``ops``, in order."""
    last: dict[tuple[tuple[str, ...], str], int] = {}
    for i, op in enumerate(ops):
        if isinstance(op, PutOp):
            last[(tuple(op.namespace), op.key)] = i
    return {i: ops[i] for i in sorted(last.values())}  # type: ignore[misc]


def _ttl_config(ttl: TTLConfig | None) -> TTLConfig | None:
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise TypeError(f"ttl must be a TTLConfig dict, got {type(ttl).__name__}")
    default = ttl.get("default_ttl")
    if default is not None and (not _is_number(default) or default < 0):
        raise ValueError(f"ttl default_ttl must be minutes >= 0 or None, got {default!r}")
    return TTLConfig(**ttl)  # type: ignore[typeddict-item]


def _validate_op_labels(op: Op) -> None:
    """The labels an op carries, checked as the newest ``BaseStore`` checks them.

    Done here rather than by ``langgraph.store.base.validate_op_namespace``,
    which refuses a NUL byte in a label only from some langgraph 1.x release on;
    every version this package supports gets the same answer.
    """
    if isinstance(op, (GetOp, PutOp)):
        paths = [op.namespace]
    elif isinstance(op, SearchOp):
        paths = [op.namespace_prefix]
    else:
        paths = [condition.path for condition in op.match_conditions or ()]
    for path in paths:
        for label in path:
            if not isinstance(label, str):
                raise InvalidNamespaceError(
                    f"namespace labels must be strings, got {type(label).__name__} in {path!r}"
                )
            if not label or "." in label or "\0" in label:
                raise InvalidNamespaceError(
                    f"invalid namespace label {label!r} in {path!r}: labels are non-empty "
                    f"and hold no period ('.') and no NUL byte"
                )


def _namespace(namespace: Any) -> tuple[str, ...]:
    if not isinstance(namespace, (tuple, list)):
        raise TypeError(
            f"a store namespace is a tuple of strings, got {type(namespace).__name__}: "
            f"{namespace!r:.100}"
        )
    return tuple(keys.require_text(part, "store namespace label") for part in namespace)


def _identity(namespace: tuple[str, ...], key: str) -> dict[str, str]:
    return {
        # a JSON array keeps ("a,b",) and ("a", "b") apart, as the path does
        "store_namespace": json.dumps(list(namespace), ensure_ascii=False, separators=(",", ":")),
        "store_key": key,
    }


def _now_micros(now: float) -> int:
    return round(now * 1_000_000)


def _micros(moment: datetime) -> int:
    return round(moment.timestamp() * 1_000_000)


def _time(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, timezone.utc)


def _expired(expires_at: float | None, now: float) -> bool:
    return expires_at is not None and now >= expires_at


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _pack(content: dict[str, Any]) -> bytes:
    type_, blob = content["value"]
    return pack({**content, "value": [type_, blob]})


def _unpack_item(identity: Mapping[str, str], content: bytes) -> _Stored:
    """The item in verified content (its value still serialized); a surprise is damage."""
    body = unpack(content)
    if not isinstance(body, dict) or body.get("v") != _CONTENT_VERSION:
        raise RecordDamagedError("store item has an unexpected shape or version")
    try:
        namespace = json.loads(identity["store_namespace"])
        key, version = identity["store_key"], identity["store_version"]
    except (KeyError, ValueError):
        raise RecordDamagedError("store item identity is incomplete") from None
    if not isinstance(namespace, list) or not all(isinstance(p, str) for p in namespace):
        raise RecordDamagedError("store item namespace is not a list of strings")
    created, updated = body.get("created_at"), body.get("updated_at")
    ttl, expires_at, value = body.get("ttl"), body.get("expires_at"), body.get("value")
    vectors = body.get("vectors")
    if not isinstance(created, int) or not isinstance(updated, int):
        raise RecordDamagedError("store item times are not integers")
    if (ttl is not None and not _is_number(ttl)) or (
        expires_at is not None and not _is_number(expires_at)
    ):
        raise RecordDamagedError("store item expiry is not a number")
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], bytes)
    ):
        raise RecordDamagedError("store item value is not a (type, bytes) pair")
    if not isinstance(vectors, dict) or not all(
        isinstance(name, str) and isinstance(v, list) and all(_is_number(x) for x in v)
        for name, v in vectors.items()
    ):
        raise RecordDamagedError("store item vectors are not lists of numbers")
    return _Stored(
        namespace=tuple(namespace),
        key=key,
        version=version,
        value=(value[0], value[1]),  # type: ignore[arg-type]  # deserialized by the caller
        created_at=_time(created),
        updated_at=_time(updated),
        ttl=ttl,
        expires_at=expires_at,
        vectors=vectors,
    )
