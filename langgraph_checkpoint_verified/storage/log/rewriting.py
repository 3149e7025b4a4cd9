"""A thread's log rewritten whole (compaction), or checked block by block (scrubbing).

``LogRewriter.compact`` writes a log's live entries, and the changes made with them,
to a new file, syncs it, writes its parity beside it, and renames both over the old
ones: a crash leaves the old log or the new one. Records stored one file each (the
layout before logs) are folded into the new log, then removed. Readers notice the
new file by its inode and read it afresh; writers that waited for the old log's
lock find it retired (``LogAppender.retire``) and append to the new one.

``LogRewriter.scrub`` checks a log's blocks against its parity
(``storage.log.redundancy.scrub``); with repair, under the log's append lock, it
writes rebuilt blocks back and the parity of bytes no record covers.

``FileStorage`` routes a key or prefix to its log and calls these holding no lock:
each takes the locks it needs.
"""

from __future__ import annotations

import builtins
import os
import sys
from collections.abc import Mapping
from contextlib import nullcontext, suppress

from langgraph_checkpoint_verified.errors import StoreWriteError
from langgraph_checkpoint_verified.storage.base import FILE_MODE
from langgraph_checkpoint_verified.storage.files import (
    RecordFileStorage,
    discard_temp,
    remove_quietly,
    temp_path,
    write_all,
)
from langgraph_checkpoint_verified.storage.log.appending import LogAppender
from langgraph_checkpoint_verified.storage.log.entries import PUT, encode_entry
from langgraph_checkpoint_verified.storage.log.reading import LogReader
from langgraph_checkpoint_verified.storage.log.redundancy import (
    LogScrub,
    scrub,
    write_parity_file,
)
from langgraph_checkpoint_verified.storage.log.thread_log import DamagedEntry, ThreadLog

if sys.platform != "win32":
    import fcntl


class LogRewriter:
    """Compaction and scrubbing of the logs of one ``FileStorage``.

    Args:
        files: Where the store's plain files are (record files folded into logs).
        reader: Keeps each log's key directory up to date and reads its entries.
        appender: Appends to logs, holds them for lock blocks, retires them.
        fsync: ``False`` skips every sync, as the store does.
    """

    def __init__(
        self, files: RecordFileStorage, reader: LogReader, appender: LogAppender, *, fsync: bool
    ) -> None:
        self.files = files
        self.reader = reader
        self.appender = appender
        self.fsync = fsync

    def compact(self, log: ThreadLog, changes: Mapping[str, bytes | None]) -> None:
        """Rewrite ``log`` with only its live records and ``changes`` (key -> new bytes,
        or ``None`` to delete); durable, atomic. See ``FileStorage.compact``."""
        with log.writing, log.lock, self.appender.appending(log) as (append_fd, size):
            live: list[tuple[int, str, bytes]] = []
            folded: list[str] = []
            for key in log.index.keys_under(log.thread_key):
                where = log.index[key]
                if isinstance(where, str):
                    folded.append(where)
                if key in changes:
                    continue  # taken from changes below, or deleted
                data = self.reader.read_known(log, key)
                if data is None or isinstance(where, DamagedEntry):
                    continue  # damaged: the saver reports and quarantines it, not this
                live.append((where[0] if isinstance(where, tuple) else -1, key, data))
            live.sort()
            # new bytes go last, in key order: a checkpoint after the records it refers to
            end = len(live)
            live += [(end, key, data) for key, data in sorted(changes.items()) if data is not None]
            temp, parity_temp = temp_path(log.directory), temp_path(log.directory)
            fd = -1
            try:
                fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
                # locked before anyone can see it: whoever waited for the old log's lock
                # appends to the new one once this block (or the lock block it is in) ends
                fcntl.flock(fd, fcntl.LOCK_EX)
                data = b"".join(encode_entry(PUT, k, d) for _, k, d in live)
                write_all(fd, data)
                if self.fsync:
                    os.fsync(fd)
                write_parity_file(parity_temp, data, fsync=self.fsync)
                self.appender.retire(log, append_fd, size)
                # A sidecar never stands beside a log it is not of, whatever a crash
                # keeps: the old one is gone (durably) before the new log is renamed
                # in, and the new one follows it. In between, the log is unprotected,
                # as a log written before parity existed is.
                with suppress(FileNotFoundError):
                    os.unlink(log.parity.path)
                self.files.sync_directory(log.directory)
                os.replace(temp, log.path)
                self.files.sync_directory(log.directory)
                os.replace(parity_temp, log.parity.path)
                self.files.sync_directory(log.directory)
            except BaseException as exc:
                if fd >= 0:
                    os.close(fd)
                discard_temp(temp)
                discard_temp(parity_temp)
                if isinstance(exc, OSError):
                    raise StoreWriteError(log.path, exc) from exc
                raise
            log.close()
            log.append_fd, log.append_ino = fd, os.fstat(fd).st_ino
            if log.held:
                log.held_append = True
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
            for path in [*folded, *log.shadowed.values()]:
                remove_quietly(path)
            self.reader.refresh(log)

    def scrub(self, log: ThreadLog, *, repair: bool) -> LogScrub | None:
        """What checking ``log`` block by block against its parity found (``None``: no
        log); with ``repair``, what it rebuilt is written back. See ``FileStorage.scrub``."""
        if not os.path.exists(log.path):
            return None
        with (
            log.writing if repair else nullcontext(),
            log.lock,
            self.appender.appending(log) if repair else nullcontext(),
        ):
            self.reader.refresh(log)
            if log.fd is None:
                return None
            damage: builtins.list[tuple[int, int]] = []

            def vouched(start: int, end: int) -> bool:
                if not damage:  # a full read of the log, made when first needed
                    damage.append((-1, -1))
                    damage.extend(self.reader.damaged_ranges(log.thread_key))
                return not any(lo < end and start < hi for lo, hi in damage)

            writable: builtins.list[int] = []

            def writable_log() -> int:
                if not writable:
                    writable.append(os.open(log.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)))
                return writable[0]

            try:
                found = scrub(
                    log.fd,
                    log.end,
                    log.parity,
                    vouched=vouched,
                    repair=repair,
                    fsync=self.fsync,
                    writable_log=writable_log,
                )
            except OSError as exc:
                raise StoreWriteError(log.path, exc) from exc
            finally:
                for fd in writable:
                    os.close(fd)
            if found.rewritten:
                log.close()  # read again: what was rebuilt is now what the file holds
        return found
