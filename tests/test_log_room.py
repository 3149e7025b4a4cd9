"""The room at a log's end: zeros written ahead of the entries, which appends overwrite.

An append that fits the room leaves the file's size as it is (its ``fdatasync`` has
no new size or block to commit); zeros after the last entry are room only where the
parity says nothing was synced there, so lost blocks are rebuilt, a write torn in the
room is cut, and no writer ever writes over another's entry.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from logtools import view_log

from langgraph_checkpoint_verified.storage.log.entries import (
    CHECKSUM_SIZE,
    HEADER_SIZE,
    PUT,
    encode_entry,
)
from langgraph_checkpoint_verified.storage.log.file_storage import LOG_NAME, FileStorage
from langgraph_checkpoint_verified.storage.log.parity import BLOCK_SIZE
from langgraph_checkpoint_verified.storage.log.room import (
    ALIGNMENT,
    MAX_ROOM,
    MIN_ROOM,
    zeros_start,
)

T = "threads/t"


def log_of(root: Path) -> Path:
    return root / T / LOG_NAME


class FileCalls:
    """``os.pwrite``, ``os.write``, ``os.ftruncate`` and ``os.fdatasync`` on the log."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
        self.calls: list[str] = []
        for name in ("pwrite", "write", "ftruncate", "fdatasync"):
            real = getattr(os, name)

            def counted(fd, *args, _name=name, _real=real):
                if os.readlink(f"/proc/self/fd/{fd}") == str(log):
                    self.calls.append(_name)
                return _real(fd, *args)

            monkeypatch.setattr(os, name, counted)


def test_an_append_that_fits_the_room_overwrites_it_and_leaves_the_size_as_it_is(
    tmp_path, monkeypatch
):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/first", b"x" * 100)  # a new log: the entry, then room
    log = log_of(tmp_path)
    size = log.stat().st_size
    assert size >= MIN_ROOM and size % ALIGNMENT == 0
    calls = FileCalls(monkeypatch, log)
    for n in range(20):
        storage.write(f"{T}/ns/{n}", os.urandom(300))
        assert log.stat().st_size == size  # nothing for the sync to commit but the data
    monkeypatch.undo()
    assert calls.calls == ["pwrite", "fdatasync"] * 20
    view = view_log(log.read_bytes(), T)
    assert view.whole and len(view.entries) == 21
    assert FileStorage(tmp_path).read(f"{T}/ns/19") is not None


