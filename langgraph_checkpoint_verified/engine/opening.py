"""Opening a store of verified records, and closing it: the one way the saver, the cache
and the store do both.

Each face takes a path (a directory, or ``s3://bucket/prefix``) or a ``Storage``,
a key, and what to do with damage; ``open_records`` checks them, opens the
storage, makes the ``Codec`` and the ``DamageReporter``, and reads (or writes)
the store marker, so that a wrong key is one clear ``StoreKeyError`` at once
rather than every record quarantined as damage later. Each face is a
``ClosedOnExit``: ``with`` and ``async with`` close it on the way out.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import TracebackType
from typing import Any, TypeVar

from langgraph_checkpoint_verified.engine.damage import Damage, DamageReporter
from langgraph_checkpoint_verified.engine.marker import check_store_marker
from langgraph_checkpoint_verified.records.format import DEFAULT_COMPRESSION_LEVEL, Codec
from langgraph_checkpoint_verified.storage import FileStorage, Storage, open_storage


def open_records(
    path: str | os.PathLike[str] | None,
    storage: Storage | None,
    *,
    owner: str,
    key: bytes | None = None,
    fsync: bool = True,
    compression_level: int = DEFAULT_COMPRESSION_LEVEL,
    on_corruption: Callable[[Damage], Any] | None = None,
    quarantine: bool = True,
) -> tuple[Storage, Codec, DamageReporter]:
    """The storage, codec and damage reporter of a store, its marker checked.

    Args:
        path: The store directory, or ``"s3://bucket/prefix"``; or ``None`` with ``storage``.
        storage: A ``Storage`` to use instead of a path.
        owner: The class opening it, for messages (``"VerifiedSaver"``...).
        key: Secret bytes making checksums keyed MACs.
        fsync: ``False`` skips every fsync (files only).
        compression_level: zstd level for new records.
        on_corruption: Called with each ``Damage`` found.
        quarantine: ``False`` reports damage without moving anything.

    Raises:
        TypeError: Both or neither of ``path`` and ``storage``, or a path of the wrong type.
        StoreKeyError: The key does not match the store's marker or records.

    Example:
        >>> from langgraph_checkpoint_verified.storage import MemoryStorage
        >>> storage, codec, reporter = open_records(None, MemoryStorage(), owner="X")
        >>> type(storage).__name__, codec.key
        ('MemoryStorage', None)
    """
    if (path is None) == (storage is None):
        raise TypeError(
            f"pass exactly one of a store directory ({owner}('store/')) or storage=...; "
            f"{owner}.in_memory() keeps its records in memory"
        )
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or PathLike, got {type(path).__name__}")
    if storage is None:
        assert path is not None
        storage = open_storage(path, fsync=fsync)
    codec = Codec(key, compression_level=compression_level)
    reporter = DamageReporter(storage, codec, on_corruption=on_corruption, quarantine=quarantine)
    if isinstance(storage, FileStorage) and storage.on_healed is None:
        # what a log heals, or finds between its entries, is reported by the first face
        # opened on this storage (a saver sets its own: its threads' logs are its)
        storage.on_damaged_span = reporter.damaged_span
        storage.on_healed = reporter.healed
    check_store_marker(storage, codec, reporter)
    return storage, codec, reporter


_Face = TypeVar("_Face", bound="ClosedOnExit")


class ClosedOnExit(AbstractContextManager, AbstractAsyncContextManager):  # type: ignore[type-arg]
    """A face of a store used as a context manager, sync or async: ``close`` on the way out.

    Example:
        >>> class Face(ClosedOnExit):
        ...     closed = False
        ...     def close(self) -> None:
        ...         self.closed = True
        >>> with Face() as face:
        ...     face.closed
        False
        >>> face.closed
        True
    """

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Face) -> _Face:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self: _Face) -> _Face:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
