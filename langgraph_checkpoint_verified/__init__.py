"""A LangGraph checkpointer that verifies every record it reads, recovers past damage,
and runs side effects once."""

from langgraph_checkpoint_verified._log import FileStorage
from langgraph_checkpoint_verified._object_storage import ObjectStorage
from langgraph_checkpoint_verified._storage import MemoryStorage, Storage
from langgraph_checkpoint_verified.errors import (
    CheckpointDamagedError,
    RecordDamagedError,
    StoreKeyError,
    StoreUnavailableError,
    StoreWriteError,
    ToolOutcomeUnknownError,
    VerifiedSaverError,
)
from langgraph_checkpoint_verified.migrate import MigrationReport, migrate
from langgraph_checkpoint_verified.recovery import (
    Damage,
    RecoveryStats,
    UnusableCheckpoint,
    VerifyReport,
)
from langgraph_checkpoint_verified.retry import (
    STOP_RETRYING,
    RecoveryFailedError,
    RecoveryResult,
    StateUpdate,
    arun_with_recovery,
    run_with_recovery,
)
from langgraph_checkpoint_verified.saver import VerifiedSaver
from langgraph_checkpoint_verified.tools import (
    VerifiedToolNode,
    current_idempotency_key,
    idempotency_key,
)

__all__ = [
    "CheckpointDamagedError",
    "Damage",
    "FileStorage",
    "MemoryStorage",
    "MigrationReport",
    "ObjectStorage",
    "RecordDamagedError",
    "RecoveryFailedError",
    "RecoveryResult",
    "RecoveryStats",
    "STOP_RETRYING",
    "StateUpdate",
    "Storage",
    "StoreKeyError",
    "StoreUnavailableError",
    "StoreWriteError",
    "ToolOutcomeUnknownError",
    "UnusableCheckpoint",
    "VerifiedSaver",
    "VerifiedSaverError",
    "VerifiedToolNode",
    "VerifyReport",
    "arun_with_recovery",
    "current_idempotency_key",
    "idempotency_key",
    "migrate",
    "run_with_recovery",
]
