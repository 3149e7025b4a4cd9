"""The one crossing an async twin makes: the synchronous core, run off the event loop's back.

Every face writes its operations once, synchronously, and its ``a*`` twins call
``run_off_loop`` once per call, since serializing, compressing and hashing a
large state, and the disk's syncs, would otherwise stall the loop. Files and
memory: a worker thread (``asyncio.to_thread``). A store reached over the
network (``awaits_io``, S3): the store's own event loop thread, where the core
runs in a greenlet and each request is awaited through the store's async API,
so that many calls are in flight without a thread each (``async_bridge``, which
is imported only then: greenlet is the ``[s3]`` extra).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from langgraph_checkpoint_verified.storage.base import Storage

T = TypeVar("T")


async def run_off_loop(storage: Storage, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` (synchronous, using ``storage``) without blocking the loop.

    Example:
        >>> import asyncio
        >>> from langgraph_checkpoint_verified.storage import MemoryStorage
        >>> asyncio.run(run_off_loop(MemoryStorage(), sum, [1, 2, 3]))
        6
    """
    if getattr(storage, "awaits_io", False):
        from langgraph_checkpoint_verified.storage.async_bridge import run_core_off_loop

        return await run_core_off_loop(fn, *args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)
