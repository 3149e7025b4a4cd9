"""Where records live: a small interface, a durable file store and a memory store.

The saver only ever talks to ``Storage``: immutable named records that are
written whole, read whole, listed by prefix and deleted. Keys are ``/``-joined
segments that ``_keys`` has already made safe.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import os
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from langgraph_checkpoint_verified._keys import TEMP_PREFIX
from langgraph_checkpoint_verified.errors import StoreWriteError

if sys.platform != "win32":
    import fcntl

QUARANTINE_PREFIX = "quarantine"
LOCK_NAME = ".lock"
_DIR_MODE = 0o700
_FILE_MODE = 0o600


@runtime_checkable
class Storage(Protocol):
    """What a record store offers: whole records, written, read, listed and removed by key.

    ``FileStorage`` (``_log``) and ``MemoryStorage`` implement it; an object store could.
    """

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        """Store ``data`` under ``key`` atomically and durably.

        Returns ``False`` (and changes nothing) when ``replace`` is false and
        the key already exists. Raises ``StoreWriteError`` when the write
        cannot be made durable; the previous content of ``key`` is then intact.
        ``durable=False`` keeps the write atomic but lets a machine crash lose
        it: only for records that are made again if lost (quarantine notes).
        """
        ...

    def read(self, key: str) -> bytes | None:
        """The bytes stored under ``key``, or ``None`` if there are none."""
        ...

    def list(self, prefix: str) -> list[str]:
        """Names directly under ``prefix`` (records and sub-prefixes), unsorted."""
        ...

    def walk(self, prefix: str) -> Iterator[str]:
        """Every record key under ``prefix``, at any depth."""
        ...

    def delete(self, key: str) -> None:
        """Remove one record; a missing key is not an error."""
        ...

    def delete_tree(self, prefix: str) -> None:
        """Remove every record under ``prefix``."""
        ...

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        """Rename ``key`` to ``new_key`` (used for quarantine); ``False`` if ``key`` is gone.

        With ``replace=False`` nothing already at ``new_key`` is overwritten
        (``False`` is returned and ``key`` stays where it is).

        Atomic, not durable: after a machine crash the record may be back at
        ``key``, where the next read finds it damaged and moves it again.
        """
        ...

    def location(self, key: str) -> str:
        """Where ``key`` lives, for messages (a file path, or ``memory:key``)."""
        ...

    def stamp(self, key: str) -> Hashable | None:
        """A cheap token that changes whenever ``key`` is written, moved or deleted."""
        ...

    def written_stamp(self, key: str) -> Hashable | None:
        """The stamp of what this process just wrote under ``key`` (right after ``write``),
        where the store can tell it without asking anyone; ``stamp(key)`` otherwise."""
        ...

    def lock(self, prefix: str, *, exclusive: bool) -> AbstractContextManager[None]:
        """Hold a lock on ``prefix``, shared or exclusive, across processes using the store."""
        ...

    def write_many(
        self, items: Sequence[tuple[str, bytes]], *, replace: bool = True, durable: bool = True
    ) -> builtins.list[bool]:
        """``write`` for several records at once (one durable step where the store can)."""
        ...

    def greatest_name(self, prefix: str) -> str | None:
        """``max(self.list(prefix))``, or ``None``: the newest checkpoint without listing all."""
        ...

    def compact(self, prefix: str) -> None:
        """Reclaim the space of records deleted or replaced under a thread ``prefix``."""
        ...


class _OneRecordPerWrite:
    """For stores where every record is written on its own: a batch is its writes in
    turn, and a deleted record leaves no space to reclaim."""

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        raise NotImplementedError

    def write_many(
        self, items: Sequence[tuple[str, bytes]], *, replace: bool = True, durable: bool = True
    ) -> builtins.list[bool]:
        return [self.write(k, d, replace=replace, durable=durable) for k, d in items]

    def compact(self, prefix: str) -> None:
        """Nothing to reclaim."""

    def stamp(self, key: str) -> Hashable | None:
        raise NotImplementedError

    def written_stamp(self, key: str) -> Hashable | None:
        return self.stamp(key)


class RecordFileStorage(_OneRecordPerWrite):
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
        if self.root.exists() and not self.root.is_dir():
            raise NotADirectoryError(_not_a_store(self.root))
        self._root = str(self.root)
        # Directories this store made (or found) durably, so that a write need not
        # stat its way down the tree every time. Only a hint: delete_tree, or
        # another process, may remove one at any moment, so an operation that
        # finds its directory gone forgets them all and makes it again.
        self._known_dirs: set[str] = set()
        self._ensure_dir(self._root, sync=fsync)

    # -- writing ---------------------------------------------------------

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        path = self._path(key)
        directory = os.path.dirname(path)
        sync = self.fsync and durable
        try:
            temp, fd = self._create_temp(directory, sync=sync)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        written = os.write(fd, view)
                        view = view[written:]
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
                _remove_quietly(temp)
                raise
            if created and sync:
                self._sync_dir(directory)
            return created
        except OSError as exc:
            raise StoreWriteError(path, exc) from exc

    def _create_temp(self, directory: str, *, sync: bool) -> tuple[str, int]:
        """A new, uniquely named file in ``directory`` (made if missing), open for writing."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        self._ensure_dir(directory, sync=sync)
        temp = f"{directory}/{TEMP_PREFIX}{os.getpid()}-{_PID_SPACE}-{secrets.token_hex(8)}"
        try:
            return temp, os.open(temp, flags, _FILE_MODE)
        except FileNotFoundError:
            self._forget_dirs()  # removed since we saw it: make it again
            self._ensure_dir(directory, sync=sync)
            return temp, os.open(temp, flags, _FILE_MODE)

    def _ensure_dir(self, directory: str, *, sync: bool) -> None:
        if directory in self._known_dirs:
            return
        missing = []
        current = directory
        while not os.path.isdir(current):
            missing.append(current)
            current = os.path.dirname(current)
        for new_dir in reversed(missing):
            with suppress(FileExistsError):
                os.mkdir(new_dir, _DIR_MODE)
            if sync:
                # the new entry must survive a crash as much as the file inside it
                self._sync_dir(os.path.dirname(new_dir))
        # one made without its fsync must not vouch for a durable write later
        if sync or not self.fsync:
            self._known_dirs.add(directory)

    def _forget_dirs(self) -> None:
        self._known_dirs.clear()

    def _sync_dir(self, directory: str) -> None:
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
            with open(self._path(key), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except IsADirectoryError:
            return None

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
                _remove_if_abandoned(f"{directory}/{name}")
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
                    _remove_if_abandoned(os.path.join(dirpath, name))
                elif not name.startswith("."):
                    yield f"{rel}/{name}"

    # -- removing --------------------------------------------------------

    def delete(self, key: str) -> None:
        _remove_quietly(self._path(key))

    def delete_tree(self, prefix: str) -> None:
        path = self._path(prefix)
        if os.path.isdir(path):
            # rename first so a crash half-way never leaves a half-deleted thread visible
            parent = os.path.dirname(path)
            doomed = f"{parent}/{TEMP_PREFIX}deleting-{secrets.token_hex(8)}"
            try:
                os.rename(path, doomed)
            except FileNotFoundError:
                return
            self._forget_dirs()
            self._sync_dir(parent)
            shutil.rmtree(doomed, ignore_errors=True)
        else:
            _remove_quietly(path)

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        source, target = self._path(key), self._path(new_key)
        target_dir = os.path.dirname(target)
        # no fsync: a rename lost in a crash leaves the damage where a read finds it again
        self._ensure_dir(target_dir, sync=False)
        try:
            self._rename(source, target, replace=replace)
        except FileExistsError:
            return False
        except FileNotFoundError:
            if not os.path.lexists(source):
                return False  # someone else moved or deleted it first
            self._forget_dirs()  # it is the target's directory that went away
            self._ensure_dir(target_dir, sync=False)
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

    @contextmanager
    def lock(self, prefix: str, *, exclusive: bool) -> Iterator[None]:
        """An advisory ``flock`` on ``<prefix>/.lock``; it needs no cleanup after a crash.

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
        lock_path = f"{directory}/{LOCK_NAME}"
        while True:
            fd = self._open_lock_file(directory, lock_path)
            if fd is None:
                break
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                try:
                    current = os.stat(lock_path).st_ino
                except FileNotFoundError:
                    current = None
                if current == os.fstat(fd).st_ino:
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the directory was deleted while we waited: lock its successor
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)  # closing releases the lock

    def _open_lock_file(self, directory: str, lock_path: str) -> int | None:
        """A descriptor of the lock file (made if missing); ``None`` if there is none
        and this process cannot make one."""
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        cannot_write = (errno.EACCES, errno.EPERM, errno.EROFS)  # permissions, read-only mount
        try:
            try:
                self._ensure_dir(directory, sync=self.fsync)
            except OSError as exc:
                # only a directory that cannot be made (mkdir names it) means there is
                # nothing to lock; one made but not synced is a failed write as any
                if exc.errno not in cannot_write or exc.filename is None:
                    raise
                return None
            try:
                return os.open(lock_path, flags, _FILE_MODE)
            except FileNotFoundError:
                self._forget_dirs()  # removed since we saw it: make it again
                self._ensure_dir(directory, sync=self.fsync)
                return os.open(lock_path, flags, _FILE_MODE)
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


class _IndexedRecords(dict[str, Any]):
    """The memory store's records: a dict that also knows what lies under each prefix.

    ``children[prefix]`` counts, for each name directly under ``prefix``, the
    keys that pass through it, so listing a prefix costs the size of the
    answer, not of the store. Every way of changing a dict keeps it up to date,
    so code (and tests) may still treat ``records`` as a plain dict.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.children: dict[str, dict[str, int]] = {}
        # the greatest name under a prefix, once asked for: the newest checkpoint id
        self.newest: dict[str, str] = {}
        self.update(*args, **kwargs)

    def _count(self, key: str, step: int) -> None:
        end = key.find("/")
        while end != -1:
            after = key.find("/", end + 1)
            parent, name = key[:end], key[end + 1 : after if after != -1 else len(key)]
            names = self.children.setdefault(parent, {})
            left = names.get(name, 0) + step
            if left:
                names[name] = left
                newest = self.newest.get(parent)
                if newest is not None and name > newest:
                    self.newest[parent] = name
            else:
                del names[name]
                if self.newest.get(parent) == name:
                    del self.newest[parent]  # found again when asked
                if not names:
                    del self.children[parent]
            end = after

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self:
            self._count(key, 1)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._count(key, -1)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = super().pop(key)
            self._count(key, -1)
            return value
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, Any]:
        key, value = super().popitem()
        self._count(key, -1)
        return key, value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> _IndexedRecords:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        super().clear()
        self.children.clear()
        self.newest.clear()

    def names_under(self, prefix: str) -> list[str]:
        return list(self.children.get(prefix, ()))

    def greatest_name_under(self, prefix: str) -> str | None:
        """``max(names_under(prefix))``, kept up to date after the first time."""
        newest = self.newest.get(prefix)
        if newest is None:
            names = self.children.get(prefix)
            if not names:
                return None
            newest = self.newest[prefix] = max(names)
        return newest

    def keys_under(self, prefix: str) -> list[str]:
        """Every key strictly under ``prefix``, unsorted."""
        found = []
        pending = [prefix]
        while pending:
            parent = pending.pop()
            for name in self.children.get(parent, ()):
                key = f"{parent}/{name}"
                if key in self:
                    found.append(key)
                if key in self.children:
                    pending.append(key)
        return found


