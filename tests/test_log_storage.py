"""The log ``FileStorage`` on its own: ``Storage``'s contract, kept by one log per thread.

* Every ``Storage`` method: ``write`` (``replace=False`` keeps the first record),
  ``read``, ``list``, ``walk``, ``delete``, ``delete_tree``, ``move_aside`` (out of
  a thread into the quarantine, and back), ``stamp``, ``lock``, ``write_many``
  (one append and one sync per thread) and ``compact`` (only live records, a new
  file swapped in, record files of the older layout folded in).
* A torn tail is never read and is cut off by the next append; damage in the
  middle names its key or is reported.
* Across real processes (``log_child.py``): two appending to one thread at once
  never interleave or lose an entry; a reader that keeps its key directory sees
  another process's appends, deletions and compactions; a compaction while
  another process appends and reads loses no acknowledged write.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from logtools import lose_parity

from langgraph_checkpoint_verified.records.keys import TEMP_PREFIX
from langgraph_checkpoint_verified.storage.files import RecordFileStorage
from langgraph_checkpoint_verified.storage.log import file_storage
from langgraph_checkpoint_verified.storage.log.entries import DELETE, PUT, encode_entry, scan
from langgraph_checkpoint_verified.storage.log.file_storage import LOG_NAME, FileStorage
from langgraph_checkpoint_verified.storage.log.parity import BLOCK_SIZE
from langgraph_checkpoint_verified.storage.log.room import all_zeros

CHILD = Path(__file__).with_name("log_child.py")
T = "threads/t"


def log_of(root: Path, thread: str = T) -> Path:
    return root / thread / LOG_NAME


def entries_of(root: Path, thread: str = T) -> list[tuple[int, str]]:
    """(kind, key) of every entry of the log, after checking it is whole entries only."""
    data = log_of(root, thread).read_bytes()
    entries, damaged, end = scan(data)
    assert damaged == [] and all_zeros(data, end)  # then room, or nothing
    return [(entry.kind, entry.key) for entry in entries]


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(TEMP_PREFIX)]


# -- the Storage contract ---------------------------------------------------------------


def test_records_of_a_thread_are_entries_of_its_log_and_the_rest_are_files(tmp_path):
    storage = FileStorage(tmp_path)
    assert storage.write(f"{T}/ns/a/checkpoints/1.ckpt", b"one")
    assert storage.write(f"{T}/ns/a/checkpoints/1.ckpt", b"one again")
    assert not storage.write(f"{T}/ns/a/checkpoints/1.ckpt", b"never", replace=False)
    assert storage.write(f"{T}/tools/c/intent", b"", replace=False)
    assert storage.write("store.marker", b"marker")

    assert storage.read(f"{T}/ns/a/checkpoints/1.ckpt") == b"one again"
    assert storage.read(f"{T}/tools/c/intent") == b""
    assert storage.read(f"{T}/ns/a/checkpoints/2.ckpt") is None
    assert storage.read("threads/other/ns/a") is None
    assert (tmp_path / "store.marker").read_bytes() == b"marker"
    # one log per thread, whatever the number of records, and its parity beside it
    assert sorted(p.name for p in (tmp_path / T).iterdir()) == [LOG_NAME, f"{LOG_NAME}.parity"]
    assert entries_of(tmp_path) == [
        (PUT, f"{T}/ns/a/checkpoints/1.ckpt"),
        (PUT, f"{T}/ns/a/checkpoints/1.ckpt"),
        (PUT, f"{T}/tools/c/intent"),
    ]
    assert sorted(storage.list(T)) == ["ns", "tools"]
    assert storage.list(f"{T}/ns/a") == ["checkpoints"]
    assert storage.list(f"{T}/missing") == []
    assert storage.list("threads") == ["t"]
    assert list(storage.walk(T)) == [f"{T}/ns/a/checkpoints/1.ckpt", f"{T}/tools/c/intent"]
    assert list(storage.walk(f"{T}/tools")) == [f"{T}/tools/c/intent"]
    storage.write("threads/s/ns/x", b"s")
    assert list(storage.walk("threads")) == [
        "threads/s/ns/x",
        f"{T}/ns/a/checkpoints/1.ckpt",
        f"{T}/tools/c/intent",
    ]
    # another instance (another process's view) reads the same records from the log
    assert FileStorage(tmp_path).read(f"{T}/ns/a/checkpoints/1.ckpt") == b"one again"


class SyscallCounter:
    def __init__(self, monkeypatch):
        self.calls: list[tuple[str, str]] = []
        for name in ("write", "pwrite", "fdatasync", "fsync"):
            real = getattr(os, name)

            def counting(fd, *args, _name=name, _real=real):
                self.calls.append((_name, os.readlink(f"/proc/self/fd/{fd}")))
                return _real(fd, *args)

            monkeypatch.setattr(os, name, counting)


def test_write_many_costs_one_write_and_one_sync_per_thread(tmp_path, monkeypatch):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/existing", b"0")
    storage.write("threads/u/ns/existing", b"0")
    counter = SyscallCounter(monkeypatch)
    written = storage.write_many(
        [
            (f"{T}/ns/a", b"1"),
            ("threads/u/ns/a", b"2"),
            (f"{T}/ns/b", b"3"),
            (f"{T}/ns/existing", b"not replaced"),
        ],
        replace=False,
    )
    monkeypatch.undo()
    assert written == [True, True, True, False]
    logs = sorted(str(log_of(tmp_path, t)) for t in (T, "threads/u"))
    # one write into each log's room, one sync each (the parity beside it: no sync)
    assert sorted(call for call in counter.calls if call[1] in logs) == sorted(
        [("pwrite", logs[0]), ("fdatasync", logs[0]), ("pwrite", logs[1]), ("fdatasync", logs[1])]
    )
    assert not [call for call in counter.calls if call[0] in ("fsync", "fdatasync")][4:]
    assert [key for _, key in entries_of(tmp_path)] == [
        f"{T}/ns/{k}" for k in ("existing", "a", "b")
    ]
    assert storage.read(f"{T}/ns/existing") == b"0"


def test_durable_false_appends_without_a_sync_and_is_still_a_whole_record(tmp_path, monkeypatch):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/a", b"first")
    counter = SyscallCounter(monkeypatch)
    assert storage.write(f"{T}/ns/a", b"second", durable=False)
    monkeypatch.undo()
    assert [name for name, path in counter.calls if path == str(log_of(tmp_path))] == ["pwrite"]
    assert [name for name, _ in counter.calls if "sync" in name] == []
    assert FileStorage(tmp_path).read(f"{T}/ns/a") == b"second"


def test_delete_appends_a_tombstone_that_every_reader_honours(tmp_path):
    storage = FileStorage(tmp_path)
    other = FileStorage(tmp_path)  # keeps its key directory between calls
    storage.write_many([(f"{T}/ns/a/1", b"1"), (f"{T}/ns/a/2", b"2"), (f"{T}/ns/b/1", b"3")])
    assert other.read(f"{T}/ns/a/1") == b"1"

    storage.delete(f"{T}/ns/a/1")
    storage.delete(f"{T}/ns/a/missing")  # not an error, and appends nothing
    storage.delete("threads/never/ns/x")
    assert entries_of(tmp_path)[-1] == (DELETE, f"{T}/ns/a/1")
    assert len(entries_of(tmp_path)) == 4
    for reader in (storage, other, FileStorage(tmp_path)):
        assert reader.read(f"{T}/ns/a/1") is None
        assert list(reader.walk(T)) == [f"{T}/ns/a/2", f"{T}/ns/b/1"]

    storage.delete_tree(f"{T}/ns/a")
    for reader in (storage, other, FileStorage(tmp_path)):
        assert list(reader.walk(T)) == [f"{T}/ns/b/1"]
        assert sorted(reader.list(f"{T}/ns")) == ["b"]
    # deleted, then written again: the newest entry wins
    storage.write(f"{T}/ns/a/1", b"back")
    assert other.read(f"{T}/ns/a/1") == b"back"


def test_delete_tree_of_a_thread_removes_its_log_and_a_new_one_starts_empty(tmp_path):
    storage = FileStorage(tmp_path)
    other = FileStorage(tmp_path)
    storage.write(f"{T}/ns/a", b"1")
    storage.write("threads/u/ns/a", b"u")
    assert other.read(f"{T}/ns/a") == b"1"
    storage.delete_tree(T)
    assert not (tmp_path / T).exists()
    assert storage.list("threads") == ["u"]
    for reader in (storage, other):
        assert reader.read(f"{T}/ns/a") is None and list(reader.walk(T)) == []
    other.write(f"{T}/ns/b", b"2")
    assert storage.read(f"{T}/ns/b") == b"2" and storage.read(f"{T}/ns/a") is None
    assert entries_of(tmp_path) == [(PUT, f"{T}/ns/b")]
    assert storage.read("threads/u/ns/a") == b"u"


def test_records_moved_aside_together_go_one_file_per_log_and_only_if_unchanged(tmp_path):
    """``move_aside_unchanged``: the records of each log go into one file of their own,
    back to back (numbered by the first of them when there are several logs), a record
    that is a file of its own is renamed, and a record that no longer holds what the
    reader judged stays where it is, its bytes in no file."""
    storage = FileStorage(tmp_path)
    for key, data in [
        (f"{T}/ns/a", b"A" * 10),
        (f"{T}/ns/b", b"B" * 7),
        (f"{T}/ns/c", b"C" * 5),
        ("threads/u/ns/a", b"U" * 3),
        ("cache/x.entry", b"X" * 4),
    ]:
        storage.write(key, data)
    moves = [
        (f"{T}/ns/a", b"A" * 10),
        ("threads/u/ns/a", b"U" * 3),
        (f"{T}/ns/b", b"rewritten since"),
        ("cache/x.entry", b"X" * 4),
        (f"{T}/ns/c", b"C" * 5),
    ]
    moved = storage.move_aside_unchanged(moves, "quarantine/m")
    assert moved == [
        ("quarantine/m-1.records", 0, 10),
        ("quarantine/m-2.records", 0, 3),
        None,
        ("quarantine/m-4.record", 0, 4),
        ("quarantine/m-1.records", 10, 5),
    ]
    assert storage.read("quarantine/m-1.records") == b"A" * 10 + b"C" * 5
    assert storage.read("quarantine/m-2.records") == b"U" * 3
    assert storage.read("quarantine/m-4.record") == b"X" * 4
    assert sorted(storage.list("quarantine")) == ["m-1.records", "m-2.records", "m-4.record"]
    fresh = FileStorage(tmp_path)
    assert [fresh.read(key) for key, _ in moves] == [None, None, b"B" * 7, None, None]
    # one thread's records alone share <aside>.records; one record keeps <aside>.record
    storage.write(f"{T}/ns/d", b"D")
    storage.write(f"{T}/ns/e", b"E")
    assert storage.move_aside_unchanged(
        [(f"{T}/ns/d", b"D"), (f"{T}/ns/e", b"E")], "quarantine/n"
    ) == [
        ("quarantine/n.records", 0, 1),
        ("quarantine/n.records", 1, 1),
    ]
    assert storage.move_aside_unchanged([(f"{T}/ns/b", b"B" * 7)], "quarantine/o") == [
        ("quarantine/o.record", 0, 7)
    ]
    assert storage.read("quarantine/o.record") == b"B" * 7


def test_move_aside_takes_a_record_out_of_its_thread_and_back_never_over_a_newer(tmp_path):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/a", b"damaged")
    assert storage.move_aside(f"{T}/ns/a", "quarantine/q1.record")
    assert storage.read(f"{T}/ns/a") is None
    assert (tmp_path / "quarantine" / "q1.record").read_bytes() == b"damaged"
    assert FileStorage(tmp_path).read(f"{T}/ns/a") is None
    assert not storage.move_aside(f"{T}/ns/a", "quarantine/q2.record")  # gone already

    # not over something already in the quarantine
    storage.write(f"{T}/ns/b", b"also damaged")
    assert not storage.move_aside(f"{T}/ns/b", "quarantine/q1.record", replace=False)
    assert storage.read(f"{T}/ns/b") == b"also damaged"
    assert (tmp_path / "quarantine" / "q1.record").read_bytes() == b"damaged"

    # back into the thread, but never over a newer record
    assert storage.move_aside("quarantine/q1.record", f"{T}/ns/a", replace=False)
    assert storage.read(f"{T}/ns/a") == b"damaged"
    assert not (tmp_path / "quarantine" / "q1.record").exists()
    storage.write("quarantine/q3.record", b"old")
    assert not storage.move_aside("quarantine/q3.record", f"{T}/ns/a", replace=False)
    assert storage.read(f"{T}/ns/a") == b"damaged"
    assert storage.read("quarantine/q3.record") == b"old"
    with pytest.raises(ValueError):
        storage.move_aside(f"{T}/ns/a", "threads/u/ns/a")


def test_stamp_changes_whenever_the_record_does(tmp_path):
    storage = FileStorage(tmp_path)
    key = f"{T}/ns/a"
    assert storage.stamp(key) is None
    storage.write(key, b"1")
    first = storage.stamp(key)
    assert first is not None and storage.stamp(key) == first
    storage.write(f"{T}/ns/b", b"unrelated")
    assert storage.stamp(key) == first
    storage.write(key, b"1")  # same bytes, new record
    second = storage.stamp(key)
    assert second != first
    storage.write(f"{T}/ns/c", b"dropped")
    storage.delete(f"{T}/ns/c")
    storage.compact(T)  # the record moved to a new file
    third = storage.stamp(key)
    assert third not in (first, second)
    assert storage.stamp(key) == third
    # another process compacting: a new file, even should its inode number be one this
    # process saw before (a stamp names the opening of the file, never reused)
    seen = {third}
    for _ in range(3):
        FileStorage(tmp_path).compact(T)
        assert storage.stamp(key) not in seen
        seen.add(storage.stamp(key))
    storage.delete(key)
    assert storage.stamp(key) is None
    storage.write("store.marker", b"m")
    assert storage.stamp("store.marker") is not None


def test_a_threads_lock_is_its_logs_flock_and_appends_inside_take_no_lock(tmp_path, monkeypatch):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/a", b"1")
    flocks = []
    real_flock = fcntl.flock
    monkeypatch.setattr(fcntl, "flock", lambda fd, op: flocks.append(op) or real_flock(fd, op))
    with storage.lock(T, exclusive=True):
        taken = len(flocks)
        fd = os.open(log_of(tmp_path), os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                real_flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        storage.write(f"{T}/ns/b", b"2")
        with storage.lock(T, exclusive=False):  # the thread holding it takes it again
            storage.write(f"{T}/ns/c", b"3")
        assert len(flocks) == taken  # the appends inside the block took no lock
    fd = os.open(log_of(tmp_path), os.O_RDONLY)
    real_flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go at the block's end
    os.close(fd)
    assert list(storage.walk(T)) == [f"{T}/ns/a", f"{T}/ns/b", f"{T}/ns/c"]


def blocked_flock_waiters() -> int:
    return sum(
        "->" in line and "FLOCK" in line for line in Path("/proc/locks").read_text().splitlines()
    )


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs /proc/locks")
@pytest.mark.parametrize("compacting", [False, True], ids=["appending", "compacting"])
def test_another_process_appends_after_a_lock_block_ends_not_inside_it(tmp_path, compacting):
    """Whoever holds the thread's lock decides and appends as one step: another process's
    append waits for the block to end (seen waiting in ``/proc/locks``), then comes after
    everything the block appended. A compaction in the block locks the new log before
    renaming it in: the waiter, sent from the old log to the new one, waits there too."""
    holder, other = FileStorage(tmp_path), FileStorage(tmp_path)
    holder.write(f"{T}/ns/first", b"1")
    other.read(f"{T}/ns/first")
    waiters = blocked_flock_waiters()
    appended = threading.Event()

    def append_elsewhere() -> None:
        other.write(f"{T}/ns/theirs", b"after")
        appended.set()

    def wait_for_a_new_waiter() -> None:
        deadline = time.monotonic() + 60
        while blocked_flock_waiters() <= waiters:
            assert time.monotonic() < deadline, "the other append never waited for the lock"
            time.sleep(0.01)

    with holder.lock(T, exclusive=False):
        writer = threading.Thread(target=append_elsewhere)
        writer.start()
        wait_for_a_new_waiter()
        if compacting:
            holder.compact(T)
            wait_for_a_new_waiter()  # on the new log's lock now
        assert not appended.is_set()
        holder.write(f"{T}/ns/mine", b"inside")
    writer.join()
    entries = [e.key for e in scan(log_of(tmp_path).read_bytes())[0]]
    assert entries == [f"{T}/ns/first", f"{T}/ns/mine", f"{T}/ns/theirs"]
    assert FileStorage(tmp_path).read(f"{T}/ns/theirs") == b"after"


def test_a_log_locked_by_this_thread_is_not_closed_to_make_room_for_others(tmp_path, monkeypatch):
    """The least recently used logs are closed past a limit, but not one whose lock a
    block holds: closing its descriptor would let go of the lock halfway through."""
    monkeypatch.setattr(file_storage, "_OPEN_LOGS", 2)
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/a", b"1")
    with storage.lock(T, exclusive=True):
        for other in ("threads/b", "threads/c", "threads/d"):
            storage.write(f"{other}/ns/x", b"2")  # each opening past the limit
        fd = os.open(log_of(tmp_path), os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):  # still held
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        storage.write(f"{T}/ns/b", b"3")
    assert [e.key for e in scan(log_of(tmp_path).read_bytes())[0]] == [f"{T}/ns/a", f"{T}/ns/b"]


def test_compact_keeps_exactly_the_live_records_in_a_new_file(tmp_path):
    storage = FileStorage(tmp_path)
    reader = FileStorage(tmp_path)
    for i in range(20):
        storage.write(f"{T}/ns/{i % 5}", f"value {i}".encode())
    storage.write(f"{T}/ns/dropped", b"x")
    storage.delete(f"{T}/ns/dropped")
    expected = {f"{T}/ns/{i}": f"value {15 + i}".encode() for i in range(5)}
    assert {k: reader.read(k) for k in expected} == expected
    size, inode = log_of(tmp_path).stat().st_size, log_of(tmp_path).stat().st_ino

    storage.compact(T)
    after = log_of(tmp_path).stat()
    assert after.st_ino != inode and after.st_size < size
    assert sorted(entries_of(tmp_path)) == sorted((PUT, k) for k in expected)
    assert temp_files(tmp_path) == []
    for view in (storage, reader, FileStorage(tmp_path)):
        assert {k: view.read(k) for k in expected} == expected
        assert view.read(f"{T}/ns/dropped") is None
        assert list(view.walk(T)) == sorted(expected)
    storage.compact(T)  # again: nothing to drop, same records
    assert sorted(entries_of(tmp_path)) == sorted((PUT, k) for k in expected)
    storage.compact("threads/never")  # a thread that does not exist: nothing happens
    assert not (tmp_path / "threads" / "never").exists()


def test_compact_folds_records_of_the_older_layout_into_the_log(tmp_path):
    old = RecordFileStorage(tmp_path)
    old.write(f"{T}/ns/a/checkpoints/1.ckpt", b"file one")
    storage = FileStorage(tmp_path)
    assert storage.read(f"{T}/ns/a/checkpoints/1.ckpt") == b"file one"
    storage.write(f"{T}/ns/a/checkpoints/3.ckpt", b"log three")
    expected = {
        f"{T}/ns/a/checkpoints/1.ckpt": b"file one",
        f"{T}/ns/a/checkpoints/3.ckpt": b"log three",
    }
    assert {k: storage.read(k) for k in expected} == expected

    storage.compact(T)
    assert list((tmp_path / T).rglob("*.ckpt")) == []
    assert sorted(key for _, key in entries_of(tmp_path)) == sorted(expected)
    for view in (storage, FileStorage(tmp_path)):
        assert {k: view.read(k) for k in expected} == expected


def test_a_record_file_replaced_in_the_log_does_not_come_back_once_deleted(tmp_path):
    """A store of the older layout, a record rewritten through the log, then deleted
    and compacted: the deletion must hold. The file of the older layout, shadowed by
    the log's entry, must not reappear once that entry is compacted away."""
    key = f"{T}/ns/a/checkpoints/2.ckpt"
    RecordFileStorage(tmp_path).write(key, b"file two")
    storage = FileStorage(tmp_path)
    storage.write(key, b"log two")
    storage.compact(T)
    storage.delete(key)
    assert storage.read(key) is None
    storage.compact(T)
    assert storage.read(key) is None
    assert FileStorage(tmp_path).read(key) is None


