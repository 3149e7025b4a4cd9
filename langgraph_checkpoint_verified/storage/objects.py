"""Records as objects in an S3-compatible bucket: a store several machines share.

One object per record, under the same keys as on disk (``threads/<T>/ns/<NS>/
checkpoints/<id>.ckpt``, ``.../writes/<id>/<task>.<slot>.wr``, ``quarantine/...``),
below the store's prefix in the bucket. The bytes are the same verified records
as in a thread's log: the saver checks every one it reads, whoever wrote it.

Writes are conditional, so machines never overwrite each other blindly:

* A record is created with ``If-None-Match: *``: the first writer wins. A
  record that must not be replaced (a task's first writes) reports that it
  exists; one that may be (a checkpoint put again, a record maintenance rewrites)
  is compared first: the same bytes are a no-op, other bytes replace exactly
  the version that was read (``If-Match: <etag>``), retried if a third writer
  came in between.
* Finding the newest checkpoint of a namespace does not list the namespace: a
  small head object (``heads/<T>/<NS>.head``, outside every thread) names a
  recent checkpoint, and one ``LIST`` starting at that name returns it and every
  newer one. The head is moved forward by compare and swap (``If-Match``),
  never backwards, when a namespace's first checkpoint is written and then
  every ``HEAD_EVERY`` checkpoints this process writes, so a ``put`` costs one
  ``PUT`` most of the time.

What this process wrote, and what it read, it keeps with the ETag the store gave
it (``_Known``), and does not ask for again while the store last said so less
than ``fresh_for`` seconds ago: a ``PUT``'s answer carries the new ETag, and
each ``LIST`` carries the ETag of every object it names, so reading back a
record this process just wrote, or just listed unchanged, costs no request.
Later, the object is revalidated: a ``HEAD``, or a ``GET`` with
``If-None-Match`` that answers ``304 Not Modified`` without the bytes when
nothing changed. A ``LIST`` that names another ETag, or no longer names the
object, forgets it at once, so an object rewritten or damaged behind this
process is read again, and verified, by the next read that lists it (every
``get_tuple`` of a namespace's newest checkpoint does).

An acknowledged write is durable when S3 acknowledges it. Requests are retried
by obstore (a 5xx, a dropped connection, with backoff); when the store cannot be
reached after that, reads and writes raise ``StoreUnavailableError``: an
unreachable store is never taken for a damaged or missing record, so a thread
never falls back to an older checkpoint because the network failed.

Called from the saver's async twins, the core runs on the store's own event loop
thread and every request goes through obstore's async API, awaited there
(``storage.async_bridge``): many calls are in flight at once without a thread
each, and none of their serializing, hashing or compressing runs on the caller's
event loop. Locks are this process's (and give the event loop
back while they wait): machines sharing a bucket are kept apart by the
conditional writes above, not by locks (see ``docs/s3.md`` for what that means
for maintenance).
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import contextlib
import errno
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from langgraph_checkpoint_verified.errors import StoreUnavailableError, StoreWriteError
from langgraph_checkpoint_verified.records.keys import MEMORIES_PREFIX
from langgraph_checkpoint_verified.storage import async_bridge
from langgraph_checkpoint_verified.storage.async_bridge import (
    SharedExclusiveLock,
    await_io,
    in_core_greenlet,
)
from langgraph_checkpoint_verified.storage.base import OneRecordPerWrite

try:
    import obstore
    from obstore.exceptions import (
        AlreadyExistsError,
        NotFoundError,
        NotModifiedError,
        PermissionDeniedError,
        PreconditionError,
        UnauthenticatedError,
    )

    _REFUSED: tuple[type[BaseException], ...] = (
        PermissionDeniedError,
        UnauthenticatedError,
        PermissionError,
    )
except ImportError:  # pragma: no cover - the [s3] extra is not installed
    obstore = None  # type: ignore[assignment]
    _REFUSED = (PermissionError,)

LIST_CHAIN_LIMIT = 16
"""A list stored as what it gained is stored whole again after this many versions: a
machine reading it for the first time makes one request per version of the chain."""
WINDOW_CHAIN_LIMIT = 0
"""A list that also loses items (a window of the latest messages) is stored whole at each
version: what a window saves is bounded by the window, and each version of its chain
would be one more request, one after the other, for a machine reading it first."""
T = TypeVar("T")

HEAD_EVERY = 64
"""A process moves a namespace's head forward once per this many checkpoints it writes."""
HEADS_PREFIX = "heads"
_CHECKPOINTS = "/checkpoints"
_MEMORIES = f"{MEMORIES_PREFIX}/"
_CAS_ATTEMPTS = 32
FRESH_FOR = 60.0
"""Seconds during which what the store last said of an object (its ETag, its bytes) is
taken as still true, without a request: longer than a step of a run, and far shorter
than the idle time after which maintenance may touch a thread (``docs/s3.md``)."""
_KNOWN_OBJECTS = 4096
_KNOWN_BYTES = 32 * 1024 * 1024
_LISTINGS = 256
_LISTED_NAMES = 4 * LIST_CHAIN_LIMIT


