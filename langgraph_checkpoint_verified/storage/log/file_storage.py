"""The file store: one append-only log per thread, an in-memory key directory, compaction.

Every record of a thread (``threads/<T>/...``: checkpoints, pending writes,
tool-call records) is an entry appended to the thread's log,
``threads/<T>/log`` (see ``storage.log.entries`` for the entry format). A durable call is
one ``pwrite`` of the new entries into the room at the log's end (zeros written ahead,
``storage.log.room``) and one ``fdatasync``: no new file, no rename, no directory sync,
and, while the room lasts, no change to the file's size for the sync to commit. A log is
created (and its directory synced) once per thread.

This is Bitcask's design: each process keeps, per thread it touched, a key
directory (key -> where its latest entry's data lies), built by reading the
log once and brought up to date by reading only what was appended since
(another process's appends included). Deleting appends a tombstone. A process
that read or appended a long stretch of log past its hint leaves a new hint
beside it (``log.hint``: every key's position, sorted, in blocks with an index,
like an SSTable's): the next process reads the hint's index, the blocks it
needs as it needs them, and the log from where the hint ends.
``compact`` writes the live entries to a new file, syncs it and renames it
over the log, so a crash leaves the old log or the new one; readers notice the
new file by its inode and read it afresh.

Appends take an exclusive ``flock`` on the log for the write and its sync, so
two processes never interleave entries, and whoever appends first cuts off a
torn tail left by a crash; the thread's lock (``lock``) is that same ``flock``,
held for a whole put or maintenance step. Readers take no lock: an entry
half-written at the moment they read is a torn tail to them, not damage. The
append descriptor stays open between appends, and a process knows nobody appended
or moved the log when the header where it knows the log to end is still zeros: a
log is moved from its path (compaction, deletion) only after its retirement
(``RETIRED_NAME``) is appended. Anything else there, and one ``stat`` of the path.

Beside each log, ``log.parity`` (``storage.log.parity``, ``storage.log.redundancy``)
is brought up to date after each append's sync, with no sync of its own. A read
checks its entry's checksum; an entry that fails it, or damage found by a scan,
is rebuilt from the parity where one block of its stripe is damaged, served and
reported (``on_healed``); ``scrub`` finds and, with repair, writes back what is
rebuilt.

This module routes each key to its log and implements ``Storage`` over the logs:
keeping a key directory up to date and reading entries back is ``LogReader``'s
(``storage.log.reading``), appending and holding a log for a lock block is
``LogAppender``'s (``storage.log.appending``), and compaction and scrubbing are
``LogRewriter``'s (``storage.log.rewriting``). Everything else (the store marker,
the quarantine) is a plain file, written by ``RecordFileStorage``. A store written
as one file per record (the layout before logs) is read as it is: its files are in
the key directory, under the log's entries, and ``compact`` folds them into the log.
"""

from __future__ import annotations

import builtins
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Any

from langgraph_checkpoint_verified.errors import StoreWriteError
from langgraph_checkpoint_verified.storage.base import (
    LOCK_NAME,
    MovedAside,
    aside_names,
    move_aside_one_by_one,
)
from langgraph_checkpoint_verified.storage.files import (
    RecordFileStorage,
    remove_quietly,
)
from langgraph_checkpoint_verified.storage.log.appending import LogAppender
from langgraph_checkpoint_verified.storage.log.entries import DELETE, PUT
from langgraph_checkpoint_verified.storage.log.hint_file import HINT_NAME
from langgraph_checkpoint_verified.storage.log.reading import LogReader
from langgraph_checkpoint_verified.storage.log.redundancy import (
    PARITY_SUFFIX,
    LogScrub,
)
from langgraph_checkpoint_verified.storage.log.rewriting import LogRewriter
from langgraph_checkpoint_verified.storage.log.thread_log import (
    LOG_NAME,
    LOG_PARENTS,
    RETIRED_NAME,
    DamagedBytes,
    DamagedEntry,
    ThreadLog,
    thread_dir_key,
)
from langgraph_checkpoint_verified.storage.lru import close_least_recent

