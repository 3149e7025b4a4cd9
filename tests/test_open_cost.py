"""What opening a store and loading the latest checkpoint read, counted in files and bytes.

Bounded:

* ``VerifiedSaver(path)`` opens one small file, the store marker, however many
  threads and checkpoints the store holds;
* loading the latest checkpoint reads no other thread's log, and a bounded number
  of records (the checkpoint, the records holding its unchanged values, its
  pending writes) whatever the length of the thread;
* a second ``get_tuple`` on the same saver scans only what was appended to the log
  since: zero bytes when nothing was, exactly the appended bytes when another saver
  appended.

Opening a thread: the first read of a thread in a process builds its key
directory. From the thread's hint (``log.hint``: where each key's record lies,
left by a process that read the log) and the part of the log after it, when
there is a hint; by scanning the whole log once otherwise, after which that
process leaves a hint. The hint holds keys and positions, not records: it is a
fraction of the log's size. Counted in bytes read (``os.pread``/``os.read`` and
the builtin ``open``), not in seconds.
"""

from __future__ import annotations

import builtins
import itertools
import os
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from logtools import counted_rereads, lose_parity

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.records.keys import thread_prefix
from langgraph_checkpoint_verified.storage.log import hint_file
from langgraph_checkpoint_verified.storage.log.entries import (
    HEADER_SIZE,
    LOG_TAIL_SIZE,
    decode_hint_index,
    scan,
)
from langgraph_checkpoint_verified.storage.log.file_storage import HINT_NAME, LOG_NAME, PARITY_NAME
from langgraph_checkpoint_verified.storage.log.hint_file import (
    HINT_AFTER_BYTES,
    HINT_AFTER_ENTRIES,
    HINT_BYTES_PER_ENTRY,
)
from langgraph_checkpoint_verified.storage.log.parity import BLOCK_SIZE, RECORD_SIZE, STRIPE_SIZE
from langgraph_checkpoint_verified.storage.log.tail import TAIL_WINDOW

# a latest checkpoint is one record, plus the records holding its unchanged
# values (one per channel at most) and its pending writes: a small constant
MAX_RECORDS_FOR_LATEST = 8
LONG = {"configurable": {"thread_id": "long"}}


def build_store(
    root, checkpoints: int, other_threads: int, saver: VerifiedSaver | None = None
) -> dict:
    saver = saver or VerifiedSaver(root, fsync=False)
    parent = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    for step in range(checkpoints):
        versions = {"constant": 1, "counter": step + 1}
        parent = saver.put(
            parent,
            generate_checkpoint(
                channel_values={"constant": "set once", "counter": step},
                channel_versions=versions,
            ),
            generate_metadata(step=step),
            versions if step == 0 else {"counter": step + 1},
        )
        saver.put_writes(parent, [("out", step)], "task")
    for i in range(other_threads):
        saver.put(
            {"configurable": {"thread_id": f"other-{i}", "checkpoint_ns": ""}},
            generate_checkpoint(channel_values={"x": i}, channel_versions={"x": 1}),
            generate_metadata(),
            {"x": 1},
        )
    return parent


class ReadCounter:
    """Every file opened, and every read: (path, offset or None, bytes returned)."""

    def __init__(self, monkeypatch) -> None:
        self.opened: list[str] = []
        self.reads: list[tuple[str, int | None, int]] = []
        real_open, real_pread, real_read = os.open, os.pread, os.read
        real_builtin_open = builtins.open

        def path_of(fd: int) -> str:
            return os.readlink(f"/proc/self/fd/{fd}")

        def counting_open(path, *args, **kwargs):
            self.opened.append(os.fspath(path))
            return real_open(path, *args, **kwargs)

        def counting_pread(fd, size, offset):
            data = real_pread(fd, size, offset)
            self.reads.append((path_of(fd), offset, len(data)))
            return data

        def counting_read(fd, size):
            data = real_read(fd, size)
            self.reads.append((path_of(fd), None, len(data)))
            return data

        def counting_builtin_open(path, *args, **kwargs):
            if isinstance(path, (str, os.PathLike)):
                self.opened.append(os.fspath(path))
            return real_builtin_open(path, *args, **kwargs)

        monkeypatch.setattr(os, "open", counting_open)
        monkeypatch.setattr(os, "pread", counting_pread)
        monkeypatch.setattr(os, "read", counting_read)
        monkeypatch.setattr(builtins, "open", counting_builtin_open)

    def take(self) -> tuple[list[str], list[tuple[str, int | None, int]]]:
        taken = self.opened, self.reads
        self.opened, self.reads = [], []
        return taken


