"""Appending to thread logs: entries written into the room at a log's end under its
``flock``, synced, then protected by its parity; lock blocks, whose appends may share
one sync (``storage.log.commits``); a log's retirement before it leaves its path.

A durable append is one ``pwrite`` of the new entries and one ``fdatasync`` of a file
whose size does not change while its room lasts (``storage.log.room``), then the
parity of those bytes written beside it with no sync of its own. Whoever appends
first after a crash cuts off the torn tail it left. ``FileStorage`` routes keys to
logs and calls this; it reads through the ``LogReader`` it is given.
"""

from __future__ import annotations

import builtins
import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from langgraph_checkpoint_verified.errors import StoreWriteError
from langgraph_checkpoint_verified.storage.base import CANNOT_WRITE_ERRNOS, FILE_MODE
from langgraph_checkpoint_verified.storage.files import (
    RecordFileStorage,
    UnsyncedDirectories,
    write_all_at,
)
from langgraph_checkpoint_verified.storage.log.entries import (
    CHECKSUM_SIZE,
    DELETE,
    HEADER_SIZE,
    PUT,
    encode_entry,
)
from langgraph_checkpoint_verified.storage.log.hint_file import hint_due, write_hint
from langgraph_checkpoint_verified.storage.log.parity import BLOCK_SIZE, STRIPE_SIZE
from langgraph_checkpoint_verified.storage.log.reading import LogReader
from langgraph_checkpoint_verified.storage.log.redundancy import rebuilt_blocks
from langgraph_checkpoint_verified.storage.log.room import room_after
from langgraph_checkpoint_verified.storage.log.thread_log import (
    RETIRED_NAME,
    ThreadLog,
    apply_entry,
)

if sys.platform != "win32":
    import fcntl


