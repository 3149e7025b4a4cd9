"""Group commit: durable appends of one log's lock blocks that share one ``fdatasync``.

LangGraph stores a step's checkpoint on a background thread while the next step's
tasks store their writes: two durable calls on one thread, the second queued
for the thread's lock while the first holds it. Synced one by one, they cost two
``fdatasync`` calls back to back. Instead, a durable append inside a lock block
(``FileStorage.lock``) is written but not synced, and the block's end settles
it: one ``fdatasync`` for everything the block appended, then the parity
records of those bytes (a record covers bytes only once they are synced), in
the order they were appended. A block that ends with appends unsettled while
another thread of this process waits to begin a block on the same log passes
the hold on instead: the ``flock`` stays held, the waiting block runs and
appends, and the last block of the chain settles for all of them. Each block's
caller returns only once its appends are synced, or raises what the sync raised.

Nothing another process could see changes: the ``flock`` is held from the first
block's start to the sync's end, as it was from each append to its sync. A
chain is at most ``MAX_PASSES`` blocks long, so a caller waits for a bounded
number of others. An append made outside every lock block (or a block that
excludes the others) settles what is unsettled before it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

MAX_PASSES = 4
"""How many blocks may follow the first of a chain before one settles for them all."""


class OwnedLock:
    """A re-entrant lock that says how deep its owner is in it (``depth``): a block may
    pass its hold on only if releasing it lets another thread in."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._owner: int | None = None
        self.depth = 0
        """How many times the owning thread holds the lock (0 to any other thread)."""

    def acquire(self, blocking: bool = True) -> bool:
        if not self._lock.acquire(blocking):
            return False
        self._owner = threading.get_ident()
        self.depth += 1
        return True

    def release(self) -> None:
        self.depth -= 1
        if not self.depth:
            self._owner = None
        self._lock.release()

    def __enter__(self) -> OwnedLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass
class Unsettled:
    """Bytes appended to a log, not yet synced and protected."""

    ino: int
    at: int
    appended: bytes

    @property
    def end(self) -> int:
        return self.at + len(self.appended)


@dataclass
class CommitGroup:
    """One log's appends waiting for a shared sync, and the threads waiting on it."""

    unsettled: list[Unsettled] = field(default_factory=list)
    durable: bool = False
    """Whether one of the unsettled appends was durable: settling syncs then."""
    queued: int = 0
    """Threads of this process waiting to begin a lock block on the log."""
    open: bool = False
    """Whether a block ended and passed its hold on: the ``flock`` is still held."""
    passes: int = 0
    hold: int = 0
    """The number of the latest hold taken (one per ``flock`` taken by a block)."""
    ended: int = 0
    """The number of the latest hold settled and let go of."""
    failures: dict[int, BaseException] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)

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
        with self.changed:
            self.queued += 1
            self.changed.notify_all()

    def leave(self) -> None:
        """A thread that queued gave up waiting."""
        with self.changed:
            self.queued -= 1
            self.changed.notify_all()

    def arrive(self) -> bool:
        """A thread that queued begins its block: whether it takes on a hold passed on
        (its ``flock`` held already), which it then settles, or carries on."""
        with self.changed:
            self.queued -= 1
            joined, self.open = self.open, False
            self.changed.notify_all()
            return joined

    def may_pass_on(self) -> bool:
        """Whether a block ending now should leave its appends to the next block."""
        return bool(self.unsettled) and self.queued > 0 and self.passes < MAX_PASSES

    def pass_on(self) -> int:
        """Leave the hold open for the next block; the hold's number, to wait on."""
        with self.changed:
            self.open, self.passes = True, self.passes + 1
            self.changed.notify_all()
            return self.hold

    def begin(self) -> None:
        """A block takes the ``flock``: a new hold."""
        self.hold += 1

    def end(self, failure: BaseException | None) -> None:
        """The hold is settled (or its sync failed) and its ``flock`` let go of."""
        with self.changed:
            if failure is not None:
                self.failures[self.hold] = failure
            for old in [n for n in self.failures if n < self.hold - 64]:
                del self.failures[old]  # long since seen by whoever waited on them
            self.open, self.passes, self.ended = False, 0, self.hold
            self.changed.notify_all()

    def wait(self, hold: int) -> bool:
        """Wait until hold ``hold`` is settled (``True``), or until nobody is left to take
        it on (``False``: a thread that queued gave up, say, interrupted while it
        waited), when the caller must settle it itself."""
        with self.changed:
            while self.ended < hold:
                if self.open and self.hold == hold and not self.queued:
                    return False
                self.changed.wait()
            return True

    def failure(self, hold: int) -> BaseException | None:
        """What the sync of hold ``hold`` raised, if anything."""
        with self.changed:
            return self.failures.get(hold)
