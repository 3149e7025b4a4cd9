"""Measuring tools shared by the benchmark sections.

Importing this module wraps ``os.fsync`` and ``os.fdatasync`` with counters
(see ``FsyncCounter``). ``run.py`` imports it before the package under test, so
a module that binds ``from os import fsync`` at import time is counted too.
"""

from __future__ import annotations

import contextvars
import functools
import gc
import inspect
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

# -- fsync counting ------------------------------------------------------------


class FsyncCounter:
    """Counts calls of ``os.fsync`` and ``os.fdatasync`` made by Python code, in any thread.

    SQLite calls fsync from C, which this cannot see: the count is given for
    VerifiedSaver only.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        for name in ("fsync", "fdatasync"):
            original = getattr(os, name, None)
            if original is not None and not getattr(original, "_bench_counted", False):
                setattr(os, name, self._counting(original))

    def _counting(self, original: Callable[[int], None]) -> Callable[[int], None]:
        @functools.wraps(original)
        def counted(fd: Any) -> None:
            with self._lock:
                self.calls += 1
            return original(fd)

        counted._bench_counted = True  # type: ignore[attr-defined]
        return counted


FSYNCS = FsyncCounter()


# -- the interpreter's full garbage collections ----------------------------------


class FullCollections:
    """Counts the cyclic garbage collector's full (generation 2) collections.

    A full collection walks every object the process holds (LangGraph's, LangChain's
    and pydantic's included: some 40 ms here) and runs inside whichever call happens
    to allocate when one is due, whatever saver made it: a call's p99 is often that.
    ``count`` read before and after a call says whether one ran during it.
    """

    def __init__(self) -> None:
        self.count = 0
        gc.callbacks.append(self._collected)

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info.get("generation") == 2:
            self.count += 1


FULL_COLLECTIONS = FullCollections()


# -- timing the saver's own calls ------------------------------------------------

SYNC_METHODS = ("put", "put_writes", "get_tuple")
ASYNC_METHODS = ("aput", "aput_writes", "aget_tuple")

_inside_saver_call: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "inside_saver_call", default=False
)


class SaverCallTimer:
    """Wraps a saver's put/put_writes/get_tuple (and async twins) on the instance.

    Every call's ``(start, end)`` is recorded; ``take()`` returns the time
    covered by at least one call since the last ``take()`` (the union of the
    intervals, so a ``put_writes`` running on LangGraph's background thread
    while a ``put`` runs is not counted twice) and the number of calls. A
    call made from inside another timed call (an async twin that runs its sync
    twin on a worker thread) is not timed again.
    """

    def __init__(self, saver: Any) -> None:
        self._lock = threading.Lock()
        self._spans: list[tuple[float, float]] = []
        for name in (*SYNC_METHODS, *ASYNC_METHODS):
            method = getattr(saver, name, None)
            if method is None:
                continue
            if inspect.iscoroutinefunction(method):
                setattr(saver, name, self._wrap_async(method))
            else:
                setattr(saver, name, self._wrap_sync(method))

    def _record(self, started: float) -> None:
        span = (started, time.perf_counter())
        with self._lock:
            self._spans.append(span)

    def _wrap_sync(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)  # keeps the signature LangGraph inspects (task_path)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if _inside_saver_call.get():
                return method(*args, **kwargs)
            token = _inside_saver_call.set(True)
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self._record(started)
                _inside_saver_call.reset(token)

        return timed

    def _wrap_async(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            if _inside_saver_call.get():
                return await method(*args, **kwargs)
            token = _inside_saver_call.set(True)
            started = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                self._record(started)
                _inside_saver_call.reset(token)

        return timed

    def take(self) -> tuple[float, int]:
        """(seconds covered by saver calls, number of calls) since the last ``take``."""
        with self._lock:
            spans, self._spans = self._spans, []
        return union_seconds(spans), len(spans)


def union_seconds(spans: Iterable[tuple[float, float]]) -> float:
    total = 0.0
    end = float("-inf")
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


# -- statistics -----------------------------------------------------------------


def percentile(samples: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (``pct`` in 0..100) of at least one sample."""
    ordered = sorted(samples)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def p50_p99(samples: Sequence[float]) -> dict[str, float]:
    """Median and 99th percentile in milliseconds, and how many samples they come from."""
    return {
        "p50_ms": 1000 * percentile(samples, 50),
        "p99_ms": 1000 * percentile(samples, 99),
        "samples": len(samples),
    }


def paired_ratio(samples: Sequence[float], baseline: Sequence[float]) -> float:
    """Median over rounds of (sample / baseline sample of the same round).

    Both were measured in the same round, one right after the other, so
    drift of the machine's speed between rounds cancels out.
    """
    ratios = [a / b for a, b in zip(samples, baseline, strict=True) if b > 0]
    return statistics.median(ratios) if ratios else float("nan")


def rotated(names: Sequence[str], turn: int) -> list[str]:
    """``names`` starting at a different one each turn: none always runs first (or last)."""
    shift = turn % len(names)
    return [*names[shift:], *names[:shift]]


# -- sizes on disk ----------------------------------------------------------------


def tree_bytes(path: Path) -> dict[str, int]:
    """Apparent bytes (sum of sizes), allocated bytes (``du``) and files under ``path``."""
    apparent = allocated = files = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            try:
                st = os.stat(os.path.join(dirpath, name))
            except FileNotFoundError:  # a temp file renamed away while we walked
                continue
            apparent += st.st_size
            allocated += st.st_blocks * 512
            files += 1
    return {"apparent": apparent, "allocated": allocated, "files": files}


def sqlite_bytes(db: Path) -> dict[str, int]:
    """The same for a SQLite database and its -wal and -shm files (as they are, not folded)."""
    apparent = allocated = files = 0
    for suffix in ("", "-wal", "-shm", "-journal"):
        candidate = Path(f"{db}{suffix}")
        if candidate.exists():
            st = candidate.stat()
            apparent += st.st_size
            allocated += st.st_blocks * 512
            files += 1
    return {"apparent": apparent, "allocated": allocated, "files": files}