def log_of(root: Path, thread_id: str) -> Path:
    return root / thread_prefix(thread_id) / LOG_NAME


def split_reads(reads, log: Path):
    """A log's reads: those of whole records (a record's entry, exactly: its checksum is
    checked as it is read; or its data alone, compared with bytes verified before), and
    the scans. Neither are the few bytes a hint names its log by, read where a hint ends
    (to check one, or to write one), nor the look at where the next entry would start
    (an entry header of zeros: no process appended since)."""
    data = log.read_bytes()
    entries = scan(data)[0]
    records = {(e.offset, e.end - e.offset) for e in entries}
    records |= {(e.data_offset, e.data_size) for e in entries}
    mine = [(offset, size) for path, offset, size in reads if path == str(log)]
    mine = [(offset, size) for offset, size in mine if size not in (LOG_TAIL_SIZE, HEADER_SIZE)]
    return [r for r in mine if r in records], [r for r in mine if r not in records]


@pytest.mark.parametrize("checkpoints", [20, 2_000])
def test_open_and_load_latest_read_the_marker_then_the_threads_log_once(
    tmp_path, monkeypatch, checkpoints
):
    root = tmp_path / "store"
    last = build_store(root, checkpoints, other_threads=50)
    log = log_of(root, "long")
    (log.parent / HINT_NAME).unlink(missing_ok=True)  # the writer's hint lost: read the log
    counter = ReadCounter(monkeypatch)

    saver = VerifiedSaver(root)
    opened, reads = counter.take()
    assert opened == [str(root / "store.marker")]
    assert (root / "store.marker").stat().st_size < 4096

    latest = saver.get_tuple(LONG)
    opened, reads = counter.take()
    assert latest.config["configurable"]["checkpoint_id"] == last["configurable"]["checkpoint_id"]
    assert latest.checkpoint["channel_values"] == {
        "constant": "set once",
        "counter": checkpoints - 1,
    }
    assert latest.pending_writes == [("task", "out", checkpoints - 1)]
    # no other thread's log, no file of anything else; of the parity, one record: what it
    # says of the zeros after the last entry (room, or blocks lost since they were written)
    hint, parity = log.parent / HINT_NAME, log.parent / PARITY_NAME
    assert {path for path, _, _ in reads} == {str(log), str(parity)}
    (size,) = [size for path, _, size in reads if path == str(parity)]
    assert 0 < size <= RECORD_SIZE  # the last stripe's record: as long as what it covers
    assert {p for p in opened if not p.startswith(str(log.parent / ".tmp-"))} <= {
        str(log),
        str(hint),
        str(parity),
    }
    records, scans = split_reads(reads, log)
    assert scans == [(0, log.stat().st_size)]  # no hint yet: the whole log, once
    assert 1 <= len(records) <= MAX_RECORDS_FOR_LATEST
    if log.stat().st_size >= HINT_AFTER_BYTES:
        # ...and the next process to open the thread reads the hint left for it instead
        assert hint.stat().st_size < log.stat().st_size / 2
        other = VerifiedSaver(root)
        counter.take()
        assert other.get_tuple(LONG) == latest
        opened, reads = counter.take()
        records, scans = split_reads(reads, log)
        # nothing of the log but the records themselves, and a look at the room after them
        end = scan(log.read_bytes())[2]
        assert scans == [(end, min(TAIL_WINDOW, log.stat().st_size - end))]
        assert 1 <= len(records) <= MAX_RECORDS_FOR_LATEST
        assert str(hint) in opened

    # again: nothing was appended, nothing is scanned
    assert saver.get_tuple(LONG) == latest
    opened, reads = counter.take()
    assert opened == []
    records, scans = split_reads(reads, log)
    assert scans == []
    assert len(records) <= MAX_RECORDS_FOR_LATEST

    # another saver appends: what it appended is scanned, and no more of the room than
    # the window read to see it
    monkeypatch.undo()
    size = scan(log.read_bytes())[2]
    build_more = VerifiedSaver(root)
    newest = build_more.put(
        latest.config,
        generate_checkpoint(channel_values={"counter": -1}, channel_versions={"counter": -1}),
        generate_metadata(step=checkpoints),
        {"counter": -1},
    )
    appended = scan(log.read_bytes())[2] - size
    assert 0 < appended < TAIL_WINDOW
    counter = ReadCounter(monkeypatch)
    assert saver.get_tuple(LONG).config == newest
    _, reads = counter.take()
    # the first read of the log is the scan of what was appended (here one whole entry,
    # which is also the read of a record: it is told apart by coming first), after the
    # look that found it
    log_reads = [read for read in reads if read[0] == str(log) and read[2] != HEADER_SIZE]
    assert log_reads[0] == (str(log), size, min(TAIL_WINDOW, log.stat().st_size - size))
    records, scans = split_reads(log_reads[1:], log)
    assert scans == []
    assert len(records) <= MAX_RECORDS_FOR_LATEST


