"""Reading thread logs: a process's key directory of each log kept up to date with the
file, and an entry's data read back checked (rebuilt from the log's parity if need be).

A process knows a log up to ``ThreadLog.end``. ``LogReader.refresh`` brings it up to
date with the least the file allows: nothing while this process holds the log's
``flock``; one read when the header where the log is known to end is still zeros
(nobody appended, and the file is still at its path, since whoever moves it appends
its retirement, ``RETIRED_NAME``, first); else one ``stat`` of the path, then the new
file read afresh or the entries appended since read. A log opened for the first time
is read from its hint (``hint_file``) and the tail after it; damage found between
entries is reported (``on_damaged_span``), blocks rebuilt from parity too
(``on_healed``). ``FileStorage`` routes keys to logs and calls this holding each
log's ``ThreadLog.lock`` (a thread lock of this process; readers take no ``flock``).
"""

from __future__ import annotations

import builtins
import itertools
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from langgraph_checkpoint_verified.records.keys import TEMP_PREFIX
from langgraph_checkpoint_verified.storage.files import RecordFileStorage, remove_if_abandoned
from langgraph_checkpoint_verified.storage.log.entries import (
    CHECKSUM_SIZE,
    DELETE,
    HEADER_SIZE,
    PUT,
    DamagedSpan,
    Entry,
    entry_is_intact,
)
from langgraph_checkpoint_verified.storage.log.hint_file import (
    hint_due,
    hint_pays_off,
    read_hint,
    write_hint,
)
from langgraph_checkpoint_verified.storage.log.key_directory import KeyDirectory
from langgraph_checkpoint_verified.storage.log.redundancy import patch, rebuilt_blocks
from langgraph_checkpoint_verified.storage.log.room import all_zeros
from langgraph_checkpoint_verified.storage.log.tail import Tail, read_tail
from langgraph_checkpoint_verified.storage.log.thread_log import (
    LOG_NAME,
    RETIRED_NAME,
    DamagedBytes,
    DamagedEntry,
    ThreadLog,
    apply_entries,
    apply_entry,
    thread_dir_key,
)

_OPENINGS = itertools.count(1)


