"""The requests an object store makes: one obstore call each, its errors made the store's.

``Bucket`` is the only part of ``ObjectStorage`` that talks to S3. Each method is
one request (a read ahead's GETs are several, in flight together), run blocking,
or awaited on the store's event loop when called from an async twin
(``storage.async_bridge``). What comes back is plain data, and what goes wrong is
one of four things: the object is not there (``None``), a conditional write lost
to another writer (``WriteConflict``), the store refused (``StoreWriteError``
with ``EACCES``, as a read-only file system), or it could not be reached after
obstore's retries (``StoreUnavailableError``). An unreachable store is never
taken for a missing object.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from langgraph_checkpoint_verified.errors import StoreUnavailableError, StoreWriteError
from langgraph_checkpoint_verified.storage.async_bridge import await_io, in_core_greenlet

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
    _CONFLICTS: tuple[type[BaseException], ...] = (
        AlreadyExistsError,
        PreconditionError,
        FileExistsError,
    )
    _ABSENT: tuple[type[BaseException], ...] = (FileNotFoundError, NotFoundError)
except ImportError:  # pragma: no cover - the [s3] extra is not installed
    obstore = None  # type: ignore[assignment]
    _REFUSED = (PermissionError,)
    _CONFLICTS = (FileExistsError,)
    _ABSENT = (FileNotFoundError,)

T = TypeVar("T")

UNCHANGED = object()
"""What a conditional GET returns when the object still has the ETag it was given."""


class WriteConflict(Exception):
    """A conditional PUT lost: the object exists (``create``), or has another ETag."""


def require_obstore() -> None:
    if obstore is None:
        raise ImportError("S3 stores need obstore: pip install 'langgraph-checkpoint-verified[s3]'")


def open_store(
    url: str, *, endpoint: str | None, region: str | None, options: dict[str, Any]
) -> Any:
    """obstore's ``S3Store`` for ``s3://bucket[/prefix]``, plain HTTP allowed for an
    ``http://`` endpoint (a local server), path-style requests for any endpoint named."""
    from obstore.store import S3Store

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
    return S3Store.from_url(url, **options)


def first_line(error: BaseException) -> str:
    """obstore's message without the debug dump that follows its first line."""
    return str(error).strip().split("\n", 1)[0]