def test_a_thread_no_process_read_yet_is_opened_from_the_hint_its_writer_left(
    tmp_path, monkeypatch
):
    """The writer knows every key as it appends: it leaves a hint once the log has grown
    far enough past the last one, so a new process reads the hint and the tail after it
    (at most ``HINT_AFTER_BYTES`` or a quarter of the hint's size, read in windows that
    double, so at most about twice that), never the whole log."""
    root = tmp_path / "store"
    last = build_store(root, 2_000, other_threads=0)
    log, hint = log_of(root, "long"), log_of(root, "long").parent / HINT_NAME
    assert hint.exists()
    writers_hint, hint_bytes = hint.stat(), hint.read_bytes()
    counter = ReadCounter(monkeypatch)
    latest = VerifiedSaver(root).get_tuple(LONG)
    _, reads = counter.take()
    assert latest.config == last
    records, scans = split_reads(reads, log)
    scanned = sum(size for _, size in scans)
    assert scanned <= 2 * max(HINT_AFTER_BYTES, writers_hint.st_size // 4) + TAIL_WINDOW
    assert scanned < log.stat().st_size
    assert 1 <= len(records) <= MAX_RECORDS_FOR_LATEST
    read_of_hint = sum(size for path, _, size in reads if path == str(hint))
    log_bytes = log.read_bytes()
    hint_index = decode_hint_index(
        hint_bytes, lambda end: log_bytes[end - LOG_TAIL_SIZE : end], len(log_bytes)
    )
    assert hint_index is not None
    past_hint = scan(log_bytes, hint_index.end)[0]
    if scan(log_bytes)[2] - hint_index.end < HINT_AFTER_BYTES and (
        len(past_hint) < HINT_AFTER_ENTRIES + writers_hint.st_size // HINT_BYTES_PER_ENTRY
    ):
        # the writer's hint, read a few blocks of it
        assert read_of_hint < writers_hint.st_size / 2
        assert hint.stat().st_ino == writers_hint.st_ino
    else:  # a reader that scanned that much leaves a new hint
        assert hint.stat().st_ino != writers_hint.st_ino
        counter.take()
        VerifiedSaver(root).get_tuple(LONG)  # ...and the next one scans nothing of the log
        _, reads = counter.take()
        # nothing of the log but a look at the room after its entries
        assert all(offset >= scan(log_bytes)[2] for offset, _ in split_reads(reads, log)[1])


def hint_index_of(log: Path) -> tuple[Any, bytes]:
    """The index of the hint beside ``log`` (it must be one of that log) and the log's bytes."""
    log_bytes = log.read_bytes()
    hint_index = decode_hint_index(
        (log.parent / HINT_NAME).read_bytes(),
        lambda end: log_bytes[end - LOG_TAIL_SIZE : end],
        len(log_bytes),
    )
    assert hint_index is not None
    return hint_index, log_bytes


def entries_past_hint(log: Path) -> int:
    """How many entries the log holds past the position its hint covers up to."""
    hint_index, log_bytes = hint_index_of(log)
    return len(scan(log_bytes, hint_index.end)[0])


def put_counters(saver: VerifiedSaver, parent: dict, count: int) -> dict:
    """``count`` more checkpoints of ``build_store``'s thread: one small entry each."""
    for _ in range(count):
        version = next(_MORE_VERSIONS)
        parent = saver.put(
            parent,
            generate_checkpoint(
                channel_values={"counter": version}, channel_versions={"counter": version}
            ),
            generate_metadata(),
            {"counter": version},
        )
    return parent


_MORE_VERSIONS = itertools.count(1_000_000)


def hint_to_the_end(root: Path) -> None:
    """A reader of ``build_store``'s thread, which scans what its writer left past the last
    hint (more than a hint costs) and leaves a hint that covers the whole log."""
    VerifiedSaver(root).get_tuple(LONG)
    assert entries_past_hint(log_of(root, "long")) == 0


def test_a_process_leaves_a_hint_once_its_scans_cost_more_than_writing_one(tmp_path, monkeypatch):
    """A process opening a thread past its hint pays for a new hint only once the entries
    it scanned there cost more than rewriting the hint does (``HINT_AFTER_ENTRIES``
    entries for making a file, one more for each ``HINT_BYTES_PER_ENTRY`` of hint): a
    reader one entry short of that leaves the hint as it found it, and makes no file at
    all; a second saver of the same process scanning the same stretch has paid enough
    and writes it, after which the next reader scans nothing; and past that new hint,
    one scan of as many entries writes one at once."""
    root = tmp_path / "store"
    writer = VerifiedSaver(root, fsync=False)  # appends on, never reading the log again
    last = build_store(root, 2_000, other_threads=0, saver=writer)
    log = log_of(root, "long")
    hint = log.parent / HINT_NAME
    hint_to_the_end(root)
    # the writer leaves no hint of its own from here on: only readers do
    monkeypatch.setattr(hint_file, "HINT_AFTER_BYTES", 1 << 40)

    def hint_cost() -> int:
        return HINT_AFTER_ENTRIES + hint.stat().st_size // HINT_BYTES_PER_ENTRY

    assert hint_cost() > 2 * HINT_AFTER_ENTRIES  # a hint this long costs more than a file
    last = put_counters(writer, last, hint_cost() - 1 - entries_past_hint(log))
    assert entries_past_hint(log) == hint_cost() - 1
    earlier_hint, files = hint.stat(), sorted(os.listdir(log.parent))

    assert VerifiedSaver(root).get_tuple(LONG).config == last
    assert hint.stat().st_ino == earlier_hint.st_ino
    assert sorted(os.listdir(log.parent)) == files

    assert VerifiedSaver(root).get_tuple(LONG).config == last
    assert hint.stat().st_ino != earlier_hint.st_ino
    assert entries_past_hint(log) == 0
    with monkeypatch.context() as patch:
        counter = ReadCounter(patch)
        assert VerifiedSaver(root).get_tuple(LONG).config == last
        _, reads = counter.take()
    log_end = scan(log.read_bytes())[2]
    assert all(offset >= log_end for offset, _ in split_reads(reads, log)[1])

    last = put_counters(writer, last, hint_cost())
    assert entries_past_hint(log) == hint_cost()
    readers_hint = hint.stat()
    assert VerifiedSaver(root).get_tuple(LONG).config == last
    assert hint.stat().st_ino != readers_hint.st_ino
    assert entries_past_hint(log) == 0


def test_a_reader_whose_scan_rebuilt_a_block_leaves_a_hint_so_the_next_need_not(tmp_path):
    """Rebuilding a block from the parity costs a scan far more than its entries, and would
    cost every reader after it as much until the next append writes the block back: a
    reader whose scan past the hint healed one leaves a new hint however few entries it
    scanned, and the next reader rebuilds nothing."""
    root = tmp_path / "store"
    writer = VerifiedSaver(root, fsync=False)
    last = build_store(root, 2_000, other_threads=0, saver=writer)
    log = log_of(root, "long")
    hint_to_the_end(root)
    last = put_counters(writer, last, HINT_AFTER_ENTRIES)
    hint_index, log_bytes = hint_index_of(log)
    past_hint = scan(log_bytes, hint_index.end)[0]
    # an older checkpoint's entry, blocks away from the newest's: read by the scan only
    damaged = past_hint[len(past_hint) // 2]
    assert past_hint[-1].offset - damaged.end > 2 * BLOCK_SIZE
    with log.open("r+b") as file:
        file.seek(damaged.data_offset + damaged.data_size // 2)
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0xFF]))
    earlier_hint = (log.parent / HINT_NAME).stat()

    first = VerifiedSaver(root)
    assert first.get_tuple(LONG).config == last
    assert first.stats.healed_blocks == 1
    assert (log.parent / HINT_NAME).stat().st_ino != earlier_hint.st_ino

    second = VerifiedSaver(root)
    assert second.get_tuple(LONG).config == last
    assert second.stats.healed_blocks == 0