# -- torn tails and damage --------------------------------------------------------------


def test_a_torn_tail_is_never_read_and_the_next_append_cuts_it(tmp_path):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/a", b"acknowledged")
    intact = log_of(tmp_path).read_bytes()
    intact = intact[: scan(intact)[2]]  # the entry, without the room after it
    torn = encode_entry(PUT, f"{T}/ns/torn", b"never acknowledged" * 10)[:-7]
    with open(log_of(tmp_path), "r+b") as f:
        # a writer that knew of no room: it cut the room off (a torn tail to it) first
        f.truncate(len(intact))
        f.seek(len(intact))
        f.write(torn)
    reports = []
    for reader in (storage, FileStorage(tmp_path)):
        reader.on_damaged_span = lambda *args: reports.append(args)
        assert reader.read(f"{T}/ns/torn") is None
        assert list(reader.walk(T)) == [f"{T}/ns/a"]
    assert reports == []  # a torn tail is not damage

    storage.write(f"{T}/ns/b", b"next")
    data = log_of(tmp_path).read_bytes()
    appended = intact + encode_entry(PUT, f"{T}/ns/b", b"next")
    assert data.startswith(appended) and all_zeros(data, len(appended))
    assert FileStorage(tmp_path).read(f"{T}/ns/b") == b"next"


