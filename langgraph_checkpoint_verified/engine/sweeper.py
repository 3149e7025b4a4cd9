"""A sweep on a schedule, in the background: a thread for sync code, a task for async.

One ``Sweeper`` runs per store in a process, however many savers open it (the
LangGraph server asks for a checkpointer once per worker thread): savers
``acquire`` the store's sweeper and ``release`` it when they close; the last
release stops it. A sweep that fails is logged and the next one runs on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger("langgraph_checkpoint_verified")


class Sweeper:
    """Calls ``sweep`` every ``interval`` seconds until stopped.

    Args:
        sweep: One sweep, synchronous (run on the sweeper's thread).
        asweep: The same sweep awaited (run as a task when started on an event loop).
        interval: Seconds between the end of one sweep and the start of the next.
        on_sweep: Called with each sweep's result (a ``SweepReport``).

    Attributes:
        sweeps: How many sweeps have ended (failed ones included).
        users: The savers using it (see ``acquire``).
        thread: The thread it runs on, when started outside an event loop.
        task: The task it runs as, when started on an event loop.
    """

    def __init__(
        self,
        sweep: Callable[[], Any],
        asweep: Callable[[], Awaitable[Any]],
        interval: float,
        on_sweep: Callable[[Any], Any] | None = None,
    ) -> None:
        if not isinstance(interval, (int, float)) or interval <= 0:
            raise ValueError(f"the sweep interval must be a positive number, got {interval!r}")
        self.sweep = sweep
        self.asweep = asweep
        self.interval = float(interval)
        self.on_sweep = on_sweep
        self.sweeps = 0
        self.users = 0
        self._stop = threading.Event()
        self._ended = threading.Condition()
        self.thread: threading.Thread | None = None
        self.task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    def start(self) -> None:
        """Run as a task on the running event loop if there is one, else on a daemon thread."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            self._wake = asyncio.Event()
            self.task = loop.create_task(self._run_async(), name="langgraph-verified-sweeper")
        else:
            self.thread = threading.Thread(
                target=self._run, name="langgraph-verified-sweeper", daemon=True
            )
            self.thread.start()

    def stop(self) -> None:
        """Stop after the sweep in progress, if any (a thread is waited for)."""
        self._stop.set()
        if self.task is not None and self._wake is not None:
            wake, task = self._wake, self.task
            with contextlib.suppress(RuntimeError):  # its loop is closed: nothing runs
                task.get_loop().call_soon_threadsafe(wake.set)
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()

    def wait_for_sweeps(self, count: int, timeout: float | None = None) -> bool:
        """Block until ``count`` sweeps have ended; ``False`` if ``timeout`` passed first."""
        with self._ended:
            return self._ended.wait_for(lambda: self.sweeps >= count, timeout)

    def _ended_one(self, result: Any) -> None:
        with self._ended:
            self.sweeps += 1
            self._ended.notify_all()
        if self.on_sweep is not None and result is not None:
            try:
                self.on_sweep(result)
            except Exception:
                logger.exception("the sweeper's on_sweep callback failed")

    def _run(self) -> None:
        while not self._stop.is_set():
            result = None
            try:
                result = self.sweep()
            except Exception:
                logger.exception("a background sweep failed; the next runs on schedule")
            self._ended_one(result)
            self._stop.wait(self.interval)

    async def _run_async(self) -> None:
        assert self._wake is not None
        while not self._stop.is_set():
            result = None
            try:
                result = await self.asweep()
            except Exception:
                logger.exception("a background sweep failed; the next runs on schedule")
            self._ended_one(result)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)


_SWEEPERS: dict[str, Sweeper] = {}
_SWEEPERS_LOCK = threading.Lock()


def acquire(store: str, make: Callable[[], Sweeper]) -> Sweeper:
    """The running sweeper of ``store`` (made and started by ``make`` if there is none)."""
    with _SWEEPERS_LOCK:
        sweeper = _SWEEPERS.get(store)
        if sweeper is None:
            sweeper = _SWEEPERS[store] = make()
            sweeper.start()
        sweeper.users += 1
        return sweeper


def release(store: str, sweeper: Sweeper) -> None:
    """One user fewer; the last one stops the store's sweeper."""
    with _SWEEPERS_LOCK:
        sweeper.users -= 1
        if sweeper.users > 0 or _SWEEPERS.get(store) is not sweeper:
            return
        del _SWEEPERS[store]
    sweeper.stop()
