"""``VerifiedCache``: LangGraph's node cache (``BaseCache``) on verified records.

Each entry is one record (kind ``CACHE_ENTRY``) at
``cache/<namespace parts>/<key>.entry``, framed like every record of the store:
its namespace and key inside the checksummed identity, the serialized value and
its expiry time in the zstd payload. A read verifies the frame and the identity
before it deserializes anything; damage is reported, counted and quarantined by
a ``DamageReporter``, exactly as the saver does, and the entry is a miss.

This is a face over ``storage``, ``records`` and the engine's damage reporting;
it does not use the saver, so a graph can have a cache without a checkpointer.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from langgraph.cache.base import BaseCache, FullKey, Namespace, ValueT
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_verified.engine.damage import Damage, RecoveryStats
from langgraph_checkpoint_verified.engine.opening import ClosedOnExit, open_records
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

T = TypeVar("T")

_VERIFIED_ENTRIES = 4096
_VERIFIED_BYTES = 4 * 1024 * 1024
"""Most entries, and serialized bytes, of verified entries a cache keeps to serve again."""

_CONTENT_VERSION = 1


class VerifiedCache(BaseCache[ValueT], ClosedOnExit):
    """A LangGraph node cache whose entries are verified records.

    Pass it to ``graph.compile(cache=...)`` and give nodes a ``CachePolicy``: a
    node called again with the same input is answered from the cache instead
    of running. The cache can share its directory (or bucket) with a
    ``VerifiedSaver``: its entries live under ``cache/``, beside the saver's
    ``threads/``, and share the store marker and the quarantine.

    Every entry read is verified (checksums or, with ``key``, MACs, and that
    the entry is the one asked for, not a copy of another) before its value is
    deserialized. A damaged entry is never returned: it is a miss (the node
    runs again), and it is reported, counted in ``stats`` and moved under
    ``quarantine/``. Expired entries are misses too, and are deleted when found.

    Several processes may share one store with no lock: each entry is written
    atomically, whole (a temporary file renamed into place, or one object
    ``PUT``), and entries do not depend on each other. When two processes set
    the same key, the last write wins, as it would in a single process; an
    expired entry deleted by one process just as another rewrites it is at
    worst one more miss, never a wrong value.

    Args:
        path: Directory of the store (created if missing), or
            ``"s3://bucket/prefix"`` for a bucket (``ObjectStorage``, the ``[s3]``
            extra). Omit it and pass ``storage=``, or use ``VerifiedCache.in_memory()``.
        storage: A ``Storage`` implementation to use instead of files.
        serde: Serializer of the cached values (any ``SerializerProtocol``, e.g.
            ``EncryptedSerializer``). Defaults to LangGraph's cache serializer.
        key: Secret bytes (16 to 64). Checksums become keyed MACs: entries not
            written with this key are rejected as damage. A store shared with a
            saver takes the saver's key.
        fsync: ``True`` (the default) makes every acknowledged ``set`` survive
            power loss. ``False`` is faster and survives process crashes only.
        compression_level: zstd level for new entries (1 to 22).
        on_corruption: Called with a ``Damage`` for each damaged entry found.
        quarantine: ``False`` reports damage without moving entries aside.

    Example:
        >>> import tempfile
        >>> from langgraph.graph import StateGraph, START
        >>> from langgraph.types import CachePolicy
        >>> from typing_extensions import TypedDict
        >>> class State(TypedDict):
        ...     n: int
        >>> calls = []
        >>> def double(state: State) -> State:
        ...     calls.append(state["n"])
        ...     return {"n": state["n"] * 2}
        >>> builder = StateGraph(State)
        >>> _ = builder.add_node("double", double, cache_policy=CachePolicy(ttl=60))
        >>> _ = builder.add_edge(START, "double")
        >>> with tempfile.TemporaryDirectory() as store:
        ...     graph = builder.compile(cache=VerifiedCache(store))
        ...     graph.invoke({"n": 21}), graph.invoke({"n": 21})
        ({'n': 42}, {'n': 42})
        >>> calls  # the second invoke was answered from the cache
        [21]
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
        on_corruption: Callable[[Damage], Any] | None = None,
        quarantine: bool = True,
    ) -> None:
        super().__init__(serde=serde)
        self.storage, self.codec, self.reporter = open_records(
            path,
            storage,
            owner="VerifiedCache",
            key=key,
            fsync=fsync,
            compression_level=compression_level,
            on_corruption=on_corruption,
            quarantine=quarantine,
        )
        self._closed = False
        self._verified: OrderedDict[str, tuple[Any, float | None, tuple[str, bytes]]] = (
            OrderedDict()
        )
        """Entries verified by this process: record key -> (stamp, expiry, value)."""
        self._verified_bytes = 0
        self._verified_lock = threading.Lock()

    @classmethod
    def in_memory(cls, **kwargs: Any) -> VerifiedCache[Any]:
        """A cache holding the same verified records in memory (an ``InMemoryCache`` drop-in).

        Example:
            >>> cache = VerifiedCache.in_memory()
            >>> cache.set({(("ns",), "k"): ("value", None)})
            >>> cache.get([(("ns",), "k"), (("ns",), "other")])
            {(('ns',), 'k'): 'value'}
        """
        return cls(storage=MemoryStorage(), **kwargs)

    @property
    def stats(self) -> RecoveryStats:
        """Counters of damaged and unreadable entries found, and entries quarantined."""
        return self.reporter.stats

    # -- the cache ---------------------------------------------------------

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """The values of ``keys`` that are cached, verify and have not expired.

        Args:
            keys: ``(namespace, key)`` pairs; a namespace is a tuple of strings.

        Returns:
            A dict from each key found to its value; keys not cached, expired or
            damaged are left out.

        Example:
            >>> cache = VerifiedCache.in_memory()
            >>> cache.set({(("a",), "k"): ({"x": 1}, 60)})
            >>> cache.get([(("a",), "k")])
            {(('a',), 'k'): {'x': 1}}
        """
        self._check_open()
        now = time.time()
        found: dict[FullKey, ValueT] = {}
        for namespace, key in keys:
            typed = self._read_entry(namespace, key, now)
            if typed is not None:
                found[(namespace, key)] = self.serde.loads_typed(typed)
        return found

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """Cache each value under its key, for ``ttl`` seconds (``None``: until cleared).

        Each entry is written on its own, atomically and (with ``fsync``) durably.

        Example:
            >>> cache = VerifiedCache.in_memory()
            >>> cache.set({(("a",), "k"): ("kept", None), (("a",), "gone"): ("x", 0)})
            >>> cache.get([(("a",), "k"), (("a",), "gone")])
            {(('a',), 'k'): 'kept'}
        """
        self._check_open()
        now = time.time()
        records = []
        for (namespace, key), (value, ttl) in pairs.items():
            record_key, identity = _entry(namespace, key)
            if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float))):
                raise TypeError(f"ttl must be a number of seconds or None, got {ttl!r}")
            type_, blob = self.serde.dumps_typed(value)
            content = {
                "v": _CONTENT_VERSION,
                # absolute, so a process that reads the entry later needs no other clock
                "expires_at": None if ttl is None else now + ttl,
                "type": type_,
                "data": blob,
            }
            records.append(
                (record_key, self.codec.encode(RecordKind.CACHE_ENTRY, identity, pack(content)))
            )
        self.storage.write_many(records)

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Delete the entries of ``namespaces`` (``None``: every entry).

        Only a namespace's own entries go: ``("a",)`` does not clear ``("a", "b")``,
        as with LangGraph's ``InMemoryCache``.

        Example:
            >>> cache = VerifiedCache.in_memory()
            >>> cache.set({(("a",), "k"): (1, None), (("b",), "k"): (2, None)})
            >>> cache.clear([("a",)])
            >>> cache.get([(("a",), "k"), (("b",), "k")])
            {(('b',), 'k'): 2}
        """
        self._check_open()
        if namespaces is None:
            self.storage.delete_tree(keys.CACHE_PREFIX)
            return
        for namespace in namespaces:
            prefix = keys.cache_namespace_prefix(_namespace(namespace))
            for name in self.storage.list(prefix):
                if name.endswith(keys.CACHE_ENTRY_SUFFIX):
                    self.storage.delete(f"{prefix}/{name}")

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """``get``, off the event loop."""
        return await self._run_async(self.get, keys)

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """``set``, off the event loop."""
        await self._run_async(self.set, pairs)

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """``clear``, off the event loop."""
        await self._run_async(self.clear, namespaces)

    # -- opening and closing ---------------------------------------------------

    def close(self) -> None:
        """Release the cache and the files it keeps open. Idempotent; later calls raise
        ``VerifiedSaverError``."""
        self._closed = True
        self.storage.close_idle()

    def __repr__(self) -> str:
        return f"VerifiedCache({self.storage!r})"

    # -- inside ---------------------------------------------------------------

    def _read_entry(self, namespace: Any, key: Any, now: float) -> tuple[str, bytes] | None:
        """The serialized value of one entry, or ``None`` for a miss of any cause.

        An entry this process verified is served again while the store's stamp of
        its record is unchanged (a ``stat``, no read): the record is written whole
        and replaced atomically, so the same stamp is the same bytes.
        """
        record_key, identity = _entry(namespace, key)
        try:
            stamp = self.storage.stamp(record_key)
            known = self._verified.get(record_key)
            if known is not None and stamp is not None and known[0] == stamp:
                expires_at, typed = known[1], known[2]
            else:
                data = self.storage.read(record_key)
        except OSError as exc:
            self.reporter.unreadable(record_key, exc)
            return None
        if known is None or stamp is None or known[0] != stamp:
            if data is None:
                return None
            try:
                # the identity check is what rejects an entry copied or renamed here
                # from another key: its bytes verify, but they say whose they are
                content = self.codec.decode(data, RecordKind.CACHE_ENTRY, identity)
                expires_at, typed = _unpack_entry(content)
            except RecordDamagedError as exc:
                self.reporter.damaged(record_key, exc, data)
                return None
            if stamp is not None:
                self._remember(record_key, (stamp, expires_at, typed))
        if expires_at is not None and now >= expires_at:
            # Lazily, as InMemoryCache does. Another process may have rewritten the
            # entry since our read; deleting its fresh copy costs one miss, never a
            # wrong value, which is why a cache needs no lock here.
            self.storage.delete(record_key)
            return None
        return typed

    def _remember(
        self, record_key: str, entry: tuple[Any, float | None, tuple[str, bytes]]
    ) -> None:
        with self._verified_lock:
            old = self._verified.pop(record_key, None)
            if old is not None:
                self._verified_bytes -= len(old[2][1])
            self._verified[record_key] = entry
            self._verified_bytes += len(entry[2][1])
            while self._verified and (
                self._verified_bytes > _VERIFIED_BYTES or len(self._verified) > _VERIFIED_ENTRIES
            ):
                _, dropped = self._verified.popitem(last=False)
                self._verified_bytes -= len(dropped[2][1])

    async def _run_async(self, fn: Callable[..., T], *args: Any) -> T:
        return await run_off_loop(self.storage, fn, *args)

    def _check_open(self) -> None:
        if self._closed:
            raise VerifiedSaverError(
                f"{self!r} is closed; open a new VerifiedCache on the same store to continue"
            )


def _namespace(namespace: Any) -> tuple[str, ...]:
    return keys.require_labels(namespace, "cache namespace")


def _entry(namespace: Any, key: Any) -> tuple[str, dict[str, str]]:
    """Where an entry lives, and the identity its record must carry."""
    parts = _namespace(namespace)
    keys.require_text(key, "cache key")
    identity = {
        # a JSON array keeps ("a,b",) and ("a", "b") apart, as the path does
        "cache_namespace": json.dumps(list(parts), ensure_ascii=False, separators=(",", ":")),
        "cache_key": key,
    }
    return keys.cache_entry_key(parts, key), identity


def _unpack_entry(content: bytes) -> tuple[float | None, tuple[str, bytes]]:
    """``(expires_at, (type, bytes))`` of verified content; a surprise is damage."""
    body = unpack(content)
    if not isinstance(body, dict) or body.get("v") != _CONTENT_VERSION:
        raise RecordDamagedError("cache entry has an unexpected shape or version")
    expires_at, type_, blob = body.get("expires_at"), body.get("type"), body.get("data")
    if expires_at is not None and (
        isinstance(expires_at, bool) or not isinstance(expires_at, (int, float))
    ):
        raise RecordDamagedError(f"cache entry expiry is not a time: {expires_at!r:.100}")
    if not isinstance(type_, str) or not isinstance(blob, bytes):
        raise RecordDamagedError("cache entry value is not a (type, bytes) pair")
    return expires_at, (type_, blob)
