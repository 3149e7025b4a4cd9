"""Locks on directories of a store, across processes (``flock``) and across threads.

A lock file (``<directory>/.lock``) stays open for as long as the store does, so
that locking a thread costs one ``flock`` and one ``stat`` (is the file still at
its path?) and unlocking one ``flock``, instead of opening, checking and closing
the file each time. ``flock`` belongs to the open file, which every thread of a
process shares: so an in-process reader/writer lock stands in front of it. The
first thread to take it takes the ``flock``, others join a shared hold or wait,
and the last one out releases it.

A forked child must not keep its parent's open lock files (it would share the
parent's ``flock``): every ``DirectoryLocks`` forgets them in the child.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from langgraph_checkpoint_verified.storage.lru import close_least_recent

if sys.platform != "win32":
    import fcntl

MAX_OPEN_LOCK_FILES = 256
"""Lock files kept open at most (the least recently used idle ones are closed)."""


class _LockFile:
    """One open lock file, and who in this process holds it."""

    def __init__(self, fd: int, ino: int) -> None:
        self.fd = fd
        self.ino = ino
        self.changed = threading.Condition()
        self.shared = 0
        self.exclusive = False
        self.closed = False

    @property
    def idle(self) -> bool:
        return not self.exclusive and not self.shared


class DirectoryLocks:
    """Shared and exclusive locks on directories, held through open lock files.

    Args:
        open_lock_file: Opens ``(directory, lock path)``'s lock file, making it if
            needed; ``None`` when there is none and none can be made (a read-only
            store: nothing can be written there to be locked against).
    """

    def __init__(self, open_lock_file: Callable[[str, str], int | None]) -> None:
        self._open_lock_file = open_lock_file
        self._files: OrderedDict[str, _LockFile] = OrderedDict()
        self._lock = threading.Lock()
        _ALL.add(self)
        # gone with its store: the descriptors are not left open for the process's life
        weakref.finalize(self, _close_all, self._files)

    @contextmanager
    def hold(self, directory: str, lock_path: str, *, exclusive: bool) -> Iterator[None]:
        """Hold ``lock_path`` (in ``directory``) shared or exclusive, across processes.

        A lock won on a file no longer at its path (the directory was deleted, by
        renaming it away, meanwhile) is let go and taken again on the current one.
        """
        while True:
            entry = self._entry(directory, lock_path)
            if entry is None:
                yield  # nothing can be locked, and nothing written here
                return
            with entry.changed:
                while not entry.closed and (entry.exclusive or (exclusive and entry.shared)):
                    entry.changed.wait()
                if entry.closed:
                    continue
                held = not entry.idle or self._lock_file(entry, lock_path, exclusive=exclusive)
                if held and exclusive:
                    entry.exclusive = True
                elif held:
                    entry.shared += 1
                else:  # no longer at its path: whoever waits on it starts again too
                    entry.closed = True
                    entry.changed.notify_all()
            if held:
                break
            self._discard(lock_path, entry)
        try:
            yield
        finally:
            with entry.changed:
                if exclusive:
                    entry.exclusive = False
                else:
                    entry.shared -= 1
                if entry.idle:
                    fcntl.flock(entry.fd, fcntl.LOCK_UN)
                entry.changed.notify_all()

    @staticmethod
    def _lock_file(entry: _LockFile, lock_path: str, *, exclusive: bool) -> bool:
        """Take the ``flock``; ``False`` (and nothing held) if the file is no longer at its path."""
        fcntl.flock(entry.fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            current = os.stat(lock_path).st_ino
        except FileNotFoundError:
            current = None
        except BaseException:
            fcntl.flock(entry.fd, fcntl.LOCK_UN)
            raise
        if current == entry.ino:
            return True
        fcntl.flock(entry.fd, fcntl.LOCK_UN)
        return False

    def _entry(self, directory: str, lock_path: str) -> _LockFile | None:
        with self._lock:
            entry = self._files.get(lock_path)
            if entry is not None:
                self._files.move_to_end(lock_path)
                return entry
        fd = self._open_lock_file(directory, lock_path)
        if fd is None:
            return None
        entry = _LockFile(fd, os.fstat(fd).st_ino)
        with self._lock:
            existing = self._files.get(lock_path)
            if existing is not None:  # another thread opened it meanwhile: use theirs
                os.close(fd)
                return existing
            self._close_idle_beyond(MAX_OPEN_LOCK_FILES - 1)  # room first (``storage.lru``)
            self._files[lock_path] = entry
        return entry

    def _close_idle_beyond(self, limit: int) -> None:
        """Close least recently used idle lock files until at most ``limit`` are open
        (caller holds ``self._lock``)."""

        def close_if_idle(path: str, entry: _LockFile) -> bool:
            # a thread that holds ``changed`` is taking the lock (in ``flock``, maybe
            # waiting for another process): in use, passed over rather than waited for
            if not entry.changed.acquire(blocking=False):
                return False
            try:
                if entry.idle and not entry.closed:
                    self._close(path, entry)
                    return True
                return False
            finally:
                entry.changed.release()

        close_least_recent(self._files, limit, close_if_idle)

    def _discard(self, lock_path: str, entry: _LockFile) -> None:
        """Close a lock file found no longer at its path (already marked closed)."""
        with self._lock:
            if self._files.get(lock_path) is entry:
                del self._files[lock_path]
        os.close(entry.fd)

    def _close(self, lock_path: str, entry: _LockFile) -> None:
        entry.closed = True
        del self._files[lock_path]
        os.close(entry.fd)
        entry.changed.notify_all()

    def forget_in_child(self) -> None:
        """In a forked child: let go of the parent's open lock files."""
        self._lock = threading.Lock()
        _close_all(self._files)


def _close_all(files: OrderedDict[str, _LockFile]) -> None:
    entries = list(files.values())
    files.clear()
    for entry in entries:
        entry.closed = True
        with suppress(OSError):
            os.close(entry.fd)


_ALL: weakref.WeakSet[DirectoryLocks] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for locks in list(_ALL):
        locks.forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