def test_the_last_entries_damaged_are_damage_not_a_torn_tail(tmp_path):
    """Entries complete by their own headers up to the end of the log were written whole,
    and may have been acknowledged: damaged, each is reported, read as its damaged
    bytes, and kept; the next append goes after them, and only a final incomplete
    entry (a write cut short) is a torn tail."""
    storage = FileStorage(tmp_path)
    for name in "abcd":
        storage.write(f"{T}/ns/{name}", name.encode() * 50)
    data = bytearray(log_of(tmp_path).read_bytes())
    entries = scan(bytes(data))[0]
    for entry in entries[1:]:  # b, c and d: every entry after a
        data[entry.data_offset + 10] ^= 0xFF
    lose_parity(log_of(tmp_path))  # damage beyond what parity rebuilds
    torn = encode_entry(PUT, f"{T}/ns/torn", b"never acknowledged" * 10)[:-7]
    damaged = bytes(data[: entries[-1].end])  # the entries (not the room after them)
    log_of(tmp_path).write_bytes(damaged + torn)

    found, spans, end = scan(damaged + torn)
    assert [e.key for e in found] == [f"{T}/ns/a"]
    assert [span.key for span in spans] == [f"{T}/ns/{name}" for name in "bcd"]
    assert end == len(damaged)
    reader = FileStorage(tmp_path)
    for entry in entries[1:]:
        assert reader.read(entry.key) == damaged[entry.offset : entry.end]
    assert reader.read(f"{T}/ns/torn") is None
    reader.write(f"{T}/ns/e", b"next")
    appended = damaged + encode_entry(PUT, f"{T}/ns/e", b"next")
    after = log_of(tmp_path).read_bytes()
    assert after.startswith(appended) and all_zeros(after, len(appended))


