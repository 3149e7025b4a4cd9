"""Where records live: a small interface, a durable file store and a memory store.

The saver only ever talks to ``Storage``: immutable named records that are
written whole, read whole, listed by prefix and deleted. Keys are ``/``-joined
segments that ``_keys`` has already made safe.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Protocol, runtime_checkable

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
    """The five operations a record store must offer."""

    def write(self, key: str, data: bytes, *, replace: bool = True) -> bool:
        """Store ``data`` under ``key`` atomically and durably.

        Returns ``False`` (and changes nothing) when ``replace`` is false and
        the key already exists. Raises ``StoreWriteError`` when the write
        cannot be made durable; the previous content of ``key`` is then intact.
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

    def move_aside(self, key: str, new_key: str) -> bool:
        """Rename ``key`` to ``new_key`` (used for quarantine); ``False`` if ``key`` is gone."""
        ...

    def location(self, key: str) -> str:
        """Where ``key`` lives, for messages (a file path, or ``memory:key``)."""
        ...

    def stamp(self, key: str) -> Hashable | None:
        """A cheap token that changes whenever ``key`` is written, moved or deleted."""
        ...

    def lock(self, prefix: str, *, exclusive: bool) -> AbstractContextManager[None]:
        """Hold a lock on ``prefix``, shared or exclusive, across processes using the store."""
        ...


class FileStorage:
    """Records as files under one directory.

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
            raise NotADirectoryError(f"store path {self.root} exists and is not a directory")
        self._ensure_dir(self.root)

    # -- writing ---------------------------------------------------------

    def write(self, key: str, data: bytes, *, replace: bool = True) -> bool:
        path = self._path(key)
        try:
            self._ensure_dir(path.parent)
            temp = path.parent / f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        written = os.write(fd, view)
                        view = view[written:]
                    if self.fsync:
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
            if created:
                self._sync_dir(path.parent)
            return created
        except OSError as exc:
            raise StoreWriteError(str(path), exc) from exc

    def _ensure_dir(self, directory: Path) -> None:
        if directory.is_dir():
            return
        missing = []
        current = directory
        while not current.is_dir():
            missing.append(current)
            current = current.parent
        for new_dir in reversed(missing):
            with suppress(FileExistsError):
                os.mkdir(new_dir, _DIR_MODE)
            # the new entry must survive a crash as much as the file inside it
            self._sync_dir(new_dir.parent)

    def _sync_dir(self, directory: Path) -> None:
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
        visible = []
        for name in names:
            if name.startswith(TEMP_PREFIX):
                _remove_if_abandoned(directory / name)
            elif not name.startswith("."):  # encoded names never start with a dot
                visible.append(name)
        return visible

    def walk(self, prefix: str) -> Iterator[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            # a directory being deleted is renamed to a temp name first: never descend
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(TEMP_PREFIX))
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for name in sorted(filenames):
                if name.startswith(TEMP_PREFIX):
                    _remove_if_abandoned(Path(dirpath) / name)
                elif not name.startswith("."):
                    yield f"{rel}/{name}"

    # -- removing --------------------------------------------------------

    def delete(self, key: str) -> None:
        path = self._path(key)
        _remove_quietly(path)

    def delete_tree(self, prefix: str) -> None:
        path = self._path(prefix)
        if path.is_dir():
            # rename first so a crash half-way never leaves a half-deleted thread visible
            doomed = path.parent / f"{TEMP_PREFIX}deleting-{secrets.token_hex(8)}"
            try:
                os.rename(path, doomed)
            except FileNotFoundError:
                return
            self._sync_dir(path.parent)
            shutil.rmtree(doomed, ignore_errors=True)
        else:
            _remove_quietly(path)

    def move_aside(self, key: str, new_key: str) -> bool:
        source, target = self._path(key), self._path(new_key)
        self._ensure_dir(target.parent)
        try:
            os.rename(source, target)
        except FileNotFoundError:
            return False
        return True

    def location(self, key: str) -> str:
        return str(self._path(key))

    def stamp(self, key: str) -> Hashable | None:
        try:
            st = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    @contextmanager
    def lock(self, prefix: str, *, exclusive: bool) -> Iterator[None]:
        """An advisory ``flock`` on ``<prefix>/.lock``; it needs no cleanup after a crash."""
        directory = self._path(prefix)
        try:
            self._ensure_dir(directory)
            fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, _FILE_MODE)
        except OSError as exc:
            raise StoreWriteError(str(directory / LOCK_NAME), exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _path(self, key: str) -> Path:
        # keys are built from encoded segments only; this is a second line of defence
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"unsafe storage key {key!r}")
        return self.root / key if key else self.root

    def __repr__(self) -> str:
        return f"FileStorage({str(self.root)!r}, fsync={self.fsync})"


class MemoryStorage:
    """The same records, held in a dict: a drop-in for ``InMemorySaver``'s storage.

    Records are the exact bytes the file store would write, so they are
    verified on every read just the same.
    """

    def __init__(self) -> None:
        self.records: dict[str, bytes] = {}
        self._lock = threading.RLock()
        self._writes = 0
        self._stamps: dict[str, int] = {}

    def write(self, key: str, data: bytes, *, replace: bool = True) -> bool:
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError("records are bytes")
        with self._lock:
            if not replace and key in self.records:
                return False
            self.records[key] = bytes(data)
            self._writes += 1
            self._stamps[key] = self._writes
            return True

    def read(self, key: str) -> bytes | None:
        return self.records.get(key)

    def list(self, prefix: str) -> list[str]:
        start = f"{prefix}/"
        with self._lock:
            keys = list(self.records)
        return list({k[len(start) :].split("/", 1)[0] for k in keys if k.startswith(start)})

    def walk(self, prefix: str) -> Iterator[str]:
        start = f"{prefix}/"
        with self._lock:
            keys = sorted(k for k in self.records if k.startswith(start))
        yield from keys

    def delete(self, key: str) -> None:
        with self._lock:
            self.records.pop(key, None)

    def delete_tree(self, prefix: str) -> None:
        start = f"{prefix}/"
        with self._lock:
            for key in [k for k in self.records if k.startswith(start) or k == prefix]:
                del self.records[key]

    def move_aside(self, key: str, new_key: str) -> bool:
        with self._lock:
            data = self.records.pop(key, None)
            if data is None:
                return False
            self.records[new_key] = data
            return True

    def location(self, key: str) -> str:
        return f"memory:{key}"

    def stamp(self, key: str) -> Hashable | None:
        with self._lock:
            if key not in self.records:
                return None
            # records changed by hand (as tests do) have no stamp: never trust a cache then
            return (self._stamps.get(key), id(self.records[key]))

    @contextmanager
    def lock(self, prefix: str, *, exclusive: bool) -> Iterator[None]:
        with self._lock:
            yield

    def __repr__(self) -> str:
        return f"MemoryStorage({len(self.records)} records)"


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)


# A temp file whose writer is alive may be about to be renamed into place; one
# whose writer is gone is garbage. The writer's pid is in the name.
_ABANDONED_AFTER_SECONDS = 3600.0


def _remove_if_abandoned(path: Path) -> None:
    rest = path.name[len(TEMP_PREFIX) :]
    pid_text = rest.split("-", 1)[0]
    try:
        if pid_text.isdigit():
            pid = int(pid_text)
            if pid == os.getpid() or _process_alive(pid):
                return
        elif time.time() - path.stat().st_mtime < _ABANDONED_AFTER_SECONDS:
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
