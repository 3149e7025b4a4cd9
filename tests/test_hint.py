"""The key directory a process leaves beside a thread's log (``log.hint``).

A hint only saves the next process from reading the whole log: whatever it
says, or whatever became of it, the records read are the ones the log holds.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import zlib
from pathlib import Path

import ormsgpack
import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from logtools import counted_rereads, lose_parity

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.storage.log import hint_file, key_directory
from langgraph_checkpoint_verified.storage.log.entries import (
    DELETE,
    HINT_BLOCK_KEYS,
    HINT_MAGIC,
    HINT_VERSION,
    LOG_TAIL_SIZE,
    Entry,
    KeptBlock,
    decode_hint_index,
    encode_hint,
    encode_hint_parts,
    hint_block,
    scan,
)
from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage
from langgraph_checkpoint_verified.storage.log.hint_file import HINT_AFTER_BYTES, HINT_NAME
from langgraph_checkpoint_verified.storage.log.key_directory import HintedDirectory, KeyDirectory
from langgraph_checkpoint_verified.storage.log.reading import LogReader

THREAD = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def fill(saver: VerifiedSaver, steps: int, start: int = 0) -> dict:
    config = THREAD
    for step in range(start, start + steps):
        config = saver.put(
            config,
            generate_checkpoint(channel_values={"n": step, "pad": "x" * 300}),
            generate_metadata(step=step),
            {"n": step + 1},
        )
    return config


def newest_step(root) -> int:
    return VerifiedSaver(root).get_tuple(THREAD).metadata["step"]


def test_a_hint_is_left_and_used_and_what_is_appended_after_it_is_read(tmp_path):
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    log, hint = root / "threads/t/log", root / "threads/t" / HINT_NAME
    assert log.stat().st_size > HINT_AFTER_BYTES
    assert newest_step(root) == 1499  # read the whole log: leaves a hint
    assert hint.exists() and hint.stat().st_size < log.stat().st_size / 2
    fill(VerifiedSaver(root, fsync=False), 3, start=1500)  # appended after the hint
    assert newest_step(root) == 1502
    assert len(list(VerifiedSaver(root).list(THREAD))) == 1503


def test_a_stale_or_damaged_hint_is_ignored(tmp_path):
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    newest_step(root)
    hint = root / "threads/t" / HINT_NAME
    saved = hint.read_bytes()
    # the log compacted since: the hint names another file
    VerifiedSaver(root).prune(["t"])
    hint.write_bytes(saved)
    assert [t.metadata["step"] for t in VerifiedSaver(root).list(THREAD)] == [1499]
    # a damaged hint
    data = bytearray(hint.read_bytes())
    data[len(data) // 2] ^= 0xFF
    hint.write_bytes(bytes(data))
    assert newest_step(root) == 1499
    # a hint lying about positions: CRC intact but made for a log that was replaced
    os.remove(hint)
    assert newest_step(root) == 1499


def test_a_byte_damaged_anywhere_in_a_hint_costs_no_record(tmp_path):
    """A hint is only a shortcut: whichever of its bytes is damaged (its index, a block's
    keys, a block's positions), a reader finds every checkpoint, and reports and
    quarantines nothing (the records are sound). Its checksums are what tells it: a key
    or first key changed in a block would send the reader to the wrong record, or past
    the right one."""
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 600)
    assert newest_step(root) == 599  # the whole log read: the reader leaves a hint
    hint = root / "threads/t" / HINT_NAME
    saved = hint.read_bytes()
    index_offset, index_size = struct.unpack_from("<QQ", saved, len(saved) - 24)
    assert len(decode_hint_index(saved, tail_of(root / "threads/t/log"), 10**12).blocks) == 3
    prefix = "threads/t/ns/~/checkpoints"
    keys = FileStorage(str(root), fsync=False).list(prefix)
    assert len(keys) == 600

    def damage(position: int) -> None:
        damaged = bytearray(saved)
        damaged[position] ^= 0x5A
        hint.write_bytes(bytes(damaged))

    # every byte of the index (the first key of each block, where each block is)
    for position in range(index_offset, index_offset + index_size):
        damage(position)
        assert FileStorage(str(root), fsync=False).list(prefix) == keys, position
    # bytes spread over the blocks, read by a saver
    for position in range(0, index_offset, index_offset // 40):
        damage(position)
        reader = VerifiedSaver(root)
        steps = [t.metadata["step"] for t in reader.list(THREAD)]
        assert steps == list(range(599, -1, -1)), position
        assert reader.stats.damaged_records == 0, position
        assert not (root / "quarantine").exists(), position


def test_no_hint_for_a_log_with_damage_only_a_whole_read_finds(tmp_path):
    """Bytes between two entries that name no record, and that could not be copied to
    the quarantine (here: quarantine off), are found only by reading the log: no hint
    is left for it, so every reader finds them."""
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    log = root / "threads/t/log"
    lose_parity(log)  # damage beyond what parity rebuilds
    (root / "threads/t" / HINT_NAME).unlink()  # and the writer's hint lost too
    entries = scan(log.read_bytes())[0]
    hit = entries[len(entries) // 4]
    with open(log, "r+b") as f:  # an entry's header: it no longer says whose it is
        f.seek(hit.offset)
        f.write(b"\xff" * 8)
    reader = VerifiedSaver(root, quarantine=False)
    assert reader.get_tuple(THREAD).metadata["step"] == 1499
    assert reader.stats.damaged_records == 1  # found by the read of the log, reported
    assert not (root / "threads/t" / HINT_NAME).exists()
    assert not VerifiedSaver(root).verify(thread_id="t").ok


def log_bytes_read(monkeypatch: pytest.MonkeyPatch, log, call) -> tuple[int, object]:
    """How many bytes of ``log`` ``call()`` reads, and what it returns."""
    read = []
    real = os.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}") == str(log):
            read.append(size)
        return real(fd, size, offset)

    with monkeypatch.context() as patch:
        patch.setattr(os, "pread", pread)
        returned = call()
    return sum(read), returned


def test_a_log_whose_damage_was_moved_aside_gets_a_hint_again(tmp_path, monkeypatch):
    """Damage keeps a log from its hint only while it stands: the read that quarantines
    the damaged record (its key deleted from the log) leaves a hint past it at once, and
    hints follow the log as it grows again. A process opening the thread reads what was
    appended after the newest hint, not the damage again, nor all that came after it."""
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    log = root / "threads/t/log"
    lose_parity(log)  # damage beyond what parity rebuilds
    newest = scan(log.read_bytes())[0][-1]
    assert newest.key.endswith(".ckpt")
    with open(log, "r+b") as f:  # a byte flipped in the newest checkpoint's record
        f.seek(newest.data_offset + newest.data_size // 2)
        byte = f.read(1)
        f.seek(newest.data_offset + newest.data_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    unmoved = VerifiedSaver(root, quarantine=False)
    damaged, _ = log_bytes_read(monkeypatch, log, lambda: unmoved.get_tuple(THREAD))
    saver = VerifiedSaver(root, fsync=False)
    assert saver.get_tuple(THREAD).metadata["step"] == 1498
    assert saver.stats.quarantined_records == 1

    def newest_step() -> int:
        reader = VerifiedSaver(root)
        step = reader.get_tuple(THREAD).metadata["step"]
        assert reader.stats.damaged_records == 0  # the quarantined record is behind the hint
        return step

    read, step = log_bytes_read(monkeypatch, log, newest_step)
    assert step == 1498 and read < damaged / 2  # not the damage, nor the room after it
    damaged_at = newest.offset
    fill(saver, 1500, start=1500)  # the thread goes on: far more than HINT_AFTER_BYTES
    read, step = log_bytes_read(monkeypatch, log, newest_step)
    assert step == 2999 and read < (log.stat().st_size - damaged_at) / 2
    assert len(list(VerifiedSaver(root).list(THREAD))) == 2999


def entries_past_the_hint(root) -> list[Entry]:
    """The entries of thread ``t``'s log that its hint does not cover."""
    data = (root / "threads/t/log").read_bytes()
    hint = (root / "threads/t" / HINT_NAME).read_bytes()
    index = decode_hint_index(hint, lambda end: data[end - LOG_TAIL_SIZE : end], len(data))
    assert index is not None
    return scan(data, index.end)[0]


@pytest.mark.parametrize("past_the_hint", [False, True], ids=["under", "past"])
def test_the_next_put_after_a_fallback_moved_records_aside_leaves_a_hint_past_them(
    tmp_path, past_the_hint
):
    """A read that falls back past damaged checkpoints moves them aside with one append
    of their deletions, and writes no hint of its own: the fallback stays as short as it
    can. The hint still names the records moved out, so the next append of that process
    (the thread going on) leaves a new one: readers after it read nothing past it, not
    the deletions again, each of them.

    The damaged entries are under the hint (found damaged when read), or past it (found
    damaged by the scan that opens the thread: the deletions settle that damage, and the
    move still leaves the hint to the next append)."""
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500 - 30 * past_the_hint)
    assert newest_step(root) == 1499 - 30 * past_the_hint  # leaves a hint
    if past_the_hint:
        fill(VerifiedSaver(root, fsync=False), 30, start=1470)
    appended = {(e.kind, e.key) for e in entries_past_the_hint(root)}
    assert len(appended) == 30 * past_the_hint
    log = root / "threads/t/log"
    lose_parity(log)  # damage beyond what parity rebuilds
    newest = [e for e in scan(log.read_bytes())[0] if e.key.endswith(".ckpt")][-3:]
    with open(log, "r+b") as f:  # a byte flipped in each of the newest three records
        for entry in newest:
            f.seek(entry.data_offset + entry.data_size // 2)
            byte = f.read(1)
            f.seek(entry.data_offset + entry.data_size // 2)
            f.write(bytes([byte[0] ^ 0xFF]))
    saver = VerifiedSaver(root, fsync=False)
    found = saver.get_tuple(THREAD)
    assert found.metadata["step"] == 1496 and saver.stats.quarantined_records == 3
    past = [e for e in entries_past_the_hint(root) if (e.kind, e.key) not in appended]
    assert sorted((e.kind, e.key) for e in past) == sorted((DELETE, e.key) for e in newest)
    saver.put(
        found.config,
        generate_checkpoint(channel_values={"n": 1497, "pad": "x" * 300}),
        generate_metadata(step=1497),
        {"n": 1498},
    )
    assert entries_past_the_hint(root) == []
    assert newest_step(root) == 1497


def long_log_with_an_older_checkpoint_damaged(root, *, in_header: bool) -> tuple[Path, Entry]:
    """A 1,500-checkpoint thread whose log has no parity and no hint (the next reader
    reads it whole), with 8 bytes destroyed in the entry of a checkpoint a quarter in,
    which no read of the newest needs: in its header (the entry no longer says whose it
    is) or in its record. The log, and that entry as it was."""
    fill(VerifiedSaver(root, fsync=False), 1500)
    log = root / "threads/t/log"
    lose_parity(log)  # damage beyond what parity rebuilds
    (root / "threads/t" / HINT_NAME).unlink()
    entries = scan(log.read_bytes())[0]
    hit = next(e for e in entries[len(entries) // 4 :] if e.key.endswith(".ckpt"))
    with open(log, "r+b") as f:
        f.seek(hit.offset if in_header else hit.data_offset + hit.data_size // 2)
        f.write(b"\xff" * 8)
    return log, hit


def test_a_damaged_record_nobody_reads_is_named_in_the_hint_and_found_by_its_reader(
    tmp_path, monkeypatch
):
    """A record whose entry is damaged keeps the log from no hint: the hint names it where
    its data lies, as it names a record damaged after the hint was written, and whoever
    reads it finds it damaged (reported, quarantined, its parent returned instead). So a
    thread that goes on past damage no read needs is opened from its hint, not read
    whole again by every process."""
    root = tmp_path / "store"
    log, hit = long_log_with_an_older_checkpoint_damaged(root, in_header=False)
    damaged_id = hit.key.rsplit("/", 1)[1].removesuffix(".ckpt")
    assert VerifiedSaver(root).get_tuple(THREAD).metadata["step"] == 1499
    assert (root / "threads/t" / HINT_NAME).exists()

    def newest_step() -> int:
        reader = VerifiedSaver(root)
        step = reader.get_tuple(THREAD).metadata["step"]
        assert reader.stats.damaged_records == 0  # no read of the newest needs it
        return step

    writer = VerifiedSaver(root, fsync=False)
    fill(writer, 1500, start=1500)  # far more than HINT_AFTER_BYTES
    read, step = log_bytes_read(monkeypatch, log, newest_step)
    assert step == 2999 and read < (log.stat().st_size - hit.offset) / 4
    # read from the hint, the damaged checkpoint is found damaged, and its parent returned
    seen = []
    reader = VerifiedSaver(root, on_corruption=seen.append)
    asked = {"configurable": {**THREAD["configurable"], "checkpoint_id": damaged_id}}
    found = reader.get_tuple(asked)
    assert found is not None and found.checkpoint["id"] < damaged_id
    assert [d.key for d in seen] == [hit.key] and seen[0].quarantined_to is not None
    assert reader.get_tuple(asked).checkpoint["id"] == found.checkpoint["id"]
    assert VerifiedSaver(root).verify(thread_id="t").ok  # moved aside: nothing stands


def test_damage_that_names_no_record_is_hinted_past_once_it_is_in_the_quarantine(
    tmp_path, monkeypatch
):
    """Bytes between two entries that name no record (an entry's header destroyed) are
    no record any read can ask for: the reader that finds them copies them to the
    quarantine, and from then on they keep the log from no hint. The next process reads
    the hint, not the damage again, and is not told about it again; ``verify`` still
    names it (only compaction removes it from the log), and hints follow the log as it
    grows."""
    root = tmp_path / "store"
    log, hit = long_log_with_an_older_checkpoint_damaged(root, in_header=True)
    seen = []
    first = VerifiedSaver(root, on_corruption=seen.append)
    assert first.get_tuple(THREAD).metadata["step"] == 1499
    (span,) = seen
    assert span.reason.startswith("damaged log entry: ") and span.quarantined_to is not None
    assert (root / "threads/t" / HINT_NAME).exists()  # left at once, past the damage

    def newest_step() -> int:
        reader = VerifiedSaver(root)
        step = reader.get_tuple(THREAD).metadata["step"]
        assert reader.stats.damaged_records == 0  # not found, nor reported, again
        return step

    read, step = log_bytes_read(monkeypatch, log, newest_step)
    assert step == 1499 and read < (log.stat().st_size - hit.offset) / 4
    report = VerifiedSaver(root).verify(thread_id="t")
    assert [d.location for d in report.damaged] == [span.location]
    assert report.damaged[0].quarantined_to == span.quarantined_to
    writer = VerifiedSaver(root, fsync=False)
    fill(writer, 1500, start=1500)  # far more than HINT_AFTER_BYTES
    read, step = log_bytes_read(monkeypatch, log, newest_step)
    assert step == 2999 and read < (log.stat().st_size - hit.offset) / 4


def test_a_hint_of_an_earlier_layout_is_ignored_and_replaced(tmp_path):
    """Version 1 listed ``[key, offset, size]`` a key at a time, version 2 a directory at a
    time; both were read whole. Either is read past, and the next reader leaves a new one."""
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    log, hint = root / "threads/t/log", root / "threads/t" / HINT_NAME
    newest_step(root)
    stat = log.stat()
    key = "threads/t/ns/~/checkpoints/x.ckpt"
    for version, body in (
        (1, [(key, 0, 0)]),
        (2, [["threads/t/ns/~/checkpoints", ["x.ckpt"], struct.pack("<QQ", 0, 0)]]),
    ):
        data = struct.pack("<4sB3xQQ", HINT_MAGIC, version, stat.st_ino, stat.st_size)
        data += ormsgpack.packb(body)
        hint.write_bytes(data + struct.pack("<I", zlib.crc32(data)))
        assert decode_hint_index(hint.read_bytes(), tail_of(log), stat.st_size) is None
        assert newest_step(root) == 1499
        assert len(list(VerifiedSaver(root).list(THREAD))) == 1500
        assert decode_hint_index(hint.read_bytes(), tail_of(log), stat.st_size) is not None


def test_version_3_named_its_log_by_inode_and_is_read_past(tmp_path):
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    log, hint = root / "threads/t/log", root / "threads/t" / HINT_NAME
    newest_step(root)
    data = bytearray(hint.read_bytes())
    data[4] = 3  # the same hint, as version 3 would have read it
    hint.write_bytes(bytes(data))
    assert decode_hint_index(bytes(data), tail_of(log), log.stat().st_size) is None
    assert newest_step(root) == 1499
    assert hint.read_bytes()[4] == HINT_VERSION


def tail_of(log) -> object:
    """Reads a log's bytes just before where a hint says it ends."""
    return lambda end: log.read_bytes()[end - LOG_TAIL_SIZE : end]


def test_a_copied_store_keeps_using_its_hint_and_a_rewritten_log_does_not(tmp_path, monkeypatch):
    """A hint names its log by the bytes where it ends, not by the file: a copy of the store
    (new inodes: a backup restored, ``cp -r``) opens from its hint; a log whose bytes there
    changed (compacted, or a crash lost what the hint covered) is read whole."""
    scans = []
    read_tail = LogReader.read_tail
    monkeypatch.setattr(
        LogReader,
        "read_tail",
        lambda self, log, fd, size, **kw: (
            scans.append(size - log.end) or read_tail(self, log, fd, size, **kw)
        ),
    )
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    newest_step(root)  # leaves a hint, if the writer's is too far behind
    scans.clear()
    assert newest_step(root) == 1499
    after_hint = sum(scans)  # what is read of the log past its hint
    assert after_hint < HINT_AFTER_BYTES
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    assert os.stat(copy / "threads/t/log").st_ino != os.stat(root / "threads/t/log").st_ino
    scans.clear()
    assert newest_step(copy) == 1499
    assert sum(scans) == after_hint  # the copy opens from its hint as the original does
    # the same size, other bytes where the hint ends: not this hint's log
    log = copy / "threads/t/log"
    data = bytearray(log.read_bytes())
    hint_end = decode_hint_index(
        (copy / "threads/t" / HINT_NAME).read_bytes(), tail_of(log), 10**12
    )
    assert hint_end is not None
    data[hint_end.end - 1] ^= 0xFF  # the last entry's checksum
    log.write_bytes(bytes(data))
    scans.clear()
    assert (
        decode_hint_index((copy / "threads/t" / HINT_NAME).read_bytes(), tail_of(log), len(data))
        is None
    )
    assert newest_step(copy) in (1499, 1498)  # healed from parity, or the one before it
    assert sum(scans) == len(data)  # the whole log read


def raw_hint(blocks: list[tuple[list, bytes]], first_keys: list | None = None) -> bytes:
    """A version 3 hint of these blocks, every checksum right, whatever the blocks hold."""
    header = struct.pack("<4sB3x8sQ", HINT_MAGIC, HINT_VERSION, TAIL, 100)
    parts, spans, offset = [header], b"", len(header)
    for keys, positions in blocks:
        block = ormsgpack.packb([keys, positions])
        spans += struct.pack("<QQQ", offset, len(block), zlib.crc32(block))
        parts.append(block)
        offset += len(block)
    if first_keys is None:
        first_keys = [keys[0] for keys, _ in blocks]
    index = ormsgpack.packb([first_keys, spans])
    footer = struct.pack(
        "<QQI4s", offset, len(index), zlib.crc32(index, zlib.crc32(header)), b"LGCI"
    )
    return b"".join([*parts, index, footer])


TAIL = b"end-of-7"


def positions(*numbers: int) -> bytes:
    return struct.pack(f"<{len(numbers)}Q", *numbers)


def test_a_hint_block_whose_checksum_holds_but_that_makes_no_sense_is_refused():
    good = raw_hint([(["a/x", "a/y"], positions(16, 10, 30, 10)), (["a/z"], positions(50, 5))])
    index = decode_hint_index(good, lambda end: TAIL, 120)
    assert [hint_block(good, index, n) for n in (0, 1)] == [
        [("a/x", (16, 10)), ("a/y", (30, 10))],
        [("a/z", (50, 5))],
    ]
    # the largest record early, the last one small: each ends within what the hint covers
    skewed = raw_hint([(["a/x", "a/y"], positions(16, 70, 90, 10))])
    index = decode_hint_index(skewed, lambda end: TAIL, 120)
    assert hint_block(skewed, index, 0) == [("a/x", (16, 70)), ("a/y", (90, 10))]
    for blocks, first_keys in (
        ([(["a/y", "a/x"], positions(16, 10, 30, 10))], None),  # not in order
        ([(["a/x"], positions(16, 10))], ["a/w"]),  # not the key the index names
        ([(["a/x", "a/z"], positions(16, 10, 30, 10)), (["a/y"], positions(5, 5))], None),
        ([(["a/x"], positions(16, 600))], None),  # beyond what the hint covers
        ([(["a/x", "a/y"], positions(16, 70, 90, 11))], None),  # the last one, just
        ([(["a/x", "a/y"], positions(16, 10))], None),  # a position for each key
        ([([3], positions(16, 10))], [3]),  # keys are strings
        ([([], b"")], ["a"]),
    ):
        hint = raw_hint(blocks, first_keys)
        index = decode_hint_index(hint, lambda end: TAIL, 120)
        assert index is None or hint_block(hint, index, 0) is None, blocks


def test_a_block_damaged_after_the_hint_was_opened_sends_the_reader_to_the_log(
    tmp_path, monkeypatch
):
    whole_reads = counted_rereads(monkeypatch)
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    newest_step(root)  # leaves a hint
    reader = VerifiedSaver(root)
    assert reader.get_tuple(THREAD).metadata["step"] == 1499  # the index and a few blocks
    hint = root / "threads/t" / HINT_NAME
    data = bytearray(hint.read_bytes())
    index = decode_hint_index(bytes(data), tail_of(root / "threads/t/log"), 10**12)
    offset, size, _ = index.blocks[0]
    with open(hint, "r+b") as f:  # the same file the reader holds open
        f.seek(offset + size // 2)
        f.write(bytes([data[offset + size // 2] ^ 0xFF]))
    assert whole_reads == []
    assert len(list(reader.list(THREAD))) == 1500  # every block: the first fails, the log is read
    assert whole_reads == [{"from_hint": False}]  # the same hint: nothing to read on from
    assert reader.get_tuple(THREAD).metadata["step"] == 1499
    assert reader.stats.damaged_records == 0  # a hint is no record: nothing to report


@pytest.mark.parametrize("seed", range(8))
def test_a_directory_read_from_a_hint_block_by_block_answers_as_a_complete_one(tmp_path, seed):
    """Random lookups, writes, deletions and listings, on a directory filled whole and on
    one taken from a hint as it is used: every answer the same. Short runs, each on a new
    directory, so that most answers come while most blocks are still unread."""
    rng = random.Random(seed)
    checkpoints = [f"1f0{n:05d}" for n in range(700)]
    keys = [f"threads/t/ns/~/checkpoints/{c}.ckpt" for c in checkpoints]
    keys += [f"threads/t/ns/~/writes/{c}/task{n}.0" for c in checkpoints[::3] for n in range(2)]
    keys += [f"threads/t/ns/sub/checkpoints/{c}.ckpt" for c in checkpoints[::7]]
    keys += [f"threads/t/tools/call{n}.tool" for n in range(40)]
    # a directory with names of its own, then more than a block of deeper keys
    keys += [f"threads/t/mixed/a{n:04d}" for n in range(300)]
    keys += [f"threads/t/mixed/z/{n:04d}" for n in range(600)]
    positions = {key: (n * 10, 10) for n, key in enumerate(keys)}
    hint = tmp_path / HINT_NAME
    original = encode_hint(TAIL, 10**9, [(k, *where) for k, where in positions.items()])
    index = decode_hint_index(original, lambda end: TAIL, 10**9)
    assert len(index.blocks) > 6

    def unexpected_rescan():
        raise AssertionError("every block verifies: no reason to read the log")

    narrow = [
        "threads/t/ns/~/checkpoints",
        "threads/t/ns/sub/checkpoints",
        "threads/t/tools",
        "threads/t/ns/none",
        "threads/t/mixed",
        *(f"threads/t/ns/~/writes/{c}" for c in rng.sample(checkpoints, 20)),
    ]
    broad = ["threads/t", "threads/t/ns", "threads/t/ns/~", "threads/t/ns/~/writes"]
    newer = [f"threads/t/ns/~/checkpoints/2f0{n:05d}.ckpt" for n in range(20)]
    older = [f"threads/t/ns/~/checkpoints/0f0{n:05d}.ckpt" for n in range(20)]
    older += [f"threads/t/mixed/0{n}" for n in range(20)]
    unread_answers = carried = 0
    for _ in range(30):
        hint.write_bytes(original)
        stat = hint.stat()
        lazy = HintedDirectory(str(hint), (stat.st_ino, stat.st_size), index, unexpected_rescan)
        whole = KeyDirectory()
        for key, where in positions.items():
            whole[key] = where
        for step in range(12):
            # a run starts with a question, asked of a directory with no block read
            action = rng.randrange(2, 7) if step == 0 else rng.randrange(8)
            key = rng.choice([*rng.sample(keys, 3), rng.choice(newer), rng.choice(older)])
            prefix = rng.choice(narrow)
            if action == 0:
                lazy[key] = whole[key] = (step, 1)
            elif action == 1:
                # the greatest and the smallest names go too, now and then
                key = rng.choice([key, f"{prefix}/{whole.greatest_name_under(prefix)}"])
                if key in whole:
                    del lazy[key]
                    del whole[key]
            elif action == 2:
                assert lazy.get(key) == whole.get(key)
                assert (key in lazy) == (key in whole)
                if key in whole:
                    assert lazy[key] == whole[key]
                else:
                    with pytest.raises(KeyError):
                        lazy[key]
            elif action == 3:
                assert sorted(lazy.names_under(prefix)) == sorted(whole.names_under(prefix))
            elif action == 4:
                assert sorted(lazy.keys_under(prefix)) == sorted(whole.keys_under(prefix))
            elif action == 7:
                # a stretch of log applied at once, to one directory or the other
                stretch = [*rng.sample(keys, 4), *rng.sample(newer, 3), *rng.sample(older, 3)]
                changes = {k: rng.choice([None, (step, 2)]) for k in stretch}
                at_once, one_by_one = (lazy, whole) if rng.random() < 0.5 else (whole, lazy)
                held = {k: one_by_one.get(k) for k in changes if one_by_one.get(k) is not None}
                for k, where in changes.items():
                    if where is not None:
                        one_by_one[k] = where
                    elif k in one_by_one:
                        del one_by_one[k]
                assert at_once.apply(changes) == held
            elif action == 6:
                count = rng.choice([1, 3, 40, 300])
                assert lazy.greatest_names_under(prefix, count) == (
                    whole.greatest_names_under(prefix, count)
                )
            else:
                assert lazy.greatest_name_under(prefix) == whole.greatest_name_under(prefix)
            unread_answers += lazy._index is not None
        carried += rewrite_hint(lazy, hint)
        prefix = rng.choice(broad)
        assert sorted(lazy.keys_under(prefix)) == sorted(whole.keys_under(prefix))
        assert sorted(lazy.names_under(prefix)) == sorted(whole.names_under(prefix))
        assert dict(lazy.items()) == dict(whole.items())
        assert len(lazy) == len(whole)
        identity = (hint.stat().st_ino, hint.stat().st_size)
        again = HintedDirectory(str(hint), identity, lazy_index(hint), unexpected_rescan)
        assert dict(again.items()) == dict(whole.items())  # the hint written, read afresh
    assert unread_answers > 300  # most answers came with blocks still unread
    assert carried > 30  # and blocks never read were carried into the next hint as they were


@pytest.mark.parametrize("seed", range(8))
def test_a_directory_whose_hint_another_process_replaces_answers_as_a_complete_one(
    tmp_path, monkeypatch, seed
):
    """Random lookups, writes, deletions, listings and stretches of log, on a directory
    filled whole and on one taken from a hint as it is used, while another process now and
    then writes the next hint in its place (cut into blocks of other sizes: no block of
    the new hint holds the keys of a block of the old). The directory reads on from the
    hint at the path, as a reader caught up with the log would find it; every answer the
    same as the complete directory's, whatever call was reading a block then."""
    rng = random.Random(seed)
    from langgraph_checkpoint_verified.storage.log import entries

    keys = [f"threads/t/ns/~/checkpoints/1f0{n:05d}.ckpt" for n in range(900)]
    keys += [f"threads/t/ns/~/writes/1f0{n:05d}/task.0" for n in range(0, 900, 2)]
    keys += [f"threads/t/tools/call{n}.tool" for n in range(60)]
    whole = KeyDirectory()
    for n, key in enumerate(keys):
        whole[key] = (n * 10, 10)
    hint = tmp_path / HINT_NAME
    replaced = {"written": 0, "read_on": 0}

    def write_next_hint() -> None:
        """Another process's hint of the log as the directory knows it now, in place."""
        monkeypatch.setattr(entries, "HINT_BLOCK_KEYS", rng.choice([37, 100, HINT_BLOCK_KEYS]))
        data = encode_hint(TAIL, 10**9, [(k, *w) for k, w in sorted(dict.items(whole))])
        monkeypatch.setattr(entries, "HINT_BLOCK_KEYS", HINT_BLOCK_KEYS)
        temp = tmp_path / "next-hint"
        temp.write_bytes(data)
        os.replace(temp, hint)
        replaced["written"] += 1

    def opened(rescan) -> HintedDirectory:
        stat = hint.stat()
        return HintedDirectory(str(hint), (stat.st_ino, stat.st_size), lazy_index(hint), rescan)

    def read_on(from_hint: bool) -> KeyDirectory:
        # what ``LogReader`` gives: the hint at the path read on from, the log after it
        # applied; here the log's state is the complete directory's, hinted afresh
        assert from_hint, "every block verifies: no reason to read the log"
        write_next_hint()
        replaced["read_on"] += 1
        return opened(read_on)

    prefixes = ["threads/t/ns/~/checkpoints", "threads/t/tools", "threads/t/ns/~/writes"]
    newer = [f"threads/t/ns/~/checkpoints/2f0{n:05d}.ckpt" for n in range(30)]
    for _ in range(12):
        write_next_hint()
        lazy = opened(read_on)
        for _step in range(25):
            if rng.random() < 0.3:
                write_next_hint()  # found replaced at the next block this directory reads
            action = rng.randrange(8)
            key = rng.choice([*rng.sample(keys, 2), rng.choice(newer)])
            prefix = rng.choice(prefixes)
            if action == 0:
                lazy[key] = (_step, 1)
                whole[key] = (_step, 1)
            elif action == 1 and key in whole:
                del lazy[key]
                del whole[key]
            elif action == 2:
                assert lazy.get(key) == whole.get(key)
                assert (key in lazy) == (key in whole)
            elif action == 3:
                assert sorted(lazy.keys_under(prefix)) == sorted(whole.keys_under(prefix))
            elif action == 4:
                assert sorted(lazy.names_under(prefix)) == sorted(whole.names_under(prefix))
            elif action == 5:
                count = rng.choice([1, 5, 120])
                assert lazy.greatest_names_under(prefix, count) == (
                    whole.greatest_names_under(prefix, count)
                )
            elif action == 6:
                assert lazy.greatest_name_under(prefix) == whole.greatest_name_under(prefix)
            else:
                stretch = [*rng.sample(keys, 5), *rng.sample(newer, 3)]
                changes = {k: rng.choice([None, (_step, 2)]) for k in stretch}
                held = {k: whole[k] for k in changes if k in whole}
                assert lazy.apply(changes) == held
                whole.apply(changes)
        assert dict(lazy.items()) == dict(whole.items())
        assert len(lazy) == len(whole)
    assert replaced["read_on"] > 30  # calls found their hint replaced, and read on


def test_a_lookup_decodes_its_block_once_and_takes_no_key_into_the_directory(tmp_path, monkeypatch):
    keys = [f"threads/t/ns/~/checkpoints/1f0{n:05d}.ckpt" for n in range(2000)]
    hint = tmp_path / HINT_NAME
    hint.write_bytes(encode_hint(TAIL, 10**9, [(k, n * 10, 10) for n, k in enumerate(keys)]))
    stat = hint.stat()
    lazy = HintedDirectory(str(hint), (stat.st_ino, stat.st_size), lazy_index(hint), None)
    decoded = []
    real = key_directory.hint_block_columns
    monkeypatch.setattr(
        key_directory,
        "hint_block_columns",
        lambda *args: decoded.append(args[2]) or real(*args),
    )
    for _ in range(3):
        assert lazy.get(keys[1000]) == (10_000, 10)
        assert keys[1001] in lazy and lazy[keys[999]] == (9_990, 10)
        assert lazy.get("threads/t/ns/~/checkpoints/1f001000.ckpz") is None
    assert len(decoded) == 1 and dict.__len__(lazy) == 0  # one block, read for lookups only
    lazy[keys[1000]] = (1, 1)  # a change takes the block in, with no second decode
    assert len(decoded) == 1 and dict.__len__(lazy) == 256
    assert lazy.get(keys[1000]) == (1, 1) and lazy.get(keys[1001]) == (10_010, 10)


def test_the_greatest_names_of_a_long_directory_read_its_last_blocks_alone(tmp_path):
    """A fallback past damaged newest checkpoints asks for the next newest few: the blocks
    holding them are read, not the thread's every block."""
    prefix = "threads/t/ns/~/checkpoints"
    keys = [f"{prefix}/1f0{n:05d}.ckpt" for n in range(2000)]
    keys += [f"threads/t/ns/~/writes/1f0{n:05d}/task.n.wr" for n in range(0, 2000, 50)]
    hint = tmp_path / HINT_NAME
    hint.write_bytes(encode_hint(TAIL, 10**9, [(k, n * 10, 10) for n, k in enumerate(keys)]))
    stat = hint.stat()
    lazy = HintedDirectory(str(hint), (stat.st_ino, stat.st_size), lazy_index(hint), None)
    blocks = len(lazy._unread)
    names = [key.rpartition("/")[2] for key in keys[:2000]]
    assert lazy.greatest_names_under(prefix, 16) == names[::-1][:16]
    assert blocks - len(lazy._unread) == 1  # the last block of the prefix holds all 16
    assert lazy.greatest_names_under(prefix, 300) == names[::-1][:300]
    assert blocks - len(lazy._unread) == 2
    assert lazy.greatest_names_under(prefix, 5000) == names[::-1]  # every name, no more
    assert lazy.greatest_names_under("threads/t/ns/none", 3) == []


def test_the_greatest_name_after_a_write_into_the_last_block_reads_no_other_block(tmp_path):
    """Opening a thread applies the entries appended after its hint: a new checkpoint's
    key takes the hint's last block in. Its newest checkpoint is then in that block, and
    the block before it is not read for it."""
    prefix = "threads/t/ns/~/checkpoints"
    keys = [f"{prefix}/1f0{n:05d}.ckpt" for n in range(2000)]
    hint = tmp_path / HINT_NAME
    hint.write_bytes(encode_hint(TAIL, 10**9, [(k, n * 10, 10) for n, k in enumerate(keys)]))
    stat = hint.stat()
    lazy = HintedDirectory(str(hint), (stat.st_ino, stat.st_size), lazy_index(hint), None)
    blocks = len(lazy._unread)
    lazy.apply({f"{prefix}/2f000000.ckpt": (20_000, 10)})  # appended after the hint
    assert blocks - len(lazy._unread) == 1
    assert lazy.greatest_name_under(prefix) == "2f000000.ckpt"
    assert blocks - len(lazy._unread) == 1
    assert lazy.greatest_names_under(prefix, 3) == [
        "2f000000.ckpt",
        *[key.rpartition("/")[2] for key in keys[:-3:-1]],
    ]
    assert blocks - len(lazy._unread) == 1
    # the same asked of a directory whose last block was read for no write: as before
    other = HintedDirectory(str(hint), (stat.st_ino, stat.st_size), lazy_index(hint), None)
    assert other.greatest_name_under(prefix) == keys[-1].rpartition("/")[2]
    assert blocks - len(other._unread) == 1


def lazy_index(hint):
    return decode_hint_index(hint.read_bytes(), lambda end: TAIL, 10**9)


def rewrite_hint(lazy: KeyDirectory, hint) -> int:
    """Write the next hint of a directory read from or written to ``hint`` as
    ``FileStorage`` does (the blocks that hold no key changed since carried as they are),
    and read on from it; the blocks carried."""
    parts = lazy.hint_parts()
    assert parts is not None  # it was read from a hint: it knows which
    old = hint.read_bytes()
    kept = [part for part in parts if isinstance(part, KeptBlock)]
    # each carried block is where the old hint holds it, as its index vouches for it
    assert all(zlib.crc32(old[p.offset : p.offset + p.size]) == p.crc for p in kept)
    encoded = [
        part if isinstance(part, KeptBlock) else [(k, *where) for k, where in part]
        for part in parts
    ]
    pieces, index = encode_hint_parts(TAIL, 10**9, encoded)
    new = b"".join(p if isinstance(p, bytes) else old[p[0] : p[0] + p[1]] for p in pieces)
    carried = {p.first_key: old[p.offset : p.offset + p.size] for p in kept}
    for first_key, (offset, size, _) in zip(index.first_keys, index.blocks, strict=True):
        if first_key in carried:
            assert new[offset : offset + size] == carried[first_key]  # copied as it was
    temp = hint.with_name("next")
    temp.write_bytes(new)
    os.replace(temp, hint)
    assert index == lazy_index(hint)  # the index written is the one a reader decodes
    unread = len(lazy._unread) if isinstance(lazy, HintedDirectory) else 0
    lazy.hinted(str(hint), (hint.stat().st_ino, hint.stat().st_size), index)
    if isinstance(lazy, HintedDirectory):
        # the blocks never read are still unread; the blocks read since but not changed
        # are carried too, and need no reading: their keys are in the directory
        assert len(lazy._unread) == unread <= len(kept)
    return len(kept)


@pytest.mark.parametrize("seed", range(4))
def test_a_directory_written_to_a_hint_carries_its_unchanged_blocks_into_the_next(tmp_path, seed):
    """A writer's directory (every key in it, none read from a hint) remembers the hint it
    wrote: the next one copies the blocks no change touched, encodes the others, and reads
    back as the directory is, whatever was set, deleted or applied in between."""
    rng = random.Random(seed)
    keys = [f"threads/t/ns/~/checkpoints/1f0{n:05d}.ckpt" for n in range(2500)]
    keys += [f"threads/t/ns/~/writes/1f0{n:05d}/task{t}.0" for n in range(0, 2500, 4) for t in "ab"]
    keys += [f"threads/t/tools/call{n:03d}.tool" for n in range(300)]
    whole = KeyDirectory()
    for n, key in enumerate(keys):
        whole[key] = (n * 10, 10)
    hint = tmp_path / HINT_NAME
    hint.write_bytes(encode_hint(TAIL, 10**9, [(k, *where) for k, where in whole.items()]))
    assert whole.hint_parts() is None  # no hint known yet: encoded whole
    whole.hinted(str(hint), (hint.stat().st_ino, hint.stat().st_size), lazy_index(hint))
    blocks = len(lazy_index(hint).blocks)
    newer = iter(f"threads/t/ns/~/checkpoints/2f0{n:05d}.ckpt" for n in range(10**6))

    def unexpected_rescan():
        raise AssertionError("every block verifies: no reason to read the log")

    for round_ in range(8):
        touched = set()
        for _ in range(rng.randrange(1, 6)):
            key = rng.choice(keys)
            touched.add(key)
            if rng.random() < 0.3 and key in whole:
                del whole[key]
            else:
                whole[key] = (round_, 1)
        whole.apply({next(newer): (round_, 2) for _ in range(rng.randrange(50, 400))})
        whole.apply({rng.choice(keys): rng.choice([None, (round_, 3)])})  # applied, set or gone
        carried = rewrite_hint(whole, hint)
        # only the blocks a change touched are encoded again (the last one, new keys too)
        assert carried >= blocks - len(touched) - 2
        identity = (hint.stat().st_ino, hint.stat().st_size)
        again = HintedDirectory(str(hint), identity, lazy_index(hint), unexpected_rescan)
        assert dict(again.items()) == dict(whole.items())
        blocks = len(lazy_index(hint).blocks)


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.pop("threads/t/a"),
        lambda d: d.popitem(),
        lambda d: d.setdefault("threads/t/c", (3, 1)),
        lambda d: d.update({"threads/t/a": (9, 9)}),
        lambda d: d.clear(),
    ],
    ids=["pop", "popitem", "setdefault", "update", "clear"],
)
def test_a_directory_changed_through_dicts_own_methods_encodes_its_next_hint_whole(
    tmp_path, change
):
    """Nothing in the package changes a directory but through its own methods, which note
    the blocks they touch; changed any other way, it forgets its last hint rather than
    carry a block that no longer holds."""
    whole = KeyDirectory()
    whole["threads/t/a"], whole["threads/t/b"] = (0, 1), (1, 1)
    hint = tmp_path / HINT_NAME
    hint.write_bytes(encode_hint(TAIL, 10**9, [(k, *where) for k, where in whole.items()]))
    whole.hinted(str(hint), (hint.stat().st_ino, hint.stat().st_size), lazy_index(hint))
    assert whole.hint_parts() is not None
    change(whole)
    assert whole.last_hint is None and whole.hint_parts() is None


def test_a_writer_of_a_long_thread_encodes_only_what_changed_since_its_last_hint(
    tmp_path, monkeypatch
):
    """Appending to a long thread, a writer leaves a new hint now and then: it encodes the
    blocks its appends (and the deletions and rewrites of older keys among them) touched,
    and copies the rest from its last hint, whose keys it never encodes again. A process
    opening the thread from that hint finds every key where a full read of the log does."""
    root = tmp_path / "store"
    storage = FileStorage(str(root), fsync=False)
    since = {"appended": 0, "older": 0}
    hints: list[tuple[int, int, int]] = []  # (keys encoded, bound, keys held) per hint
    real = hint_file.encode_hint_parts

    def counting(log_tail, end, parts):
        encoded = sum(len(part) for part in parts if not isinstance(part, KeptBlock))
        # the blocks of older keys touched, the last block, and the keys appended
        bound = (since["older"] + 1) * HINT_BLOCK_KEYS + since["appended"]
        hints.append((encoded, bound, len(held)))
        since.update(appended=0, older=0)
        return real(log_tail, end, parts)

    monkeypatch.setattr(hint_file, "encode_hint_parts", counting)
    rng = random.Random(11)
    prefix = "threads/t/ns/~/checkpoints"
    held: dict[str, bytes] = {}
    for n in range(6000):
        key = f"{prefix}/1f0{n:06d}.ckpt"
        held[key] = f"record {n} ".encode() * 60
        since["appended"] += 1
        storage.write(key, held[key])
        if n % 97 == 0 and n:  # now and then, an older record rewritten or deleted
            older = rng.choice(sorted(held))
            since["older"] += 1
            if rng.random() < 0.5:
                del held[older]
                storage.delete(older)
            else:
                held[older] = b"rewritten " + older.encode()
                storage.write(older, held[older])
    assert len(hints) > 8
    assert hints[0][0] == hints[0][2]  # the first hint: every key encoded
    for encoded, bound, _ in hints[1:]:
        assert encoded <= bound  # the others: what changed, never the whole thread again
    assert hints[-1][0] < hints[-1][2] / 3

    def no_full_read(self, log):
        raise AssertionError("the hint verifies: no reason to read the whole log")

    monkeypatch.setattr(LogReader, "_read_whole", no_full_read)
    opened = FileStorage(str(root), fsync=False)
    assert sorted(opened.list(prefix)) == sorted(k.rpartition("/")[2] for k in held)
    assert all(opened.read(key) == data for key, data in held.items())
    scratch = opened.reader.read_afresh("threads/t")
    assert scratch is not None
    log = opened._log("threads/t")
    assert isinstance(log.index, HintedDirectory)
    assert dict(log.index.items()) == dict(scratch.index.items())


@pytest.mark.parametrize("first_writer", ["made the thread", "opened it from its hint"])
def test_writers_taking_turns_carry_each_other_s_hints_forward(tmp_path, monkeypatch, first_writer):
    """Two processes take turns appending to a long thread, each leaving a hint now and
    then in place of the other's: each copies the blocks of the one it finds that the log
    after it left unchanged (reading on from it if it still reads blocks from a hint),
    encoding what changed since, not every key of the thread at each turn. One of them
    made the thread and holds every key, or both opened it from a hint."""
    root = tmp_path / "store"
    prefix = "threads/t/ns/~/checkpoints"
    held: dict[str, bytes] = {}

    def append(storage: FileStorage, n: int) -> None:
        key = f"{prefix}/1f0{n:06d}.ckpt"
        held[key] = f"record {n} ".encode() * 60
        storage.write(key, held[key])

    writers = [FileStorage(str(root), fsync=False), FileStorage(str(root), fsync=False)]
    for n in range(3000):
        append(writers[0], n)
    if first_writer == "opened it from its hint":
        writers[0] = FileStorage(str(root), fsync=False)
    hints: list[tuple[int, int]] = []  # (keys encoded, keys held) per hint
    real = hint_file.encode_hint_parts

    def counting(log_tail, end, parts):
        encoded = sum(len(part) for part in parts if not isinstance(part, KeptBlock))
        hints.append((encoded, len(held)))
        return real(log_tail, end, parts)

    monkeypatch.setattr(hint_file, "encode_hint_parts", counting)
    for n in range(3000, 9000):
        append(writers[n // 500 % 2], n)
    assert len(hints) > 10
    for encoded, keys in hints:
        assert encoded < keys / 4  # the rest copied from the hint it found, whoever wrote it

    def no_full_read(self, log, **how):
        raise AssertionError("the hint verifies: no reason to read the whole log")

    monkeypatch.setattr(LogReader, "_read_whole", no_full_read)
    opened = FileStorage(str(root), fsync=False)
    assert sorted(opened.list(prefix)) == sorted(k.rpartition("/")[2] for k in held)
    assert all(opened.read(key) == data for key, data in held.items())


def test_a_log_with_damage_is_not_hinted_again_at_every_append(tmp_path, monkeypatch):
    """A log holding damage that keeps it from a hint gets none; appends to it must not
    each try (reading every key of a long log) to write one."""
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    log = root / "threads/t/log"
    lose_parity(log)
    (root / "threads/t" / HINT_NAME).unlink()
    last = scan(log.read_bytes())[0][-3]  # an entry's header near the end: names nothing
    with open(log, "r+b") as f:
        f.seek(last.offset)
        f.write(b"\xff" * 8)
    saver = VerifiedSaver(root, fsync=False, quarantine=False)  # nothing copied aside
    assert saver.get_tuple(THREAD) is not None
    encoded = []
    real = hint_file.encode_hint_parts
    monkeypatch.setattr(
        hint_file, "encode_hint_parts", lambda *a, **k: encoded.append(1) or real(*a, **k)
    )
    items = []
    monkeypatch.setattr(
        HintedDirectory, "items", lambda self: items.append(1) or KeyDirectory.items(self)
    )
    monkeypatch.setattr(KeyDirectory, "items", lambda self: items.append(1) or dict.items(self))
    fill(saver, 1500, start=1500)  # far more than HINT_AFTER_BYTES appended
    assert encoded == [] and items == []