@pytest.mark.parametrize("parity", ["kept", "lost"])
def test_the_log_past_a_hint_is_read_as_far_as_its_parity_reaches_in_one_read(
    tmp_path, monkeypatch, parity
):
    """Past the hint, the entries end about where the parity's last stripe record does (a
    record covers what was synced): the first read reaches there, a block beyond, and no
    further. With no parity to say, windows from ``TAIL_WINDOW`` that double."""
    root = tmp_path / "store"
    # a writer that leaves its hints further apart than the default, so that the one it
    # left is far behind the log's end
    monkeypatch.setattr(hint_file, "HINT_AFTER_BYTES", 4 * HINT_AFTER_BYTES)
    build_store(root, 2_000, other_threads=0)
    monkeypatch.undo()
    log = log_of(root, "long")
    hint_index, log_bytes = hint_index_of(log)
    end = scan(log_bytes)[2]
    assert end - hint_index.end > 2 * TAIL_WINDOW  # the writer's hint is that far behind
    if parity == "lost":
        lose_parity(log)
    counter = ReadCounter(monkeypatch)
    VerifiedSaver(root).get_tuple(LONG)
    _, reads = counter.take()
    _, scans = split_reads(reads, log)
    assert scans[0][0] == hint_index.end
    if parity == "kept":
        assert len(scans) == 1
        assert end < hint_index.end + scans[0][1] <= end + STRIPE_SIZE + BLOCK_SIZE
    else:
        assert [size for _, size in scans[:2]] == [TAIL_WINDOW, 2 * TAIL_WINDOW]


