"""Storage: where record bytes live, behind one small interface (``Storage``).

One module per backend: ``memory`` (``MemoryStorage``), ``log`` (``FileStorage``:
one append-only log per thread), ``files`` (``RecordFileStorage``: one file per
record, for what lives outside thread logs) and ``objects`` (``ObjectStorage``:
S3 and S3-compatible object stores). A new backend is one more module that
implements ``Storage``; the engine above never knows which one it talks to.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_verified.storage.base import QUARANTINE_PREFIX, Storage
from langgraph_checkpoint_verified.storage.files import RecordFileStorage
from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage
from langgraph_checkpoint_verified.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.storage.objects import ObjectStorage


def open_storage(path: str | os.PathLike[str], *, fsync: bool = True) -> Storage:
    """The storage a path names: ``ObjectStorage`` for ``s3://bucket/prefix``, else files.

    ``ObjectStorage`` is imported only then (obstore and greenlet are the ``[s3]``
    extra, and a saver on files does not load them).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     type(open_storage(tmp)).__name__
        'FileStorage'
    """
    if isinstance(path, str) and path.startswith("s3://"):
        from langgraph_checkpoint_verified.storage.objects import ObjectStorage

        return ObjectStorage(path)
    return FileStorage(path, fsync=fsync)


def __getattr__(name: str) -> Any:
    # obstore and greenlet (the [s3] extra) are imported only by who uses S3
    if name == "ObjectStorage":
        from langgraph_checkpoint_verified.storage.objects import ObjectStorage

        return ObjectStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "QUARANTINE_PREFIX",
    "FileStorage",
    "MemoryStorage",
    "ObjectStorage",
    "RecordFileStorage",
    "Storage",
    "open_storage",
]