def test_damage_in_the_middle_reads_as_its_key_or_is_reported(tmp_path):
    storage = FileStorage(tmp_path)
    for name in "abcd":
        storage.write(f"{T}/ns/{name}", name.encode() * 50)
    data = bytearray(log_of(tmp_path).read_bytes())
    a, _, c, _ = scan(bytes(data))[0]
    data[a.data_offset + 10] ^= 0xFF  # a flipped byte in a's data: its header still names it
    data[c.offset : c.offset + 4] = b"XXXX"  # c's header destroyed: it names nothing
    log_of(tmp_path).write_bytes(bytes(data))
    lose_parity(log_of(tmp_path))  # damage beyond what parity rebuilds

    reader = FileStorage(tmp_path)
    reports = []
    reader.on_damaged_span = lambda *args: reports.append(args)
    # a reads back as its damaged bytes, which never verify as a record
    assert reader.read(f"{T}/ns/a") == bytes(data[a.offset : a.end])
    assert reader.read(f"{T}/ns/b") == b"b" * 50
    assert reader.read(f"{T}/ns/c") is None
    assert reader.read(f"{T}/ns/d") == b"d" * 50
    ((where, reason, raw, key, _),) = reports
    assert where == f"{log_of(tmp_path)}@{c.offset}"
    assert reason == "no entry starts here" and key is None
    assert raw == bytes(data[c.offset : c.end])