def test_the_room_grows_with_the_log_and_stays_within_an_eighth_of_it(tmp_path):
    storage = FileStorage(tmp_path, fsync=False)
    log = log_of(tmp_path)
    for n in range(600):
        storage.write(f"{T}/ns/{n}", os.urandom(3000))
        end = view_log(log.read_bytes(), T).end
        room = log.stat().st_size - end
        assert 0 <= room <= max(MIN_ROOM, min(end // 8, MAX_ROOM)) + ALIGNMENT


def test_zeros_where_synced_entries_were_are_lost_blocks_rebuilt_not_room(tmp_path):
    """A lost sector at the end of the log reads as zeros, as room does: the parity,
    which covers only what was synced, tells them apart, and rebuilds the block."""
    storage = FileStorage(tmp_path)
    log = log_of(tmp_path)
    n = 0
    while True:  # until the last entry lies inside one block, after a few
        storage.write(f"{T}/ns/{n}", os.urandom(700))
        n += 1
        last = view_log(log.read_bytes(), T).entries[-1]
        if n >= 10 and last.offset // BLOCK_SIZE == (last.end - 1) // BLOCK_SIZE:
            break
    data = bytearray(log.read_bytes())
    data[last.offset : last.end] = bytes(last.end - last.offset)  # looks like room now
    log.write_bytes(bytes(data))
    assert view_log(bytes(data), T).whole and view_log(bytes(data), T).end == last.offset
    healed = []
    reader = FileStorage(tmp_path)
    reader.on_healed = lambda location, key: healed.append(location)
    assert reader.read(last.key) == storage.read(last.key) is not None
    assert healed == [f"{log}@{last.offset // BLOCK_SIZE * BLOCK_SIZE}"]
    assert sorted(reader.walk(T)) == sorted(f"{T}/ns/{k}" for k in range(n))


def test_a_reader_catching_up_takes_zeros_where_synced_entries_were_for_lost_blocks(tmp_path):
    """A process that knew the log reads what another appended since a window at a time,
    up to the room: zeros where that writer's last entry was synced are a lost block,
    rebuilt from the parity, not room (whose next append would write over the entry)."""
    reader, writer = FileStorage(tmp_path), FileStorage(tmp_path)
    reader.write(f"{T}/ns/first", b"f" * 500)  # the reader knows the log, up to its room
    log = log_of(tmp_path)
    written = {}
    while True:  # until the writer's last entry lies inside one block, after a few
        key = f"{T}/ns/{len(written)}"
        written[key] = os.urandom(700)
        writer.write(key, written[key])
        last = view_log(log.read_bytes(), T).entries[-1]
        if len(written) >= 3 and last.offset // BLOCK_SIZE == (last.end - 1) // BLOCK_SIZE:
            break
    data = bytearray(log.read_bytes())
    data[last.offset : last.end] = bytes(last.end - last.offset)  # looks like room now
    log.write_bytes(bytes(data))
    assert reader.read(last.key) == written[last.key]
    reader.write(f"{T}/ns/next", b"n" * 500)
    fresh = FileStorage(tmp_path)
    assert {key: fresh.read(key) for key in written} == written


def test_a_writer_never_writes_over_another_writers_entry_whose_header_was_lost(tmp_path):
    """Another process appended (synced, parity written), then the block holding that
    entry's header was lost: the zeros where this writer would append are not room."""
    first, second = FileStorage(tmp_path), FileStorage(tmp_path)
    first.write(f"{T}/ns/a", b"a" * 500)
    second.write(f"{T}/ns/b", b"b" * 500)
    log = log_of(tmp_path)
    entry_b = view_log(log.read_bytes(), T).entry(f"{T}/ns/b")
    data = bytearray(log.read_bytes())
    data[entry_b.offset : entry_b.offset + HEADER_SIZE] = bytes(HEADER_SIZE)
    log.write_bytes(bytes(data))
    first.write(f"{T}/ns/c", b"c" * 500)
    fresh = FileStorage(tmp_path)
    assert [fresh.read(f"{T}/ns/{k}") for k in "abc"] == [b"a" * 500, b"b" * 500, b"c" * 500]
    # c went after b (whose header is rebuilt on every read, until a repair writes it back)
    assert view_log(log.read_bytes(), T).entry(f"{T}/ns/c").offset == entry_b.end


@pytest.mark.parametrize("left", range(HEADER_SIZE + 1))
def test_an_append_leaves_room_for_a_whole_entry_header_so_the_next_needs_no_stat(
    tmp_path, monkeypatch, left
):
    """A writer that knows the log up to room sees that nobody appended by reading one
    entry header there: zeros. Room shorter than a header could not show it, and every
    call would look the log up again until the room was outgrown. So an append that
    would leave less than a header of room grows the file as if it had not fit."""
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/first", b"x" * 100)
    log = log_of(tmp_path)
    room = log.stat().st_size - view_log(log.read_bytes(), T).end
    key = f"{T}/ns/filling"
    storage.write(key, b"f" * (room - left - (HEADER_SIZE + len(key) + CHECKSUM_SIZE)))
    room = log.stat().st_size - view_log(log.read_bytes(), T).end
    assert room == left if left == HEADER_SIZE else room >= MIN_ROOM
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(
        os, "stat", lambda path, *a, **k: stats.append(path) or real_stat(path, *a, **k)
    )
    storage.write(f"{T}/ns/next", b"next")
    monkeypatch.undo()
    assert str(log) not in map(str, stats)
    assert FileStorage(tmp_path).read(f"{T}/ns/next") == b"next"


@pytest.mark.parametrize("first", [True, False], ids=["first append", "later append"])
def test_an_entry_torn_in_the_room_is_a_torn_tail_and_the_next_append_cuts_it(tmp_path, first):
    """A power cut in the middle of overwriting the room leaves an entry complete by its
    header (the zeros complete it) that fails its checksum: never synced, so the parity
    does not cover it, and it is a torn tail, not damage. A new log's sidecar is made
    before its first append, so that holds for the first entry too."""
    storage = FileStorage(tmp_path)
    key = f"{T}/ns/torn"
    storage.write(key, b"will be torn")
    log = log_of(tmp_path)
    data = bytearray(log.read_bytes())
    at = 0 if first else view_log(bytes(data), T).end
    if first:  # as if the first append had been torn: the sidecar made, nothing in it
        (log.parent / f"{LOG_NAME}.parity").write_bytes(b"")
    else:
        storage.write(f"{T}/ns/kept", b"kept")
        data = bytearray(log.read_bytes())
        at = view_log(bytes(data), T).end
    torn = encode_entry(PUT, key, b"never synced" * 20)[:60]
    data[at:] = torn + bytes(len(data) - at - len(torn))
    log.write_bytes(bytes(data))
    reports = []
    reader = FileStorage(tmp_path)
    reader.on_damaged_span = lambda *args: reports.append(args)
    assert reader.read(key) == (None if first else b"will be torn")
    assert reports == []
    reader.write(f"{T}/ns/next", b"next")
    view = view_log(log.read_bytes(), T)
    assert view.whole and view.entries[-1].key == f"{T}/ns/next"
    assert torn not in log.read_bytes()


@pytest.mark.parametrize("checksum_bytes_written", [1, 2, 3])
def test_an_entry_torn_inside_its_checksum_is_a_torn_tail_when_the_parity_cannot_say(
    tmp_path, checksum_bytes_written
):
    """A power cut can stop an entry's one write inside its last bytes, its checksum,
    and take the unsynced parity record of its stripe with it. The checksum then holds
    the first bytes of the entry's own checksum and zeros after them: a write that never
    finished, a torn tail, never damage (a checksum damaged since it was written whole
    would not be the right one's first bytes with zeros after)."""
    storage = FileStorage(tmp_path)
    key = f"{T}/ns/torn"
    storage.write(key, b"old value")
    storage.write(f"{T}/ns/kept", b"kept")
    log = log_of(tmp_path)
    data = bytearray(log.read_bytes())
    at = view_log(bytes(data), T).end
    entry = encode_entry(PUT, key, b"never synced" * 60)
    checksum = entry[-4:]
    assert all(checksum)  # every byte of it differs from the room's zeros
    torn = entry[: len(entry) - 4 + checksum_bytes_written]
    data[at : at + len(torn)] = torn
    log.write_bytes(bytes(data))
    parity = log.parent / f"{LOG_NAME}.parity"
    parity.write_bytes(b"\xff" * parity.stat().st_size)  # the stripe's record torn: unreadable
    reports = []
    reader = FileStorage(tmp_path)
    reader.on_damaged_span = lambda *args: reports.append(args)
    assert reader.read(key) == b"old value"
    assert reports == []
    reader.write(f"{T}/ns/next", b"next")
    view = view_log(log.read_bytes(), T)
    assert view.whole and view.entries[-1].key == f"{T}/ns/next"
    assert torn not in log.read_bytes()


@pytest.mark.parametrize(
    "size", [1, BLOCK_SIZE, 64 * 1024, 64 * 1024 + BLOCK_SIZE + 1, MAX_ROOM + 3]
)
def test_the_zeros_that_end_a_log_start_after_its_last_byte_that_is_not_one(size):
    """``zeros_start`` (where a search for the next entry stops) compares chunks, then
    blocks, with zeros from the end: it gives what stripping them byte by byte gives,
    wherever the last byte that is not a zero lies, chunk and block edges included."""
    edges = {0, 1, BLOCK_SIZE - 1, BLOCK_SIZE, 64 * 1024 - 1, 64 * 1024, size // 2, size - 1}
    assert zeros_start(bytes(size)) == 0
    for last in sorted(at for at in edges if 0 <= at < size):
        data = bytearray(size)
        data[last] = 0x4C
        data[last // 3] = 0x47  # an earlier byte that is not a zero changes nothing
        assert zeros_start(bytes(data)) == len(bytes(data).rstrip(b"\0")) == last + 1