@dataclass
class _Known:
    """What the store last said an object is: its ETag and size, its bytes if kept."""

    etag: str
    size: int
    data: bytes | None
    checked: float
    """``time.monotonic()`` when the store last answered for it (a PUT, GET, HEAD or LIST)."""


_UNCHANGED = object()


def _refused(location: str, error: BaseException) -> StoreWriteError:
    """A request the store refused (403, bad credentials): as a file system's EACCES, so a
    store this process may only read is one, as on disk."""
    return StoreWriteError(
        location,
        PermissionError(
            errno.EACCES,
            f"permission denied by the store ({_first_line(error)}): check the "
            "credentials and the bucket's policy",
        ),
    )


def _first_line(error: BaseException) -> str:
    """obstore's message without the debug dump that follows its first line."""
    return str(error).strip().split("\n", 1)[0]


def _require_obstore() -> None:
    if obstore is None:
        raise ImportError("S3 stores need obstore: pip install 'langgraph-checkpoint-verified[s3]'")


class ObjectStorage(OneRecordPerWrite):
    """Records as objects of an S3-compatible bucket (``Storage``); needs the ``[s3]`` extra.

    Args:
        url: ``s3://bucket`` or ``s3://bucket/prefix``.
        endpoint: The S3 endpoint (MinIO, Ceph, R2, a local server); AWS if not
            given. Credentials, region and endpoint are also read from the usual
            ``AWS_*`` environment variables.
        region: The bucket's region.
        store: An obstore ``S3Store`` made by the caller, instead of ``url``.
        fresh_for: Seconds during which an object this process wrote, read or saw
            listed is not asked for again (its bytes and ETag are taken from memory);
            ``0`` revalidates each one at every use.
        **options: More ``S3Store`` options (``client_options``,
            ``retry_config``, ``access_key_id``, ...).

    ``VerifiedSaver("s3://agents/checkpoints")`` makes one from the environment;
    ``VerifiedSaver(storage=ObjectStorage("s3://agents/checkpoints",
    endpoint="http://minio:9000"))`` names the endpoint (see ``docs/s3.md``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        store: Any = None,
        fresh_for: float = FRESH_FOR,
        **options: Any,
    ) -> None:
        _require_obstore()
        if (url is None) == (store is None):
            raise TypeError("pass exactly one of url='s3://bucket/prefix' or store=S3Store(...)")
        if store is None:
            from obstore.store import S3Store

            assert url is not None
            if not url.startswith("s3://") or len(url) <= len("s3://"):
                raise ValueError(f"an S3 store is named s3://bucket[/prefix], got {url!r}")
            if endpoint is not None:
                options["endpoint"] = endpoint
                if endpoint.startswith("http://"):
                    client = dict(options.pop("client_options", None) or {})
                    client.setdefault("allow_http", True)
                    options["client_options"] = client
                options.setdefault("virtual_hosted_style_request", False)
            if region is not None:
                options["region"] = region
            store = S3Store.from_url(url, **options)
            self.url = url.rstrip("/")
        else:
            self.url = f"s3://{getattr(store, 'config', {}).get('bucket', '?')}"
            if getattr(store, "prefix", None):
                self.url += f"/{store.prefix}"
        self.store = store
        self.fresh_for = float(fresh_for)
        self.list_chain_limit = LIST_CHAIN_LIMIT
        self.window_chain_limit = WINDOW_CHAIN_LIMIT
        self.awaits_io = async_bridge.AVAILABLE
        """The saver's async twins run its core on the store's event loop thread,
        requests awaited through obstore's async API (see ``storage.async_bridge``)."""
        self._locks: dict[str, SharedExclusiveLock] = {}
        self._heads: dict[str, tuple[str | None, str]] = {}
        """checkpoints prefix -> (etag of its head object as last seen, the name it holds)."""
        self._newest: dict[str, str] = {}
        """checkpoints prefix -> the newest checkpoint name this process knows of."""
        self._since_head: dict[str, int] = {}
        self._known: OrderedDict[str, _Known] = OrderedDict()
        """key -> what the store last said is there (least recently used first)."""
        self._known_bytes = 0
        self._listed: OrderedDict[str, builtins.list[str]] = OrderedDict()
        """checkpoints prefix -> the names its last LIST from the head returned, sorted."""
        self._ahead: dict[str, tuple[str, int, int]] = {}
        """checkpoints prefix -> (the oldest name its last read ahead fetched, how many,
        how many since the walk began or began again)."""
        self._fetchers: tuple[int, ThreadPoolExecutor] | None = None
        """(the process id, its threads for the GETs of a read ahead outside an async twin)."""
        self._state_lock = threading.Lock()

    # -- requests ------------------------------------------------------------

    def _unavailable(self, operation: str, key: str, exc: Exception) -> StoreUnavailableError:
        return StoreUnavailableError(operation, self.location(key), _first_line(exc))

    def _io(self, call: Callable[[], T], async_call: Callable[[], Awaitable[T]]) -> T:
        """One request: awaited on the event loop inside an async twin, else blocking."""
        if in_core_greenlet():
            return await_io(async_call())
        return call()

    def _get(self, key: str, *, unless_etag: str | None = None) -> Any:
        """GET: ``(bytes, etag)``, ``None`` if absent, ``_UNCHANGED`` if the object still
        has the ETag ``unless_etag`` (``If-None-Match``: a 304, no bytes sent)."""
        options: Any = {"if_none_match": unless_etag} if unless_etag else None

        def call() -> tuple[bytes, str | None]:
            result = obstore.get(self.store, key, options=options)
            return bytes(result.bytes()), result.meta.get("e_tag")

        async def async_call() -> tuple[bytes, str | None]:
            result = await obstore.get_async(self.store, key, options=options)
            return bytes(await result.bytes_async()), result.meta.get("e_tag")

        try:
            return self._io(call, async_call)
        except (FileNotFoundError, NotFoundError):
            return None
        except NotModifiedError:
            return _UNCHANGED
        except Exception as exc:
            raise self._unavailable("read", key, exc) from exc

    def _get_many(self, keys: builtins.list[str]) -> builtins.list[Any]:
        """``_get`` of each key, the requests in flight together; an error of the first
        key is raised, those of the others are taken as "not fetched" (``_UNCHANGED``)."""
        if len(keys) == 1:
            return [self._get(keys[0])]
        if in_core_greenlet():

            async def gather() -> builtins.list[Any]:
                return await asyncio.gather(
                    *(self._get_async(key) for key in keys), return_exceptions=True
                )

            results = await_io(gather())
        else:
            with self._state_lock:
                # a pool's threads do not survive a fork: a child makes its own
                if self._fetchers is None or self._fetchers[0] != os.getpid():
                    pool = ThreadPoolExecutor(LIST_CHAIN_LIMIT, "s3-fetch")
                    self._fetchers = (os.getpid(), pool)
                fetchers = self._fetchers[1]
            futures = [fetchers.submit(self._get, key) for key in keys]
            results = []
            for future in futures:
                try:
                    results.append(future.result())
                except Exception as exc:
                    results.append(exc)
        if isinstance(results[0], StoreUnavailableError):
            raise results[0]
        if isinstance(results[0], BaseException):
            raise self._unavailable("read", keys[0], results[0]) from results[0]  # type: ignore[arg-type]
        return [_UNCHANGED if isinstance(r, BaseException) else r for r in results]

    async def _get_async(self, key: str) -> tuple[bytes, str | None] | None:
        try:
            result = await obstore.get_async(self.store, key)
            return bytes(await result.bytes_async()), result.meta.get("e_tag")
        except (FileNotFoundError, NotFoundError):
            return None

    def _put(self, key: str, data: bytes, mode: Any) -> str | None:
        """PUT ``data``; its new etag. ``AlreadyExistsError``/``PreconditionError`` pass."""
        try:
            result = self._io(
                lambda: obstore.put(self.store, key, data, mode=mode),
                lambda: obstore.put_async(self.store, key, data, mode=mode),
            )
        except (AlreadyExistsError, PreconditionError, FileExistsError):
            raise
        except _REFUSED as exc:
            raise _refused(self.location(key), exc) from exc
        except Exception as exc:
            raise self._unavailable("write", key, exc) from exc
        etag: str | None = result.get("e_tag")
        return etag

    def _list_keys(self, prefix: str | None, offset: str | None = None) -> builtins.list[str]:
        """Every key under ``prefix`` (after ``offset``), in key order: one LIST a page."""
        return [meta["path"] for meta in self._list_meta(prefix, offset)]

    def _list_meta(self, prefix: str | None, offset: str | None = None) -> builtins.list[Any]:
        """``_list_keys``, each key with its ETag and size (obstore's ``ObjectMeta``)."""

        def call() -> builtins.list[Any]:
            stream = obstore.list(self.store, prefix, offset=offset)
            return [meta for chunk in stream for meta in chunk]

        async def async_call() -> builtins.list[Any]:
            stream = obstore.list(self.store, prefix, offset=offset)
            return [meta async for chunk in stream for meta in chunk]

        try:
            return self._io(call, async_call)
        except Exception as exc:
            raise self._unavailable("list", prefix or "", exc) from exc

    # -- what the store last said ----------------------------------------------

    def _remember(self, key: str, etag: str | None, data: bytes | None, size: int) -> None:
        """The store just said ``key`` holds ``data`` (or ``size`` bytes) under ``etag``."""
        with self._state_lock:
            self._drop(key)
            if not etag:
                return  # nothing to revalidate against: ask the store each time
            self._known[key] = _Known(etag, size, data, time.monotonic())
            self._known_bytes += len(data) if data is not None else 0
            while len(self._known) > _KNOWN_OBJECTS or self._known_bytes > _KNOWN_BYTES:
                self._drop(next(iter(self._known)))

    def _drop(self, key: str) -> None:
        """Forget ``key`` (the caller holds ``_state_lock``)."""
        known = self._known.pop(key, None)
        if known is not None and known.data is not None:
            self._known_bytes -= len(known.data)

    def _forget(self, keys: builtins.list[str]) -> None:
        with self._state_lock:
            for key in keys:
                self._drop(key)

    def _fresh(self, key: str) -> tuple[_Known | None, bool]:
        """What is known of ``key``, and whether the store said so within ``fresh_for``."""
        with self._state_lock:
            known = self._known.get(key)
            if known is None:
                return None, False
            self._known.move_to_end(key)
            return known, time.monotonic() - known.checked < self.fresh_for

    def _confirm(self, key: str, etag: str | None) -> None:
        """The store says ``key`` has ``etag`` now: known and the same, it is fresh again;
        known and different (rewritten, damaged, replaced), it is forgotten."""
        with self._state_lock:
            known = self._known.get(key)
            if known is None:
                return
            if etag and etag == known.etag:
                known.checked = time.monotonic()
            else:
                self._drop(key)

    def _saw_listed(self, start: str, listed: Sequence[Any], after: str = "") -> None:
        """A LIST of the keys directly under ``start`` (greater than ``after``) returned
        ``listed``: confirm or forget each key of it this process knows."""
        etags = {meta["path"]: meta.get("e_tag") for meta in listed}
        with self._state_lock:
            mine = [
                key
                for key in self._known
                if key.startswith(start) and key > after and "/" not in key[len(start) :]
            ]
        for key in mine:
            self._confirm(key, etags.get(key))

    # -- Storage -------------------------------------------------------------

    def compact(self, prefix: str, *, changes: Mapping[str, bytes | None] | None = None) -> None:
        """``changes``: each write one conditional PUT, then every deletion in one batched
        DELETE request (a thousand keys a request). Not atomic: writes go first, so a
        crash in between leaves every remaining record readable."""
        changes = changes or {}
        for key, data in changes.items():
            if data is not None:
                self.write(key, data)
        doomed = [key for key, data in changes.items() if data is None]
        if doomed:
            self._forget(doomed)
            self._delete(doomed, prefix)

    def usage(self, prefix: str) -> int:
        """Bytes of the objects at ``prefix`` or under it: the LIST's sizes, no GET."""

        def inside(meta: Any) -> bool:
            path: str = meta["path"]
            return path == prefix or path.startswith(f"{prefix}/")

        def call() -> int:
            stream = obstore.list(self.store, prefix)
            return sum(meta["size"] for chunk in stream for meta in chunk if inside(meta))

        async def async_call() -> int:
            stream = obstore.list(self.store, prefix)
            return sum([meta["size"] async for chunk in stream for meta in chunk if inside(meta)])

        try:
            return self._io(call, async_call)
        except Exception as exc:
            raise self._unavailable("list", prefix, exc) from exc

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        """Create ``key`` (``If-None-Match``); see the module docstring for an existing one."""
        data = bytes(data)
        for _ in range(_CAS_ATTEMPTS):
            try:
                etag = self._put(key, data, "create")
                break
            except (AlreadyExistsError, PreconditionError, FileExistsError):
                if not replace:
                    return False
            found = self._get(key)
            if found is None or found is _UNCHANGED:
                continue  # deleted in between: create it again
            stored, etag = found
            if stored == data:
                break  # the same record, written twice: nothing to do
            try:
                etag = self._put(key, data, {"e_tag": etag})
                break
            except (AlreadyExistsError, PreconditionError):
                continue  # replaced in between: compare again
        else:
            raise self._unavailable("write", key, TimeoutError("too many concurrent writers"))
        # the answer carries the ETag: reading these bytes back, or their stamp, asks nothing
        self._remember(key, etag, data, len(data))
        self._note_written(key)
        return True

    def write_many(
        self, items: Sequence[tuple[str, bytes]], *, replace: bool = True, durable: bool = True
    ) -> builtins.list[bool]:
        """``write`` each; then each namespace's head names the newest checkpoint written
        (a copied thread's head would otherwise name its oldest one)."""
        written = [self.write(key, data, replace=replace, durable=durable) for key, data in items]
        newest: dict[str, str] = {}
        for key, _ in items:
            prefix, _, name = key.rpartition("/")
            if prefix.startswith("threads/") and prefix.endswith(_CHECKPOINTS):
                newest[prefix] = max(name, newest.get(prefix, name))
        for prefix, name in newest.items():
            self._advance_head(prefix, name)
        return written

    def read(self, key: str) -> bytes | None:
        """The object's bytes: from memory while fresh (``fresh_for``), then revalidated
        by a conditional GET that sends no bytes when they did not change."""
        known, fresh = self._fresh(key)
        if known is not None and known.data is not None:
            if fresh:
                return known.data
            found = self._get(key, unless_etag=known.etag)
            if found is _UNCHANGED:
                self._confirm(key, known.etag)
                return known.data
        else:
            found = self._get_with_chain(key)
        if found is None:
            self._forget([key])
            return None
        data, etag = found
        self._remember(key, etag, data, len(data))
        return data  # type: ignore[no-any-return]

    def _get_with_chain(self, key: str) -> Any:
        """``_get(key)``; and when ``key`` is an older checkpoint of a namespace just
        listed (a first read walking the records a list value extends, one after the
        other), the GETs of checkpoints listed just before it too, in flight together.

        Read ahead as a file system does: one more record at first, and each time the
        walk goes on below what the last read ahead fetched, twice as many, until the
        walk has fetched ``list_chain_limit`` records (a list's chain is never longer),
        then again from two. A chain of 16 records costs four round trips instead of
        sixteen, and a single older record (a value that changed long ago) costs one
        more GET, not sixteen.
        """
        prefix, _, name = key.rpartition("/")
        with self._state_lock:
            listed = self._listed.get(prefix)
            older: builtins.list[str] = []
            if listed and name in listed and name != listed[-1]:
                lowest, window, fetched = self._ahead.get(prefix, ("", 1, 0))
                room = self.list_chain_limit - fetched
                if name < lowest and room > 0:
                    window = min(2 * window, room)  # the walk goes on: read further ahead
                else:
                    window, fetched = 2, 0  # a new walk, or a chain's worth fetched already
                at = bisect.bisect_left(listed, name)
                for candidate in reversed(listed[max(0, at - window + 1) : at]):
                    if f"{prefix}/{candidate}" not in self._known:
                        older.append(f"{prefix}/{candidate}")
                self._ahead[prefix] = (listed[max(0, at - window + 1)], window, fetched + window)
        if not older:
            return self._get(key)
        found, *more = self._get_many([key, *older])
        for other, result in zip(older, more, strict=True):
            if isinstance(result, tuple):
                self._remember(other, result[1], result[0], len(result[0]))
        return found

    def list(self, prefix: str) -> builtins.list[str]:
        start = f"{prefix}/" if prefix else ""
        try:
            result = self._io(
                lambda: obstore.list_with_delimiter(self.store, start or None),
                lambda: obstore.list_with_delimiter_async(self.store, start or None),
            )
        except Exception as exc:
            raise self._unavailable("list", prefix, exc) from exc
        self._saw_listed(start, result["objects"])
        names = [p[len(start) :].rstrip("/") for p in result["common_prefixes"]]
        names += [o["path"][len(start) :] for o in result["objects"]]
        if not prefix:
            names = [n for n in names if n != HEADS_PREFIX]
        return names

    def walk(self, prefix: str) -> Iterator[str]:
        heads = f"{HEADS_PREFIX}/"
        keys = self._list_keys(f"{prefix}/" if prefix else None)
        yield from sorted(k for k in keys if not k.startswith(heads))

    def delete(self, key: str) -> None:
        self._forget([key])
        self._delete([key], key)

    def _delete(self, keys: builtins.list[str], what: str) -> None:
        try:
            self._io(
                lambda: obstore.delete(self.store, keys),
                lambda: obstore.delete_async(self.store, keys),
            )
        except (FileNotFoundError, NotFoundError):
            pass
        except _REFUSED as exc:
            raise _refused(self.location(what), exc) from exc
        except Exception as exc:
            raise self._unavailable("delete", what, exc) from exc

    def delete_tree(self, prefix: str) -> None:
        keys = builtins.list(self.walk(prefix)) + self._heads_under(prefix)
        with self._state_lock:
            keys += [key for key in self._known if key.startswith(f"{prefix}/")]
        self._forget(keys)
        if keys:
            self._delete(sorted(set(keys)), prefix)
        with self._state_lock:
            for known in (self._heads, self._newest, self._since_head):
                for checkpoints in [p for p in known if p.startswith(f"{prefix}/")]:
                    del known[checkpoints]

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        """Copy ``key`` to ``new_key``, then delete it (S3 has no rename).

        Raises ``PermissionError`` (as a file system would) when the store refuses;
        a copy whose original cannot be deleted is deleted again.
        """
        self._forget([key])  # the bytes in the store, as they are, not as remembered
        found = self._get(key)
        if found is None:
            return False
        try:
            if not self.write(new_key, found[0], replace=replace):
                return False
            try:
                self.delete(key)
            except StoreWriteError:
                with contextlib.suppress(StoreWriteError):
                    self.delete(new_key)
                raise
        except StoreWriteError as exc:
            raise PermissionError(exc.errno, str(exc)) from exc
        return True

    def location(self, key: str) -> str:
        return f"{self.url}/{key}"

    def stamp(self, key: str) -> Hashable | None:
        """The object's ETag and size: from memory while fresh (``fresh_for``), else one
        ``HEAD`` (another machine may have rewritten it since)."""
        known, fresh = self._fresh(key)
        if known is not None and fresh:
            return (known.etag, known.size)
        try:
            meta = self._io(
                lambda: obstore.head(self.store, key),
                lambda: obstore.head_async(self.store, key),
            )
        except (FileNotFoundError, NotFoundError):
            self._forget([key])
            return None
        except Exception as exc:
            raise self._unavailable("read", key, exc) from exc
        self._confirm(key, meta.get("e_tag"))
        return (meta.get("e_tag"), meta.get("size"))

    def written_stamp(self, key: str) -> Hashable | None:
        """The ETag the store gave the bytes this process just wrote: no request."""
        known, _ = self._fresh(key)
        if known is not None:
            return (known.etag, known.size)
        return self.stamp(key)

    @contextmanager
    def lock(self, prefix: str, *, exclusive: bool) -> Iterator[None]:
        with self._state_lock:
            lock = self._locks.setdefault(prefix, SharedExclusiveLock())
        with lock.hold(exclusive=exclusive):
            yield

    # -- the newest checkpoint -------------------------------------------------

    def greatest_name(self, prefix: str) -> str | None:
        """The greatest name under ``prefix``; for checkpoints, from the head object and
        one ``LIST`` that starts at the name it holds."""
        if prefix.startswith(_MEMORIES):
            return self._greatest_batch(prefix)
        if not prefix.endswith(_CHECKPOINTS):
            return max(self.list(prefix), default=None)
        with self._state_lock:
            known = self._newest.get(prefix)
        if known is None:
            known = self._read_head(prefix)
        names = self._names_from(prefix, known) if known is not None else None
        listed_from = known or ""
        if not names:
            names = self.list(prefix)  # no head yet, or what it names was deleted
            listed_from = ""
        newest = max(names, default=None)
        with self._state_lock:
            # the names listed before `listed_from` are still those of the last LIST
            before = [n for n in self._listed.get(prefix, []) if n < listed_from]
            listed = before + sorted(n for n in names if n.endswith(".ckpt"))
            self._listed[prefix] = listed[-_LISTED_NAMES:]
            self._listed.move_to_end(prefix)
            self._ahead.pop(prefix, None)
            while len(self._listed) > _LISTINGS:
                self._ahead.pop(self._listed.popitem(last=False)[0], None)
            if newest is None:
                self._newest.pop(prefix, None)
            else:
                self._newest[prefix] = newest
        return newest

    def _greatest_batch(self, prefix: str) -> str | None:
        """The greatest batch name of a memory log: one ``LIST`` from the greatest this
        process saw there (writers name each batch after every name they saw), and a
        whole listing only when that one is gone (compacted)."""
        with self._state_lock:
            known = self._newest.get(prefix)
        names = self._names_from(prefix, known) if known is not None else None
        if not names:
            names = self.list(prefix)
        newest = max(names, default=None)
        with self._state_lock:
            if newest is None:
                self._newest.pop(prefix, None)
            else:
                self._newest[prefix] = newest
        return newest

    def _names_from(self, prefix: str, name: str) -> builtins.list[str]:
        """Names under ``prefix`` from ``name`` on (``name`` itself included if it exists)."""
        start = f"{prefix}/"
        # LIST returns keys after its offset: a key just short of `name` includes it
        offset = f"{start}{name[:-1]}"
        listed = self._list_meta(start, offset=offset)
        self._saw_listed(start, listed, after=offset)
        names = [meta["path"][len(start) :] for meta in listed]
        return [n for n in names if "/" not in n and n >= name]

    def _heads_under(self, prefix: str) -> builtins.list[str]:
        """The head objects of the namespaces a ``delete_tree(prefix)`` removes entirely."""
        parts = prefix.split("/")
        if prefix in ("", "threads"):
            return self._list_keys(f"{HEADS_PREFIX}/")
        if parts[0] != "threads" or len(parts) < 2:
            return []
        if len(parts) == 2 or parts[2:] == ["ns"]:  # a thread, or all its namespaces
            return self._list_keys(f"{HEADS_PREFIX}/{parts[1]}/")
        if len(parts) == 4 or parts[4:] == ["checkpoints"]:  # one namespace, or its checkpoints
            return [self._head_key("/".join([*parts[:4], "checkpoints"]))]
        return []  # writes or tool records: no head goes with them

    @staticmethod
    def _head_key(checkpoints_prefix: str) -> str:
        # threads/<T>/ns/<NS>/checkpoints -> heads/<T>/<NS>.head
        parts = checkpoints_prefix.split("/")
        return f"{HEADS_PREFIX}/{parts[1]}/{parts[3]}.head"

    def _read_head(self, prefix: str) -> str | None:
        found = self._get(self._head_key(prefix))
        if found is None:
            return None
        data, etag = found
        name = data.decode("utf-8", "replace").strip()
        with self._state_lock:
            self._heads[prefix] = (etag, name)
        return name or None

    def _note_written(self, key: str) -> None:
        """After a checkpoint record is written: move its namespace's head forward, at
        the namespace's first checkpoint and then every ``HEAD_EVERY``. After a memory
        log's batch: remember it as the greatest name seen there."""
        prefix, _, name = key.rpartition("/")
        if prefix.startswith(_MEMORIES):
            # a batch of a memory log: the next look for newer ones lists from it
            with self._state_lock:
                if name > self._newest.get(prefix, ""):
                    self._newest[prefix] = name
            return
        if not prefix.endswith(_CHECKPOINTS) or not prefix.startswith("threads/"):
            return
        with self._state_lock:
            if name > self._newest.get(prefix, ""):
                self._newest[prefix] = name
            count = self._since_head.get(prefix, 0) + 1
            first = prefix not in self._heads
            self._since_head[prefix] = count
            if not first and count < HEAD_EVERY:
                return
            self._since_head[prefix] = 0
        self._advance_head(prefix, name)

    def _advance_head(self, prefix: str, name: str) -> None:
        head_key = self._head_key(prefix)
        with self._state_lock:
            etag, held = self._heads.get(prefix, (None, ""))
        for _ in range(_CAS_ATTEMPTS):
            if held >= name:
                return  # never backwards
            try:
                new_etag = self._put(head_key, name.encode(), {"e_tag": etag} if etag else "create")
            except (AlreadyExistsError, PreconditionError, FileExistsError):
                found = self._get(head_key)  # moved by another writer: look again
                etag, held = (None, "") if found is None else (found[1], found[0].decode())
                continue
            with self._state_lock:
                self._heads[prefix] = (new_etag, name)
            return
        # many writers moving it at once: the head only saves a longer LIST, never matters
        # for what is read, so leave it to the next checkpoint

    def __repr__(self) -> str:
        return f"ObjectStorage({self.url!r})"
