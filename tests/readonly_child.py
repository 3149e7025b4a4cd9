"""Makes a store read-only for this process, as a read-only mount or missing write
permission would, when the real thing cannot be had (``chmod`` does not stop root).

``install(store, code)`` makes every call that would change something under the
store fail with ``OSError(code)``: creating, opening for writing (a thread's log
is appended to through ``os.open(..., O_RDWR | O_APPEND)``), renaming, linking,
removing files and directories (the quarantine is written that way), writing,
truncating or syncing data through a descriptor of a file under the store, and
``os.access(..., W_OK)`` answers no. Reading (``open(path, "rb")``, ``os.open``
read-only, ``os.pread``, listing) still works, and nothing outside the store is
touched.

Run as a script, it installs that and then runs the console script as the user
would:

    python readonly_child.py STORE EROFS langgraph-verified repair STORE
"""

from __future__ import annotations

import errno
import os
import runpy
import sys
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def install(store: str | os.PathLike[str], code: int, patch: Any = setattr) -> None:
    """Refuse, with ``OSError(code)``, every change under ``store`` from now on.

    ``patch`` replaces an attribute of ``os``: ``setattr``, or pytest's
    ``monkeypatch.setattr`` so that the test undoes it.
    """
    root = os.path.realpath(store)

    def under(path: Any) -> bool:
        if isinstance(path, int):
            return False
        resolved = os.path.realpath(os.fsdecode(path))
        return resolved == root or resolved.startswith(root + os.sep)

    def refuse(path: Any) -> None:
        raise OSError(code, os.strerror(code), os.fsdecode(path))

    real_open, real_access, real_close = os.open, os.access, os.close
    store_fds: dict[int, str] = {}
    """Descriptors of files under the store (opened read-only: the others are refused)."""

    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        if flags & _WRITE_FLAGS and under(path):
            refuse(path)
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        if under(path):
            store_fds[fd] = os.fsdecode(path)
        return fd

    def close(fd: int) -> None:
        store_fds.pop(fd, None)
        real_close(fd)

    def refusing_fd(real: Any) -> Any:
        def call(fd: int, *args: Any, **kwargs: Any) -> Any:
            if fd in store_fds:
                refuse(store_fds[fd])
            return real(fd, *args, **kwargs)

        return call

    def access(path: Any, mode: int, **kwargs: Any) -> bool:
        if mode & os.W_OK and under(path):
            return False
        return real_access(path, mode, **kwargs)

    def refusing(real: Any, paths: int) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            for path in args[:paths]:
                if under(path):
                    refuse(path)
            return real(*args, **kwargs)

        return call

    def mkdir(path: Any, *args: Any, **kwargs: Any) -> Any:
        # as the kernel does on a read-only mount, or in a directory this user cannot
        # write: a name that exists is EEXIST, whatever else would refuse the call
        if under(path) and not os.path.lexists(path):
            refuse(path)
        return real_mkdir(path, *args, **kwargs)

    patch(os, "open", open_)
    patch(os, "close", close)
    patch(os, "access", access)
    for name in ("write", "pwrite", "ftruncate", "fdatasync"):
        patch(os, name, refusing_fd(getattr(os, name)))
    real_mkdir = os.mkdir
    patch(os, "mkdir", mkdir)
    for name, paths in [
        ("makedirs", 1),
        ("rmdir", 1),
        ("unlink", 1),
        ("remove", 1),
        ("rename", 2),
        ("replace", 2),
        ("link", 2),
        ("symlink", 2),
        ("chmod", 1),
        ("utime", 1),
    ]:
        patch(os, name, refusing(getattr(os, name), paths))


if __name__ == "__main__":
    store, code_name, script, *argv = sys.argv[1:]
    install(store, getattr(errno, code_name))
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")
