"""Records as files, one file each, written atomically and durably; the thread locks.

What ``FileStorage`` keeps outside thread logs (the store marker, the
quarantine), and how stores were laid out before logs (still read). The
helpers for temporary files (named by their writer, removed once it is gone)
are shared with the log.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import os
import secrets
import shutil
import socket
import stat
import threading
import time
import weakref
from collections.abc import Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from langgraph_checkpoint_verified.errors import StoreWriteError
from langgraph_checkpoint_verified.records.keys import TEMP_PREFIX
from langgraph_checkpoint_verified.storage.base import (
    CANNOT_WRITE_ERRNOS,
    DIR_MODE,
    FILE_MODE,
    LOCK_NAME,
    OneRecordPerWrite,
)
from langgraph_checkpoint_verified.storage.locks import DirectoryLocks

DELETIONS_SYNCED_TOGETHER = 128
"""Trees deleted in a ``deleting_together`` block whose renames one directory sync makes
durable: a sweep of many threads syncs once per this many, and leaves at most this many
renamed trees behind if it is killed."""


@dataclass
class UnsyncedDirectories:
    """Directory entries made for a new file whose syncs wait for the file's first synced
    bytes: made after that ``fdatasync``, they find its journal commit already made the
    entries durable (ext4, XFS), and each costs a flush instead of a commit of its own."""

    to_sync: list[str] = field(default_factory=list)
    """Directories to ``fsync`` (each holds a new entry), outermost first."""
    made: list[str] = field(default_factory=list)
    """Directories that vouch for durable writes once those syncs are made."""

    def __bool__(self) -> bool:
        return bool(self.to_sync or self.made)


class RecordFileStorage(OneRecordPerWrite):
    """Records as files under one directory, one file each.

    What ``FileStorage`` keeps outside thread logs (the store marker, the
    quarantine), and how stores were laid out before logs (still read).

    Every write goes to a uniquely named temporary file in the destination
    directory, is flushed and fsynced, renamed into place, and the directory is
    fsynced, before ``write`` returns. A crash at any point leaves either the
    old record or the new one, plus possibly a temporary file that readers
    never look at and that is removed once its writer is gone.

    Args:
        root: The store directory; created (mode 0700) if missing.
        fsync: ``False`` skips every fsync. Faster, and a machine crash or
            power loss may then lose acknowledged writes. Process crashes
            lose nothing either way.
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).absolute()
        self.fsync = fsync
        self._root = str(self.root)
        try:
            found = os.stat(self._root)
        except (FileNotFoundError, NotADirectoryError):
            found = None  # made below (or refused there, with the reason why)
        if found is not None and not stat.S_ISDIR(found.st_mode):
            raise NotADirectoryError(not_a_store(self.root))
        # Directories this store made (or found) durably, so that a write need not
        # stat its way down the tree every time. Only a hint: delete_tree, or
        # another process, may remove one at any moment, so an operation that
        # finds its directory gone forgets them all and makes it again.
        self._known_dirs: set[str] = set()
        # Directories known to exist, made or found without a sync: enough for a write
        # that need not survive a crash (the quarantine's copies), not for a durable one.
        self._seen_dirs: set[str] = set()
        if found is None:
            self.ensure_directory(self._root, sync=fsync)
        else:
            # a store's own directory is trusted: it was made, and synced, with its marker
            self._known_dirs.add(self._root)
        # the locks call this store back weakly: as its part, they must not keep it alive
        # (a cycle: freed by the garbage collector only, its descriptors open till then)
        open_lock_file = weakref.WeakMethod(self._open_lock_file)

        def open_through_store(directory: str, lock_path: str) -> int | None:
            method = open_lock_file()
            assert method is not None, "a store's locks are used only through the store"
            return method(directory, lock_path)

        self._locks = DirectoryLocks(open_through_store)
        self._deleting = threading.local()
        """Per thread, inside ``deleting_together``: the trees renamed away, to remove."""

    # -- writing ---------------------------------------------------------

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        path = self._path(key)
        directory = os.path.dirname(path)
        sync = self.fsync and durable
        try:
            temp, fd = self._create_temp(directory, sync=sync)
            try:
                try:
                    write_all(fd, data)
                    if sync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                if replace:
                    os.replace(temp, path)
                    created = True
                else:
                    # link() fails if the name exists: first writer wins, atomically
                    try:
                        os.link(temp, path)
                        created = True
                    except FileExistsError:
                        created = False
                    os.unlink(temp)
            except BaseException:
                discard_temp(temp)
                raise
            if created and sync:
                self.sync_directory(directory)
            return created
        except OSError as exc:
            raise StoreWriteError(path, exc) from exc

    def _create_temp(self, directory: str, *, sync: bool) -> tuple[str, int]:
        """A new, uniquely named file in ``directory`` (made if missing), open for writing."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        self.ensure_directory(directory, sync=sync)
        temp = temp_path(directory)
        try:
            return temp, os.open(temp, flags, FILE_MODE)
        except FileNotFoundError:
            self.forget_directories()  # removed since we saw it: make it again
            self.ensure_directory(directory, sync=sync)
            return temp, os.open(temp, flags, FILE_MODE)

    def ensure_directory(
        self, directory: str, *, sync: bool, later: UnsyncedDirectories | None = None
    ) -> bool:
        """Make ``directory`` and its missing parents; ``sync`` makes each new entry durable.

        Whether this call made ``directory`` itself: it then holds nothing but what
        this process puts in it. A ``mkdir`` first, the parents only if it is refused
        for want of them: a directory that exists costs one call, a new one two (and
        its parent's sync), without a look at each level first.

        With ``later``, the syncs are not made here but noted there, for the caller to
        make with ``sync_later`` once the file it makes in ``directory`` holds its
        first synced bytes (a thread's new log: ``storage.log.appending``).
        """
        if directory in self._known_dirs or (not sync and directory in self._seen_dirs):
            return False
        made = self._make_directory(directory, sync=sync, later=later)
        if sync and not made and directory in self._seen_dirs:
            # made (or found) by a write that need not last: its entry is synced now
            self._sync_now_or_later(os.path.dirname(directory), later)
        # one made without its fsync must not vouch for a durable write later
        if later is not None and sync and self.fsync:
            self._seen_dirs.add(directory)
            later.made.append(directory)
        elif sync or not self.fsync:
            self._known_dirs.add(directory)
        else:
            self._seen_dirs.add(directory)
        return made

    def _make_directory(
        self, directory: str, *, sync: bool, later: UnsyncedDirectories | None = None
    ) -> bool:
        parent = os.path.dirname(directory)
        parent_made = False
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            return False
        except FileNotFoundError:
            if parent == directory:
                raise
            parent_made = self._make_directory(parent, sync=sync, later=later)
            try:
                os.mkdir(directory, DIR_MODE)
            except FileExistsError:
                return False
        if sync:
            # the new entry must survive a crash as much as the file inside it
            self._sync_now_or_later(parent, later)
            if parent_made:
                self._vouched(parent, later)  # by the sync of its own parent, just noted
            else:
                self._vouch_for(parent, later)
        return True

    def _vouched(self, directory: str, later: UnsyncedDirectories | None) -> None:
        """``directory``'s entry is durable once the syncs noted in ``later`` are made (now,
        without ``later``)."""
        if later is None or not self.fsync:
            self._known_dirs.add(directory)
        else:
            later.made.append(directory)

    def _vouch_for(self, directory: str, later: UnsyncedDirectories | None) -> None:
        """Make the entries naming ``directory`` durable, from the store's own directory
        down, unless this process made or synced them already: another process may have
        made it (a store's ``threads``, say) and not synced it yet, and what this process
        makes in it must not depend on that process's next sync."""
        chain: list[tuple[str, str]] = []  # (directory, the one naming it), innermost first
        while (
            directory not in self._known_dirs
            and directory != self._root
            and directory.startswith(self._root)
        ):
            parent = os.path.dirname(directory)
            chain.append((directory, parent))
            directory = parent
        if later is None:
            for directory, parent in chain:
                self.sync_directory(parent)
                self._known_dirs.add(directory)
            return
        for directory, _ in chain:
            self._vouched(directory, later)
        if self.fsync:
            # ``to_sync`` is outermost first: these come before the entries made below them
            above = [parent for _, parent in reversed(chain)]
            later.to_sync[:0] = [d for d in above if d not in later.to_sync]

    def _sync_now_or_later(self, directory: str, later: UnsyncedDirectories | None) -> None:
        if later is None:
            self.sync_directory(directory)
        elif self.fsync and directory not in later.to_sync:
            later.to_sync.append(directory)

    def sync_later(self, later: UnsyncedDirectories) -> None:
        """Make the syncs ``ensure_directory`` left in ``later``, innermost directory first;
        its directories then vouch for durable writes, as if made with their syncs."""
        for directory in reversed(later.to_sync):
            self.sync_directory(directory)
        later.to_sync.clear()
        for directory in later.made:
            self._seen_dirs.discard(directory)
            self._known_dirs.add(directory)
        later.made.clear()

    def forget_directories(self) -> None:
        """Forget which directories exist (one was removed): the next write makes it again."""
        self._known_dirs.clear()
        self._seen_dirs.clear()

    def sync_directory(self, directory: str) -> None:
        """``fsync`` a directory: what was made in it survives a crash (unless ``fsync=False``)."""
        if not self.fsync:
            return
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- reading ---------------------------------------------------------

    def read(self, key: str) -> bytes | None:
        try:
            fd = os.open(self._path(key), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        try:
            return read_all(fd)
        except IsADirectoryError:
            return None
        finally:
            os.close(fd)

    def list(self, prefix: str) -> list[str]:
        directory = self._path(prefix)
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        # Hidden names (temp files, the lock) are rare, and one min() at C speed
        # proves there are none: a name starting with "." sorts before any name
        # whose first character is "/" or above, and no name can hold a "/".
        if not names or min(names) >= "/":
            return names
        visible = []
        for name in names:
            if name.startswith(TEMP_PREFIX):
                remove_if_abandoned(f"{directory}/{name}")
            elif not name.startswith("."):  # encoded names never start with a dot
                visible.append(name)
        return visible

    def walk(self, prefix: str) -> Iterator[str]:
        base = Path(self._path(prefix))
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            # a directory being deleted is renamed to a temp name first: never descend
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(TEMP_PREFIX))
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for name in sorted(filenames):
                if name.startswith(TEMP_PREFIX):
                    remove_if_abandoned(os.path.join(dirpath, name))
                elif not name.startswith("."):
                    yield f"{rel}/{name}"

    # -- removing --------------------------------------------------------

    def delete(self, key: str) -> None:
        remove_quietly(self._path(key))

    def delete_tree(self, prefix: str) -> None:
        path = self._path(prefix)
        if not os.path.isdir(path):
            remove_quietly(path)
            return
        # renamed first, so that a crash half-way never leaves a half-deleted thread
        # visible; to a name of this process's temp files, so that one it leaves (killed
        # before removing it) is removed once it is gone
        doomed = temp_path(os.path.dirname(path))
        try:
            os.rename(path, doomed)
        except FileNotFoundError:
            return
        self.forget_directories()
        pending: builtins.list[str] | None = getattr(self._deleting, "pending", None)
        if pending is None:
            self._finish_deletions([doomed])
            return
        pending.append(doomed)
        if len(pending) >= DELETIONS_SYNCED_TOGETHER:
            self._finish_deletions(pending)

    @contextmanager
    def deleting_together(self) -> Iterator[None]:
        """``Storage.deleting_together``: the renames of the trees deleted in the block are
        synced with one ``fsync`` of their directory (for every ``DELETIONS_SYNCED_TOGETHER``
        of them), and only then are the trees removed. Nested blocks are one."""
        if getattr(self._deleting, "pending", None) is not None:
            yield
            return
        pending: builtins.list[str] = []
        self._deleting.pending = pending
        try:
            yield
        finally:
            self._deleting.pending = None
            if pending:
                self._finish_deletions(pending)

    def _finish_deletions(self, doomed: builtins.list[str]) -> None:
        """Make the renames of the trees ``doomed`` durable, one sync of each directory they
        were renamed in, then remove them (and forget them: ``doomed`` is emptied). A sync
        that fails raises, and leaves the trees for the next listing to remove once this
        process is gone: removed before their renames are durable, a crash could bring a
        tree back with files missing."""
        renamed = doomed.copy()
        doomed.clear()
        for directory in dict.fromkeys(os.path.dirname(path) for path in renamed):
            self.sync_directory(directory)
        for path in renamed:
            shutil.rmtree(path, ignore_errors=True)

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        source, target = self._path(key), self._path(new_key)
        target_dir = os.path.dirname(target)
        # no fsync: a rename lost in a crash leaves the damage where a read finds it again
        self.ensure_directory(target_dir, sync=False)
        try:
            self._rename(source, target, replace=replace)
        except FileExistsError:
            return False
        except FileNotFoundError:
            if not os.path.lexists(source):
                return False  # someone else moved or deleted it first
            self.forget_directories()  # it is the target's directory that went away
            self.ensure_directory(target_dir, sync=False)
            try:
                self._rename(source, target, replace=replace)
            except (FileNotFoundError, FileExistsError):
                return False
        return True

    @staticmethod
    def _rename(source: str, target: str, *, replace: bool) -> None:
        if replace:
            os.rename(source, target)
        else:
            os.link(source, target)  # fails if target exists: never overwrite
            os.unlink(source)

    def location(self, key: str) -> str:
        return self._path(key)

    def stamp(self, key: str) -> Hashable | None:
        try:
            st = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def lock(self, prefix: str, *, exclusive: bool) -> AbstractContextManager[None]:
        """An advisory ``flock`` on ``<prefix>/.lock``; it needs no cleanup after a crash.

        The lock file stays open, and the threads of this process share its ``flock``
        (``storage.locks``): a lock taken while another thread holds it costs no call.

        ``delete_tree`` renames the directory (lock file included) away, so a lock
        won on a file no longer at its path is let go and taken again on the
        current one: whoever waited on a deleted thread's lock then sees the
        thread as it is now.

        On a store this process cannot write (a read-only mount, no write
        permission) the lock file is opened read-only, which ``flock`` accepts;
        if there is none and none can be made, nothing is locked: no one can
        write there through this directory's lock anyway.
        """
        directory = self._path(prefix)
        return self._locks.hold(directory, f"{directory}/{LOCK_NAME}", exclusive=exclusive)

    def _open_lock_file(self, directory: str, lock_path: str) -> int | None:
        """A descriptor of the lock file (made if missing); ``None`` if there is none
        and this process cannot make one."""
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        cannot_write = CANNOT_WRITE_ERRNOS  # permissions, a read-only mount
        try:
            try:
                self.ensure_directory(directory, sync=self.fsync)
            except OSError as exc:
                # only a directory that cannot be made (mkdir names it) means there is
                # nothing to lock; one made but not synced is a failed write as any
                if exc.errno not in cannot_write or exc.filename is None:
                    raise
                return None
            try:
                return os.open(lock_path, flags, FILE_MODE)
            except FileNotFoundError:
                self.forget_directories()  # removed since we saw it: make it again
                self.ensure_directory(directory, sync=self.fsync)
                return os.open(lock_path, flags, FILE_MODE)
            except OSError as exc:
                if exc.errno not in cannot_write:
                    raise
                try:
                    # flock does not care how the file was opened
                    return os.open(lock_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                except FileNotFoundError:
                    return None  # no lock file, and none can be made: nothing to lock
                except OSError:
                    raise exc from None
        except OSError as exc:
            raise StoreWriteError(lock_path, exc) from exc

    def _path(self, key: str) -> str:
        # keys are built from encoded segments only; this is a second line of defence
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"unsafe storage key {key!r}")
        return f"{self._root}/{key}" if key else self._root

    def greatest_name(self, prefix: str) -> str | None:
        return max(self.list(prefix), default=None)

    def __repr__(self) -> str:
        return f"RecordFileStorage({self._root!r}, fsync={self.fsync})"


def read_all(fd: int) -> bytes:
    """All of the file open at ``fd``, from its offset: one ``fstat`` and, for a file that
    does not change meanwhile (a record is renamed into place whole), one ``read``
    (Python's buffered ``open`` adds an ``ioctl``, two ``lseek``, an ``fstat`` and a
    second ``read``)."""
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    got = 0
    while True:
        # one byte more than the file holds: a read that fills it says the file grew
        chunk = os.read(fd, size + 1 - got if got <= size else 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
        if got == size:
            break  # all the file held when looked at (a short read elsewhere: read on)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # b"" for none


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` at ``fd``'s offset (``os.write`` may write less at a time)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_all_at(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of ``fd`` (``os.pwrite`` may write less at a time)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


_COPY_IN_PROCESS_ERRNOS = frozenset(
    {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}
)
"""``copy_file_range`` errors that mean "not between these files": copied in-process."""


def copy_range(source: int, offset: int, size: int, target: int, target_offset: int) -> None:
    """Copy ``size`` bytes at ``offset`` of ``source`` to ``target_offset`` of ``target``:
    inside the kernel where it can (``copy_file_range``, no bytes through this process),
    else read and written here. ``OSError`` (``EIO``) if ``source`` is shorter."""
    copy = getattr(os, "copy_file_range", None)
    done = 0
    while done < size and copy is not None:
        try:
            copied = copy(source, target, size - done, offset + done, target_offset + done)
        except OSError as exc:
            if exc.errno not in _COPY_IN_PROCESS_ERRNOS:
                raise
            break
        if copied == 0:
            raise OSError(errno.EIO, f"source ends before byte {offset + size}")
        done += copied
    if done < size:
        data = os.pread(source, size - done, offset + done)
        if len(data) != size - done:
            raise OSError(errno.EIO, f"source ends before byte {offset + size}")
        write_all_at(target, data, target_offset + done)


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)


def discard_temp(path: str) -> None:
    """Remove a temp file after the write it was made for failed, never raising: that
    failure is the one the caller reports. A temp file that cannot be removed (a store
    that refuses ``unlink`` as well) stays, named as this process's, until
    ``remove_if_abandoned`` finds its process gone; readers never look at it."""
    with suppress(OSError):
        remove_quietly(path)


# A temp file whose writer is alive may be about to be renamed into place; one
# whose writer is gone is garbage. The writer's pid is in the name.
_ABANDONED_AFTER_SECONDS = 3600.0


def _pid_space() -> str:
    """Names the set of processes whose pids this process can check: the host and
    its pid namespace. Another container or host sharing the store has another."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    material = f"{socket.gethostname()}\0{namespace}".encode()
    return hashlib.sha256(material).hexdigest()[:8]


PID_SPACE = _pid_space()


def temp_path(directory: str) -> str:
    """A new temp file's path in ``directory``, named so that ``remove_if_abandoned`` can
    tell, later and in any process, whether its writer is gone."""
    return f"{directory}/{TEMP_PREFIX}{os.getpid()}-{PID_SPACE}-{secrets.token_hex(8)}"


def remove_if_abandoned(path: str) -> None:
    # name: .tmp-<pid>-<pid space>-<random>; a pid is only checked in its own space
    pid_text, _, rest = os.path.basename(path)[len(TEMP_PREFIX) :].partition("-")
    space = rest.partition("-")[0]
    try:
        if pid_text.isdigit() and space == PID_SPACE:
            pid = int(pid_text)
            if pid == os.getpid() or _process_alive(pid):
                return
        elif time.time() - os.stat(path).st_mtime < _ABANDONED_AFTER_SECONDS:
            return
        remove_quietly(path)
    except OSError:
        pass


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError as exc:
        return exc.errno != errno.ESRCH
    return True


def not_a_store(path: Path) -> str:
    """Why ``path`` cannot be a store, and what to do instead."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        head = b""
    if head == b"SQLite format 3\x00":
        return (
            f"{path} is a SQLite database, not a store (a store is a directory). To move "
            f"a SqliteSaver's checkpoints into a store: langgraph-verified migrate {path} "
            f"<new store directory>, then open that directory"
        )
    return f"store path {path} exists and is not a directory: a store is a directory"
