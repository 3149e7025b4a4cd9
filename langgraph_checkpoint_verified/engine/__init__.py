"""The engine: threads of verified records, under every face of the package.

``Engine`` (``core``) reads a thread's checkpoints (falling back past damage)
and writes them; the modules beside it are functions over an ``Engine``:
``maintenance`` (delete, prune, copy), ``delta_history`` (``DeltaChannel``
histories), ``tool_records`` (what ``VerifiedToolNode`` keeps of each call),
``verify`` (check a store: ``usability`` judges a thread's records, ``repair``
moves aside what no read can use, ``standalone_records`` checks the memory
store's and the node cache's, ``verify_report`` is what they report) and
``retention`` (``RetentionPolicy``, ``sweep_threads``: expire and trim threads);
``sweeper`` runs sweeps on a schedule. ``damage`` reports, counts and
quarantines every damaged record found. Below them: ``reads`` (reading and
verifying records), ``writes``, the caches (``record_cache``,
``decoded_values``) and the store marker (``marker``).

The faces (``saver``, ``tools``, ``retry``, ``cli``, ``server``, ``migrate``) use
the names this package exports and the public attributes of ``Engine``.
"""

from langgraph_checkpoint_verified.engine.core import Engine
from langgraph_checkpoint_verified.engine.damage import Damage, DamageReporter, RecoveryStats
from langgraph_checkpoint_verified.engine.retention import RetentionPolicy, SweepReport
from langgraph_checkpoint_verified.engine.verify_report import (
    HealedBlock,
    UnusableCheckpoint,
    VerifyReport,
)

__all__ = [
    "Damage",
    "DamageReporter",
    "Engine",
    "HealedBlock",
    "RecoveryStats",
    "RetentionPolicy",
    "SweepReport",
    "UnusableCheckpoint",
    "VerifyReport",
]
