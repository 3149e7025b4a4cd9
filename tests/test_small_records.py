"""Small records kept uncompressed (flag bit 1): verified like any other, and cheap.

``VerifiedSaver.in_memory()`` stores the content of a checkpoint or writes
record under 16 KB as it is, and a store on disk under 2 KB: zstd would cost
more time than it saves. The digests and the identity cover it all the same, a
record written compressed before still reads, and the work one put costs is
counted here, so that a change that makes a small put compress again, or hash
its bytes more often, fails.
"""

from __future__ import annotations

import hashlib
import struct

import pytest

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import (
    FLAG_UNCOMPRESSED,
    HEADER_SIZE,
    Codec,
    RecordKind,
)
from langgraph_checkpoint_verified.storage import MemoryStorage

IDENTITY = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1"}
THREAD = {"configurable": {"thread_id": "t"}}


def checkpoint(n: int, value: object) -> dict:
    return {
        "v": 1,
        "id": f"{n:04d}",
        "ts": "",
        "channel_values": {"count": value},
        "channel_versions": {"count": n},
        "versions_seen": {},
    }


def put_steps(saver: VerifiedSaver, steps: int, value: object = None) -> dict:
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for n in range(1, steps + 1):
        config = saver.put(
            config, checkpoint(n, n if value is None else value), {"step": n}, {"count": n}
        )
    return config


def test_small_content_is_stored_as_it_is_and_reads_back():
    codec = Codec()
    content = b"a small record " * 4
    data = codec.encode(RecordKind.WRITES, IDENTITY, content, uncompressed_below=1024)
    assert data[6] & FLAG_UNCOMPRESSED
    assert content in data
    assert codec.decode(data, RecordKind.WRITES, IDENTITY) == content
    # at or above the threshold: a zstd frame, as every record was before
    compressed = codec.encode(RecordKind.WRITES, IDENTITY, content, uncompressed_below=10)
    assert not compressed[6] & FLAG_UNCOMPRESSED
    assert codec.decode(compressed, RecordKind.WRITES, IDENTITY) == content


@pytest.mark.parametrize("key", [None, b"k" * 32])
def test_every_byte_of_an_uncompressed_record_is_covered(key):
    codec = Codec(key)
    data = codec.encode(RecordKind.CHECKPOINT, IDENTITY, b"x" * 40, uncompressed_below=1024)
    for offset in range(len(data)):
        damaged = bytearray(data)
        damaged[offset] ^= 0x01
        with pytest.raises(RecordDamagedError):
            codec.decode(bytes(damaged), RecordKind.CHECKPOINT, IDENTITY)
    with pytest.raises(RecordDamagedError, match="identity mismatch"):
        codec.decode(data, RecordKind.CHECKPOINT, {**IDENTITY, "thread_id": "other"})


def _redigest(head_and_identity: bytes, payload: bytes) -> bytes:
    """A record with digests that match, as a writer following docs/format.md makes it."""
    header = hashlib.blake2b(head_and_identity, digest_size=16, person=b"lgcv-header").digest()
    body = head_and_identity + header + payload
    return body + hashlib.blake2b(body, digest_size=32, person=b"lgcv-record").digest()


def test_an_uncompressed_payload_must_be_exactly_the_declared_content():
    codec = Codec()
    data = codec.encode(RecordKind.WRITES, IDENTITY, b"y" * 30, uncompressed_below=1024)
    identity_size = struct.unpack_from("<I", data, 8)[0]
    head = bytearray(data[: HEADER_SIZE + identity_size])
    struct.pack_into("<Q", head, 20, 31)  # U says one byte more than P holds
    with pytest.raises(RecordDamagedError, match="uncompressed payload"):
        codec.decode(_redigest(bytes(head), b"y" * 30), RecordKind.WRITES, IDENTITY)
    head[6] |= 0x04  # a flag no reader knows
    struct.pack_into("<Q", head, 20, 30)
    with pytest.raises(RecordDamagedError, match="unknown flags"):
        codec.decode(_redigest(bytes(head), b"y" * 30), RecordKind.WRITES, IDENTITY)


def test_reframing_keeps_a_payload_uncompressed():
    codec = Codec()
    data = codec.encode(RecordKind.WRITES, IDENTITY, b"z" * 50, uncompressed_below=1024)
    moved = {**IDENTITY, "thread_id": "u"}
    copied = codec.reframe(data, RecordKind.WRITES, moved)
    assert copied[6] & FLAG_UNCOMPRESSED
    assert codec.decode(copied, RecordKind.WRITES, moved) == b"z" * 50


