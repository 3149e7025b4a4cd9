"""A checkpointer factory of one's own, loaded by file path (``./my_checkpointer.py:checkpointer``).

The store and key still come from the environment (``open_from_env``); the
factory adds an option the environment does not cover: every damaged record
found is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langgraph_checkpoint_verified import Damage, VerifiedSaver
from langgraph_checkpoint_verified.server import open_from_env

logger = logging.getLogger("my_checkpointer")


def log_damage(damage: Damage) -> None:
    logger.warning("damaged record skipped: %s", damage)


@asynccontextmanager
async def checkpointer() -> AsyncIterator[VerifiedSaver]:
    # Opening reads the store: off the event loop, which the server guards against blocking.
    saver = await asyncio.to_thread(open_from_env, on_corruption=log_damage)
    try:
        yield saver
    finally:
        saver.close()