# -- several processes ------------------------------------------------------------------


class Child:
    """A ``log_child.py`` process with its own ``FileStorage`` on the store."""

    def __init__(self, root: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def send(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def answer(self) -> str:
        line = self.process.stdout.readline()
        assert line, f"the child exited ({self.process.poll()})"
        return line.rstrip("\n")

    def ask(self, line: str) -> str:
        self.send(line)
        return self.answer()

    def read(self, key: str) -> bytes | None:
        found = self.ask(f"read {key}")
        return None if found == "none" else bytes.fromhex("" if found == "-" else found)

    def close(self) -> None:
        self.process.stdin.close()
        assert self.process.wait(timeout=120) == 0


@pytest.fixture
def children(tmp_path):
    started: list[Child] = []

    def start() -> Child:
        started.append(Child(tmp_path))
        return started[-1]

    yield start
    for child in started:
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait()


APPENDS = 300


def test_two_processes_appending_to_one_thread_never_interleave_or_lose_an_entry(
    tmp_path, children
):
    FileStorage(tmp_path).write(f"{T}/ns/first", b"0")
    writers = [children(), children()]
    # hold the log's lock until both have started, so that they append at the same time
    fd = os.open(log_of(tmp_path), os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        for writer in writers:
            writer.send(f"append {T}/ns/w {APPENDS}")
        assert [writer.answer() for writer in writers] == ["started", "started"]
    finally:
        os.close(fd)
    acked = []
    for writer in writers:
        lines = [writer.answer() for _ in range(APPENDS + 1)]
        assert lines[-1] == "done"
        acked += [line.split()[1] for line in lines[:-1]]
        writer.close()

    assert len(set(acked)) == 2 * APPENDS
    # whole entries only, each once: no bytes of two appends mixed, none lost
    assert sorted(key for _, key in entries_of(tmp_path)) == sorted([f"{T}/ns/first", *acked])
    storage = FileStorage(tmp_path)
    assert all(storage.read(key) == key.encode() for key in acked)


def test_a_reader_in_another_process_sees_appends_deletions_and_compactions(tmp_path, children):
    storage = FileStorage(tmp_path)
    reader = children()
    assert reader.read(f"{T}/ns/a") is None
    storage.write(f"{T}/ns/a", b"1")
    assert reader.read(f"{T}/ns/a") == b"1"
    storage.write_many([(f"{T}/ns/a", b"2"), (f"{T}/ns/b", b"")])
    assert reader.read(f"{T}/ns/a") == b"2"
    assert reader.read(f"{T}/ns/b") == b""
    storage.delete(f"{T}/ns/a")
    assert reader.read(f"{T}/ns/a") is None
    assert reader.ask(f"walk {T}") == f"{T}/ns/b"
    storage.write(f"{T}/ns/c", b"3")
    storage.compact(T)
    assert reader.read(f"{T}/ns/c") == b"3"
    assert reader.ask(f"walk {T}") == f"{T}/ns/b {T}/ns/c"
    # and the other way round: the parent's key directory follows the child's appends
    assert reader.ask(f"write {T}/ns/d {b'4'.hex()}") == "ok"
    assert storage.read(f"{T}/ns/d") == b"4"
    assert reader.ask(f"compact {T}") == "ok"
    assert list(storage.walk(T)) == [f"{T}/ns/b", f"{T}/ns/c", f"{T}/ns/d"]
    storage.delete_tree(T)
    assert reader.read(f"{T}/ns/c") is None
    reader.close()


def test_a_block_another_process_writes_back_reads_the_same_before_and_after(tmp_path, children):
    """A lost 4 KB block, rebuilt from parity by two processes: the one that appends next
    writes it back, under the log's lock, with its append; the other reads the same bytes
    before and after, and a process opening the log then finds nothing to rebuild."""
    values = {f"{T}/ns/{i:02}": os.urandom(1500).hex().encode() for i in range(40)}
    FileStorage(tmp_path).write_many(sorted(values.items()))
    log = log_of(tmp_path)
    written = log.read_bytes()
    block = 5 * BLOCK_SIZE
    log.write_bytes(written[:block] + bytes(BLOCK_SIZE) + written[block + BLOCK_SIZE :])

    writer, reader = FileStorage(tmp_path), children()
    healed: list[str] = []
    writer.on_healed = lambda location, key: healed.append(location)
    assert all(writer.read(key) == value for key, value in values.items())
    assert healed == [f"{log}@{block}"]
    assert all(reader.read(key) == value for key, value in values.items())
    assert log.read_bytes()[block : block + BLOCK_SIZE] == bytes(BLOCK_SIZE)  # reads write nothing

    writer.write(f"{T}/ns/next", b"next")
    assert log.read_bytes()[: len(written)].startswith(written[: block + BLOCK_SIZE])
    assert all(reader.read(key) == value for key, value in values.items())
    assert reader.read(f"{T}/ns/next") == b"next"
    reader.close()
    fresh = FileStorage(tmp_path)
    fresh.on_healed = lambda location, key: healed.append(location)
    assert all(fresh.read(key) == value for key, value in values.items())
    assert healed == [f"{log}@{block}"]


def test_compaction_while_another_process_appends_and_another_reads_loses_nothing(
    tmp_path, children
):
    storage = FileStorage(tmp_path)
    for i in range(50):
        storage.write(f"{T}/ns/old/{i}", b"old")
    for i in range(0, 50, 2):
        storage.delete(f"{T}/ns/old/{i}")
    survivors = {f"{T}/ns/old/{i}": b"old" for i in range(1, 50, 2)}
    appender, reader = children(), children()
    appender.send(f"append {T}/ns/new {APPENDS}")
    assert appender.answer() == "started"
    acked: list[str] = []
    inodes = {log_of(tmp_path).stat().st_ino}
    while True:
        line = appender.answer()
        if line == "done":
            break
        acked.append(line.split()[1])
        if len(acked) % 10 == 0:
            storage.compact(T)  # while the appender goes on
            inodes.add(log_of(tmp_path).stat().st_ino)
            # the reader keeps its key directory: it must follow the new file
            key = acked[len(acked) // 2]
            assert reader.read(key) == key.encode()
            assert reader.read(f"{T}/ns/old/1") == b"old"
            assert reader.read(f"{T}/ns/old/0") is None
    appender.close()
    assert len(inodes) > 1  # compactions did swap files in

    expected = {**survivors, **{key: key.encode() for key in acked}}
    for view in (storage, FileStorage(tmp_path)):
        assert sorted(view.walk(T)) == sorted(expected)
        assert all(view.read(key) == value for key, value in expected.items())
    assert all(reader.read(key) == value for key, value in expected.items())
    reader.close()
    storage.compact(T)
    assert sorted(key for _, key in entries_of(tmp_path)) == sorted(expected)
    assert temp_files(tmp_path) == []
