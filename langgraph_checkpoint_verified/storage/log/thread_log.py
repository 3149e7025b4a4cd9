"""One thread's log as a process knows it: its files, what was read of it, its key directory.

``FileStorage`` keeps one ``ThreadLog`` per thread it touched (the least recently
used are closed); its ``LogReader`` and ``LogAppender`` do the reading and the
appending. This is the state they keep, how an entry read or appended changes
the key directory, and which log a key is in (``thread_dir_key``).
"""

from __future__ import annotations

import os
import threading
import weakref
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, NamedTuple

from langgraph_checkpoint_verified.storage.files import UnsyncedDirectories
from langgraph_checkpoint_verified.storage.log.commits import CommitGroup
from langgraph_checkpoint_verified.storage.log.entries import PUT
from langgraph_checkpoint_verified.storage.log.key_directory import KeyDirectory
from langgraph_checkpoint_verified.storage.log.redundancy import ParityFile

LOG_NAME = "log"
LOG_PARENTS = ("threads", "memories")
"""Each directory under these is one log: a thread's, or the memory store's of one label."""
RETIRED_NAME = ".log-retired"
"""A log's last entry before a compaction renames a new log over it, or a deletion moves
its thread away, is a tombstone of ``<thread>/.log-retired`` (a key no record has): a
process that knows the log up to some point learns that its file is still at its path
from the zeros after that point, and looks at the path again when it reads this."""


def thread_dir_key(key: str) -> str | None:
    """The log a key is in: ``threads/<T>`` for a key inside a thread (or the thread
    itself), ``memories/<L>`` for one of the memory store's labels; else ``None``."""
    if key.startswith("threads/"):
        end = key.find("/", 8)
    elif key.startswith("memories/"):
        end = key.find("/", 9)
    else:
        return None
    return key if end == -1 else key[:end]


@dataclass(frozen=True)
class DamagedBytes:
    """Bytes in a thread's log that are no intact entry of that thread."""

    location: str
    """``<log path>@<offset>``."""
    offset: int
    reason: str
    data: bytes
    claimed_key: str | None
    span_id: str
    """Names the bytes for as long as the log file is the same (its inode and the offset)."""


class DamagedEntry(NamedTuple):
    """What a key reads back as when its latest entry is damaged: the whole stretch."""

    offset: int
    data: bytes