class LogAppender:
    """Appends to thread logs, and holds them for ``FileStorage.lock`` blocks.

    Args:
        files: The store's plain files (the directories logs are made in).
        reader: Brings a log's key directory up to date before an append.
        fsync: ``False`` skips every sync.
    """

    def __init__(self, files: RecordFileStorage, reader: LogReader, *, fsync: bool) -> None:
        self.files = files
        self.reader = reader
        self.fsync = fsync

    def append(
        self,
        log: ThreadLog,
        entries: list[tuple[int, str, bytes]],
        *,
        replace: bool = True,
        durable: bool = True,
        hint: bool = True,
    ) -> builtins.list[bool]:
        """Append ``entries`` (kind, key, data) to ``log`` as one write, synced unless not
        ``durable``; with ``replace=False``, a put of a key the log holds is left out; a
        hint written after it if one is due, unless not to ``hint``. Whether each entry
        was appended."""
        with log.writing, log.lock:
            with self.appending(log) as (fd, size):
                chosen = [
                    replace or kind != PUT or key not in log.index for kind, key, _ in entries
                ]
                kept = [entry for entry, keep in zip(entries, chosen, strict=True) if keep]
                if kept:
                    self.append_locked(log, fd, size, kept, durable=durable)
            if hint and hint_due(log) and not log.commits.unsettled:
                # the writer knows every key already: a process opening the thread next
                # reads the hint and the tail after it, not the whole log (and this
                # happens outside the file lock: other writers need not wait for it;
                # a lock block's appends are hinted once settled, as the block ends)
                write_hint(log)
            return chosen

    def append_locked(
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
            self.reader.rebuild(log, log.fd)
        if log.room and size > log.end and log.parity.covers_beyond(log.end):
            # the room is where another writer's synced entries were: lost blocks, not
            # room (rebuilt from the parity if they can be), never to be written over
            log.room = False
            self.reader.read_tail(log, fd, size)
        try:
            if size > log.end and not log.room:
                # a torn tail: a crashed writer's half entry, cut before appending
                os.ftruncate(fd, log.end)
                log.parity.forget_after(log.end)
                size = log.end
            if log.rewrite:
                self._write_back(log, fd)
            new_end = log.end + len(appended)
            if new_end + HEADER_SIZE > size:
                # outgrown: new room after the entries, written first (the entries are
                # one write, whole or torn) and synced with them; room shorter than an
                # entry header counts as outgrown (``storage.log.room`` says why)
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
            if not deferred and log.unsynced_directories is not None:
                self._sync_directories(log)  # after the entries' own sync: see there
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
            self._protect(log, fd, log.ino or 0, log.end, appended, synced=sync)
        # the entries are where we put them: no need to read them back
        offset = log.end
        for (kind, key, data), entry in zip(kept, payload, strict=True):
            data_offset = offset + len(entry) - CHECKSUM_SIZE - len(data)
            apply_entry(log, kind, key, (data_offset, len(data)))
            offset += len(entry)
        log.end = offset
        if deferred and not log.held:
            self._settle(log)

    @staticmethod
    def _write_back(log: ThreadLog, fd: int) -> None:
        """Write the blocks reads rebuilt from the log's parity back in their places, before
        the entries (caller holds the ``flock``): the append's sync makes them durable with
        its own, and every reader, in any process, finds the log whole again. Each stripe
        is rebuilt afresh from what the file holds now: a block written back since (by
        ``repair``, or another process) has nothing left to rebuild and is left as it is.

        Best effort: a block that cannot be written stays as it was, rebuilt by every read
        and named by ``verify`` until ``repair`` writes it; the append goes on.
        """
        blocks, log.rewrite = sorted(b for b in log.rewrite if b < log.end), set()
        try:
            stripes = log.parity.heal(fd, [(b, min(b + BLOCK_SIZE, log.end)) for b in blocks])
            for start, stripe in stripes.items():
                on_disk = os.pread(fd, len(stripe), start)
                for block in rebuilt_blocks(on_disk, start, {start: stripe}):
                    end = min(block + BLOCK_SIZE, start + len(stripe), log.end)
                    write_all_at(fd, stripe[block - start : end - start], block)
        except OSError:
            return

    def _settle(self, log: ThreadLog) -> None:
        """Sync what lock blocks appended and left unsettled (one ``fdatasync`` for all),
        then protect it, in the order appended (caller holds the log's ``flock``)."""
        unsettled, durable = log.commits.take()
        if not unsettled:
            return
        fd = log.append_fd
        if fd is None or log.append_ino != unsettled[0].ino:
            # appended to a file no longer open here: never the case (a log is replaced
            # only after ``retire`` settled it), and nothing to call durable if it were
            log.room = False
            raise StoreWriteError(log.path, OSError(errno.EIO, "appended file is gone"))
        try:
            if durable:
                os.fdatasync(fd)
            if log.unsynced_directories is not None:
                self._sync_directories(log)
        except OSError as exc:
            log.room = False
            raise StoreWriteError(log.path, exc) from exc
        for done in unsettled:
            self._protect(log, fd, done.ino, done.at, done.appended, synced=durable)

    def _protect(
        self, log: ThreadLog, fd: int, ino: int, at: int, appended: bytes, *, synced: bool
    ) -> None:
        """Cover ``appended`` with parity: now if it is synced (or the store never syncs),
        else after the next sync. Appends left unsynced for long (deletions, moves to the
        quarantine, and nothing durable after them) get a sync of their own once a
        stripe of them waits, so that what is unprotected stays bounded."""
        if synced or not self.fsync:
            log.parity.protect(fd, ino, at, appended)
            return
        if log.parity.defer(ino, at, appended) < STRIPE_SIZE:
            return
        try:
            os.fdatasync(fd)
        except OSError:
            return  # not durable, as asked: they stay unprotected until the next sync
        log.parity.protect_deferred(fd, at + len(appended))

    def protect_unsynced(self, log: ThreadLog) -> None:
        """Sync what appends made without a sync left waiting for parity, and cover it (a
        repair, a store closed). Best effort, as those appends: a sync that fails leaves
        them unprotected, which ``verify`` reports."""
        with log.writing, log.lock:
            if not log.parity.deferred:
                return
            with suppress(OSError, StoreWriteError), self.appending(log) as (fd, _):
                os.fdatasync(fd)
                log.parity.protect_deferred(fd, log.end)

    @contextmanager
    def appending(self, log: ThreadLog) -> Iterator[tuple[int, int]]:
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
        completed = False
        try:
            yield fd, size
            completed = True
        finally:
            if log.append_fd == fd:
                try:
                    self._directories_before_unlock(log, completed=completed)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)

    def _lock_for_append(self, log: ThreadLog) -> tuple[int, int]:
        """Take the ``flock`` of the log's append descriptor (opened, and the log made, if
        need be), with the key directory read up to the file's end; that descriptor and
        the file's size.

        The descriptor stays open between appends. Under the lock, zeros where this
        process knows the log to end say it is still the log and nobody appended, with
        no call but that read (``LogReader.refresh``); anything else, and one ``stat`` of the
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
                st = self.reader.refresh(log, appending=True)
                if log.ino is not None and log.ino != log.append_ino and st is None:
                    # the file read is not the one appended to: the path says which is
                    log.close_read()
                    st = self.reader.refresh(log, appending=True)
            except BaseException:
                if log.append_fd == fd:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                raise
            if log.ino is not None and log.ino == log.append_ino:
                return fd, log.size if st is None else st.st_size
            log.close_append()  # replaced or deleted since: append to what is there now

    @contextmanager
    def holding(self, log: ThreadLog, *, exclusive: bool) -> Iterator[None]:
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
            self._directories_before_unlock(log, completed=True)
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

    def retire(self, log: ThreadLog, fd: int, size: int) -> None:
        """Append the log's retirement (``RETIRED_NAME``) before its file leaves its path
        (caller holds its flock, through to the rename): whoever knew the log up to here
        reads it, and looks at the path again."""
        thread_key = log.thread_key
        self._settle(log)  # the file it was appended to is still the log's
        self.append_locked(
            log, fd, size, [(DELETE, f"{thread_key}/{RETIRED_NAME}", b"")], durable=False
        )
        log.retiring = True  # and so does this process, should the move fail

    def _append_descriptor(self, log: ThreadLog) -> int:
        """``log.append_fd``, opened (and the log created) if it is not open.

        The directory entries of a log made here are not synced now but after the first
        append's own ``fdatasync`` (``ThreadLog.unsynced_directories``), before the
        ``flock`` is let go of: that sync commits the file system's journal with the new
        entries in it (ext4, XFS), and the directory syncs after it, still made for the
        file systems that need them, each cost a flush instead of a commit of its own. A
        new thread's first ``put`` makes one commit instead of three. Nothing is
        acknowledged before the entries are synced.

        The same holds for a log found empty that another process made: its maker may
        not have taken its ``flock`` yet, and the entries leading to it (the log's, its
        directory's, and ``threads``' for a store's first thread) may still wait for the
        maker's first append. Whoever appends to the log first syncs them after its own
        (three ``fsync`` calls where the maker had synced them already; none for a log
        that holds anything, or one made here in a directory made here).
        """
        if log.append_fd is not None:
            return log.append_fd
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        for attempt in (1, 2):
            later = UnsyncedDirectories() if self.fsync else None
            try:
                if self.files.ensure_directory(log.directory, sync=self.fsync, later=later):
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
        st = os.fstat(fd)
        log.append_fd, log.append_ino = fd, st.st_ino
        if created:
            log.parity.bind(log.append_ino)
        if later is not None:
            if st.st_size == 0:
                # nothing appended yet: the new log's name must survive a crash as much
                # as what it will hold, and so must the names above it that this
                # process did not make (and sync) itself
                above = [log.directory] if log.made_here else self._up_to_root(log.directory)
                later.to_sync.extend(d for d in above if d not in later.to_sync)
            if later:
                pending = log.unsynced_directories
                if pending is not None:  # an earlier opening's, never synced: kept too
                    later.to_sync[:0] = [d for d in pending.to_sync if d not in later.to_sync]
                    later.made[:0] = pending.made
                log.unsynced_directories = later
        return fd

    def _up_to_root(self, directory: str) -> builtins.list[str]:
        """The store's directory and those between it and ``directory``, outermost first."""
        root = self.files.location("")
        chain = [directory]
        while chain[0] != root and os.path.dirname(chain[0]) != chain[0]:
            chain.insert(0, os.path.dirname(chain[0]))
        return chain

    def _sync_directories(self, log: ThreadLog) -> None:
        """Sync the directory entries of the log this process made (caller holds its
        ``flock``); raises ``OSError`` and keeps them to sync again if one fails."""
        later = log.unsynced_directories
        if later is not None:
            self.files.sync_later(later)
        log.unsynced_directories = None

    def _directories_before_unlock(self, log: ThreadLog, *, completed: bool) -> None:
        """The directory entries of a log made here, synced before its ``flock`` is let go
        of when no append synced them (nothing appended, or an append failed): another
        process may append to the log next, and its appends must not depend on them."""
        if log.unsynced_directories is None:
            return
        if completed:
            try:
                self._sync_directories(log)
            except OSError as exc:
                raise StoreWriteError(log.directory, exc) from exc
        else:
            with suppress(OSError):  # best effort: the block's own error is the one raised
                self._sync_directories(log)
