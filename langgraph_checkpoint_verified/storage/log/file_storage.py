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

Everything else (the store marker, the quarantine) is a plain file, written
by ``RecordFileStorage``. A store written as one file per record (the layout before
logs) is read as it is: its files are in the key directory, under the log's
entries, and ``compact`` folds them into the log.
"""

from __future__ import annotations

import builtins
import errno
import itertools
import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

from langgraph_checkpoint_verified.errors import StoreWriteError
from langgraph_checkpoint_verified.records.keys import TEMP_PREFIX
from langgraph_checkpoint_verified.storage.base import (
    CANNOT_WRITE_ERRNOS,
    FILE_MODE,
    LOCK_NAME,
    move_aside_one_by_one,
)
from langgraph_checkpoint_verified.storage.files import (
    RecordFileStorage,
    remove_if_abandoned,
    remove_quietly,
    temp_path,
    write_all,
    write_all_at,
)
from langgraph_checkpoint_verified.storage.log.entries import (
    CHECKSUM_SIZE,
    DELETE,
    HEADER_SIZE,
    PUT,
    DamagedSpan,
    Entry,
    encode_entry,
    entry_is_intact,
)
from langgraph_checkpoint_verified.storage.log.hint_file import (
    HINT_AFTER_BYTES,
    HINT_AFTER_ENTRIES,
    HINT_NAME,
    hint_due,
    read_hint,
    write_hint,
)
from langgraph_checkpoint_verified.storage.log.key_directory import KeyDirectory
from langgraph_checkpoint_verified.storage.log.redundancy import (
    PARITY_SUFFIX,
    LogScrub,
    patch,
    rebuilt_blocks,
    scrub,
    write_parity_file,
)
from langgraph_checkpoint_verified.storage.log.room import all_zeros, room_after
from langgraph_checkpoint_verified.storage.log.tail import Tail, read_tail
from langgraph_checkpoint_verified.storage.log.thread_log import (
    LOG_NAME,
    DamagedBytes,
    DamagedEntry,
    ThreadLog,
    apply_entries,
    apply_entry,
)

if sys.platform != "win32":
    import fcntl

LOG_PARENTS = ("threads", "memories")
"""Each directory under these is one log: a thread's, or the memory store's of one label."""
PARITY_NAME = LOG_NAME + PARITY_SUFFIX
RETIRED_NAME = ".log-retired"
"""A log's last entry before a compaction renames a new log over it, or a deletion moves
its thread away, is a tombstone of ``<thread>/.log-retired`` (a key no record has): a
process that knows the log up to some point learns that its file is still at its path
from the zeros after that point, and looks at the path again when it reads this."""
_OPEN_LOGS = 256
_OPENINGS = itertools.count(1)

_InLog = tuple[int, int]
"""Where an entry's data lies in the log: (offset, size)."""


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

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.files = RecordFileStorage(root, fsync=fsync)
        self.root: Path = self.files.root
        self.fsync = fsync
        self.on_damaged_span: Callable[[str, str, bytes, str | None, str], Any] | None = None
        """Called as ``(log location, reason, bytes, claimed key, span id)`` for damage
        between entries that names no readable key (set by the saver's reporter)."""
        self.on_healed: Callable[[str, str | None], Any] | None = None
        """Called as ``(block location, key read)`` for each damaged block of a log
        rebuilt from its parity, once per block and opening of the log (set by the
        saver's reporter)."""
        self._logs: OrderedDict[str, ThreadLog] = OrderedDict()
        self._lock = threading.Lock()
        self._views = threading.local()
        """Per thread: the logs inside a ``consistent_reads`` block, and the log object
        caught up with there (``None`` before the first read)."""
        _OPEN_STORES.add(self)
        # gone with the store: its logs' descriptors are not left open for the process's life
        weakref.finalize(self, _close_logs, self._logs)

    def forget_append_descriptors(self) -> None:
        """In a forked child: close the descriptors kept open for appending (the child must
        not share its parent's: a ``flock`` belongs to the open file, which fork shares),
        and let go of the locks the parent's other threads held."""
        self._lock = threading.Lock()
        for log in list(self._logs.values()):
            log.forget_locks_in_child()

    # -- routing ------------------------------------------------------------

    @staticmethod
    def _thread_dir_key(key: str) -> str | None:
        """The log a key is in: ``threads/<T>`` for a key inside a thread (or the thread
        itself), ``memories/<L>`` for one of the memory store's labels; else ``None``."""
        if key.startswith("threads/"):
            end = key.find("/", 8)
        elif key.startswith("memories/"):
            end = key.find("/", 9)
        else:
            return None
        return key if end == -1 else key[:end]

    def _log(self, thread_key: str) -> ThreadLog:
        with self._lock:
            log = self._logs.get(thread_key)
            if log is None:
                log = ThreadLog(self.files.location(thread_key), thread_key)
                self._logs[thread_key] = log
                self._close_idle_beyond(_OPEN_LOGS)
            self._logs.move_to_end(thread_key)
            return log

    def close_idle(self) -> None:
        """Close every log no call is using (``VerifiedSaver.close``): its descriptors and
        ``flock`` go now, not when the store is collected; a later call opens it again."""
        with self._lock:
            self._close_idle_beyond(0)

    def _close_idle_beyond(self, limit: int) -> None:
        """Close least recently used logs no thread appends to or holds locked, until at
        most ``limit`` are open (caller holds ``self._lock``)."""
        for thread_key, old in list(self._logs.items()):
            if len(self._logs) <= limit:
                return
            if not old.writing.acquire(blocking=False):
                continue
            try:
                if old.held or old.commits.open:
                    continue  # this very thread holds it locked, or a block passed it on
                del self._logs[thread_key]
                with old.lock:
                    old.close()
            finally:
                old.writing.release()

    # -- keeping the key directory up to date --------------------------------

    def consistent_reads(self, prefix: str) -> AbstractContextManager[None]:
        """Within the block, this thread catches up with the log of ``prefix``'s thread
        once: later reads use the key directory and the file as they were then (an
        open descriptor keeps a replaced log readable), or as its own appends left them."""
        thread_key = self._thread_dir_key(prefix)
        views: dict[str, ThreadLog | None] = self._views.__dict__.setdefault("logs", {})
        if thread_key is None or thread_key in views:
            return nullcontext()
        unhealable: dict[str, set[int]] = self._views.__dict__.setdefault("unhealable", {})
        return _CaughtUpOnce(views, unhealable, thread_key)

    def _refresh(self, log: ThreadLog, *, appending: bool = False) -> os.stat_result | None:
        """Bring ``log.index`` up to date with the file (caller holds ``log.lock``; with
        ``appending``, the log's ``flock`` too). Returns the ``stat`` of the log's path
        (or of the log just opened) made to do so, ``None`` if none was needed.

        One read when this process knows the log up to where zeros follow (room
        nobody appended to): the file is then still at its path, since whoever moves
        it appends ``RETIRED_NAME`` first. None at all while this process holds the
        log's ``flock`` for a ``lock`` block: nobody else can append or move it then.
        A log not open here yet is opened by its path, with no look at the path first
        (on a network file system each is a round trip). Else one ``stat`` of the path
        says whether it names another file now (read afresh) or how long the file is.
        """
        views: dict[str, ThreadLog | None] = self._views.__dict__.get("logs", {})
        if log.thread_key in views:
            if not appending and views[log.thread_key] is log and log.built:
                return None  # caught up with once in this block already
            views[log.thread_key] = log
        if (
            log.fd is not None
            and log.built
            and log.room
            and not log.retiring
            and ((log.held and log.held_append) or self._nothing_appended(log))
        ):
            return None
        if log.fd is None:
            return self._open_log(log)
        try:
            st = os.stat(log.path)
        except (FileNotFoundError, NotADirectoryError):
            if log.ino is not None or not log.built:
                log.close()
                self._rebuild(log, None)
            return None
        if st.st_ino != log.ino:
            try:
                fd = os.open(log.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                log.close_read()
                self._rebuild(log, None)
                return None
            self._read_opened(log, fd)
            return st
        if st.st_size > log.end and not (
            log.room and st.st_size == log.size and self._nothing_appended(log)
        ):
            self._read_tail(log, log.fd, st.st_size)  # type: ignore[arg-type]
        return st

    def _open_log(self, log: ThreadLog) -> os.stat_result | None:
        """Open and read the log at its path (none is open here): the ``fstat`` of what
        was opened, or ``None`` when there is no log there (and the key directory is
        then what the directory holds of the layout before logs).

        A thread this process never looked at is listed first, as its record files of
        that layout must be anyway: the names say whether it has a log, so a thread
        nobody wrote (every new conversation's) costs that one call."""
        names: builtins.list[str] | None = None
        if not log.built and not log.made_here:
            try:
                names = os.listdir(log.directory)
            except (FileNotFoundError, NotADirectoryError):
                names = []
            if LOG_NAME not in names:
                self._rebuild(log, None, names)
                return None
        try:
            fd = os.open(log.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError):
            if log.ino is not None or not log.built:
                log.close()
                self._rebuild(log, None)
            return None
        return self._read_opened(log, fd, names)

    def _read_opened(
        self, log: ThreadLog, fd: int, names: builtins.list[str] | None = None
    ) -> os.stat_result:
        """Read the log from ``fd``, just opened at its path, in place of the file read
        so far (``names``: the thread's directory, if listed just now); its ``fstat``."""
        st = os.fstat(fd)
        log.close_read(next_ino=st.st_ino)
        log.fd, log.ino = fd, st.st_ino
        log.opening = next(_OPENINGS)
        self._rebuild(log, fd, names)
        return st

    @staticmethod
    def _nothing_appended(log: ThreadLog) -> bool:
        """Whether the log still has room at ``end`` (a whole entry header of zeros there),
        as it had when last read: appends overwrite the room, so the file's size does not
        say whether another process appended, its next header does."""
        assert log.fd is not None
        header = os.pread(log.fd, HEADER_SIZE, log.end)
        return len(header) == HEADER_SIZE and all_zeros(header)

    def _rebuild(
        self, log: ThreadLog, fd: int | None, names: builtins.list[str] | None = None
    ) -> None:
        """Read the log from scratch (``fd``; ``None``: there is none), with the record
        files of the layout before logs among ``names`` (the directory listed just now;
        ``None``: list it)."""
        log.built = True
        log.reading = next(_OPENINGS)
        log.retiring = False
        log.spans = []
        log.holds_damage = False
        log.shadowed = {}
        log.index = KeyDirectory()
        log.end = 0
        log.room, log.size = True, 0
        log.hint_end = log.hint_size = 0
        made_here, log.made_here = log.made_here, False  # true of this reading only
        if not made_here:
            thread_key = os.path.relpath(log.directory, self.files.location(""))
            for key, path in self._record_files(log.directory, thread_key, names):
                log.index[key] = path
        if fd is None:
            log.fd = None
            return
        size = os.fstat(fd).st_size
        if not log.index and size:  # a hint covers the log only: record files are above
            read_hint(log, fd, lambda: self._read_whole(log))
        scanned = self._read_tail(log, fd, size, far=True)
        if log.end - log.hint_end >= HINT_AFTER_BYTES or scanned >= HINT_AFTER_ENTRIES:
            # this process read that much to open the thread: the next one need not (the
            # writer's rule lets a long log's hint lag further, for the writer's sake)
            write_hint(log)

    def _read_whole(self, log: ThreadLog) -> KeyDirectory:
        """The key directory of the log up to where it was read, from the log alone (a
        block of its hint did not verify)."""
        scratch = ThreadLog(log.directory)
        scratch.fd, scratch.ino, scratch.built = log.fd, log.ino, True
        assert log.fd is not None
        self._read_tail(scratch, log.fd, log.end)  # leaves a new hint, as any full read
        log.spans = scratch.spans
        log.holds_damage = log.holds_damage or scratch.holds_damage
        log.hint_end, log.hint_size = scratch.hint_end, scratch.hint_size
        return scratch.index

    def _record_files(
        self, directory: str, thread_key: str, names: builtins.list[str] | None = None
    ) -> Iterator[tuple[str, str]]:
        """Records stored one file each (the layout before logs), if there are any
        (``names``: the directory's, listed by the caller).

        Also removes what a killed compaction left (a temp file beside the log)
        once its writer is gone.
        """
        if names is None:
            try:
                names = os.listdir(directory)
            except (FileNotFoundError, NotADirectoryError):
                return
        for name in names:
            if name.startswith(TEMP_PREFIX):
                remove_if_abandoned(f"{directory}/{name}")
        for sub in ("ns", "tools"):
            if sub not in names:  # a name the listing does not hold: no look at it
                continue
            base = f"{directory}/{sub}"
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = [d for d in dirnames if not d.startswith(TEMP_PREFIX)]
                rel = os.path.relpath(dirpath, directory)
                for name in filenames:
                    if name.startswith(TEMP_PREFIX):
                        remove_if_abandoned(f"{dirpath}/{name}")
                    elif not name.startswith("."):
                        yield f"{thread_key}/{rel}/{name}", f"{dirpath}/{name}"

    def _read_tail(self, log: ThreadLog, fd: int, size: int, *, far: bool = False) -> int:
        """Read the log from ``log.end`` to ``size`` (the file's size) into the key
        directory: the entries appended since, up to the room or a torn tail. ``far``:
        from a hint's coverage, which many entries may follow (``read_tail``). Returns
        how many entries were read."""
        if size <= log.end:
            return 0
        base = log.end
        tail = read_tail(fd, log.parity, base, size, window=bool(base) and log.room, far=far)
        if tail.healed:
            self._healed(log, tail.healed, None)
        log.room, log.size = tail.room, size
        thread_key = os.path.relpath(log.directory, self.files.location(""))
        if tail.damaged or not self._apply_entries(log, base, tail.entries, thread_key):
            self._apply_in_order(log, base, tail, thread_key)
        log.end = base + tail.end
        if tail.entries:
            # entries after a retirement: it was not followed through (a crash), the log
            # is still its thread's
            last = tail.entries[-1]
            log.retiring = last.kind == DELETE and last.key == f"{thread_key}/{RETIRED_NAME}"
        if hint_due(log):
            write_hint(log)
        return len(tail.entries)

    def _apply_in_order(self, log: ThreadLog, base: int, tail: Tail, thread_key: str) -> None:
        """Take a tail holding damage (or another thread's entries) into the key directory
        entry by entry, each damaged span reported where it lies among them."""
        spans = iter(tail.damaged)
        span = next(spans, None)
        for entry in tail.entries:
            while span is not None and span.offset < entry.offset:
                self._found_damage(log, base, span, tail.data)
                span = next(spans, None)
            if self._thread_dir_key(entry.key) != thread_key:
                # an intact entry, but of another thread: a log copied or spliced in
                self._found_damage(
                    log,
                    base,
                    DamagedSpan(
                        entry.offset, entry.end, None, f"an entry of another thread ({entry.key})"
                    ),
                    tail.data,
                )
                continue
            apply_entry(log, entry.kind, entry.key, (base + entry.data_offset, entry.data_size))
        while span is not None:
            self._found_damage(log, base, span, tail.data)
            span = next(spans, None)

    def _apply_entries(
        self, log: ThreadLog, base: int, entries: builtins.list[Entry], thread_key: str
    ) -> bool:
        """Take intact entries of this thread, read from ``base`` on with no damage between
        them, into the key directory: each key once, as its last entry left it. ``False``
        (nothing taken) if one is another thread's: that is damage, reported in order."""
        changes: dict[str, tuple[int, int] | None] = {}
        for entry in entries:
            if self._thread_dir_key(entry.key) != thread_key:
                return False
            changes[entry.key] = (
                (base + entry.data_offset, entry.data_size) if entry.kind == PUT else None
            )
        apply_entries(log, changes)
        return True

    def _found_damage(self, log: ThreadLog, base: int, span: DamagedSpan, data: bytes) -> None:
        raw = data[span.offset : span.end]
        key = span.key
        thread_key = os.path.relpath(log.directory, self.files.location(""))
        if key is not None and self._thread_dir_key(key) == thread_key:
            # The entry's frame is broken but it still says whose it is: its key
            # now reads back as the damaged stretch, byte for byte, which does not
            # verify, so the saver reports and quarantines it like any damaged record.
            log.index[key] = DamagedEntry(base + span.offset, raw)
            log.holds_damage = True
            return
        damaged = DamagedBytes(
            location=f"{log.path}@{base + span.offset}",
            offset=base + span.offset,
            reason=span.reason,
            data=raw,
            claimed_key=key,
            span_id=f"{log.ino}-{base + span.offset}",
        )
        log.spans.append(damaged)
        log.holds_damage = True
        if self.on_damaged_span is not None:
            self.on_damaged_span(damaged.location, damaged.reason, raw, key, damaged.span_id)

    def _healed(self, log: ThreadLog, blocks: builtins.list[int], key: str | None) -> None:
        """Report blocks of ``log`` rebuilt from its parity (each once per opening)."""
        for offset in blocks:
            if offset in log.healed:
                continue
            log.healed.add(offset)
            if self.on_healed is not None:
                self.on_healed(f"{log.path}@{offset}", key)

    # -- Storage ----------------------------------------------------------------

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
            by_thread.setdefault(self._thread_dir_key(key), []).append(i)
        written = [False] * len(items)
        for thread_key, indices in by_thread.items():
            if thread_key is None or thread_key == items[indices[0]][0]:
                for i in indices:
                    key, data = items[i]
                    written[i] = self.files.write(key, data, replace=replace, durable=durable)
                continue
            log = self._log(thread_key)
            chosen = self._append(
                log,
                [(PUT, items[i][0], items[i][1]) for i in indices],
                replace=replace,
                durable=durable,
            )
            for i, done in zip(indices, chosen, strict=True):
                written[i] = done
        return written

    def _append(
        self,
        log: ThreadLog,
        entries: list[tuple[int, str, bytes]],
        *,
        replace: bool = True,
        durable: bool = True,
    ) -> builtins.list[bool]:
        with log.writing, log.lock:
            with self._appending(log) as (fd, size):
                chosen = [
                    replace or kind != PUT or key not in log.index for kind, key, _ in entries
                ]
                kept = [entry for entry, keep in zip(entries, chosen, strict=True) if keep]
                if kept:
                    self._append_locked(log, fd, size, kept, durable=durable)
            if hint_due(log) and not log.commits.unsettled:
                # the writer knows every key already: a process opening the thread next
                # reads the hint and the tail after it, not the whole log (and this
                # happens outside the file lock: other writers need not wait for it;
                # a lock block's appends are hinted once settled, as the block ends)
                write_hint(log)
            return chosen

    def _append_locked(
        self,
        log: ThreadLog,
        fd: int,
        size: int,
        kept: list[tuple[int, str, bytes]],
        *,
        durable: bool,
    ) -> None:
        """Append ``kept`` at the log's end (``size`` bytes long now; caller holds its flock)."""
        payload = [encode_entry(kind, key, data) for kind, key, data in kept]
        appended = b"".join(payload)
        if size < log.end:  # the log is shorter than we knew it: read it again first
            self._rebuild(log, log.fd)
        if log.room and size > log.end and log.parity.covers_beyond(log.end):
            # the room is where another writer's synced entries were: lost blocks, not
            # room (rebuilt from the parity if they can be), never to be written over
            log.room = False
            self._read_tail(log, fd, size)
        try:
            if size > log.end and not log.room:
                # a torn tail: a crashed writer's half entry, cut before appending
                os.ftruncate(fd, log.end)
                log.parity.forget_after(log.end)
                size = log.end
            new_end = log.end + len(appended)
            if new_end > size:
                # outgrown: new room after the entries, written first (the entries are
                # one write, whole or torn) and synced with them
                room = room_after(new_end)
                write_all_at(fd, bytes(room), new_end)
                size = new_end + room
            write_all_at(fd, appended, log.end)
            # in a lock block with another block of this process waiting for the log,
            # the sync is left to the end of the blocks (``storage.log.commits``); after
            # appends still unsettled, this one settles with them, in order
            sync = self.fsync and durable
            deferred = (sync and log.held > 0 and log.commits.queued > 0) or bool(
                log.commits.unsettled
            )
            if sync and not deferred:
                os.fdatasync(fd)
        except OSError as exc:
            # what was written, if anything, is a torn tail for readers and is
            # cut off by the next append
            log.room = False
            raise StoreWriteError(log.path, exc) from exc
        log.room, log.size = True, size
        log.retiring = False  # entries after a retirement: it was not followed through
        if deferred:
            log.commits.add(log.ino or 0, log.end, appended, durable=sync)
        else:
            log.parity.protect(fd, log.ino or 0, log.end, appended)
        # the entries are where we put them: no need to read them back
        offset = log.end
        for (kind, key, data), entry in zip(kept, payload, strict=True):
            data_offset = offset + len(entry) - CHECKSUM_SIZE - len(data)
            apply_entry(log, kind, key, (data_offset, len(data)))
            offset += len(entry)
        log.end = offset
        if deferred and not log.held:
            self._settle(log)

    def _settle(self, log: ThreadLog) -> None:
        """Sync what lock blocks appended and left unsettled (one ``fdatasync`` for all),
        then protect it, in the order appended (caller holds the log's ``flock``)."""
        unsettled, durable = log.commits.take()
        if not unsettled:
            return
        fd = log.append_fd
        if fd is None or log.append_ino != unsettled[0].ino:
            # appended to a file no longer open here: never the case (a log is replaced
            # only after ``_retire`` settled it), and nothing to call durable if it were
            log.room = False
            raise StoreWriteError(log.path, OSError(errno.EIO, "appended file is gone"))
        if durable:
            try:
                os.fdatasync(fd)
            except OSError as exc:
                log.room = False
                raise StoreWriteError(log.path, exc) from exc
        for done in unsettled:
            log.parity.protect(fd, done.ino, done.at, done.appended)

    @contextmanager
    def _appending(self, log: ThreadLog) -> Iterator[tuple[int, int]]:
        """The log's append descriptor under an exclusive ``flock``, and the file's size,
        with the key directory read up to it (creates the log; caller holds
        ``log.writing`` and ``log.lock``). Inside a ``lock`` block of the thread, its
        ``flock`` is held already, and kept when the block ends."""
        if log.held and log.held_append and log.append_fd is not None:
            yield log.append_fd, log.size  # nobody else can have appended
            return
        if log.commits.open:
            self._end_hold(log)  # a block passed its hold on: settled before this append
        if log.held and log.held_read_only is not None:
            raise log.held_read_only[1]  # the block could not open the log to write it
        fd, size = self._lock_for_append(log)
        if log.held:
            log.held_append = True  # kept to the block's end
            yield fd, size
            return
        try:
            yield fd, size
        finally:
            if log.append_fd == fd:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _lock_for_append(self, log: ThreadLog) -> tuple[int, int]:
        """Take the ``flock`` of the log's append descriptor (opened, and the log made, if
        need be), with the key directory read up to the file's end; that descriptor and
        the file's size.

        The descriptor stays open between appends. Under the lock, zeros where this
        process knows the log to end say it is still the log and nobody appended, with
        no call but that read (``_refresh``); anything else, and one ``stat`` of the
        path says whether it still names that file (a compaction renames a new log
        over it, a deletion renames the thread away) and how long it is.
        """
        while True:
            fd = self._append_descriptor(log)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                log.close_append()
                raise StoreWriteError(log.path, exc) from exc
            except BaseException:
                log.close_append()
                raise
            try:
                st = self._refresh(log, appending=True)
                if log.ino is not None and log.ino != log.append_ino and st is None:
                    # the file read is not the one appended to: the path says which is
                    log.close_read()
                    st = self._refresh(log, appending=True)
            except BaseException:
                if log.append_fd == fd:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                raise
            if log.ino is not None and log.ino == log.append_ino:
                return fd, log.size if st is None else st.st_size
            log.close_append()  # replaced or deleted since: append to what is there now

    def lock(self, prefix: str, *, exclusive: bool) -> AbstractContextManager[None]:
        """A thread's lock is its log's ``flock``, taken for the block's length: puts
        (shared) decide what they refer to and append under it, maintenance (exclusive)
        what it keeps, so neither sees the other half done. Appends inside the block
        take no lock of their own. Other prefixes: ``RecordFileStorage.lock``."""
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None or thread_key != prefix:
            return self.files.lock(prefix, exclusive=exclusive)
        return self._holding(self._log(thread_key), exclusive=exclusive)

    @contextmanager
    def _holding(self, log: ThreadLog, *, exclusive: bool) -> Iterator[None]:
        """No other thread or process appends to ``log`` while the block lasts. Its
        durable appends made while another block waits for the log are synced as the
        last block it passes its hold on to ends (``storage.log.commits``); the others
        as they are made."""
        if log.writing.acquire(blocking=False):
            # nobody in the way (the usual case): a hold passed on is taken all the same
            joined = log.commits.open and log.commits.claim()
        else:
            log.commits.queue()  # seen by the block in the way, which may pass its hold on
            try:
                log.writing.acquire()
            except BaseException:
                log.commits.leave()
                raise
            joined = log.commits.arrive()
        waiting_on: int | None = None
        try:
            if log.held:
                log.held += 1
                try:
                    yield
                finally:
                    log.held -= 1
                return
            with log.lock:
                if joined and exclusive:
                    self._end_hold(log)  # what this block excludes is settled first
                if not joined or exclusive:
                    self._lock_to_hold(log)
                    log.commits.begin()
            log.held = 1
            completed = False
            try:
                yield
                completed = True
            finally:
                log.held = 0
                with log.lock:
                    # (never inside one of this class's own holds of ``writing``: none
                    # calls ``lock``, so the next block can get in once it is let go of)
                    if completed and log.commits.unsettled and log.commits.may_pass_on():
                        waiting_on = log.commits.pass_on()
                    else:
                        self._end_hold(log)
                        if hint_due(log):
                            write_hint(log)
        finally:
            log.writing.release()
        if waiting_on is not None:
            self._await_hold(log, waiting_on)

    def _await_hold(self, log: ThreadLog, hold: int) -> None:
        """Return once the hold this block passed on is settled, or raise what its sync
        raised; settle it here if the thread it was passed to never came."""
        while not log.commits.wait(hold):
            with log.writing, log.lock:
                if log.commits.open and log.commits.hold == hold:
                    self._end_hold(log)
        failure = log.commits.failure(hold)
        if failure is not None:
            cause = failure.__cause__ if isinstance(failure.__cause__, OSError) else None
            raise StoreWriteError(log.path, cause or OSError(errno.EIO, str(failure))) from failure

    def _end_hold(self, log: ThreadLog) -> None:
        """Settle the hold's appends and let go of its ``flock`` (caller holds
        ``log.writing`` and ``log.lock``); the blocks that passed it on return then."""
        failure: BaseException | None = None
        try:
            if log.commits.unsettled:
                self._settle(log)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            self._release_held(log)
            log.commits.end(failure)

    def _lock_to_hold(self, log: ThreadLog) -> None:
        """Take the log's ``flock`` for a ``lock`` block: through its append descriptor; on
        a store this process cannot write, through the log opened read-only; not at all
        if it has no log there (nobody can write one, so there is nothing to exclude)."""
        try:
            self._lock_for_append(log)
            log.held_append = True
            return
        except StoreWriteError as exc:
            cause = exc.__cause__
            if not isinstance(cause, OSError) or cause.errno not in CANNOT_WRITE_ERRNOS:
                raise
            cannot_write = exc
        try:
            fd = os.open(log.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        log.held_read_only = (fd, cannot_write)

    @staticmethod
    def _release_held(log: ThreadLog) -> None:
        """Let go of the ``flock`` a ``lock`` block took (caller holds ``log.lock``)."""
        if log.held_append and log.append_fd is not None:
            fcntl.flock(log.append_fd, fcntl.LOCK_UN)
        log.held_append = False
        if log.held_read_only is not None:
            os.close(log.held_read_only[0])
            log.held_read_only = None

    def _retire(self, log: ThreadLog, fd: int, size: int) -> None:
        """Append the log's retirement (``RETIRED_NAME``) before its file leaves its path
        (caller holds its flock, through to the rename): whoever knew the log up to here
        reads it, and looks at the path again."""
        thread_key = os.path.relpath(log.directory, self.files.location(""))
        self._settle(log)  # the file it was appended to is still the log's
        self._append_locked(
            log, fd, size, [(DELETE, f"{thread_key}/{RETIRED_NAME}", b"")], durable=False
        )
        log.retiring = True  # and so does this process, should the move fail

    def _append_descriptor(self, log: ThreadLog) -> int:
        """``log.append_fd``, opened (and the log created, durably) if it is not open."""
        if log.append_fd is not None:
            return log.append_fd
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        for attempt in (1, 2):
            try:
                if self.files.ensure_directory(log.directory, sync=self.fsync):
                    # made here and now: no log in it, nor record files of the layout
                    # before logs (reading it as the log is made need not look for them)
                    log.made_here = created = True
                else:
                    created = not os.path.exists(log.path)
                if created:
                    # the sidecar first: a log with room always has one, and a torn first
                    # append is then known for one (``ParityFile.covers_beyond``)
                    log.parity.create()
                fd = os.open(log.path, flags, FILE_MODE)
                break
            except OSError as exc:
                self.files.forget_directories()
                if attempt == 1 and isinstance(exc, FileNotFoundError):
                    continue  # the thread's directory was deleted since it was made: again
                raise StoreWriteError(log.path, exc) from exc
        log.append_fd, log.append_ino = fd, os.fstat(fd).st_ino
        if created:
            log.parity.bind(log.append_ino)
        if created and self.fsync:
            try:
                # the new log's name must survive a crash as much as what it holds
                self.files.sync_directory(log.directory)
            except OSError as exc:
                log.close_append()
                raise StoreWriteError(log.directory, exc) from exc
        return fd

    def read(self, key: str) -> bytes | None:
        thread_key = self._thread_dir_key(key)
        if thread_key is None or thread_key == key:
            return self.files.read(key)
        log = self._log(thread_key)
        with log.lock:
            self._refresh(log)
            return self._read_known(log, key)

    def still_holds(self, items: Sequence[tuple[str, bytes]]) -> bool:
        """Whether each key's entry holds exactly the bytes given: its data read again and
        compared (bytes that were verified and are the same need no checksum; any other
        bytes, damage included, are for ``read`` to check, heal and report)."""
        thread_key = self._thread_dir_key(items[0][0]) if items else None
        if thread_key is None or not all(k.startswith(f"{thread_key}/") for k, _ in items):
            return all(self.read(key) == data for key, data in items)
        log = self._log(thread_key)
        with log.lock:
            self._refresh(log)
            for key, data in items:
                where = log.index.get(key)
                if type(where) is not tuple or where[1] != len(data):
                    return False  # moved, deleted, damaged, or another record now
                assert log.fd is not None
                if os.pread(log.fd, where[1], where[0]) != data:
                    return False
            return True

    def _read_known(self, log: ThreadLog, key: str, *, heal: bool = True) -> bytes | None:
        """``key``'s data as the key directory places it (caller holds ``log.lock``);
        rebuilt from parity if it fails its checksum, unless not to ``heal``."""
        where = log.index.get(key)
        if where is None:
            return None
        if isinstance(where, DamagedEntry):
            return where.data
        if isinstance(where, str):
            return self.files.read(os.path.relpath(where, self.files.location("")))
        offset, size = where
        assert log.fd is not None
        if not heal:
            return os.pread(log.fd, size, offset)
        return self._read_entry(log, key, offset, size)

    def _read_entry(self, log: ThreadLog, key: str, offset: int, size: int) -> bytes:
        """The data of ``key``'s entry, whose data lies at ``offset``: checked against the
        entry's checksum, and rebuilt from parity if it fails (caller holds ``log.lock``)."""
        assert log.fd is not None
        key_size = len(key) if key.isascii() else len(key.encode("utf-8", "surrogatepass"))
        start = offset - HEADER_SIZE - key_size
        entry = os.pread(log.fd, offset + size + CHECKSUM_SIZE - start, start)
        if entry_is_intact(entry):
            return entry[offset - start : offset - start + size]
        # inside a ``consistent_reads`` block the file is as it was: a stripe found
        # unhealable there is not tried again by the block's later reads
        stripes = log.parity.heal(
            log.fd,
            [(start, start + len(entry))],
            unhealable=self._views.__dict__.get("unhealable", {}).get(log.thread_key),
        )
        if stripes:
            healed = patch(entry, start, stripes)
            if entry_is_intact(healed):
                self._healed(log, rebuilt_blocks(entry, start, stripes), key)
                return healed[offset - start : offset - start + size]
        # damaged for good, or cut short under us: its data does not verify
        return entry[offset - start : offset - start + size]

    def list(self, prefix: str) -> list[str]:
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None:
            return self.files.list(prefix)
        log = self._log(thread_key)
        with log.lock:
            self._refresh(log)
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
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None:
            return []
        scratch = self._read_afresh(thread_key)
        return [] if scratch is None else builtins.list(scratch.spans)

    def _damaged_ranges(self, thread_key: str) -> builtins.list[tuple[int, int]]:
        """Where a thread's log holds damage that parity cannot heal: (start, end) ranges."""
        scratch = self._read_afresh(thread_key)
        if scratch is None:
            return []
        ranges = [(d.offset, d.offset + len(d.data)) for d in scratch.spans]
        for where in scratch.index.values():
            if isinstance(where, DamagedEntry):
                ranges.append((where.offset, where.offset + len(where.data)))
        return ranges

    def _read_afresh(self, thread_key: str) -> ThreadLog | None:
        """A full, silent read of a thread's log (not the key directory, which a hint may
        have filled): what every entry and every damaged stretch in it is, as of now."""
        scratch = ThreadLog(self.files.location(thread_key))
        try:
            scratch.fd = os.open(scratch.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            scratch.ino = os.fstat(scratch.fd).st_ino
            scratch.built = True
            callbacks = self.on_damaged_span, self.on_healed
            self.on_damaged_span = self.on_healed = None
            try:
                self._read_tail(scratch, scratch.fd, os.fstat(scratch.fd).st_size)
            finally:
                self.on_damaged_span, self.on_healed = callbacks
            return scratch
        finally:
            scratch.close()

    def greatest_name(self, prefix: str) -> str | None:
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None:
            return self.files.greatest_name(prefix)
        log = self._log(thread_key)
        with log.lock:
            self._refresh(log)
            return log.index.greatest_name_under(prefix)

    def greatest_names(self, prefix: str, count: int) -> builtins.list[str]:
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None:
            return self.files.greatest_names(prefix, count)
        log = self._log(thread_key)
        with log.lock:
            self._refresh(log)
            return log.index.greatest_names_under(prefix, count)

    def walk(self, prefix: str) -> Iterator[str]:
        if prefix in LOG_PARENTS:
            for name in sorted(self.files.list(prefix)):
                yield from self.walk(f"{prefix}/{name}")
            return
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None:
            yield from self.files.walk(prefix)
            return
        log = self._log(thread_key)
        with log.lock:
            self._refresh(log)
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
            by_thread.setdefault(self._thread_dir_key(key), []).append(key)
        for thread_key, thread_keys in by_thread.items():
            if thread_key is None:
                for key in thread_keys:
                    self.files.delete(key)
                continue
            log = self._log(thread_key)
            with log.writing, log.lock:
                self._refresh(log)
                present = [key for key in thread_keys if key in log.index]
                files = [log.index[key] for key in present if isinstance(log.index[key], str)]
                files += [log.shadowed.pop(key) for key in thread_keys if key in log.shadowed]
                if present:
                    self._append(log, [(DELETE, key, b"") for key in present], durable=durable)
                for path in files:
                    remove_quietly(path)

    def delete_tree(self, prefix: str) -> None:
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None:
            self.files.delete_tree(prefix)
            return
        if thread_key == prefix:
            log = self._log(thread_key)
            with log.writing, log.lock:
                if os.path.isdir(log.directory):
                    with self._appending(log) as (fd, size):
                        self._retire(log, fd, size)
                        self.files.delete_tree(prefix)
                with self._lock:
                    if self._logs.get(thread_key) is log:
                        del self._logs[thread_key]
                log.close()
            return
        log = self._log(thread_key)
        with log.lock:
            self._refresh(log)
            keys = log.index.keys_under(prefix)
        self.delete_many(keys)

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        with _refusal_as_os_error():
            return self._move_aside(key, new_key, replace=replace)

    def _move_aside(self, key: str, new_key: str, *, replace: bool) -> bool:
        source_thread = self._thread_dir_key(key)
        target_thread = self._thread_dir_key(new_key)
        if source_thread is None and target_thread is None:
            return self.files.move_aside(key, new_key, replace=replace)
        if source_thread is not None and target_thread is None:
            return self._move_out_of_log(source_thread, [(key, new_key, None)], replace=replace)[0]
        if source_thread is None:
            # back from the quarantine into a thread (never over a newer record)
            data = self.files.read(key)
            if data is None or not self.write(new_key, data, replace=replace):
                return False
            self.files.delete(key)
            return True
        raise ValueError(f"cannot move {key} to {new_key}: records move out of threads only")

    def move_aside_unchanged(self, moves: Sequence[tuple[str, str, bytes]]) -> builtins.list[bool]:
        """Those of one thread's log (to plain files) under one lock, each copied out and
        compared with what it must still hold, then gone from the log in one append."""
        by_thread: dict[str, list[int]] = {}
        one_by_one: list[int] = []
        for i, (key, new_key, _) in enumerate(moves):
            thread_key = self._thread_dir_key(key)
            if thread_key is None or thread_key == key or self._thread_dir_key(new_key):
                one_by_one.append(i)
            else:
                by_thread.setdefault(thread_key, []).append(i)
        moved = [False] * len(moves)
        for thread_key, indices in by_thread.items():
            with _refusal_as_os_error():
                done = self._move_out_of_log(thread_key, [moves[i] for i in indices])
            for i, ok in zip(indices, done, strict=True):
                moved[i] = ok
        elsewhere = move_aside_one_by_one(self, [moves[i] for i in one_by_one])
        for i, ok in zip(one_by_one, elsewhere, strict=True):
            moved[i] = ok
        return moved

    def _move_out_of_log(
        self,
        thread_key: str,
        moves: Sequence[tuple[str, str, bytes | None]],
        *,
        replace: bool = True,
    ) -> builtins.list[bool]:
        """Move records of one thread's log to plain files, under one lock, and delete
        them from the log with one append: each whatever it holds (``expected`` is
        ``None``), or only if it holds ``expected``. Whether each was moved."""
        log = self._log(thread_key)
        moved: list[bool] = []
        with log.writing, log.lock:
            self._refresh(log)
            gone: list[str] = []
            record_files: list[str] = []
            for key, new_key, expected in moves:
                # the bytes as stored, as a rename moves them; what the reader judged may
                # have had blocks rebuilt from the parity, so compare a read like its
                data = self._read_known(log, key, heal=False)
                if data is None or (
                    expected is not None
                    and data != expected
                    and self._read_known(log, key) != expected
                ):
                    moved.append(False)
                    continue
                if not self.files.write(new_key, data, replace=replace, durable=False):
                    moved.append(False)
                    continue
                where = log.index.get(key)
                if isinstance(where, str):
                    record_files.append(where)
                gone.append(key)
                moved.append(True)
            if gone:
                self._append(log, [(DELETE, key, b"") for key in gone], durable=False)
            for path in record_files:
                remove_quietly(path)
        return moved

    def _locate(self, key: str) -> tuple[ThreadLog, Any] | None:
        """The up-to-date log of the thread ``key`` is in, and where the key is in it;
        ``None`` for a key outside every thread (a plain file)."""
        thread_key = self._thread_dir_key(key)
        if thread_key is None or thread_key == key:
            return None
        log = self._log(thread_key)
        with log.lock:
            self._refresh(log)
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
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None or not thread_key.startswith("threads/"):
            return None
        log = self._log(thread_key)
        with log.lock:
            self._refresh(log)
            if log.fd is None or log.retiring:
                return None
            return (log.opening, log.reading, log.end)

    def written_stamp(self, key: str) -> Hashable | None:
        """The stamp of the entry this process just appended for ``key``: the key
        directory has it since the append, so the file is not looked at again."""
        thread_key = self._thread_dir_key(key)
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
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None:
            self.files.compact(prefix, changes=changes)
            return
        if any(self._thread_dir_key(key) != thread_key for key in changes):
            raise ValueError(f"compact({prefix!r}) changes records of another thread")
        log = self._log(thread_key)
        if not os.path.isdir(log.directory):
            if any(data is not None for data in changes.values()):
                self.write_many([(k, d) for k, d in changes.items() if d is not None])
            return
        with log.writing, log.lock, self._appending(log) as (append_fd, size):
            live: list[tuple[int, str, bytes]] = []
            folded: list[str] = []
            for key in log.index.keys_under(thread_key):
                where = log.index[key]
                if isinstance(where, str):
                    folded.append(where)
                if key in changes:
                    continue  # taken from changes below, or deleted
                data = self.read(key)
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
                self._retire(log, append_fd, size)
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
                remove_quietly(temp)
                remove_quietly(parity_temp)
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
            self._refresh(log)

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
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None:
            return []
        log = self._log(thread_key)
        if not os.path.exists(log.path):
            return []
        with (
            log.writing if repair else nullcontext(),
            log.lock,
            self._appending(log) if repair else nullcontext(),
        ):
            self._refresh(log)
            if log.fd is None:
                return []
            damage: builtins.list[tuple[int, int]] = []

            def vouched(start: int, end: int) -> bool:
                if not damage:  # a full read of the log, made when first needed
                    damage.append((-1, -1))
                    damage.extend(self._damaged_ranges(thread_key))
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
        if found.healed or found.unhealable or found.unprotected:
            return [(log.path, found)]
        return []

    def usage(self, prefix: str) -> int:
        """Bytes of the records at ``prefix`` or under it, from the key directory (no read)."""
        thread_key = self._thread_dir_key(prefix)
        if thread_key is None:
            return self.files.usage(prefix)
        log = self._log(thread_key)
        total = 0
        with log.lock:
            self._refresh(log)
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


class _CaughtUpOnce:
    """``FileStorage.consistent_reads``'s block (a class: it is entered at every read of
    a thread's newest checkpoint, and a generator's context manager costs more)."""

    __slots__ = ("views", "unhealable", "thread_key")

    def __init__(
        self,
        views: dict[str, ThreadLog | None],
        unhealable: dict[str, set[int]],
        thread_key: str,
    ) -> None:
        self.views, self.unhealable, self.thread_key = views, unhealable, thread_key

    def __enter__(self) -> None:
        self.views[self.thread_key] = None  # no read yet
        self.unhealable[self.thread_key] = set()  # stripes parity could not rebuild

    def __exit__(self, *exc: object) -> None:
        del self.views[self.thread_key]
        del self.unhealable[self.thread_key]


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


def _close_logs(logs: OrderedDict[str, ThreadLog]) -> None:
    for log in list(logs.values()):
        with suppress(OSError):
            log.close()
    logs.clear()


def _after_fork_in_child() -> None:
    for storage in list(_OPEN_STORES):
        storage.forget_append_descriptors()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["HINT_NAME", "LOCK_NAME", "LOG_NAME", "PARITY_NAME", "FileStorage"]
