"""Damage to a thread's log that the file store must not keep from ``verify()``."""

from __future__ import annotations

from logtools import lose_parity

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.storage.log.entries import scan
from langgraph_checkpoint_verified.storage.log.room import all_zeros

CHECKPOINT = {
    "v": 1,
    "id": "1",
    "ts": "",
    "channel_values": {},
    "channel_versions": {},
    "versions_seen": {},
}


def one_thread_log(tmp_path, thread_id: str) -> bytes:
    saver = VerifiedSaver(tmp_path / thread_id, fsync=False)
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    config = saver.put(config, CHECKPOINT, {}, {})
    saver.put(config, {**CHECKPOINT, "id": "2"}, {}, {})
    return (tmp_path / thread_id / "threads" / thread_id / "log").read_bytes()


def test_verify_names_bytes_between_entries_that_are_no_entry(tmp_path):
    log = one_thread_log(tmp_path, "t")
    first_end = scan(log)[0][0].end
    log_path = tmp_path / "t" / "threads" / "t" / "log"
    lose_parity(log_path)
    log_path.write_bytes(log[:first_end] + b"junk" * 10 + log[first_end:])
    seen = []
    report = VerifiedSaver(tmp_path / "t", fsync=False, on_corruption=seen.append).verify()
    assert [d.key for d in seen] == [f"{log_path}@{first_end}"], "the reader did find it"
    assert not report.ok
    assert [d.key for d in report.damaged] == [f"{log_path}@{first_end}"]


def test_verify_names_entries_of_another_thread_in_a_threads_log(tmp_path):
    one_thread_log(tmp_path, "t")
    lose_parity(tmp_path / "t" / "threads" / "t" / "log")
    (tmp_path / "t" / "threads" / "t" / "log").write_bytes(one_thread_log(tmp_path, "other"))
    saver = VerifiedSaver(tmp_path / "t", fsync=False)
    assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
    assert not saver.verify().ok, "the log of thread t holds only records of thread other"


def test_adjacent_damaged_entries_are_named_each_on_its_own(tmp_path):
    """Two damaged entries side by side are one stretch to resynchronize over, but two
    records to report: each header that still reads starts a span of its own."""
    from langgraph_checkpoint_verified import FileStorage
    from langgraph_checkpoint_verified.storage.log.entries import scan

    storage = FileStorage(tmp_path / "store", fsync=False)
    keys = [f"threads/t/ns/~/checkpoints/{n}.ckpt" for n in (1, 2, 3)]
    for key in keys:
        storage.write(key, b"record of " + key.encode() * 4)
    log = tmp_path / "store" / "threads" / "t" / "log"
    data = bytearray(log.read_bytes())
    entries, _, _ = scan(bytes(data))
    for entry in entries[:2]:
        data[entry.data_offset + 3] ^= 0xFF
    _, damaged, end = scan(bytes(data))
    assert [span.key for span in damaged] == keys[:2]
    assert all_zeros(bytes(data), end)  # nothing but room after them: damage, not torn
    log.write_bytes(bytes(data))
    reader = FileStorage(tmp_path / "store")
    assert [reader.read(key) is not None for key in keys] == [True, True, True]
    assert reader.read(keys[2]) == b"record of " + keys[2].encode() * 4


class _CountedCrc:
    """``zlib`` for ``storage.log.entries``, counting the entry checksums it computes."""

    def __init__(self) -> None:
        import zlib

        self.zlib = zlib
        self.calls = 0

    def crc32(self, data, value=0):
        self.calls += 1
        return self.zlib.crc32(data, value)


def test_opening_a_log_with_damaged_entries_at_its_end_checks_each_entry_once(
    tmp_path, monkeypatch
):
    """The newest entries damaged (the last writes before a crash, say): the tail is read
    more than once (all of it, then again once the parity is asked whether it was
    synced; past a hint, a first window before them), and each damaged entry is met
    twice in a scan (while looking for an intact one after it, then to name it). Bytes
    read again unchanged are not scanned again, and a scan names the damaged entries
    from what its search found: every entry's checksum is computed once to open the
    thread."""
    from langgraph_checkpoint_verified import FileStorage
    from langgraph_checkpoint_verified.storage.log import entries as log_entries

    storage = FileStorage(tmp_path / "store", fsync=False)
    keys = [f"threads/t/ns/~/checkpoints/{n:03}.ckpt" for n in range(30)]
    for key in keys:
        storage.write(key, b"record of " + key.encode() * 4)
    log = tmp_path / "store" / "threads" / "t" / "log"
    lose_parity(log)
    data = bytearray(log.read_bytes())
    written, _, _ = scan(bytes(data))
    for entry in written[20:]:
        data[entry.data_offset + 3] ^= 0xFF
    log.write_bytes(bytes(data))
    _, damaged, _ = scan(bytes(data))
    assert [span.key for span in damaged] == keys[20:]
    assert {span.reason for span in damaged} == {"entry checksum mismatch"}

    counted = _CountedCrc()
    monkeypatch.setattr(log_entries, "zlib", counted)
    reader = FileStorage(tmp_path / "store", fsync=False)
    assert reader.read(keys[0]) == b"record of " + keys[0].encode() * 4
    # one per entry to open the thread, and one for the entry read
    assert counted.calls == len(keys) + 1
    assert reader.read(keys[25]) is not None, "a damaged entry reads as its damaged bytes"
