"""Records read again are not decoded again, and that never hides a change to their bytes.

``get_tuple`` of a thread's newest checkpoint reads its record and the record
holding a value it did not change. A saver keeps the records it decoded (and
the ones its ``put`` encoded) with their bytes: a read still reads the bytes,
and only bytes identical to the ones decoded skip the checksum, decompression
and parse. Counted here: decodes per read. Checked: damage, a rewrite by another
saver and maintenance are all seen by the next read; values are never shared
between two reads.
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from logtools import lose_parity, view_log

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.engine import reads
from langgraph_checkpoint_verified.engine.record_cache import RecordCache
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.kinds import VALUE_FULL, CheckpointRecord, StoredValue

THREAD = {"configurable": {"thread_id": "t"}}


def make_saver(backend: str, tmp_path) -> VerifiedSaver:
    if backend == "memory":
        return VerifiedSaver.in_memory()
    return VerifiedSaver(tmp_path / "store", fsync=False)


def reopened(saver: VerifiedSaver) -> VerifiedSaver:
    """Another saver on the same store: it has decoded nothing yet."""
    return VerifiedSaver(storage=saver.storage)


def put_steps(saver: VerifiedSaver, steps: int) -> list[dict]:
    """``messages`` changes at every step, ``profile`` only at the first: the newest
    checkpoint's ``profile`` is held by the first one's record."""
    config: dict = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    configs = []
    for step in range(1, steps + 1):
        values = {"messages": [f"m{i}" for i in range(step)], "profile": {"name": "p"}}
        versions = {"messages": step, "profile": 1}
        changed = {"messages": step} if step > 1 else dict(versions)
        config = saver.put(
            config,
            generate_checkpoint(channel_values=values, channel_versions=versions),
            generate_metadata(step=step),
            changed,
        )
        configs.append(config)
    return configs


@pytest.fixture
def decodes(monkeypatch):
    """How many checkpoint records the saver decodes (checksum, decompression, parse)."""
    counted = []
    real = reads.decode_checkpoint

    def counting(*args, **kwargs):
        counted.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(reads, "decode_checkpoint", counting)
    return counted


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_a_record_read_again_is_not_decoded_again(tmp_path, backend, decodes):
    saver = make_saver(backend, tmp_path)
    put_steps(saver, 4)
    saver = reopened(saver)  # as a new process would: nothing decoded yet
    first = saver.get_tuple(THREAD)
    assert len(decodes) == 2  # the newest record and the one holding `profile`
    for _ in range(5):
        again = saver.get_tuple(THREAD)
        assert again == first
    assert len(decodes) == 2


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_the_checkpoint_put_wrote_is_read_without_decoding(tmp_path, backend, decodes):
    saver = make_saver(backend, tmp_path)
    configs = put_steps(saver, 3)
    found = saver.get_tuple(THREAD)
    assert found.config == configs[-1]
    assert found.checkpoint["channel_values"] == {
        "messages": ["m0", "m1", "m2"],
        "profile": {"name": "p"},
    }
    assert decodes == []


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_values_are_never_shared_between_reads(tmp_path, backend):
    saver = make_saver(backend, tmp_path)
    put_steps(saver, 3)
    first = saver.get_tuple(THREAD)
    first.checkpoint["channel_values"]["messages"].append("changed by the caller")
    first.checkpoint["channel_values"]["profile"]["name"] = "changed"
    second = saver.get_tuple(THREAD)
    assert second.checkpoint["channel_values"] == {
        "messages": ["m0", "m1", "m2"],
        "profile": {"name": "p"},
    }


@pytest.mark.parametrize("parity", ["kept", "lost"])
def test_damage_after_a_read_is_seen_by_the_same_saver(tmp_path, parity):
    saver = make_saver("files", tmp_path)
    configs = put_steps(saver, 3)
    saver.put_writes(configs[-1], [("messages", "w")], "task")  # the record is not the tail
    assert saver.get_tuple(THREAD).config == configs[-1]
    newest = configs[-1]["configurable"]["checkpoint_id"]
    key = keys.checkpoint_key("t", "", newest)
    thread_key = key.split("/ns/")[0]
    log_path = tmp_path / "store" / thread_key / "log"
    entry = view_log(log_path.read_bytes(), thread_key).entry(key)
    damaged = bytearray(log_path.read_bytes())
    damaged[entry.data_offset + entry.data_size // 2] ^= 0x01
    log_path.write_bytes(bytes(damaged))  # same file, same size: only the bytes differ
    if parity == "lost":
        lose_parity(log_path)
    found = saver.get_tuple(THREAD)
    if parity == "kept":  # rebuilt from the parity: the newest itself, reported as healed
        assert found.config == configs[-1]
        assert (saver.stats.healed_blocks, saver.stats.damaged_records) == (1, 0)
    else:
        assert found.config == configs[-2]  # the newest that verifies
        assert saver.stats.damaged_records == 1


def test_a_rewrite_by_another_saver_is_seen(tmp_path):
    reader = make_saver("files", tmp_path)
    configs = put_steps(reader, 2)
    assert reader.get_tuple(THREAD).checkpoint["channel_values"]["messages"] == ["m0", "m1"]
    # another process puts the same checkpoint id again, with other values
    writer = VerifiedSaver(tmp_path / "store", fsync=False)
    checkpoint = generate_checkpoint(
        checkpoint_id=configs[-1]["configurable"]["checkpoint_id"],
        channel_values={"messages": ["rewritten"], "profile": {"name": "q"}},
        channel_versions={"messages": 3, "profile": 2},
    )
    writer.put(configs[0], checkpoint, generate_metadata(step=2), {"messages": 3, "profile": 2})
    found = reader.get_tuple(THREAD)
    assert found.checkpoint["channel_values"] == {
        "messages": ["rewritten"],
        "profile": {"name": "q"},
    }


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_maintenance_never_changes_a_record_another_read_holds(tmp_path, backend):
    saver = make_saver(backend, tmp_path)
    configs = put_steps(saver, 6)
    before = {c["configurable"]["checkpoint_id"]: saver.get_tuple(c) for c in configs}
    # prune rewrites the newest to hold `profile` itself, then removes the first record
    saver.prune(["t"], strategy="keep_latest")
    newest = configs[-1]["configurable"]["checkpoint_id"]
    assert saver.get_tuple(THREAD) == before[newest]
    assert [c.config["configurable"]["checkpoint_id"] for c in saver.list(THREAD)] == [newest]
    assert reopened(saver).get_tuple(THREAD) == before[newest]


def record(checkpoint_id: str, value_bytes: int) -> CheckpointRecord:
    return CheckpointRecord(
        thread_id="t",
        checkpoint_ns="",
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=None,
        checkpoint=("msgpack", b""),
        metadata=("msgpack", b""),
        values={"x": StoredValue(1, VALUE_FULL, ("bytes", b"v" * value_bytes))},
        refs={"x": (1, checkpoint_id)},
    )


def test_the_cache_keeps_records_within_its_byte_bound():
    cache = RecordCache(max_bytes=1000, max_summaries=2)
    for n in range(4):
        cache.remember(record(f"c{n}", 290), b"d" * 10, stamp=n)
    # 300 bytes each: the oldest whole record went to stay within 1000 bytes
    assert cache.record(("t", "", "c0"), b"d" * 10) is None
    assert all(cache.record(("t", "", f"c{n}"), b"d" * 10) for n in (1, 2, 3))
    assert cache.record(("t", "", "c3"), b"other bytes") is None
    # summaries: only the 2 newest, each only under its own stamp
    assert cache.summary(("t", "", "c1"), 1) is None
    assert cache.summary(("t", "", "c3"), 3).refs == {"x": (1, "c3")}
    assert cache.summary(("t", "", "c3"), 2) is None
    # a record larger than the bound is never kept whole; its summary is
    cache.remember(record("big", 2000), b"d", stamp="s")
    assert cache.record(("t", "", "big"), b"d") is None
    assert cache.summary(("t", "", "big"), "s").values == {}
    cache.forget_thread("t")
    assert cache.record(("t", "", "c3"), b"d" * 10) is None
    assert cache.summary(("t", "", "big"), "s") is None
