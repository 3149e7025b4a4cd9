"""The key directory a process leaves beside a thread's log (``log.hint``).

A hint only saves the next process from reading the whole log: whatever it
says, or whatever became of it, the records read are the ones the log holds.
"""

from __future__ import annotations

import os

from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified._log import HINT_AFTER_BYTES, HINT_NAME

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


def test_no_hint_for_a_log_with_damage_in_it(tmp_path):
    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    log = root / "threads/t/log"
    with open(log, "r+b") as f:  # junk between two entries, a quarter into the log
        f.seek(log.stat().st_size // 4)
        f.write(b"\0" * 64)
    # the newest checkpoint does not need the damaged record: read, not reported yet
    assert VerifiedSaver(root).get_tuple(THREAD).metadata["step"] == 1499
    assert not (root / "threads/t" / HINT_NAME).exists()
    assert not VerifiedSaver(root).verify(thread_id="t").ok


def test_a_hint_of_the_first_layout_is_ignored_and_replaced(tmp_path):
    """Version 1 listed ``[key, offset, size]`` one key at a time; version 2 groups keys
    by directory. A version 1 hint is read past, and the next reader leaves a new one."""
    import struct
    import zlib

    import ormsgpack

    from langgraph_checkpoint_verified._entries import HINT_MAGIC, decode_hint

    root = tmp_path / "store"
    fill(VerifiedSaver(root, fsync=False), 1500)
    log, hint = root / "threads/t/log", root / "threads/t" / HINT_NAME
    newest_step(root)
    stat = log.stat()
    keys = [(key, 0, 0) for key in ("threads/t/ns/~/checkpoints/x.ckpt",)]
    body = struct.pack("<4sB3xQQ", HINT_MAGIC, 1, stat.st_ino, stat.st_size)
    body += ormsgpack.packb(keys)
    hint.write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    assert decode_hint(hint.read_bytes(), stat.st_ino, stat.st_size) is None
    assert newest_step(root) == 1499
    assert len(list(VerifiedSaver(root).list(THREAD))) == 1500
    assert decode_hint(hint.read_bytes(), stat.st_ino, stat.st_size) is not None


def test_a_hint_whose_checksum_holds_but_whose_groups_make_no_sense_is_ignored():
    import struct
    import zlib

    import ormsgpack

    from langgraph_checkpoint_verified._entries import HINT_MAGIC, HINT_VERSION, decode_hint

    def hint(groups) -> bytes:
        body = struct.pack("<4sB3xQQ", HINT_MAGIC, HINT_VERSION, 7, 100) + ormsgpack.packb(groups)
        return body + struct.pack("<I", zlib.crc32(body))

    def positions(*numbers: int) -> bytes:
        return struct.pack(f"<{len(numbers)}Q", *numbers)

    assert decode_hint(hint([["threads/t", ["x"], positions(16, 60)]]), 7, 120) is not None
    for groups in (
        [["threads/t", ["x/y"], positions(16, 60)]],  # a name is one path segment
        [["threads/t", ["x", "y"], positions(16, 60)]],  # a position for each name
        [["threads/t", ["x"], positions(16, 600)]],  # beyond what the hint covers
        [["threads/t", [3], positions(16, 60)]],  # names are strings
        [[5, ["x"], positions(16, 60)]],
        [["threads/t", ["x"], [16, 60]]],
        [["threads/t", ["x"]]],
        "not a list of groups",
    ):
        assert decode_hint(hint(groups), 7, 120) is None, groups
