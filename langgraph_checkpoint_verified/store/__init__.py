"""Long-term memory on verified records: ``VerifiedStore``, LangGraph's ``BaseStore``.

``verified_store`` is the store (items as verified records, TTL, batches);
``filters`` its search filters and namespace conditions; ``vectors`` which fields
are embedded and how vectors are scored.
"""

from langgraph_checkpoint_verified.store.verified_store import StoredItem, VerifiedStore

__all__ = ["StoredItem", "VerifiedStore"]
