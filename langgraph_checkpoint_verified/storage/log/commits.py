"""Group commit: durable appends of one log's lock blocks that share one ``fdatasync``.

LangGraph stores a step's checkpoint on a background thread while the next step's
tasks store their writes: two durable calls on one thread, the second queued
for the thread's lock while the first holds it. Synced one by one, they cost two
``fdatasync`` calls back to back. Instead, a durable append inside a lock block
(``FileStorage.lock``) made while another thread of this process waits to begin
a block on the same log is written but not synced, and the block passes its
hold on as it ends: the ``flock`` stays held, the waiting block runs and
appends, and the last block of the chain settles for all of them: one
``fdatasync``, then the parity records of those bytes (a record covers bytes
only once they are synced), in the order they were appended. Each block's
caller returns only once its appends are synced, or raises what the sync
raised. A block alone syncs each append as it makes it, as an append outside
blocks does.

Nothing another process could see changes: the ``flock`` is held from the first
block's start to the sync's end, as it was from each append to its sync. A
chain is at most ``MAX_PASSES`` blocks long, so a caller waits for a bounded
number of others. An append made outside every lock block (or a block that
excludes the others) settles what is unsettled before it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

MAX_PASSES = 4
"""How many blocks may follow the first of a chain before one settles for them all."""


@dataclass
class Unsettled:
    """Bytes appended to a log, not yet synced and protected."""

    ino: int
    at: int
    appended: bytes

    @property
    def end(self) -> int:
        return self.at + len(self.appended)


class CommitGroup:
    """One log's appends waiting for a shared sync, and the threads waiting on it.

    Counters change under a plain lock; threads that wait (a block that passed its
    hold on) are counted, and woken only when there are some. A block that finds
    the log free and that nobody waits behind touches the group once, as its hold
    ends (``end``).
    """

    def __init__(self) -> None:
        self.unsettled: list[Unsettled] = []
        self.durable = False
        """Whether one of the unsettled appends was durable: settling syncs then."""
        self.queued = 0
        """Threads of this process waiting to begin a lock block on the log."""
        self.open = False
        """Whether a block ended and passed its hold on: the ``flock`` is still held."""
        self.passes = 0
        self.hold = 0
        """The number of the latest hold taken (one per ``flock`` taken by a block)."""
        self.ended = 0
        """The number of the latest hold settled and let go of."""
        self.failures: dict[int, BaseException] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._waiting = 0

    def add(self, ino: int, at: int, appended: bytes, *, durable: bool) -> None:
        self.unsettled.append(Unsettled(ino, at, appended))
        self.durable = self.durable or durable

    def take(self) -> tuple[list[Unsettled], bool]:
        """What to settle now, forgotten here: appends one after the other in one file
        joined, so that their parity is one write."""
        taken, durable = self.unsettled, self.durable
        self.unsettled, self.durable = [], False
        joined: list[Unsettled] = []
        for done in taken:
            last = joined[-1] if joined else None
            if last is not None and last.ino == done.ino and last.end == done.at:
                joined[-1] = Unsettled(last.ino, last.at, last.appended + done.appended)
            else:
                joined.append(done)
        return joined, durable

    def queue(self) -> None:
        """A thread is about to wait for the log to begin a block."""
        with self._lock:
            self.queued += 1
            self._wake()

    def leave(self) -> None:
        """A thread that queued gave up waiting."""
        with self._lock:
            self.queued -= 1
            self._wake()

    def arrive(self) -> bool:
        """A thread that queued begins its block: whether it takes on a hold passed on
        (its ``flock`` held already), which it then settles, or carries on."""
        with self._lock:
            self.queued -= 1
            return self._take_open()

    def claim(self) -> bool:
        """A thread that did not queue (the log was free) begins its block: whether it
        takes on a hold passed on."""
        with self._lock:
            return self._take_open()

    def _take_open(self) -> bool:
        joined, self.open = self.open, False
        if joined:
            self._wake()
        return joined

    def may_pass_on(self) -> bool:
        """Whether a block ending now should leave its appends to the next block."""
        return bool(self.unsettled) and self.queued > 0 and self.passes < MAX_PASSES

    def pass_on(self) -> int:
        """Leave the hold open for the next block; the hold's number, to wait on."""
        with self._lock:
            self.open, self.passes = True, self.passes + 1
            self._wake()
            return self.hold

    def begin(self) -> None:
        """A block takes the ``flock``: a new hold."""
        self.hold += 1

    def end(self, failure: BaseException | None) -> None:
        """The hold is settled (or its sync failed) and its ``flock`` let go of."""
        with self._lock:
            if failure is not None:
                self.failures[self.hold] = failure
                for old in [n for n in self.failures if n < self.hold - 64]:
                    del self.failures[old]  # long since seen by whoever waited on them
            self.open, self.passes, self.ended = False, 0, self.hold
            self._wake()

    def wait(self, hold: int) -> bool:
        """Wait until hold ``hold`` is settled (``True``), or until nobody is left to take
        it on (``False``: a thread that queued gave up, say, interrupted while it
        waited), when the caller must settle it itself."""
        with self._lock:
            self._waiting += 1
            try:
                while self.ended < hold:
                    if self.open and self.hold == hold and not self.queued:
                        return False
                    self._changed.wait()
                return True
            finally:
                self._waiting -= 1

    def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds (checked at every change above)."""
        with self._lock:
            self._waiting += 1
            try:
                self._changed.wait_for(predicate)
            finally:
                self._waiting -= 1

    def failure(self, hold: int) -> BaseException | None:
        """What the sync of hold ``hold`` raised, if anything."""
        with self._lock:
            return self.failures.get(hold)

    def _wake(self) -> None:
        if self._waiting:
            self._changed.notify_all()