class MemoryStorage(_OneRecordPerWrite):
    """The same records, held in a dict: a drop-in for ``InMemorySaver``'s storage.

    Records are the exact bytes the file store would write, so they are
    verified on every read just the same. ``records`` may be read and changed
    like any dict; it also indexes keys by prefix, so that listing a thread
    does not scan every other thread's records.
    """

    def __init__(self) -> None:
        self._records = _IndexedRecords()
        self._lock = threading.RLock()
        self._writes = 0
        self._stamps: dict[str, int] = {}

    @property
    def records(self) -> dict[str, bytes]:
        return self._records

    @records.setter
    def records(self, records: dict[str, bytes]) -> None:
        with self._lock:
            self._records = _IndexedRecords(records)

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError("records are bytes")
        with self._lock:
            if not replace and key in self._records:
                return False
            self._records[key] = bytes(data)
            self._writes += 1
            self._stamps[key] = self._writes
            return True

    def read(self, key: str) -> bytes | None:
        return self._records.get(key)

    def list(self, prefix: str) -> list[str]:
        with self._lock:
            return self._records.names_under(prefix)

    def walk(self, prefix: str) -> Iterator[str]:
        with self._lock:
            keys = sorted(self._records.keys_under(prefix))
        yield from keys

    def delete(self, key: str) -> None:
        with self._lock:
            self._records.pop(key, None)

    def delete_tree(self, prefix: str) -> None:
        with self._lock:
            for key in self._records.keys_under(prefix):
                del self._records[key]
            self._records.pop(prefix, None)

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        with self._lock:
            if key not in self._records or (not replace and new_key in self._records):
                return False
            self._records[new_key] = self._records.pop(key)
            return True

    def location(self, key: str) -> str:
        return f"memory:{key}"

    def stamp(self, key: str) -> Hashable | None:
        with self._lock:
            if key not in self._records:
                return None
            # records changed by hand (as tests do) have no stamp: never trust a cache then
            return (self._stamps.get(key), id(self._records[key]))

    @contextmanager
    def lock(self, prefix: str, *, exclusive: bool) -> Iterator[None]:
        with self._lock:
            yield

    def greatest_name(self, prefix: str) -> str | None:
        with self._lock:
            return self._records.greatest_name_under(prefix)

    def __repr__(self) -> str:
        return f"MemoryStorage({len(self._records)} records)"


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)


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


_PID_SPACE = _pid_space()


def _remove_if_abandoned(path: str) -> None:
    # name: .tmp-<pid>-<pid space>-<random>; a pid is only checked in its own space
    pid_text, _, rest = os.path.basename(path)[len(TEMP_PREFIX) :].partition("-")
    space = rest.partition("-")[0]
    try:
        if pid_text.isdigit() and space == _PID_SPACE:
            pid = int(pid_text)
            if pid == os.getpid() or _process_alive(pid):
                return
        elif time.time() - os.stat(path).st_mtime < _ABANDONED_AFTER_SECONDS:
            return
        _remove_quietly(path)
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


def _not_a_store(path: Path) -> str:
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