class ThreadLog:
    """One thread's log as this process knows it."""

    def __init__(self, directory: str, thread_key: str) -> None:
        self.directory = directory
        self.thread_key = thread_key
        """The thread's key in the store (``threads/<T>``), which its entries' keys start with."""
        self.path = f"{directory}/{LOG_NAME}"
        self.fd: int | None = None
        self.ino: int | None = None
        self.opening = 0
        """Which opening of the file ``fd`` is, unique in this process: an inode number
        can be reused once a compacted log's file is gone, an opening never is."""
        self.end = 0
        """Where the intact part of the log, as read so far, ends."""
        self.reading = 0
        """Which reading of the file the key directory comes from, unique in this process
        (a new one each time it is read from scratch): with ``opening`` and ``end``, it
        names the state of the log this process knows (``FileStorage.thread_stamp``)."""
        self.size = 0
        """The file's size when it was last read or appended to: a size other than this
        means someone wrote past the room (a release that appends at the file's end)."""
        self.room = True
        """Whether only zeros followed ``end`` when the log was last read or appended to:
        room, where the next entry goes (``storage.log.room``). ``False`` when a torn
        write's bytes are there: the next append cuts them off first."""
        self.index = KeyDirectory()
        """key -> (offset, size) in the log, a path (a record file), or bytes (damage)."""
        self.lock = threading.RLock()
        """Held to read or change what this process knows of the log (after ``writing``)."""
        self.writing = threading.RLock()
        """Held by the one thread of this process that appends, or that holds the thread's
        lock (``FileStorage.lock``): taken before ``lock``, never after it."""
        self.commits = CommitGroup()
        """Appends of lock blocks waiting for their shared sync (``storage.log.commits``)."""
        self.held = 0
        """How deep the thread holding ``writing`` is in ``FileStorage.lock`` blocks."""
        self.held_append = False
        """Whether those blocks hold the ``flock`` of ``append_fd``."""
        self.held_read_only: tuple[int, Exception] | None = None
        """Or the descriptor they hold it through: the log opened read-only, on a store
        this process cannot write (``flock`` does not care how a file is open), with the
        error that said so (what an append inside the blocks raises)."""
        self.built = False
        self.made_here = False
        """Whether this process has just made the thread's directory, to create its log:
        it holds no record files of the layout before logs, which the reading of the new
        log (``LogReader.rebuild``) need not look for."""
        self.spans: list[DamagedBytes] = []
        """Damage between entries that names no record of this thread, as read so far,
        and not kept elsewhere (copied to the quarantine) when it was found."""
        self.damaged_keys: set[str] = set()
        """Keys whose entry was found damaged (a ``DamagedEntry``), as read so far."""
        self.damage_settled = False
        """Whether damage found in the log stands no more since the last hint was written:
        the next hint is due at once, so that no later reader reads past it again."""
        self.shadowed: dict[str, str] = {}
        """Record files (the layout before logs) whose key the log holds since: key -> path."""
        self.hint_end = 0
        """How much of the log the newest hint this process knows of covers."""
        self.hint_size = 0
        """That hint's size."""
        self.parity = ParityFile(self.path)
        self.healed: set[int] = set()
        """Offsets of the blocks rebuilt from parity so far (each is reported once)."""
        self.rewrite: set[int] = set()
        """Offsets of blocks rebuilt from parity that the next append writes back in place
        (``LogAppender``): a log in use heals on disk, not only in what is read."""
        self.append_fd: int | None = None
        """Kept open between appends (see ``LogAppender.appending``)."""
        self.append_ino: int | None = None
        self.unsynced_directories: UnsyncedDirectories | None = None
        """The directory entries of a log this process made, not synced yet: synced after
        the first append's own sync, before its ``flock`` is let go of."""
        self.retiring = False
        """Whether the last entry read is the log's retirement (a compaction or a deletion
        moves it from its path next): until the path names another file, every look at
        the log looks at its path too."""
        # let go of by every call, it closes what it holds (see ``_close_descriptors``)
        weakref.finalize(self, _close_descriptors, self.__dict__).atexit = False

    def holds_damage(self) -> bool:
        """Whether the log holds damage that keeps it from a hint, as read so far: bytes
        that name no record of the thread and could not be copied to the quarantine. A
        reader finds those only by reading the log. A key whose latest entry is damaged
        does not: the hint names it where its data lies, and whoever reads it finds it
        damaged. Such damage stands no more once the record is deleted (the quarantine's
        move appends a deletion, and leaves the hint to the next append) or written again
        (and its key is forgotten here): the next hint is then due at once, naming what
        the log holds now."""
        if self.damaged_keys:
            self.damaged_keys = {
                key for key in self.damaged_keys if isinstance(self.index.get(key), DamagedEntry)
            }
            self.damage_settled = not (self.spans or self.damaged_keys)
        return bool(self.spans)

    def close(self) -> None:
        self.close_read()
        self.close_append()

    def close_as_unread(self) -> None:
        """``close``, and forget what was read: the next use reads the log from scratch,
        as a new ``ThreadLog`` would. The locks stay: a thread that still holds this
        object shares them with the next caller (``FileStorage`` hands out no other)."""
        self.close()
        self.built = False

    def close_read(self, next_ino: int | None = None) -> None:
        """Forget the file read so far (it was replaced): its descriptor, its parity's
        (kept if it is already the sidecar of ``next_ino``, the file read next: a log
        this process has just made)."""
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None
        self.ino = None
        if next_ino is None or not self.parity.is_for(next_ino):
            self.parity.close()
        self.healed = set()
        self.rewrite = set()

    def forget_locks_in_child(self) -> None:
        """In a forked child: no thread holds this log (the parent's threads are not here),
        and no descriptor the parent locks through is kept."""
        self.lock = threading.RLock()
        self.writing = threading.RLock()
        self.commits = CommitGroup()  # the parent's threads wait on theirs, not here
        self.held, self.held_append = 0, False
        if self.held_read_only is not None:
            os.close(self.held_read_only[0])
            self.held_read_only = None
        self.close_append()

    def close_append(self) -> None:
        if self.append_fd is not None:
            os.close(self.append_fd)  # and its flock with it
        self.append_fd = None
        self.append_ino = None
        self.held_append = False


def _close_descriptors(state: dict[str, Any]) -> None:
    """Close the descriptors a collected ``ThreadLog`` held; ``state`` is its ``__dict__``,
    where its methods keep them.

    ``FileStorage`` closes the logs of its table of open logs itself. This closes one
    that a call held while the bound closed it, and that the call opened again to go
    on (it is in no table then), once the last call lets go of it. A finalizer, not
    ``__del__``: it runs once no weak reference returns the log any more, and
    ``FileStorage`` hands out the logs still used through one, so no call can get
    the log back while its descriptors close.
    """
    held, state["held_read_only"] = state.get("held_read_only"), None
    descriptors = [state.get("fd"), state.get("append_fd"), held[0] if held else None]
    state["fd"] = state["append_fd"] = None
    for fd in descriptors:
        if fd is not None:
            with suppress(OSError):
                os.close(fd)
    parity = state.get("parity")
    if parity is not None:
        parity.close()


def apply_entry(log: ThreadLog, kind: int, key: str, where: tuple[int, int]) -> None:
    """Take an entry of ``kind`` for ``key``, its data at ``where``, into the key directory."""
    before = log.index.get(key)
    if isinstance(before, str):
        log.shadowed[key] = before  # a record file: removed with the key, or by compaction
    if kind == PUT:
        log.index[key] = where
    elif before is not None:
        del log.index[key]


def apply_entries(log: ThreadLog, changes: dict[str, tuple[int, int] | None]) -> None:
    """Take what a stretch of log left into the key directory at once: each key's last
    entry's data (offset, size), or ``None`` for a key its last entry deleted."""
    for key, before in log.index.apply(changes).items():
        if isinstance(before, str):
            log.shadowed[key] = before  # a record file: removed with the key, or by compaction