PARITY_NAME = LOG_NAME + PARITY_SUFFIX
_OPEN_LOGS = 256


class FileStorage:
    """Records as entries of one append-only log per thread (see the module docstring).

    Implements ``Storage``; ``VerifiedSaver(path)`` uses it.

    Args:
        root: The store directory; created (mode 0700) if missing.
        fsync: ``False`` skips every sync: process crashes lose nothing, a
            machine crash or power loss may lose acknowledged writes.

    Example:
        >>> import tempfile
        >>> storage = FileStorage(tempfile.mkdtemp())
        >>> storage.write("threads/t/ns/~/checkpoints/1.ckpt", b"record")
        True
        >>> storage.read("threads/t/ns/~/checkpoints/1.ckpt"), storage.list("threads/t/ns/~")
        (b'record', ['checkpoints'])
    """

    uncompressed_below = 2 * 1024
    """Content size from which the engine compresses a checkpoint or writes record.

    A step's records (a message or two, a tool call) are mostly 0.5 to 2 KB. zstd
    halves them, but on a thread's log that costs 17 to 35 µs a record (its tables
    cold between steps): 5 to 10% of a durable ``put``, for some 800 bytes of a local
    disk. Below this size a record is kept as it is (flag bit 1, verified the same);
    larger ones (long tool outputs, documents, whole lists) are compressed. PostgreSQL
    compresses a row's values from about 2 KB (``TOAST_TUPLE_THRESHOLD``) likewise.
    Object storage keeps compressing everything: there, bytes cross a network."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.files = RecordFileStorage(root, fsync=fsync)
        self.root: Path = self.files.root
        self.fsync = fsync
        self.reader = LogReader(self.files)
        """Keeps each log's key directory up to date with its file, and reads entries."""
        self.appender = LogAppender(self.files, self.reader, fsync=fsync)
        """Appends to the logs, and holds them for ``lock`` blocks."""
        self.rewriter = LogRewriter(self.files, self.reader, self.appender, fsync=fsync)
        """Compacts and scrubs the logs."""
        self._logs: OrderedDict[str, ThreadLog] = OrderedDict()
        self._live: weakref.WeakValueDictionary[str, ThreadLog] = weakref.WeakValueDictionary()
        """Every log handed out and still used somewhere, open or closed to keep the bound
        (those in ``_logs`` among them): a thread never gets a second object for a log
        another thread still holds (two would take the same ``flock`` through two
        descriptors, each behind its own locks)."""
        self._lock = threading.Lock()
        _OPEN_STORES.add(self)
        # gone with the store: its logs' descriptors are not left open for the process's life
        weakref.finalize(self, _close_logs, self._logs, self._live)

    def forget_append_descriptors(self) -> None:
        """In a forked child: close the descriptors kept open for appending (the child must
        not share its parent's: a ``flock`` belongs to the open file, which fork shares),
        and let go of the locks the parent's other threads held."""
        self._lock = threading.Lock()
        for log in list(self._live.values()):
            log.forget_locks_in_child()

    @property
    def on_damaged_span(self) -> Callable[[str, str, bytes, str | None, str], bool] | None:
        """Called as ``(log location, reason, bytes, claimed key, span id)`` for damage
        between entries that names no readable key (set by the saver's reporter); returns
        whether those bytes are kept elsewhere now (copied to the quarantine)."""
        return self.reader.on_damaged_span

    @on_damaged_span.setter
    def on_damaged_span(
        self, report: Callable[[str, str, bytes, str | None, str], bool] | None
    ) -> None:
        self.reader.on_damaged_span = report

    @property
    def on_healed(self) -> Callable[[str, str | None], Any] | None:
        """Called as ``(block location, key read)`` for each damaged block of a log
        rebuilt from its parity, once per block and opening of the log (set by the
        saver's reporter)."""
        return self.reader.on_healed

    @on_healed.setter
    def on_healed(self, report: Callable[[str, str | None], Any] | None) -> None:
        self.reader.on_healed = report

    # -- routing ------------------------------------------------------------

    def _log(self, thread_key: str) -> ThreadLog:
        with self._lock:
            log = self._logs.get(thread_key)
            if log is None:
                self._close_idle_beyond(_OPEN_LOGS - 1)  # room first (``storage.lru``)
                log = self._live.get(thread_key)
                if log is None:
                    log = ThreadLog(self.files.location(thread_key), thread_key)
                    self._live[thread_key] = log
                self._logs[thread_key] = log
            else:
                self._logs.move_to_end(thread_key)
            return log

    def close_idle(self) -> None:
        """Close every log no call is using (``VerifiedSaver.close``): its descriptors and
        ``flock`` go now, not when the store is collected; a later call opens it again.
        Appends made without a sync are synced first, and covered by parity."""
        with self._lock:
            self._close_idle_beyond(0, settle=True)

    def _close_idle_beyond(self, limit: int, *, settle: bool = False) -> None:
        """Close least recently used logs no thread appends to or holds locked, until at
        most ``limit`` are open (caller holds ``self._lock``); with ``settle``, each after
        ``protect_unsynced``."""

        def close_if_idle(thread_key: str, old: ThreadLog) -> bool:
            # in use, and passed over rather than waited for: a log another thread appends
            # to, holds locked (perhaps waiting for another process) or reads
            if not old.writing.acquire(blocking=False):
                return False
            try:
                if old.held or old.commits.open:
                    return False  # this very thread holds it locked, or a block passed it on
                if not old.lock.acquire(blocking=False):
                    return False
                try:
                    del self._logs[thread_key]
                    if settle:
                        self.appender.protect_unsynced(old)
                    old.close_as_unread()  # whoever still holds it reads it again
                finally:
                    old.lock.release()
                return True
            finally:
                old.writing.release()

        close_least_recent(self._logs, limit, close_if_idle)

    # -- Storage ----------------------------------------------------------------

    def consistent_reads(self, prefix: str) -> AbstractContextManager[None]:
        """Within the block, this thread catches up with the log of ``prefix``'s thread
        once: later reads use the key directory and the file as they were then (an
        open descriptor keeps a replaced log readable), or as its own appends left them."""
        return self.reader.consistent_reads(prefix)

    def deleting_together(self) -> AbstractContextManager[None]:
        """Threads deleted in the block leave the store as their directories are renamed
        away, and are made durable together (``RecordFileStorage.deleting_together``)."""
        return self.files.deleting_together()

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        return self.write_many([(key, data)], replace=replace, durable=durable)[0]

    def write_many(
        self,
        items: Sequence[tuple[str, bytes]],
        *,
        replace: bool = True,
        durable: bool = True,
    ) -> builtins.list[bool]:
        """Write several records; those of one thread cost one append and one sync.

        With ``replace=False``, a key that exists keeps its record (``False`` for it).
        """
        by_thread: dict[str | None, list[int]] = {}
        for i, (key, _) in enumerate(items):
            by_thread.setdefault(thread_dir_key(key), []).append(i)
        written = [False] * len(items)
        for thread_key, indices in by_thread.items():
            if thread_key is None or thread_key == items[indices[0]][0]:
                for i in indices:
                    key, data = items[i]
                    written[i] = self.files.write(key, data, replace=replace, durable=durable)
                continue
            log = self._log(thread_key)
            chosen = self.appender.append(
                log,
                [(PUT, items[i][0], items[i][1]) for i in indices],
                replace=replace,
                durable=durable,
            )
            for i, done in zip(indices, chosen, strict=True):
                written[i] = done
        return written

    def lock(self, prefix: str, *, exclusive: bool) -> AbstractContextManager[None]:
        """A thread's lock is its log's ``flock``, taken for the block's length: puts
        (shared) decide what they refer to and append under it, maintenance (exclusive)
        what it keeps, so neither sees the other half done. Appends inside the block
        take no lock of their own. Other prefixes: ``RecordFileStorage.lock``."""
        thread_key = thread_dir_key(prefix)
        if thread_key is None or thread_key != prefix:
            return self.files.lock(prefix, exclusive=exclusive)
        return self.appender.holding(self._log(thread_key), exclusive=exclusive)

    def read(self, key: str) -> bytes | None:
        thread_key = thread_dir_key(key)
        if thread_key is None or thread_key == key:
            return self.files.read(key)
        log = self._log(thread_key)
        with log.lock:
            self.reader.refresh(log)
            return self.reader.read_known(log, key)

    def still_holds(self, items: Sequence[tuple[str, bytes]]) -> bool:
        """Whether each key's entry holds exactly the bytes given: its data read again and
        compared (bytes that were verified and are the same need no checksum; any other
        bytes, damage included, are for ``read`` to check, heal and report)."""
        thread_key = thread_dir_key(items[0][0]) if items else None
        if thread_key is None or not all(k.startswith(f"{thread_key}/") for k, _ in items):
            return all(self.read(key) == data for key, data in items)
        log = self._log(thread_key)
        with log.lock:
            self.reader.refresh(log)
            for key, data in items:
                where = log.index.get(key)
                if type(where) is not tuple or where[1] != len(data):
                    return False  # moved, deleted, damaged, or another record now
                assert log.fd is not None
                if os.pread(log.fd, where[1], where[0]) != data:
                    return False
            return True

    def list(self, prefix: str) -> list[str]:
        thread_key = thread_dir_key(prefix)
        if thread_key is None:
            return self.files.list(prefix)
        log = self._log(thread_key)
        with log.lock:
            self.reader.refresh(log)
            return log.index.names_under(prefix)

    def damaged_bytes(self, prefix: str) -> builtins.list[DamagedBytes]:
        """Damage between entries, in the logs of the threads under ``prefix``, that names
        no record a read could ask for (see the module docstring); compaction drops it."""
        if prefix in LOG_PARENTS:
            return [
                d
                for name in self.files.list(prefix)
                for d in self.damaged_bytes(f"{prefix}/{name}")
            ]
        thread_key = thread_dir_key(prefix)
        if thread_key is None:
            return []
        scratch = self.reader.read_afresh(thread_key)
        return [] if scratch is None else builtins.list(scratch.spans)

    def greatest_name(self, prefix: str) -> str | None:
        thread_key = thread_dir_key(prefix)
        if thread_key is None:
            return self.files.greatest_name(prefix)
        log = self._log(thread_key)
        with log.lock:
            self.reader.refresh(log)
            return log.index.greatest_name_under(prefix)

    def greatest_names(self, prefix: str, count: int) -> builtins.list[str]:
        thread_key = thread_dir_key(prefix)
        if thread_key is None:
            return self.files.greatest_names(prefix, count)
        log = self._log(thread_key)
        with log.lock:
            self.reader.refresh(log)
            return log.index.greatest_names_under(prefix, count)

    def walk(self, prefix: str) -> Iterator[str]:
        if prefix in LOG_PARENTS:
            for name in sorted(self.files.list(prefix)):
                yield from self.walk(f"{prefix}/{name}")
            return
        thread_key = thread_dir_key(prefix)
        if thread_key is None:
            yield from self.files.walk(prefix)
            return
        log = self._log(thread_key)
        with log.lock:
            self.reader.refresh(log)
            keys = sorted(log.index.keys_under(prefix))
        yield from keys

    def delete(self, key: str) -> None:
        self.delete_many([key])

    def delete_many(self, keys: Sequence[str], *, durable: bool = False) -> None:
        """Remove records; a missing key is not an error.

        Not durable by default: maintenance ends with ``compact``, which is.
        """
        by_thread: dict[str | None, list[str]] = {}
        for key in keys:
            by_thread.setdefault(thread_dir_key(key), []).append(key)
        for thread_key, thread_keys in by_thread.items():
            if thread_key is None:
                for key in thread_keys:
                    self.files.delete(key)
                continue
            log = self._log(thread_key)
            with log.writing, log.lock:
                self.reader.refresh(log)
                present = [key for key in thread_keys if key in log.index]
                files = [log.index[key] for key in present if isinstance(log.index[key], str)]
                files += [log.shadowed.pop(key) for key in thread_keys if key in log.shadowed]
                if present:
                    self.appender.append(
                        log, [(DELETE, key, b"") for key in present], durable=durable
                    )
                for path in files:
                    remove_quietly(path)

    def delete_tree(self, prefix: str) -> None:
        thread_key = thread_dir_key(prefix)
        if thread_key is None:
            self.files.delete_tree(prefix)
            return
        if thread_key == prefix:
            log = self._log(thread_key)
            with log.writing, log.lock:
                if os.path.isdir(log.directory):
                    with self.appender.appending(log) as (fd, size):
                        self.appender.retire(log, fd, size)
                        self.files.delete_tree(prefix)
                with self._lock:
                    if self._logs.get(thread_key) is log:
                        del self._logs[thread_key]
                log.close_as_unread()
            return
        log = self._log(thread_key)
        with log.lock:
            self.reader.refresh(log)
            keys = log.index.keys_under(prefix)
        self.delete_many(keys)

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        with _refusal_as_os_error():
            return self._move_aside(key, new_key, replace=replace)

    def _move_aside(self, key: str, new_key: str, *, replace: bool) -> bool:
        source_thread = thread_dir_key(key)
        target_thread = thread_dir_key(new_key)
        if source_thread is None and target_thread is None:
            return self.files.move_aside(key, new_key, replace=replace)
        if source_thread is not None and target_thread is None:
            moved = self._move_out_of_log(source_thread, [(key, None)], new_key, replace=replace)
            return moved[0] is not None
        if source_thread is None:
            # back from the quarantine into a thread (never over a newer record)
            data = self.files.read(key)
            if data is None or not self.write(new_key, data, replace=replace):
                return False
            self.files.delete(key)
            return True
        raise ValueError(f"cannot move {key} to {new_key}: records move out of threads only")

    def move_aside_unchanged(
        self, moves: Sequence[tuple[str, bytes]], aside: str
    ) -> builtins.list[MovedAside | None]:
        """Those of one thread's log copied, under one lock, into one file, each compared
        first with what it must still hold, then gone from the log in one append."""
        names = aside_names(aside, len(moves))
        by_thread: dict[str, list[int]] = {}
        one_by_one: list[int] = []
        for i, (key, _) in enumerate(moves):
            thread_key = thread_dir_key(key)
            if thread_key is None or thread_key == key:
                one_by_one.append(i)
            else:
                by_thread.setdefault(thread_key, []).append(i)
        moved: list[MovedAside | None] = [None] * len(moves)
        for thread_key, indices in by_thread.items():
            # one record alone keeps its own name; of several logs, each is numbered
            # by the first of its records
            if len(moves) == 1:
                new_key = names[0]
            elif len(by_thread) == 1 and not one_by_one:
                new_key = f"{aside}.records"
            else:
                new_key = f"{aside}-{indices[0] + 1}.records"
            with _refusal_as_os_error():
                done = self._move_out_of_log(thread_key, [moves[i] for i in indices], new_key)
            for i, went in zip(indices, done, strict=True):
                moved[i] = went
        elsewhere = move_aside_one_by_one(
            self, [(moves[i][0], names[i], moves[i][1]) for i in one_by_one]
        )
        for i, went in zip(one_by_one, elsewhere, strict=True):
            moved[i] = went
        return moved

    def _move_out_of_log(
        self,
        thread_key: str,
        moves: Sequence[tuple[str, bytes | None]],
        new_key: str,
        *,
        replace: bool = True,
    ) -> builtins.list[MovedAside | None]:
        """Copy records of one thread's log into the plain file ``new_key``, back to back,
        under one lock, and delete them from the log with one append: each whatever it
        holds (``expected`` is ``None``), or only if it holds ``expected``. Where each
        went, or ``None``."""
        log = self._log(thread_key)
        moved: list[MovedAside | None] = []
        with log.writing, log.lock:
            self.reader.refresh(log)
            gone: list[str] = []
            copies: list[bytes] = []
            offset = 0
            for key, expected in moves:
                # the bytes as stored, as a rename moves them; what the reader judged may
                # have had blocks rebuilt from the parity, so compare a read like its
                data = self.reader.read_known(log, key, heal=False)
                if data is None or (
                    expected is not None
                    and data != expected
                    and self.reader.read_known(log, key) != expected
                ):
                    moved.append(None)
                    continue
                moved.append(MovedAside(new_key, offset, len(data)))
                copies.append(data)
                offset += len(data)
                gone.append(key)
            if not gone:
                return moved
            if not self.files.write(new_key, b"".join(copies), replace=replace, durable=False):
                return [None] * len(moves)
            record_files = [
                where for where in (log.index.get(key) for key in gone) if isinstance(where, str)
            ]
            try:
                self.appender.append(
                    log, [(DELETE, key, b"") for key in gone], durable=False, hint=False
                )
            except BaseException:
                # the records stay in the log: no copy of them may stand aside as if moved
                with suppress(OSError):
                    self.files.delete(new_key)
                raise
            for path in record_files:
                remove_quietly(path)
            # the hint still names the records moved out: this process's next append
            # leaves a new one (``hint_due``), so that readers after it do not each read
            # the deletions past the old one; the move itself, a read's fallback, does not
            log.damage_settled = True
        return moved

    def _locate(self, key: str) -> tuple[ThreadLog, Any] | None:
        """The up-to-date log of the thread ``key`` is in, and where the key is in it;
        ``None`` for a key outside every thread (a plain file)."""
        thread_key = thread_dir_key(key)
        if thread_key is None or thread_key == key:
            return None
        log = self._log(thread_key)
        with log.lock:
            self.reader.refresh(log)
            return log, log.index.get(key)

    def location(self, key: str) -> str:
        found = self._locate(key)
        if found is not None and isinstance(found[1], (tuple, DamagedEntry)):
            return f"{found[0].path}@{found[1][0]} ({key})"
        return self.files.location(key)

    def stamp(self, key: str) -> Hashable | None:
        found = self._locate(key)
        if found is None:
            return self.files.stamp(key)
        log, where = found
        if where is None:
            return None
        if isinstance(where, DamagedEntry):
            return ("damaged", log.ino, log.opening, where.offset)
        if isinstance(where, tuple):
            return (log.ino, log.opening, where[0])
        return self.files.stamp(os.path.relpath(where, self.files.location("")))

    def thread_stamp(self, prefix: str) -> Hashable | None:
        """The log's state as this process knows it once caught up with the file: every
        change to a thread is an append to its log (a move or a deletion too), or a new
        log at its path, which whoever renames it there announces by a retirement."""
        thread_key = thread_dir_key(prefix)
        if thread_key is None or not thread_key.startswith("threads/"):
            return None
        log = self._log(thread_key)
        with log.lock:
            self.reader.refresh(log)
            if log.fd is None or log.retiring:
                return None
            return (log.opening, log.reading, log.end)

    def written_stamp(self, key: str) -> Hashable | None:
        """The stamp of the entry this process just appended for ``key``: the key
        directory has it since the append, so the file is not looked at again."""
        thread_key = thread_dir_key(key)
        if thread_key is None or thread_key == key:
            return self.files.stamp(key)
        log = self._log(thread_key)
        with log.lock:
            where = log.index.get(key) if log.built else None
            if isinstance(where, tuple) and not isinstance(where, DamagedEntry):
                return (log.ino, log.opening, where[0])
        return self.stamp(key)

    def compact(self, prefix: str, *, changes: Mapping[str, bytes | None] | None = None) -> None:
        """Rewrite a thread's log with only its live records; durable, atomic.

        ``changes`` (key -> new bytes, or ``None`` to delete) are part of the
        rewrite: the new log holds them, so a crash leaves the thread as it
        was or with all of them. Records stored one file each are folded into
        the log, then removed. A crash leaves the old log or the new one (and,
        at worst, record files that the new log holds too).
        """
        changes = dict(changes or {})
        thread_key = thread_dir_key(prefix)
        if thread_key is None:
            self.files.compact(prefix, changes=changes)
            return
        if any(thread_dir_key(key) != thread_key for key in changes):
            raise ValueError(f"compact({prefix!r}) changes records of another thread")
        log = self._log(thread_key)
        if not os.path.isdir(log.directory):
            if any(data is not None for data in changes.values()):
                self.write_many([(k, d) for k, d in changes.items() if d is not None])
            return
        self.rewriter.compact(log, changes)

    def protect_unsynced(self) -> None:
        """Sync, and cover with parity, the appends made without a sync (deletions, moves
        to the quarantine) that wait for the next sync of their log, in every log open
        here: a repair leaves none of its bytes unprotected."""
        with self._lock:
            logs = builtins.list(self._logs.values())
        for log in logs:
            self.appender.protect_unsynced(log)

    def scrub(self, prefix: str, *, repair: bool) -> builtins.list[tuple[str, LogScrub]]:
        """Check the logs of the threads under ``prefix`` block by block against their
        parity: ``(log path, what was found)`` for each log that has something to say.

        With ``repair``, under each log's append lock, rebuilt blocks are written back
        in place (then synced) and the parity of bytes no intact record covers (a log
        written before parity existed, a lost or damaged record) is written, where the
        log's entries verify over those bytes.
        """
        if prefix in LOG_PARENTS:
            return [
                found
                for name in sorted(self.files.list(prefix))
                for found in self.scrub(f"{prefix}/{name}", repair=repair)
            ]
        thread_key = thread_dir_key(prefix)
        if thread_key is None:
            return []
        log = self._log(thread_key)
        found = self.rewriter.scrub(log, repair=repair)
        if found is not None and (found.healed or found.unhealable or found.unprotected):
            return [(log.path, found)]
        return []

    def usage(self, prefix: str) -> int:
        """Bytes of the records at ``prefix`` or under it, from the key directory (no read)."""
        thread_key = thread_dir_key(prefix)
        if thread_key is None:
            return self.files.usage(prefix)
        log = self._log(thread_key)
        total = 0
        with log.lock:
            self.reader.refresh(log)
            keys = [prefix] if prefix in log.index else []
            for key in [*keys, *log.index.keys_under(prefix)]:
                where = log.index[key]
                if isinstance(where, DamagedEntry):  # a NamedTuple: before plain tuples
                    total += len(where.data)
                elif isinstance(where, tuple):
                    total += where[1]
                else:
                    total += len(self.read(key) or b"")
        return total

    def __repr__(self) -> str:
        return f"FileStorage({str(self.root)!r}, fsync={self.fsync})"


_OPEN_STORES: weakref.WeakSet[FileStorage] = weakref.WeakSet()


@contextmanager
def _refusal_as_os_error() -> Iterator[None]:
    """A move out of a log refused by the file system raises the ``OSError`` itself, as
    ``RecordFileStorage``'s rename does: the damage reporter tells a read-only store
    (nothing moved, nothing raised) by it."""
    try:
        yield
    except StoreWriteError as exc:
        if isinstance(exc.__cause__, OSError):
            raise exc.__cause__ from None
        raise


def _close_logs(
    logs: OrderedDict[str, ThreadLog], live: weakref.WeakValueDictionary[str, ThreadLog]
) -> None:
    for log in list(live.values()):  # the open ones, ``logs``, among them
        with suppress(OSError):
            log.close()
    logs.clear()


def _after_fork_in_child() -> None:
    for storage in list(_OPEN_STORES):
        storage.forget_append_descriptors()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = [
    "HINT_NAME",
    "LOCK_NAME",
    "LOG_NAME",
    "PARITY_NAME",
    "RETIRED_NAME",
    "FileStorage",
]
