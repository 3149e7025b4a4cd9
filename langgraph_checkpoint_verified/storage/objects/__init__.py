"""The object store: records as objects of an S3-compatible bucket, several machines sharing it.

Its parts are apart, as the file store's are: ``bucket`` makes the requests (one
obstore call each, its errors made the store's), ``known`` keeps what the store
last said of each object (its ETag, its bytes), and ``object_storage`` is the
``ObjectStorage`` that writes conditionally, reads ahead along a list's chain,
and finds a namespace's newest checkpoint from its head object.
"""

from langgraph_checkpoint_verified.storage.objects.object_storage import (
    FRESH_FOR,
    HEAD_EVERY,
    LIST_CHAIN_LIMIT,
    WINDOW_CHAIN_LIMIT,
    ObjectStorage,
)

__all__ = ["FRESH_FOR", "HEAD_EVERY", "LIST_CHAIN_LIMIT", "WINDOW_CHAIN_LIMIT", "ObjectStorage"]