class LogReader:
    """Keeps the key directories of thread logs up to date, and reads their entries.

    Args:
        files: The store's plain files (records of the layout before logs).
    """

    def __init__(self, files: RecordFileStorage) -> None:
        self.files = files
        self.on_damaged_span: Callable[[str, str, bytes, str | None, str], bool] | None = None
        """Called as ``(log location, reason, bytes, claimed key, span id)`` for damage
        between entries that names no readable key (set by the saver's reporter); returns
        whether those bytes are kept elsewhere now (copied to the quarantine)."""
        self.on_healed: Callable[[str, str | None], Any] | None = None
        """Called as ``(block location, key read)`` for each damaged block of a log
        rebuilt from its parity, once per block and opening of the log (set by the
        saver's reporter)."""
        self.views = threading.local()
        """Per thread: the logs inside a ``consistent_reads`` block, and the log object
        caught up with there (``None`` before the first read)."""

    def consistent_reads(self, prefix: str) -> AbstractContextManager[None]:
        """``FileStorage.consistent_reads``: the block in which this thread catches up
        with the log of ``prefix``'s thread once."""
        thread_key = thread_dir_key(prefix)
        views: dict[str, ThreadLog | None] = self.views.__dict__.setdefault("logs", {})
        if thread_key is None or thread_key in views:
            return nullcontext()
        unhealable: dict[str, set[int]] = self.views.__dict__.setdefault("unhealable", {})
        return _CaughtUpOnce(views, unhealable, thread_key)

    def refresh(self, log: ThreadLog, *, appending: bool = False) -> os.stat_result | None:
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
        views: dict[str, ThreadLog | None] = self.views.__dict__.get("logs", {})
        if log.thread_key in views:
            if not appending and views[log.thread_key] is log and log.built:
                return None  # caught up with once in this block already
            views[log.thread_key] = log
        if (
            log.fd is not None
            and log.built
            and log.room
            and not log.retiring
            and ((log.held and log.held_append) or self.nothing_appended(log))
        ):
            return None
        if log.fd is None:
            return self._open_log(log)
        try:
            st = os.stat(log.path)
        except (FileNotFoundError, NotADirectoryError):
            if log.ino is not None or not log.built:
                log.close()
                self.rebuild(log, None)
            return None
        if st.st_ino != log.ino:
            try:
                fd = os.open(log.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                log.close_read()
                self.rebuild(log, None)
                return None
            self._read_opened(log, fd)
            return st
        if st.st_size > log.end and not (
            log.room and st.st_size == log.size and self.nothing_appended(log)
        ):
            self.read_tail(log, log.fd, st.st_size)  # type: ignore[arg-type]
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
                self.rebuild(log, None, names)
                return None
        try:
            fd = os.open(log.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError):
            if log.ino is not None or not log.built:
                log.close()
                self.rebuild(log, None)
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
        self.rebuild(log, fd, names)
        return st

    @staticmethod
    def nothing_appended(log: ThreadLog) -> bool:
        """Whether the log still has room at ``end`` (a whole entry header of zeros there),
        as it had when last read: appends overwrite the room, so the file's size does not
        say whether another process appended, its next header does."""
        assert log.fd is not None
        header = os.pread(log.fd, HEADER_SIZE, log.end)
        return len(header) == HEADER_SIZE and all_zeros(header)

    def rebuild(
        self, log: ThreadLog, fd: int | None, names: builtins.list[str] | None = None
    ) -> None:
        """Read the log from scratch (``fd``; ``None``: there is none), with the record
        files of the layout before logs among ``names`` (the directory listed just now;
        ``None``: list it)."""
        log.built = True
        log.reading = next(_OPENINGS)
        log.retiring = False
        log.spans = []
        log.damaged_keys, log.damage_settled = set(), False
        log.shadowed = {}
        log.index = KeyDirectory()
        log.end = 0
        log.room, log.size = True, 0
        log.hint_end = log.hint_size = 0
        made_here, log.made_here = log.made_here, False  # true of this reading only
        if not made_here:
            thread_key = log.thread_key
            for key, path in self._record_files(log.directory, thread_key, names):
                log.index[key] = path
        if fd is None:
            log.fd = None
            return
        size = os.fstat(fd).st_size
        if not log.index and size:  # a hint covers the log only: record files are above
            read_hint(log, fd, self._rescan(log))
        rebuilt = len(log.rewrite)
        scanned = self.read_tail(log, fd, size, far=True)
        if hint_pays_off(log, scanned, healed=len(log.rewrite) > rebuilt):
            # this process read that much to open the thread: the next one need not
            write_hint(log)

    def _rescan(
        self, log: ThreadLog, *, follow_hint: bool = True
    ) -> Callable[[bool], KeyDirectory]:
        """What ``log``'s hinted key directory calls to read the log again once its hint's
        blocks cannot be read: ``_read_whole`` (``follow_hint=False``: from the log alone).

        It holds this reader and the log weakly. The directory lives in the log, the log
        in its store's table of logs, which the store's finalizer closes: a strong
        reference to the reader would lead from that finalizer back to the store (no
        store that had read a thread would ever be collected, nor its log's descriptor
        closed), one to the log would make the log a cycle, freed only by the garbage
        collector."""
        reader, read_log = weakref.ref(self), weakref.ref(log)

        def rescan(replaced: bool) -> KeyDirectory:
            live, live_log = reader(), read_log()
            assert live is not None and live_log is not None, "used only through its store"
            return LogReader._read_whole(live, live_log, from_hint=replaced and follow_hint)

        return rescan

    def _read_whole(self, log: ThreadLog, *, from_hint: bool = False) -> KeyDirectory:
        """The key directory of the log up to where it was read, for a directory that
        cannot read its hint's blocks any more.

        With ``from_hint`` (the hint it was read from was replaced by another process's
        newer one), from the hint now at the path if that one names this log and covers
        no more of it than this reading does, then the log after it: a directory read
        on from as the old one was. Else (a block did not verify; a hint beyond this
        reading, or none) from the log alone.
        """
        assert log.fd is not None
        scratch = self._scratch(log)
        if from_hint:
            read_hint(scratch, log.fd, self._rescan(log, follow_hint=False))
            if scratch.end > log.end:
                scratch = self._scratch(log)  # written further on than this reading is
        start = scratch.end
        self.read_tail(scratch, log.fd, log.end)  # leaves a new hint, as any long read
        log.spans = [span for span in log.spans if span.offset < start] + scratch.spans
        log.damaged_keys |= scratch.damaged_keys
        log.hint_end, log.hint_size = scratch.hint_end, scratch.hint_size
        return scratch.index

    @staticmethod
    def _scratch(log: ThreadLog) -> ThreadLog:
        """A new reading of ``log``'s file, from its start, beside the one kept (through a
        descriptor of its own, closed with it: a ``ThreadLog`` closes what it holds)."""
        assert log.fd is not None
        scratch = ThreadLog(log.directory, log.thread_key)
        scratch.fd, scratch.ino, scratch.built = os.dup(log.fd), log.ino, True
        return scratch

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

    def read_tail(self, log: ThreadLog, fd: int, size: int, *, far: bool = False) -> int:
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
        thread_key = log.thread_key
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
            if thread_dir_key(entry.key) != thread_key:
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
            if thread_dir_key(entry.key) != thread_key:
                return False
            changes[entry.key] = (
                (base + entry.data_offset, entry.data_size) if entry.kind == PUT else None
            )
        apply_entries(log, changes)
        return True

    def _found_damage(self, log: ThreadLog, base: int, span: DamagedSpan, data: bytes) -> None:
        raw = data[span.offset : span.end]
        key = span.key
        thread_key = log.thread_key
        if key is not None and thread_dir_key(key) == thread_key:
            # The entry's frame is broken but it still says whose it is: its key
            # now reads back as the damaged stretch, byte for byte, which does not
            # verify, so the saver reports and quarantines it like any damaged record.
            log.index[key] = DamagedEntry(base + span.offset, raw)
            log.damaged_keys.add(key)
            return
        damaged = DamagedBytes(
            location=f"{log.path}@{base + span.offset}",
            offset=base + span.offset,
            reason=span.reason,
            data=raw,
            claimed_key=key,
            span_id=f"{log.ino}-{base + span.offset}",
        )
        if self.on_damaged_span is not None and self.on_damaged_span(
            damaged.location, damaged.reason, raw, key, damaged.span_id
        ):
            # kept in the quarantine: no read asks for it, so nothing is lost if readers
            # no longer find it; a hint may cover it now (``verify`` reads the whole log)
            log.damage_settled = True
            return
        log.spans.append(damaged)

    def _healed(self, log: ThreadLog, blocks: builtins.list[int], key: str | None) -> None:
        """Report blocks of ``log`` rebuilt from its parity (each once per opening), and
        leave them for its next append to write back."""
        log.rewrite.update(blocks)
        for offset in blocks:
            if offset in log.healed:
                continue
            log.healed.add(offset)
            if self.on_healed is not None:
                self.on_healed(f"{log.path}@{offset}", key)

    def read_known(self, log: ThreadLog, key: str, *, heal: bool = True) -> bytes | None:
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
            unhealable=self.views.__dict__.get("unhealable", {}).get(log.thread_key),
        )
        if stripes:
            healed = patch(entry, start, stripes)
            if entry_is_intact(healed):
                self._healed(log, rebuilt_blocks(entry, start, stripes), key)
                return healed[offset - start : offset - start + size]
        # damaged for good, or cut short under us: its data does not verify
        return entry[offset - start : offset - start + size]

    def damaged_ranges(self, thread_key: str) -> builtins.list[tuple[int, int]]:
        """Where a thread's log holds damage that parity cannot heal: (start, end) ranges."""
        scratch = self.read_afresh(thread_key)
        if scratch is None:
            return []
        ranges = [(d.offset, d.offset + len(d.data)) for d in scratch.spans]
        for where in scratch.index.values():
            if isinstance(where, DamagedEntry):
                ranges.append((where.offset, where.offset + len(where.data)))
        return ranges

    def read_afresh(self, thread_key: str) -> ThreadLog | None:
        """A full, silent read of a thread's log (not the key directory, which a hint may
        have filled): what every entry and every damaged stretch in it is, as of now."""
        scratch = ThreadLog(self.files.location(thread_key), thread_key)
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
                self.read_tail(scratch, scratch.fd, os.fstat(scratch.fd).st_size)
            finally:
                self.on_damaged_span, self.on_healed = callbacks
            return scratch
        finally:
            scratch.close()


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
