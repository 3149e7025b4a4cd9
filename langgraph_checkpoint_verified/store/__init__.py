"""Long-term memory on verified records: ``VerifiedStore``, LangGraph's ``BaseStore``.

``verified_store`` is the store (items as verified records, TTL, batches);
``operations`` checks what a batch is asked; ``logs`` and ``batches`` are the
memories' logs and their records (``legacy`` moves the older layout into them);
``filters`` its search filters and namespace conditions; ``vectors`` which fields
are embedded and how vectors are scored.
"""

from langgraph_checkpoint_verified.store.verified_store import StoredItem, VerifiedStore

__all__ = ["StoredItem", "VerifiedStore"]
