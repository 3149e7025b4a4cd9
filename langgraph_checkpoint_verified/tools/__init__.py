"""Side effects once: ``VerifiedToolNode`` and the names of a tool call.

``node`` is ``VerifiedToolNode`` (a ``ToolNode`` that records each finished call
in the thread's ``VerifiedSaver``); ``calls`` says what makes two calls the same
call (namespaces, lineage, fingerprints) and gives a tool its idempotency key;
``task`` reads where a tools task keeps its records from its config, and
``in_flight`` keeps one call from running twice at once in a process.
"""

from langgraph_checkpoint_verified.tools.calls import (
    current_idempotency_key,
    fingerprint,
    idempotency_key,
    lineage_checkpoint,
    record_namespace,
    stable_namespace,
)
from langgraph_checkpoint_verified.tools.node import VerifiedToolNode

__all__ = [
    "VerifiedToolNode",
    "current_idempotency_key",
    "fingerprint",
    "idempotency_key",
    "lineage_checkpoint",
    "record_namespace",
    "stable_namespace",
]
