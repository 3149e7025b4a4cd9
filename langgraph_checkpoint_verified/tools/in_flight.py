"""Tool calls running in this process, so that one call never runs twice at once.

LangGraph may retry a step while a cancelled task of the failed attempt is still
finishing, and two runs of one pending call may meet: the second waits for the
first (``claim``/``aclaim``) and then answers from its record. A call is named by
its ``CallKey``: (id of its saver, thread, record namespace, tool call id).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

CallKey = tuple[int, str, str, str]
"""(id of the saver, thread_id, record namespace, tool_call_id)."""


class InFlight:
    """One call running in this process, and how its waiters learn that it ended.

    A sync waiter blocks on ``ended`` in its own thread. An async waiter awaits a
    future of its own event loop, set from whichever thread ends the call: it
    holds no thread while it waits, so any number of runs can wait at once.
    """

    def __init__(self) -> None:
        self.ended = threading.Event()
        self.async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []


_running: dict[CallKey, InFlight] = {}
_running_lock = threading.Lock()


def claim(key: CallKey) -> InFlight | None:
    """Mark the call ``key`` names as running here; or, if it already is, the entry to
    wait on.

    Example:
        >>> key = (0, "thread", "tools:1", "call-1")
        >>> claim(key) is None  # nobody runs it: it is ours now
        True
        >>> waiting = claim(key)  # a second run finds it running
        >>> release(key)
        >>> waiting.ended.is_set()
        True
    """
    with _running_lock:
        running = _running.get(key)
        if running is None:
            _running[key] = InFlight()
        return running


async def aclaim(key: CallKey) -> None:
    """Mark the call ``key`` names as running here, first waiting (on the event loop)
    while it runs."""
    loop = asyncio.get_running_loop()
    while True:
        with _running_lock:
            running = _running.get(key)
            if running is None:
                _running[key] = InFlight()
                return
            ended: asyncio.Future[None] = loop.create_future()
            running.async_waiters.append((loop, ended))
        await ended


def release(key: CallKey) -> None:
    """The call ``key`` names ended: wake whoever waits for it."""
    with _running_lock:
        running = _running.pop(key)
    running.ended.set()
    for loop, ended in running.async_waiters:
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there
            loop.call_soon_threadsafe(_set_ended, ended)


def _set_ended(ended: asyncio.Future[None]) -> None:
    if not ended.done():  # a cancelled waiter's future is done already
        ended.set_result(None)
