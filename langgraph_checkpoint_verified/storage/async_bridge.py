"""The saver's one synchronous core, run off the caller's event loop with no thread per call.

The async twins (``aget_tuple``, ``aput``...) of a saver on a store that can
await its requests (an object store, through obstore's async API) cross once,
to the store's event loop: one daemon thread per process (``core_loop``), which
runs each call's synchronous core in a greenlet. Each request the core makes
hands its coroutine to that loop (``await_io``) and the core carries on when it
is done; meanwhile the loop runs other cores. SQLAlchemy's asyncio support runs
its synchronous ORM over async drivers the same way. Nothing waits on a thread
pool, so a server with many threads in flight is bounded by the store, not by a
pool's size; and the CPU work of a call (serializing, hashing, compressing a
large state) runs on the store's thread, never on the caller's loop, which goes
on serving other requests meanwhile.

Without the ``greenlet`` package (it comes with the ``[s3]`` extra) nothing
here is used: the twins run the core in a worker thread, as for files.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

try:
    import greenlet
except ImportError:  # pragma: no cover - the [s3] extra brings it
    greenlet = None  # type: ignore[assignment]

T = TypeVar("T")

AVAILABLE = greenlet is not None


if greenlet is not None:

    class _CoreGreenlet(greenlet.greenlet):  # type: ignore[misc,name-defined]
        """A greenlet running a synchronous core for a coroutine (its ``driver``)."""

        def __init__(self, fn: Callable[..., Any], driver: Any) -> None:
            super().__init__(fn, driver)
            self.driver = driver


def in_core_greenlet() -> bool:
    """Whether the caller runs inside ``run_core``: requests may then be awaited."""
    return greenlet is not None and isinstance(greenlet.getcurrent(), _CoreGreenlet)


def await_io(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` on the event loop from inside ``run_core``; its result."""
    current = greenlet.getcurrent()
    assert isinstance(current, _CoreGreenlet), "await_io outside run_core"
    return current.driver.switch(awaitable)  # type: ignore[no-any-return]


async def run_core(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run the synchronous ``fn`` here, awaiting each request it hands to ``await_io``."""
    core = _CoreGreenlet(fn, greenlet.getcurrent())
    core.gr_context = contextvars.copy_context()  # the caller's context, as to_thread gives
    result = core.switch(*args, **kwargs)
    while not core.dead:
        try:
            value = await result
        except BaseException:
            result = core.throw(*sys.exc_info())
        else:
            result = core.switch(value)
    return result  # type: ignore[no-any-return]


_core_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
_core_loop_lock = threading.Lock()


def core_loop() -> asyncio.AbstractEventLoop:
    """The event loop the cores of this process run on, in a daemon thread of its own
    (started at the first call, and again in a child process after ``fork``)."""
    global _core_loop
    with _core_loop_lock:
        if _core_loop is None or _core_loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="langgraph-verified-store", daemon=True
            )
            thread.start()
            _core_loop = (os.getpid(), loop)
        return _core_loop[1]


async def run_core_off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``run_core`` on the store's loop (``core_loop``), awaited from the caller's loop:
    one crossing, after which the caller's loop runs none of ``fn``'s work."""
    loop = core_loop()
    if asyncio.get_running_loop() is loop:
        return await run_core(fn, *args, **kwargs)
    # the caller's context is copied here, on the caller's side (run_core would copy the
    # store loop's)
    context = contextvars.copy_context()
    future = asyncio.run_coroutine_threadsafe(_in_context(context, fn, args, kwargs), loop)
    return await asyncio.wrap_future(future)


async def _in_context(
    context: contextvars.Context, fn: Callable[..., T], args: Any, kwargs: Any
) -> T:
    return await run_core(lambda: context.run(fn, *args, **kwargs))


class _Wakeup:
    """One waiter on a ``SharedExclusiveLock``: a future in a core, an event in a thread."""

    def __init__(self) -> None:
        if in_core_greenlet():
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            self._future: asyncio.Future[None] | None = self._loop.create_future()
        else:
            self._loop = self._future = None
            self._event = threading.Event()

    def wait(self) -> None:
        if self._future is not None:
            await_io(self._future)
        else:
            self._event.wait()

    def set(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._resolve)
        else:
            self._event.set()

    def _resolve(self) -> None:
        assert self._future is not None
        if not self._future.done():
            self._future.set_result(None)


class SharedExclusiveLock:
    """Many holders at once, or one exclusive holder, in this process.

    A core that must wait gives the event loop back (the holder it waits for
    may be another core on the same thread); a thread that must wait blocks.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._shared = 0
        self._exclusive = False
        self._waiters: list[_Wakeup] = []

    def _grant(self, exclusive: bool) -> bool:
        if exclusive:
            if self._exclusive or self._shared:
                return False
            self._exclusive = True
        else:
            if self._exclusive:
                return False
            self._shared += 1
        return True

    def _let_go(self, exclusive: bool) -> bool:
        """Give back one hold; whether the waiters may try again."""
        if exclusive:
            self._exclusive = False
        else:
            self._shared -= 1
        return True

    def acquire(self, *, exclusive: bool) -> None:
        while True:
            with self._mutex:
                if self._grant(exclusive):
                    return
                wakeup = _Wakeup()
                self._waiters.append(wakeup)
            wakeup.wait()

    def release(self, *, exclusive: bool) -> None:
        with self._mutex:
            if not self._let_go(exclusive):
                return
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.set()

    @contextmanager
    def hold(self, *, exclusive: bool) -> Iterator[None]:
        self.acquire(exclusive=exclusive)
        try:
            yield
        finally:
            self.release(exclusive=exclusive)


class ReentrantCoreLock(SharedExclusiveLock):
    """One holder at a time, which may take it again inside its hold: ``threading.RLock``,
    with the core (greenlet) that took it as its holder, or the thread outside cores.

    An ``RLock`` belongs to a thread, and every core of the store's loop runs on that
    loop's one thread: a second core would take it while the first, holding it, awaits
    a request. Here the second core gives the loop back until the first lets go.
    """

    def __init__(self) -> None:
        super().__init__()
        self._holder: object | None = None
        self._depth = 0

    def _grant(self, exclusive: bool) -> bool:
        me = greenlet.getcurrent() if greenlet is not None else threading.current_thread()
        if self._holder is not None and self._holder is not me:
            return False
        self._holder, self._depth = me, self._depth + 1
        return True

    def _let_go(self, exclusive: bool) -> bool:
        self._depth -= 1
        if self._depth:
            return False
        self._holder = None
        return True

    def __enter__(self) -> ReentrantCoreLock:
        self.acquire(exclusive=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release(exclusive=True)