class Bucket:
    """The requests of one store (an obstore ``S3Store``), named ``url`` in messages.

    ``fetchers``: how many GETs a read ahead has in flight at once outside an async
    twin (threads of a pool made at the first, and again in a forked child).
    """

    def __init__(self, store: Any, url: str, *, fetchers: int) -> None:
        self.store = store
        self.url = url
        self.fetchers = fetchers
        self._pool: tuple[int, ThreadPoolExecutor] | None = None
        self._pool_lock = threading.Lock()

    def location(self, key: str) -> str:
        return f"{self.url}/{key}"

    def unavailable(self, operation: str, key: str, exc: BaseException) -> StoreUnavailableError:
        return StoreUnavailableError(operation, self.location(key), first_line(exc))

    def refused(self, key: str, error: BaseException) -> StoreWriteError:
        """A request the store refused (403, bad credentials): as a file system's EACCES,
        so a store this process may only read is one, as on disk."""
        return StoreWriteError(
            self.location(key),
            PermissionError(
                errno.EACCES,
                f"permission denied by the store ({first_line(error)}): check the "
                "credentials and the bucket's policy",
            ),
        )

    @staticmethod
    def _io(call: Callable[[], T], async_call: Callable[[], Awaitable[T]]) -> T:
        """One request: awaited on the event loop inside an async twin, else blocking."""
        if in_core_greenlet():
            return await_io(async_call())
        return call()

    # -- reading ---------------------------------------------------------------

    def get(self, key: str, *, unless_etag: str | None = None) -> Any:
        """GET: ``(bytes, etag)``, ``None`` if absent, ``UNCHANGED`` if the object still
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
        except _ABSENT:
            return None
        except NotModifiedError:
            return UNCHANGED
        except Exception as exc:
            raise self.unavailable("read", key, exc) from exc

    def get_many(self, keys: builtins.list[str]) -> builtins.list[Any]:
        """``get`` of each key, the requests in flight together; an error of the first
        key is raised, those of the others are taken as "not fetched" (``UNCHANGED``)."""
        if len(keys) == 1:
            return [self.get(keys[0])]
        if in_core_greenlet():

            async def gather() -> builtins.list[Any]:
                return await asyncio.gather(
                    *(self._get_async(key) for key in keys), return_exceptions=True
                )

            results = await_io(gather())
        else:
            with self._pool_lock:
                # a pool's threads do not survive a fork: a child makes its own
                if self._pool is None or self._pool[0] != os.getpid():
                    self._pool = (os.getpid(), ThreadPoolExecutor(self.fetchers, "s3-fetch"))
                pool = self._pool[1]
            futures = [pool.submit(self.get, key) for key in keys]
            results = []
            for future in futures:
                try:
                    results.append(future.result())
                except Exception as exc:
                    results.append(exc)
        if isinstance(results[0], StoreUnavailableError):
            raise results[0]
        if isinstance(results[0], BaseException):
            raise self.unavailable("read", keys[0], results[0]) from results[0]
        return [UNCHANGED if isinstance(r, BaseException) else r for r in results]

    async def _get_async(self, key: str) -> tuple[bytes, str | None] | None:
        try:
            result = await obstore.get_async(self.store, key)
            return bytes(await result.bytes_async()), result.meta.get("e_tag")
        except _ABSENT:
            return None

    def head(self, key: str) -> Any:
        """HEAD: the object's metadata (``e_tag``, ``size``); ``None`` if absent."""
        try:
            return self._io(
                lambda: obstore.head(self.store, key),
                lambda: obstore.head_async(self.store, key),
            )
        except _ABSENT:
            return None
        except Exception as exc:
            raise self.unavailable("read", key, exc) from exc

    def list_meta(self, prefix: str | None, offset: str | None = None) -> builtins.list[Any]:
        """Every object under ``prefix`` (after ``offset``), in key order, with its ETag
        and size (obstore's ``ObjectMeta``): one LIST a page."""

        def call() -> builtins.list[Any]:
            stream = obstore.list(self.store, prefix, offset=offset)
            return [meta for chunk in stream for meta in chunk]

        async def async_call() -> builtins.list[Any]:
            stream = obstore.list(self.store, prefix, offset=offset)
            return [meta async for chunk in stream for meta in chunk]

        try:
            return self._io(call, async_call)
        except Exception as exc:
            raise self.unavailable("list", prefix or "", exc) from exc

    def list_keys(self, prefix: str | None) -> builtins.list[str]:
        """Every key under ``prefix``, in key order."""
        return [meta["path"] for meta in self.list_meta(prefix)]

    def list_level(self, start: str) -> Any:
        """One level under ``start`` (a ``/``-ended prefix, or ``""``): obstore's
        ``ListResult``, its ``objects`` and ``common_prefixes``."""
        try:
            return self._io(
                lambda: obstore.list_with_delimiter(self.store, start or None),
                lambda: obstore.list_with_delimiter_async(self.store, start or None),
            )
        except Exception as exc:
            raise self.unavailable("list", start.rstrip("/"), exc) from exc

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
            raise self.unavailable("list", prefix, exc) from exc

    # -- writing ---------------------------------------------------------------

    def put(self, key: str, data: bytes, mode: Any) -> str | None:
        """PUT ``data`` (``mode``: ``"create"``, or ``{"e_tag": etag}`` to replace that
        version only); its new ETag. ``WriteConflict`` when the condition fails."""
        try:
            result = self._io(
                lambda: obstore.put(self.store, key, data, mode=mode),
                lambda: obstore.put_async(self.store, key, data, mode=mode),
            )
        except _CONFLICTS as exc:
            raise WriteConflict(key) from exc
        except _REFUSED as exc:
            raise self.refused(key, exc) from exc
        except Exception as exc:
            raise self.unavailable("write", key, exc) from exc
        etag: str | None = result.get("e_tag")
        return etag

    def delete(self, keys: builtins.list[str], what: str) -> None:
        """DELETE ``keys`` (one request for up to a thousand); ``what`` names them in errors."""
        try:
            self._io(
                lambda: obstore.delete(self.store, keys),
                lambda: obstore.delete_async(self.store, keys),
            )
        except _ABSENT:
            pass
        except _REFUSED as exc:
            raise self.refused(what, exc) from exc
        except Exception as exc:
            raise self.unavailable("delete", what, exc) from exc