def test_records_read_do_not_grow_with_the_number_of_checkpoints(tmp_path, monkeypatch):
    build_store(tmp_path / "small", 20, other_threads=0)
    build_store(tmp_path / "large", 2_000, other_threads=0)
    counts = []
    for name in ("small", "large"):
        counter = ReadCounter(monkeypatch)
        VerifiedSaver(tmp_path / name).get_tuple(LONG)
        _, reads = counter.take()
        monkeypatch.undo()
        records, scans = split_reads(reads, log_of(tmp_path / name, "long"))
        # what is scanned is read once: windows, each twice the last, one after the other
        assert all(a + n == b for (a, n), (b, _) in zip(scans, scans[1:], strict=False))
        assert all(n == 2 * m for (_, m), (_, n) in zip(scans, scans[1:-1], strict=False))
        counts.append(len(records))
    assert counts[1] <= counts[0] + 1


def test_opening_a_thread_from_its_hint_reads_little_more_of_it_for_a_longer_thread(
    tmp_path, monkeypatch
):
    """The hint names every key's position, so it grows with the thread; opening the thread
    reads its index and the few blocks the newest checkpoint needs, not all of it."""
    read_and_size = []
    for checkpoints in (1_000, 6_000):
        root = tmp_path / f"store-{checkpoints}"
        build_store(root, checkpoints, other_threads=0)
        VerifiedSaver(root).get_tuple(LONG)  # reads the whole log, and leaves a hint
        hint = log_of(root, "long").parent / HINT_NAME
        counter = ReadCounter(monkeypatch)
        assert VerifiedSaver(root).get_tuple(LONG).metadata["step"] == checkpoints - 1
        _, reads = counter.take()
        monkeypatch.undo()
        read = sum(size for path, _, size in reads if path == str(hint))
        read_and_size.append((read, hint.stat().st_size))
    (small_read, small_size), (large_read, large_size) = read_and_size
    assert large_size > 5 * small_size
    assert large_read < large_size / 10
    assert large_read - small_read < (large_size - small_size) / 20


