"""Storage: where record bytes live, behind one small interface (``Storage``).

One module per backend: ``memory`` (``MemoryStorage``), ``log`` (``FileStorage``:
one append-only log per thread), ``files`` (``RecordFileStorage``: one file per
record, for what lives outside thread logs) and ``objects`` (``ObjectStorage``:
S3 and S3-compatible object stores). A new backend is one more module that
implements ``Storage``; the engine above never knows which one it talks to.
"""

from langgraph_checkpoint_verified.storage.base import QUARANTINE_PREFIX, Storage
from langgraph_checkpoint_verified.storage.files import RecordFileStorage
from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage
from langgraph_checkpoint_verified.storage.memory import MemoryStorage
from langgraph_checkpoint_verified.storage.objects import ObjectStorage

__all__ = [
    "QUARANTINE_PREFIX",
    "FileStorage",
    "MemoryStorage",
    "ObjectStorage",
    "RecordFileStorage",
    "Storage",
]
