"""A LangGraph checkpointer that verifies every record it reads, recovers past damage,
and runs side effects once."""

from langgraph_checkpoint_verified.cache import VerifiedCache
from langgraph_checkpoint_verified.engine import (
    Damage,
    RecoveryStats,
    RetentionPolicy,
    SweepReport,
    UnusableCheckpoint,
    VerifyReport,
)
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
from langgraph_checkpoint_verified.retry import (
    STOP_RETRYING,
    RecoveryFailedError,
    RecoveryResult,
    StateUpdate,
    arun_with_recovery,
    run_with_recovery,
)
from langgraph_checkpoint_verified.saver import VerifiedSaver
from langgraph_checkpoint_verified.storage import FileStorage, MemoryStorage, ObjectStorage, Storage
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
    "RetentionPolicy",
    "STOP_RETRYING",
    "StateUpdate",
    "Storage",
    "StoreKeyError",
    "StoreUnavailableError",
    "StoreWriteError",
    "SweepReport",
    "ToolOutcomeUnknownError",
    "UnusableCheckpoint",
    "VerifiedCache",
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