def test_a_fallback_past_damaged_newest_checkpoints_lists_no_more_ids_than_it_reads(
    tmp_path, monkeypatch
):
    """The newest 30 checkpoints of a 600-checkpoint thread damaged beyond what parity
    rebuilds: ``get_tuple`` asks for the next newest names a few at a time (16, then 64)
    instead of listing and sorting every id, consults the parity once per damaged record
    (quarantine moves the bytes as they are, as a rename would) and returns the newest
    checkpoint that verifies."""
    from langgraph_checkpoint_verified.storage.log import redundancy
    from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage

    root = tmp_path / "store"
    build_store(root, 600, 0)
    log = log_of(root, "long")
    lose_parity(log)
    saver = VerifiedSaver(root)
    ids = saver.engine.checkpoint_ids("long", "")
    assert saver.get_tuple(LONG).checkpoint["id"] == ids[0]
    # damaged in place after the saver read the thread: it knows where each record lies
    with log.open("r+b") as out:
        for entry in scan(log.read_bytes())[0]:
            if entry.key.endswith(".ckpt") and entry.key.rpartition("/")[2][:-5] in ids[:30]:
                out.seek(entry.data_offset + entry.data_size // 2)
                byte = out.read(1)
                out.seek(-1, os.SEEK_CUR)
                out.write(bytes([byte[0] ^ 0xFF]))

    asked: list[int] = []
    heals: list[object] = []
    real_greatest_names, real_heal = FileStorage.greatest_names, redundancy.ParityFile.heal
    monkeypatch.setattr(
        FileStorage,
        "greatest_names",
        lambda self, prefix, count: asked.append(count) or real_greatest_names(self, prefix, count),
    )
    real_list = FileStorage.list

    def list_all_but_checkpoints(self, prefix):
        assert not prefix.endswith("/checkpoints"), f"{prefix} listed in full"
        return real_list(self, prefix)

    monkeypatch.setattr(FileStorage, "list", list_all_but_checkpoints)
    monkeypatch.setattr(
        redundancy.ParityFile,
        "heal",
        lambda self, fd, spans, **kw: heals.append(spans) or real_heal(self, fd, spans, **kw),
    )
    found = saver.get_tuple(LONG)
    assert found is not None and found.checkpoint["id"] == ids[30]
    assert asked == [16, 64]
    assert len(heals) == 30
    assert saver.stats.quarantined_records == 30


@pytest.mark.parametrize(
    "ids",
    [
        [f"1f0{n:04d}" for n in range(100)],  # one length: the names a few at a time
        ["a", "a-x", "b", "c", "c1", "c-1"],  # "a-x" sorts before "a" as a name, not as an id
    ],
)
def test_checkpoint_ids_come_newest_first_whatever_their_lengths(tmp_path, ids):
    saver = VerifiedSaver(tmp_path / "store")
    for checkpoint_id in ids:
        saver.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            generate_checkpoint(checkpoint_id=checkpoint_id),
            generate_metadata(),
            {},
        )
    found = list(VerifiedSaver(tmp_path / "store").engine.reader.newest_first("t", ""))
    assert sorted(found) == sorted(ids) and len(set(found)) == len(found)
    assert found[1:] == sorted(found[1:], reverse=True)
    assert found[0] == max(ids, key=lambda i: f"{i}.ckpt")  # the greatest name: no listing


def test_a_fallback_on_a_store_that_lists_in_full_lists_once(monkeypatch):
    """Memory, record files and S3 answer ``greatest_names`` from a whole listing (on S3,
    LIST requests): they give every name at once, and a fallback past many damaged
    checkpoints does not list again for each larger batch."""
    from langgraph_checkpoint_verified.storage.memory import MemoryStorage

    storage = MemoryStorage()
    saver = VerifiedSaver(storage=storage)
    ids = [f"1f0{n:04d}" for n in range(300)]
    for checkpoint_id in ids:
        saver.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            generate_checkpoint(checkpoint_id=checkpoint_id),
            generate_metadata(),
            {},
        )
    listed: list[str] = []
    real_list = MemoryStorage.list
    monkeypatch.setattr(
        MemoryStorage, "list", lambda self, prefix: listed.append(prefix) or real_list(self, prefix)
    )
    assert list(saver.engine.reader.newest_first("t", "")) == sorted(ids, reverse=True)
    assert len([p for p in listed if p.endswith("/checkpoints")]) == 1


def hint_rewritten_by_another_saver(root: Path, parent: dict) -> dict:
    """Another saver (another process, as far as the store can tell) goes on with the long
    thread until it writes the thread's next hint in place of the one there; its last
    config."""
    hint = log_of(root, "long").parent / HINT_NAME
    before = hint.stat().st_ino
    other = VerifiedSaver(root, fsync=False)
    for step in itertools.count(10_000):
        if hint.stat().st_ino != before:
            return parent
        assert step < 20_000, "no new hint"
        parent = other.put(
            parent,
            generate_checkpoint(
                channel_values={"counter": step}, channel_versions={"counter": step}
            ),
            generate_metadata(step=step),
            {"counter": step},
        )
    raise AssertionError("unreachable")


