"""A LangGraph checkpointer that verifies every record it reads, recovers past damage,
and runs side effects once."""

from langgraph_checkpoint_verified._storage import FileStorage, MemoryStorage, Storage
from langgraph_checkpoint_verified.errors import (
    CheckpointDamagedError,
    RecordDamagedError,
    StoreWriteError,
    ToolOutcomeUnknownError,
    VerifiedSaverError,
)
from langgraph_checkpoint_verified.recovery import (
    Damage,
    RecoveryStats,
    UnusableCheckpoint,
    VerifyReport,
)
from langgraph_checkpoint_verified.saver import VerifiedSaver

__all__ = [
    "CheckpointDamagedError",
    "Damage",
    "FileStorage",
    "MemoryStorage",
    "RecordDamagedError",
    "RecoveryStats",
    "Storage",
    "StoreWriteError",
    "ToolOutcomeUnknownError",
    "UnusableCheckpoint",
    "VerifiedSaver",
    "VerifiedSaverError",
    "VerifyReport",
]
