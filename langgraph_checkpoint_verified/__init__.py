"""A LangGraph checkpointer that verifies every record it reads, recovers past damage,
and runs side effects once."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_verified.errors import (
    CheckpointDamagedError,
    NewerFormatError,
    RecordDamagedError,
    StoreKeyError,
    StoreUnavailableError,
    StoreWriteError,
    ToolOutcomeUnknownError,
    VerifiedSaverError,
)

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.cache import VerifiedCache
    from langgraph_checkpoint_verified.engine import (
        Damage,
        HealedBlock,
        RecoveryStats,
        RetentionPolicy,
        SweepReport,
        UnusableCheckpoint,
        VerifyReport,
    )
    from langgraph_checkpoint_verified.migration import MigrationReport, migrate
    from langgraph_checkpoint_verified.retry import (
        STOP_RETRYING,
        RecoveryFailedError,
        RecoveryResult,
        StateUpdate,
        arun_with_recovery,
        run_with_recovery,
    )
    from langgraph_checkpoint_verified.saver import VerifiedSaver
    from langgraph_checkpoint_verified.storage import (
        FileStorage,
        MemoryStorage,
        ObjectStorage,
        Storage,
    )
    from langgraph_checkpoint_verified.store import VerifiedStore
    from langgraph_checkpoint_verified.tools import (
        VerifiedToolNode,
        current_idempotency_key,
        idempotency_key,
    )

# Each public name is imported from its module when first used, so that importing the
# package costs nothing by itself (the command line's --help loads no LangGraph), and a
# saver user does not pay for LangGraph's prebuilt agents and tracers (tools, retry),
# the cache and the store, or obstore and greenlet (ObjectStorage).
_LAZY = {
    "Damage": "langgraph_checkpoint_verified.engine",
    "FileStorage": "langgraph_checkpoint_verified.storage",
    "MemoryStorage": "langgraph_checkpoint_verified.storage",
    "HealedBlock": "langgraph_checkpoint_verified.engine",
    "MigrationReport": "langgraph_checkpoint_verified.migration",
    "ObjectStorage": "langgraph_checkpoint_verified.storage",
    "RecoveryFailedError": "langgraph_checkpoint_verified.retry",
    "RecoveryResult": "langgraph_checkpoint_verified.retry",
    "RecoveryStats": "langgraph_checkpoint_verified.engine",
    "RetentionPolicy": "langgraph_checkpoint_verified.engine",
    "STOP_RETRYING": "langgraph_checkpoint_verified.retry",
    "StateUpdate": "langgraph_checkpoint_verified.retry",
    "Storage": "langgraph_checkpoint_verified.storage",
    "SweepReport": "langgraph_checkpoint_verified.engine",
    "UnusableCheckpoint": "langgraph_checkpoint_verified.engine",
    "VerifiedCache": "langgraph_checkpoint_verified.cache",
    "VerifiedSaver": "langgraph_checkpoint_verified.saver",
    "VerifiedStore": "langgraph_checkpoint_verified.store",
    "VerifiedToolNode": "langgraph_checkpoint_verified.tools",
    "VerifyReport": "langgraph_checkpoint_verified.engine",
    "arun_with_recovery": "langgraph_checkpoint_verified.retry",
    "current_idempotency_key": "langgraph_checkpoint_verified.tools",
    "idempotency_key": "langgraph_checkpoint_verified.tools",
    "migrate": "langgraph_checkpoint_verified.migration",
    "run_with_recovery": "langgraph_checkpoint_verified.retry",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "CheckpointDamagedError",
    "Damage",
    "FileStorage",
    "HealedBlock",
    "MemoryStorage",
    "MigrationReport",
    "NewerFormatError",
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
    "VerifiedStore",
    "VerifiedToolNode",
    "VerifyReport",
    "arun_with_recovery",
    "current_idempotency_key",
    "idempotency_key",
    "migrate",
    "run_with_recovery",
]