def test_a_hint_another_process_replaced_is_read_on_from_not_the_log_again(tmp_path, monkeypatch):
    # a long thread's hint is rewritten by whoever goes on with it; a reader that opened the
    # thread from the earlier one, and has read a few of its blocks, reads the others from
    # the hint at the path now (it covers no more of the log than the reader knows once
    # caught up), then the log after it: not the whole log
    root = tmp_path / "store"
    parent = build_store(root, 2_000, 0)
    log = log_of(root, "long")
    VerifiedSaver(root).get_tuple(LONG)  # leaves the first hint
    reader = VerifiedSaver(root)
    reader.get_tuple(LONG)  # its index and the blocks of the newest checkpoint
    whole_reads = counted_rereads(monkeypatch)
    reader_log = reader.engine.storage._log(thread_prefix("long"))
    known = reader_log.end
    hint_rewritten_by_another_saver(root, parent)
    counter = ReadCounter(monkeypatch)
    listed = [(c.checkpoint["id"], c.metadata["step"]) for c in reader.list(LONG)]
    _, reads = counter.take()
    assert whole_reads == [{"from_hint": True}]
    # what was appended since the reader last read, and nothing before it again (the
    # whole log, before)
    _, scans = split_reads(reads, log)
    assert scans and all(offset >= known for offset, _ in scans)
    fresh = VerifiedSaver(root).list(LONG)
    assert listed == [(c.checkpoint["id"], c.metadata["step"]) for c in fresh]
    assert len(listed) > 2_000

    # and it goes on from there as a writer: its next hint carries that one's blocks
    with reader_log.writing, reader_log.lock:
        hint_file.write_hint(reader_log)
    whole_reads.clear()
    assert [c.checkpoint["id"] for c in VerifiedSaver(root).list(LONG)] == [i for i, _ in listed]
    assert whole_reads == []  # the reader's hint verifies, block by block


def test_a_replacing_hint_beyond_what_the_reader_knows_sends_it_to_the_log(tmp_path, monkeypatch):
    # the hint at the path now covers appends the reader has not read yet: its positions
    # are not those of the reader's view of the log, so the log is read instead
    root = tmp_path / "store"
    parent = build_store(root, 2_000, 0)
    VerifiedSaver(root).get_tuple(LONG)
    reader = VerifiedSaver(root)
    reader.get_tuple(LONG)
    whole_reads = counted_rereads(monkeypatch)
    hint_rewritten_by_another_saver(root, parent)
    reader_log = reader.engine.storage._log(thread_prefix("long"))
    with reader_log.lock:  # no refresh: the reader knows the log as it was
        known_end = reader_log.end
        oldest = sorted(reader_log.index.keys_under(f"{thread_prefix('long')}/ns/~/checkpoints"))
    assert whole_reads == [{"from_hint": True}]
    assert reader_log.end == known_end
    assert len(oldest) == 2_000  # what the log held up to where the reader read it
    assert [c.metadata["step"] for c in reader.list(LONG)][-3:] == [2, 1, 0]


def test_a_reader_whose_hint_is_gone_reads_the_log_and_answers_as_before(tmp_path, monkeypatch):
    # the hint a reader opened the thread from is removed (not replaced) before it read
    # every block: with nothing at the path to read on from, it reads the log, once, and
    # answers as a new saver does
    root = tmp_path / "store"
    build_store(root, 2_000, 0)
    log = log_of(root, "long")
    VerifiedSaver(root).get_tuple(LONG)  # leaves the first hint
    reader = VerifiedSaver(root)
    reader.get_tuple(LONG)  # its index and the blocks of the newest checkpoint
    (log.parent / HINT_NAME).unlink()
    whole_reads = counted_rereads(monkeypatch)
    counter = ReadCounter(monkeypatch)
    listed = [(c.checkpoint["id"], c.metadata["step"]) for c in reader.list(LONG)]
    _, reads = counter.take()
    assert whole_reads == [{"from_hint": True}]
    _, scans = split_reads(reads, log)
    assert min(offset for offset, _ in scans) == 0  # the log, from its start
    assert listed == [
        (c.checkpoint["id"], c.metadata["step"]) for c in VerifiedSaver(root).list(LONG)
    ]
    assert len(listed) == 2_000
    whole_reads.clear()
    assert [c.checkpoint["id"] for c in reader.list(LONG)] == [i for i, _ in listed]
    assert whole_reads == []  # read in full once: a plain directory from then on