def test_a_small_put_in_memory_compresses_nothing_and_computes_two_digests():
    saver = VerifiedSaver.in_memory()
    config = put_steps(saver, 3)
    codec = saver.codec
    codec.digests = codec.compressions = 0
    config = saver.put(config, checkpoint(4, 4), {"step": 4}, {"count": 4})
    # one record: its header digest and its record digest, no zstd
    assert (codec.compressions, codec.digests) == (0, 2)
    saver.put_writes(config, [("count", 5), ("__error__", "boom")], "task-1")
    # two writes records (regular and special), two digests each
    assert (codec.compressions, codec.digests) == (0, 6)
    newest = keys.checkpoint_key("t", "", "0004")
    assert saver.storage.records[newest][6] & FLAG_UNCOMPRESSED


def test_a_large_state_in_memory_is_still_compressed():
    saver = VerifiedSaver.in_memory()
    codec = saver.codec
    put_steps(saver, 1, value="many words " * 4000)
    assert codec.compressions == 1
    newest = keys.checkpoint_key("t", "", "0001")
    assert not saver.storage.records[newest][6] & FLAG_UNCOMPRESSED


def test_a_step_on_disk_compresses_nothing_and_a_large_state_is_compressed(tmp_path):
    saver = VerifiedSaver(tmp_path / "store", fsync=False)
    codec = saver.codec
    codec.compressions = 0
    config = put_steps(saver, 2)
    saver.put_writes(config, [("count", 3), ("__error__", "boom")], "task-1")
    assert codec.compressions == 0
    newest = keys.checkpoint_key("t", "", "0002")
    assert saver.storage.read(newest)[6] & FLAG_UNCOMPRESSED
    # the log holds the content as it is
    assert b"boom" in (tmp_path / "store" / "threads" / "t" / "log").read_bytes()
    config = saver.put(config, checkpoint(3, "many words " * 400), {"step": 3}, {"count": 3})
    assert codec.compressions == 1
    assert not saver.storage.read(keys.checkpoint_key("t", "", "0003"))[6] & FLAG_UNCOMPRESSED
    again = VerifiedSaver(tmp_path / "store")
    assert again.get_tuple(config).checkpoint["channel_values"] == {"count": "many words " * 400}
    assert again.verify().ok


def test_a_log_written_compressed_before_reads_and_takes_small_records_beside(tmp_path):
    writer = VerifiedSaver(tmp_path / "store", fsync=False)
    writer.engine.writer.uncompressed_below = 0  # as every record on disk was written before
    put_steps(writer, 3)
    older = keys.checkpoint_key("t", "", "0003")
    assert not writer.storage.read(older)[6] & FLAG_UNCOMPRESSED
    reader = VerifiedSaver(tmp_path / "store", fsync=False)
    found = reader.get_tuple(THREAD)
    assert found is not None and found.checkpoint["channel_values"] == {"count": 3}
    reader.put(found.config, checkpoint(4, 4), {"step": 4}, {"count": 4})
    assert reader.storage.read(keys.checkpoint_key("t", "", "0004"))[6] & FLAG_UNCOMPRESSED
    again = VerifiedSaver(tmp_path / "store")
    assert [c.checkpoint["channel_values"] for c in again.list(THREAD)] == [
        {"count": n} for n in (4, 3, 2, 1)
    ]


def test_damage_to_an_uncompressed_record_in_memory_is_caught_and_reported():
    saver = VerifiedSaver.in_memory()
    put_steps(saver, 2)
    newest = keys.checkpoint_key("t", "", "0002")
    data = saver.storage.records[newest]
    assert data[6] & FLAG_UNCOMPRESSED
    saver.storage.records[newest] = data[:-40] + bytes([data[-40] ^ 0x20]) + data[-39:]
    found = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert found is not None and found.checkpoint["id"] == "0001"
    assert found.checkpoint["channel_values"] == {"count": 1}
    assert saver.stats.quarantined_records == 1


def test_records_written_compressed_before_still_read_in_memory():
    storage = MemoryStorage()
    storage.uncompressed_below = 0  # as every record was written before
    writer = VerifiedSaver(storage=storage)
    put_steps(writer, 3)
    assert not any(data[6] & FLAG_UNCOMPRESSED for data in writer.storage.records.values())
    reader = VerifiedSaver.in_memory()
    reader.storage.records = dict(writer.storage.records)
    found = reader.get_tuple({"configurable": {"thread_id": "t"}})
    assert found is not None and found.checkpoint["channel_values"] == {"count": 3}
    # and a new put on top of them is stored uncompressed beside them
    reader.put(found.config, checkpoint(4, 4), {"step": 4}, {"count": 4})
    assert reader.get_tuple(found.config).checkpoint["channel_values"] == {"count": 3}
    assert reader.get_tuple({"configurable": {"thread_id": "t"}}).checkpoint["id"] == "0004"
