"""The saver's own surface: opening and closing, verify(), keys against forgery,
and what a crashed write leaves behind."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import weakref

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from langgraph_checkpoint_verified import VerifiedSaver, VerifiedSaverError
from langgraph_checkpoint_verified.records.format import Codec
from langgraph_checkpoint_verified.records.keys import (
    TEMP_PREFIX,
    checkpoint_key,
    checkpoints_prefix,
    thread_prefix,
)
from langgraph_checkpoint_verified.records.kinds import (
    VALUE_FULL,
    StoredValue,
    decode_checkpoint,
    encode_checkpoint,
)
from langgraph_checkpoint_verified.storage.files import PID_SPACE


def put_chain(saver: VerifiedSaver, thread_id: str, n: int) -> list[dict]:
    configs, parent = [], generate_config(thread_id)
    for step in range(n):
        checkpoint = generate_checkpoint(
            channel_values={"n": step}, channel_versions={"n": step + 1}
        )
        parent = saver.put(parent, checkpoint, generate_metadata(step=step), {"n": step + 1})
        configs.append(parent)
    return configs


# -- opening and closing ----------------------------------------------------------------


@pytest.mark.parametrize("target", ["store", ":memory:"])
def test_from_conn_string_sync_and_async_close_the_saver(tmp_path, target):
    path = str(tmp_path / target) if target == "store" else target
    with VerifiedSaver.from_conn_string(path) as saver:
        put_chain(saver, "t", 2)
        assert saver.get_tuple(generate_config("t")).checkpoint["channel_values"] == {"n": 1}
    with pytest.raises(VerifiedSaverError, match="is closed"):
        saver.get_tuple(generate_config("t"))

    async def use_async() -> VerifiedSaver:
        async with VerifiedSaver.from_conn_string(path) as async_saver:
            put_chain(async_saver, "u", 1)
            assert (await async_saver.aget_tuple(generate_config("u"))) is not None
        return async_saver

    import asyncio

    closed = asyncio.run(use_async())
    with pytest.raises(VerifiedSaverError, match="is closed"):
        asyncio.run(closed.aput(generate_config("u"), generate_checkpoint(), {}, {}))


def test_close_is_idempotent_and_a_new_saver_continues(tmp_path):
    saver = VerifiedSaver(tmp_path / "store")
    put_chain(saver, "t", 3)
    saver.close()
    saver.close()
    with pytest.raises(VerifiedSaverError, match="open a new VerifiedSaver"):
        saver.put(generate_config("t"), generate_checkpoint(), {}, {})
    again = VerifiedSaver(tmp_path / "store")
    assert again.get_tuple(generate_config("t")).metadata["step"] == 2


def test_a_store_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("not a store")
    with pytest.raises(NotADirectoryError):
        VerifiedSaver(tmp_path / "file")
    with pytest.raises(TypeError, match="exactly one"):
        VerifiedSaver()
    with pytest.raises(TypeError, match="path must be"):
        VerifiedSaver(42)  # type: ignore[arg-type]


# -- verify() ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_verify_reports_progress_one_thread_and_repairs(tmp_path, backend):
    saver = VerifiedSaver(tmp_path / "store") if backend == "files" else VerifiedSaver.in_memory()
    put_chain(saver, "t", 4)
    put_chain(saver, "other", 2)
    keys = sorted(k for k in saver.storage.walk(checkpoints_prefix("t", "")))
    newest = keys[-1]
    record = saver.storage.read(newest)
    saver.storage.write(newest, record[:-1] + bytes([record[-1] ^ 1]))  # its digest's last byte

    calls: list[tuple[int, int]] = []
    report = saver.verify("t", progress=lambda done, total: calls.append((done, total)))
    assert calls == [(i, 4) for i in range(1, 5)]
    assert [d.key for d in report.damaged] == [newest]
    assert report.damaged[0].kind == "checkpoint"
    assert report.damaged[0].identity["thread_id"] == "t"  # the header still verifies
    assert not report.ok and not report.repaired
    assert saver.storage.read(newest) is not None  # a plain verify moves nothing
    assert saver.verify("other").ok

    repaired = saver.verify(repair=True)
    assert repaired.repaired and repaired.damaged[0].quarantined_to is not None
    assert saver.storage.read(newest) is None
    assert saver.verify().ok
    assert saver.stats.quarantined_records == 1


# -- authenticity -------------------------------------------------------------------------


@pytest.mark.parametrize("forger_key", [None, b"f" * 32], ids=["no-key", "other-key"])
def test_a_keyed_store_rejects_records_forged_without_its_key(tmp_path, forger_key):
    key = b"k" * 32
    saver = VerifiedSaver(tmp_path / "store", key=key)
    configs = put_chain(saver, "t", 2)
    newest_key = sorted(saver.storage.walk(checkpoints_prefix("t", "")))[-1]
    genuine = decode_checkpoint(saver.codec, saver.storage.read(newest_key))

    # A writer without the key re-frames the newest checkpoint with forged state:
    # every digest is valid for the forger's key (or for no key at all).
    forged_value = saver.serde.dumps_typed({"balance": 1_000_000})
    genuine.values = {"n": StoredValue(genuine.refs["n"][0], VALUE_FULL, forged_value)}
    saver.storage.write(newest_key, encode_checkpoint(Codec(forger_key), genuine))

    damage = []
    reader = VerifiedSaver(tmp_path / "store", key=key, on_corruption=damage.append)
    latest = reader.get_tuple(generate_config("t"))
    assert latest.config == configs[0]  # the forged checkpoint is never returned
    assert latest.checkpoint["channel_values"] == {"n": 0}
    assert [d.key for d in damage] == [newest_key]


# -- what a crashed write leaves ------------------------------------------------------------


def test_a_write_killed_before_its_rename_leaves_a_temp_file_that_is_never_read(tmp_path):
    """Appends write no temp file; compaction does (the live records and their parity,
    then ``replace`` over the log and its parity). A compaction killed before its rename
    leaves the old log, which is read as before, and temp files that are never read and
    that the next reader or compaction of the thread removes, their writer being dead.
    A live writer's temp file is left alone."""
    store = tmp_path / "store"
    configs = put_chain(VerifiedSaver(store), "t", 3)
    child = textwrap.dedent(
        f"""
        import os, signal
        from langgraph_checkpoint_verified import VerifiedSaver

        def killed_before_rename(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)

        saver = VerifiedSaver({str(store)!r})
        os.replace = killed_before_rename
        saver.prune(["t"], strategy="keep_latest")
        """
    )
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()
    directory = store / thread_prefix("t")
    leftovers = [p for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX)]
    assert len(leftovers) == 2  # the complete, fsynced, never renamed log, and its parity
    assert all(p.stat().st_size > 0 for p in leftovers)

    live = directory / f"{TEMP_PREFIX}{os.getpid()}-{PID_SPACE}-inflight"
    live.write_bytes(b"partial")
    saver = VerifiedSaver(store)
    latest = saver.get_tuple(generate_config("t"))
    assert latest.config == configs[-1]
    assert saver.verify().ok and saver.stats.damaged_records == 0
    saver.prune(["t"], strategy="keep_latest")
    assert saver.get_tuple(generate_config("t")).config == configs[-1]
    assert live.exists()
    assert not any(p.exists() for p in leftovers)


# -- fallback follows the parent chain, never a sibling branch ----------------------------


def put_at(saver, parent, values, versions, new_versions):
    checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
    return saver.put(parent, checkpoint, generate_metadata(), new_versions)


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_fallback_of_a_fork_never_returns_a_sibling(tmp_path, backend):
    """A -> B -> C, and a fork B -> D. D's unchanged channel lives in A's record."""
    saver = VerifiedSaver(tmp_path / "s") if backend == "files" else VerifiedSaver.in_memory()
    a = put_at(
        saver, generate_config("t"), {"x": "x1", "y": "y1"}, {"x": 1, "y": 1}, {"x": 1, "y": 1}
    )
    b = put_at(saver, a, {"x": "x1", "y": "y2"}, {"x": 1, "y": 2}, {"y": 2})
    c = put_at(saver, b, {"x": "x3", "y": "y2"}, {"x": 3, "y": 2}, {"x": 3})
    d = put_at(saver, b, {"x": "x1", "y": "y4"}, {"x": 1, "y": 4}, {"y": 4})
    assert saver.get_tuple(d).checkpoint["channel_values"] == {"x": "x1", "y": "y4"}

    a_key = sorted(saver.storage.walk(checkpoints_prefix("t", "")))[0]
    record = saver.storage.read(a_key)
    saver.storage.write(a_key, record[:-1] + bytes([record[-1] ^ 0xFF]))  # always a change

    # D, B and A all need A's record: nothing on D's chain verifies. C (a sibling)
    # is valid, but it is not D's ancestor and must not be returned for D.
    assert saver.get_tuple(d) is None
    assert saver.get_tuple(c).config == c
    assert saver.stats.restarts_from_scratch == 1


def test_prune_of_a_damaged_thread_works_in_strict_mode(tmp_path):
    saver = VerifiedSaver(tmp_path / "s", strict=True)
    configs = put_chain(saver, "t", 3)
    newest = sorted(saver.storage.walk(checkpoints_prefix("t", "")))[-1]
    saver.storage.write(newest, b"garbage")
    with pytest.raises(Exception, match="does not verify"):
        saver.get_tuple(generate_config("t"))
    saver.prune(["t"], strategy="keep_latest")
    assert [t.config for t in saver.list(generate_config("t"))] == [configs[1]]


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_a_checkpoint_put_again_under_its_own_id_as_parent_holds_its_values(tmp_path, backend):
    """A checkpoint put again with its own id as the parent's: the record it replaces is
    no parent to refer to (the new record would refer to itself for what did not
    change, and never load): it holds every value itself."""
    saver = VerifiedSaver(tmp_path / "s") if backend == "files" else VerifiedSaver.in_memory()
    first = generate_checkpoint(
        channel_values={"a": "kept", "b": 1}, channel_versions={"a": 1, "b": 1}
    )
    config = saver.put(generate_config("t"), first, generate_metadata(step=0), {"a": 1, "b": 1})
    assert config["configurable"]["checkpoint_id"] == first["id"]
    again = {**first, "channel_values": {"a": "kept", "b": 2}, "channel_versions": {"a": 1, "b": 2}}
    saver.put(config, again, generate_metadata(step=1), {"b": 2})
    fresh = VerifiedSaver(storage=saver.storage)
    found = fresh.get_tuple(generate_config("t"))
    assert found is not None and found.checkpoint["channel_values"] == {"a": "kept", "b": 2}
    assert fresh.verify().ok


# -- a record that cannot be read at all --------------------------------------------------


def test_unreadable_records_are_reported_not_raised_and_not_moved(tmp_path, monkeypatch):
    saver = VerifiedSaver(tmp_path / "s")
    long_id = "x" * 300  # stored under a hashed name: listing must read its header
    put_chain(saver, long_id, 2)
    configs = put_chain(saver, "t", 2)
    seen = []
    saver.reporter.on_corruption = seen.append
    real_read = saver.storage.read

    def failing_read(key):
        if key.endswith(".ckpt"):
            raise OSError(5, "Input/output error")
        return real_read(key)

    monkeypatch.setattr(saver.storage, "read", failing_read)
    assert saver.get_tuple(generate_config(long_id)) is None
    assert list(saver.list(generate_config(long_id))) == []
    assert saver.get_tuple(configs[-1]) is None
    assert saver.stats.unreadable_records >= 3
    assert saver.stats.quarantined_records == 0
    assert all("cannot read" in d.reason for d in seen)
    monkeypatch.undo()
    assert saver.get_tuple(generate_config("t")).config == configs[-1]


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_a_checkpoint_unreadable_for_a_moment_is_read_again_by_the_next_call(
    tmp_path, backend, monkeypatch
):
    """A read error is not damage: the call falls back past the checkpoint it could not
    read, and keeps nothing of that fallback, so the next call, once the storage reads
    again, returns the newest checkpoint (the thread does not go on from an older one)."""
    saver = VerifiedSaver(tmp_path / "s") if backend == "files" else VerifiedSaver.in_memory()
    configs = put_chain(saver, "t", 3)
    newest = configs[-1]["configurable"]["checkpoint_id"]
    fresh = VerifiedSaver(storage=saver.storage)  # nothing of the thread read yet
    real_read = fresh.storage.read
    failing = [True]

    def read_failing_once(key):
        if failing[0] and key.endswith(f"{newest}.ckpt"):
            raise OSError(5, "Input/output error")
        return real_read(key)

    monkeypatch.setattr(fresh.storage, "read", read_failing_once)
    assert fresh.get_tuple(generate_config("t")).config == configs[-2]
    assert fresh.stats.unreadable_records == 1 and fresh.stats.fallbacks == 1
    failing[0] = False
    assert fresh.get_tuple(generate_config("t")).config == configs[-1]


def _writes_record(saver, key_parts, value: str) -> bytes:
    from langgraph_checkpoint_verified.records.kinds import WritesRecord, encode_writes

    thread_id, checkpoint_id = key_parts
    batch = [(-3, "__interrupt__", saver.serde.dumps_typed(value))]
    return encode_writes(
        saver.codec, WritesRecord(thread_id, "", checkpoint_id, "task", "-3", "", batch)
    )


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_quarantine_never_moves_a_record_written_after_the_read_that_judged(tmp_path, backend):
    """A reader judges damaged bytes; a writer replaces the record before they are moved.
    The store compares what the key holds with what was judged, under its own lock, and
    moves nothing: the new record stays, and nothing goes to the quarantine."""
    from langgraph_checkpoint_verified.records.keys import writes_key

    saver = VerifiedSaver(tmp_path / "s") if backend == "files" else VerifiedSaver.in_memory()
    (config,) = put_chain(saver, "t", 1)
    checkpoint_id = config["configurable"]["checkpoint_id"]
    key = writes_key("t", "", checkpoint_id, "task", "-3")
    saver.storage.write(key, b"damaged bytes")
    real_move = saver.storage.move_aside_unchanged
    asked = []

    def racing_move(moves, aside):
        saver.storage.write(key, _writes_record(saver, ("t", checkpoint_id), "R2"))
        asked.extend(moves)
        return real_move(moves, aside)

    saver.storage.move_aside_unchanged = racing_move
    saver.get_tuple(config)
    saver.storage.move_aside_unchanged = real_move

    assert asked == [(key, b"damaged bytes")]
    assert saver.stats.damaged_records == 1 and saver.stats.quarantined_records == 0
    assert saver.storage.list("quarantine") == []
    assert [w[2] for w in saver.get_tuple(config).pending_writes] == ["R2"]


def _newest_eight_damaged_beyond_parity(root):
    """Twelve checkpoints of thread ``t`` in a store at ``root``, the newest eight with a
    byte flipped in the middle of each and the log's parity lost: no read can rebuild
    them. Their configs, and the ids of the damaged ones, newest first."""
    from logtools import lose_parity, view_log

    from langgraph_checkpoint_verified.records.keys import checkpoint_key

    configs = put_chain(VerifiedSaver(root), "t", 12)
    damaged_ids = [c["configurable"]["checkpoint_id"] for c in configs[-8:]][::-1]
    log = root / "threads" / "t" / "log"
    lose_parity(log)
    data = bytearray(log.read_bytes())
    view = view_log(bytes(data), "threads/t")
    for checkpoint_id in damaged_ids:
        entry = view.entry(checkpoint_key("t", "", checkpoint_id))
        data[entry.data_offset + entry.data_size // 2] ^= 0xFF
    log.write_bytes(bytes(data))
    return configs, damaged_ids


def test_a_read_past_many_damaged_checkpoints_moves_them_aside_in_one_append(tmp_path, monkeypatch):
    """The newest eight checkpoints of a log are damaged beyond its parity. The read that
    falls back past them moves all eight aside with one write to the log (their deletions,
    one entry after another, not synced: their parity waits for the log's next sync),
    makes two files in the quarantine
    (their copies back to back, and the reasons for them all), reads no quarantined copy
    back, then reports each, newest first, with where it went."""
    from logtools import view_log

    from langgraph_checkpoint_verified.records.format import RecordKind
    from langgraph_checkpoint_verified.records.keys import checkpoint_key

    root = tmp_path / "s"
    configs, damaged_ids = _newest_eight_damaged_beyond_parity(root)
    log = root / "threads" / "t" / "log"
    damaged_view = view_log(log.read_bytes(), "threads/t")
    originals = {
        checkpoint_key("t", "", c): damaged_view.read(checkpoint_key("t", "", c))
        for c in damaged_ids
    }

    seen = []
    reader = VerifiedSaver(root, on_corruption=seen.append)
    pwrites, quarantine_reads, quarantine_files_made = [], [], []
    real_pwrite, real_open = os.pwrite, os.open

    def counted_pwrite(fd, data, offset):
        if os.readlink(f"/proc/self/fd/{fd}") in (str(log), f"{log}.parity"):
            pwrites.append(len(data))  # (the hint the read leaves past the damage aside)
        return real_pwrite(fd, data, offset)

    def counted_open(path, flags, *args, **kwargs):
        if "quarantine" in str(path) and not flags & (os.O_WRONLY | os.O_RDWR):
            quarantine_reads.append(path)
        if "quarantine" in str(path) and flags & os.O_CREAT:
            quarantine_files_made.append(path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "pwrite", counted_pwrite)
    monkeypatch.setattr(os, "open", counted_open)
    found = reader.get_tuple(generate_config("t"))
    monkeypatch.undo()

    assert found.config == configs[-9]
    assert [d.key for d in seen] == [checkpoint_key("t", "", c) for c in damaged_ids]
    assert all(d.quarantined_to for d in seen) and reader.stats.quarantined_records == 8
    assert len(pwrites) == 1, pwrites
    assert quarantine_reads == []
    assert len(quarantine_files_made) == 2, quarantine_files_made
    names = sorted(reader.storage.list("quarantine"))
    (reasons_name,) = [name for name in names if name.endswith(".reasons")]
    copies_name = reasons_name.replace(".reasons", ".records")
    assert names == sorted([reasons_name, copies_name])
    assert reader.reporter.quarantined_count() == 8
    # the copies are the damaged bytes exactly, back to back, newest first; each
    # quarantined_to says where its copy starts, and the reasons say where and how long
    copies = (root / "quarantine" / copies_name).read_bytes()
    starts = list(itertools.accumulate((len(originals[d.key]) for d in seen), initial=0))
    assert copies == b"".join(originals[d.key] for d in seen)
    assert [d.quarantined_to for d in seen] == [
        f"{root / 'quarantine' / copies_name}@{start}" for start in starts[:-1]
    ]
    reasons = json.loads(
        reader.codec.decode(
            reader.storage.read(f"quarantine/{reasons_name}"),
            RecordKind.QUARANTINE_REASONS,
            {"quarantine_move": reasons_name[: -len(".reasons")]},
        )
    )
    assert [(r["original_key"], r["record"], r["offset"], r["length"]) for r in reasons] == [
        (d.key, copies_name, start, len(originals[d.key]))
        for d, start in zip(seen, starts, strict=False)
    ]
    assert all(r["kind"] == "checkpoint" and "checksum" in r["reason"] for r in reasons)
    # a later read tells each of them moved aside from never written
    assert reader.reporter.quarantined_under("threads/t/").keys() == set(originals)
    newest = reader.reporter.quarantined_reason(seen[0].key)
    assert (newest["record"], newest["offset"]) == (copies_name, 0)
    # reasons that do not verify explain nothing, and cost the reader nothing else
    reasons_path = root / "quarantine" / reasons_name
    damaged_reasons = bytearray(reasons_path.read_bytes())
    damaged_reasons[-1] ^= 1
    reasons_path.write_bytes(bytes(damaged_reasons))
    assert reader.reporter.quarantined_under("threads/t/") == {}
    assert reader.reporter.quarantined_count() == 1  # a file of copies no reason counts
    assert VerifiedSaver(root).get_tuple(generate_config("t")).config == configs[-9]
    assert VerifiedSaver(root).get_tuple(generate_config("t")).config == configs[-9]
    # the deletions' parity waits for the log's next sync, made when the reader closes
    assert VerifiedSaver(root).verify().unprotected_bytes > 0
    reader.close()
    assert VerifiedSaver(root).verify().unprotected_bytes == 0


def test_a_full_disk_while_moving_records_aside_leaves_them_in_place_and_nothing_aside(
    tmp_path, monkeypatch
):
    """The eight newest checkpoints are damaged beyond the log's parity, and the disk
    fills as the read that falls back past them appends their deletions to the log:
    the read still returns the newest checkpoint that verifies, each damage is
    reported as not moved, and the file their copies went to is gone again (no copy
    aside of a record still in place). Once the disk is back, the next read moves
    all eight."""
    import errno

    from langgraph_checkpoint_verified.records.keys import checkpoint_key

    root = tmp_path / "s"
    configs, damaged_ids = _newest_eight_damaged_beyond_parity(root)
    log = root / "threads" / "t" / "log"

    seen = []
    reader = VerifiedSaver(root, on_corruption=seen.append)
    real_pwrite = os.pwrite

    def full_disk(fd, data, offset):
        if os.readlink(f"/proc/self/fd/{fd}") == str(log):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", full_disk)
    found = reader.get_tuple(generate_config("t"))
    monkeypatch.undo()

    assert found.config == configs[-9]
    assert [d.key for d in seen] == [checkpoint_key("t", "", c) for c in damaged_ids]
    assert all(d.quarantined_to is None for d in seen)
    assert reader.stats.quarantined_records == 0
    assert reader.storage.list("quarantine") == []

    seen.clear()
    again = VerifiedSaver(root, on_corruption=seen.append)
    assert again.get_tuple(generate_config("t")).config == configs[-9]
    assert len(seen) == 8 and all(d.quarantined_to for d in seen)
    assert again.reporter.quarantined_count() == 8
    assert VerifiedSaver(root).get_tuple(generate_config("t")).config == configs[-9]


def test_a_store_that_renames_one_at_a_time_never_puts_back_over_a_newer_record(tmp_path):
    """Where the store can only rename (one file per record, S3), the record is renamed,
    then read where it went: a writer that replaced it in between gets it back, unless a
    still newer record is there by then, which is never overwritten."""
    from langgraph_checkpoint_verified.records.keys import writes_key
    from langgraph_checkpoint_verified.storage.base import move_aside_one_by_one

    saver = VerifiedSaver.in_memory()
    (config,) = put_chain(saver, "t", 1)
    checkpoint_id = config["configurable"]["checkpoint_id"]
    key = writes_key("t", "", checkpoint_id, "task", "-3")
    storage = saver.storage
    storage.write(key, b"damaged bytes")
    real_move = storage.move_aside
    moves = []

    def racing_move(source, target, **kwargs):
        if not moves:  # a writer replaces the damaged record
            storage.write(key, _writes_record(saver, ("t", checkpoint_id), "R2"))
        moves.append((source, target))
        moved = real_move(source, target, **kwargs)
        if len(moves) == 1:  # and writes again, acknowledged
            storage.write(key, _writes_record(saver, ("t", checkpoint_id), "R3"))
        return moved

    storage.move_aside = racing_move
    assert move_aside_one_by_one(storage, [(key, "quarantine/q.record", b"damaged bytes")]) == [
        None
    ]
    storage.move_aside = real_move

    assert moves == [(key, "quarantine/q.record"), ("quarantine/q.record", key)]
    assert [w[2] for w in saver.get_tuple(config).pending_writes] == ["R3"]


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_async_methods_run_off_the_event_loop(tmp_path, backend):
    """The event loop's thread never does the saver's work, whatever the backend."""
    import asyncio
    import threading

    saver = VerifiedSaver(tmp_path / "s") if backend == "files" else VerifiedSaver.in_memory()
    worker_threads = set()
    real_read = saver.storage.read

    def recording_read(key):
        worker_threads.add(threading.get_ident())
        return real_read(key)

    saver.storage.read = recording_read

    async def main() -> int:
        config = await saver.aput(generate_config("t"), generate_checkpoint(), {}, {})
        assert await saver.aget_tuple(config) is not None
        assert [t async for t in saver.alist(generate_config("t"))]
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert worker_threads and loop_thread not in worker_threads


def test_temp_files_of_another_host_or_container_are_judged_by_age(tmp_path):
    """A pid from another pid namespace (container, host) says nothing here: a
    compaction's temp file written there is left alone while young, removed once old."""
    import time

    saver = VerifiedSaver(tmp_path / "s")
    (config,) = put_chain(saver, "t", 1)
    directory = tmp_path / "s" / thread_prefix("t")
    foreign = directory / f"{TEMP_PREFIX}999999-0badc0de-inflight"
    foreign.write_bytes(b"a compaction in progress elsewhere")
    assert saver.get_tuple(generate_config("t")).config == config
    saver.prune(["t"], strategy="keep_latest")
    assert foreign.exists()
    old = time.time() - 2 * 3600
    os.utime(foreign, (old, old))
    assert saver.get_tuple(generate_config("t")).config == config
    saver.prune(["t"], strategy="keep_latest")
    assert not foreign.exists()


def test_writes_share_the_thread_lock_and_maintenance_takes_it_alone(tmp_path):
    """put and put_writes hold the thread's lock shared; prune and delete_for_runs hold
    it exclusively, so they never remove what a write is in the middle of storing."""
    from contextlib import contextmanager

    from langgraph_checkpoint_verified.records.keys import thread_prefix

    saver = VerifiedSaver(tmp_path / "s")
    taken = []
    real_lock = saver.storage.lock

    @contextmanager
    def recording_lock(prefix, *, exclusive):
        taken.append((prefix, exclusive))
        with real_lock(prefix, exclusive=exclusive):
            yield

    saver.storage.lock = recording_lock
    (config,) = put_chain(saver, "t", 1)
    saver.put_writes(config, [("x", 1)], "task")
    saver.prune(["t"])
    saver.delete_for_runs(["no-such-run"])
    saver.prune(["t"], strategy="delete")
    saver.delete_thread("t")
    saver.delete_thread("never-written")  # no thread: nothing to lock, nothing made
    assert taken == [(thread_prefix("t"), False)] * 2 + [(thread_prefix("t"), True)] * 4
    assert not (tmp_path / "s" / thread_prefix("never-written")).exists()


def test_a_lock_won_on_a_deleted_directory_is_taken_again_on_the_new_one(tmp_path, monkeypatch):
    """delete_thread renames the thread directory away, log and all, while a put may be
    waiting on the log's lock; the waiter must then lock the thread as it is now."""
    import fcntl

    from langgraph_checkpoint_verified.records.keys import thread_prefix
    from langgraph_checkpoint_verified.storage.log.file_storage import LOG_NAME

    saver = VerifiedSaver(tmp_path / "s")
    put_chain(saver, "t", 1)
    prefix = thread_prefix("t")
    elsewhere = VerifiedSaver(tmp_path / "s")  # another process
    real_flock = fcntl.flock
    calls = []

    def flock_while_the_thread_is_deleted(fd, operation):
        calls.append(operation)
        if len(calls) == 1:
            elsewhere.delete_thread("t")
        return real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_while_the_thread_is_deleted)
    with saver.storage.lock(prefix, exclusive=False):
        log = tmp_path / "s" / prefix / LOG_NAME
        assert log.exists()  # the new directory's log, not the deleted one's
        probe = os.open(log, os.O_RDONLY)
        with pytest.raises(BlockingIOError):  # ...and its lock is held
            real_flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(probe)
        monkeypatch.undo()
    # taken on the deleted log (closed with it), then on the new one
    mine = [op for op in calls[1:] if op != fcntl.LOCK_UN]
    assert calls[0] == fcntl.LOCK_EX and mine[-1] == fcntl.LOCK_EX
    assert saver.get_tuple(generate_config("t")) is None  # the thread is really gone


# -- summaries: every record verified, no value deserialized ---------------------------------


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_a_summary_listing_verifies_every_record_and_deserializes_no_value(tmp_path, backend):
    """``_list(values=False)`` (what ``langgraph-verified inspect`` reads): the same
    checkpoints, configs and metadata as ``list``, channel values and pending writes
    left empty, and a checkpoint whose value does not verify left out."""
    saver = VerifiedSaver(tmp_path / "s") if backend == "files" else VerifiedSaver.in_memory()
    a = put_at(
        saver, generate_config("t"), {"x": "x1", "y": "y1"}, {"x": 1, "y": 1}, {"x": 1, "y": 1}
    )
    b = put_at(saver, a, {"x": "x2", "y": "y1"}, {"x": 2, "y": 1}, {"x": 2})
    c = put_at(saver, b, {"x": "x3", "y": "y1"}, {"x": 3, "y": 1}, {"x": 3})
    saver.put_writes(c, [("x", "pending")], "task")
    full = list(saver.list(generate_config("t")))
    summaries = list(saver.engine.list_checkpoints(None, values=False))
    assert [s.config for s in summaries] == [f.config for f in full] == [c, b, a]
    assert [s.metadata for s in summaries] == [f.metadata for f in full]
    assert all(s.checkpoint["channel_values"] == {} for s in summaries)
    assert all(s.pending_writes == [] for s in summaries)
    assert full[0].pending_writes == [("task", "x", "pending")]

    # y of b and c is held by a's record: damage a, and nothing on that chain verifies
    a_key = sorted(saver.storage.walk(checkpoints_prefix("t", "")))[0]
    record = saver.storage.read(a_key)
    saver.storage.write(a_key, record[:-1] + bytes([record[-1] ^ 0xFF]))
    assert list(saver.engine.list_checkpoints(None, values=False)) == []


def test_a_serializer_set_on_a_saver_is_used_by_it_and_by_no_copy_of_it(tmp_path):
    """LangGraph sets ``serde`` on a shallow copy (``with_allowlist``) and the LangGraph
    server sets it on the saver itself (JS graphs): each saver reads and writes with its
    own serializer, and a copy's never reaches the saver it was copied from."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    class Tagging(JsonPlusSerializer):
        def dumps_typed(self, obj):
            kind, data = super().dumps_typed(obj)
            return kind, b"tag:" + data

        def loads_typed(self, data):
            kind, payload = data
            assert payload.startswith(b"tag:"), "read with the wrong serializer"
            return super().loads_typed((kind, payload[len(b"tag:") :]))

    import copy

    saver = VerifiedSaver(tmp_path / "s")
    plain = saver.serde
    tagged = copy.copy(saver)
    tagged.serde = Tagging()
    config = tagged.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
        generate_checkpoint(),
        generate_metadata(),
        {},
    )
    assert tagged.get_tuple(config).checkpoint["id"] == config["configurable"]["checkpoint_id"]
    assert saver.serde is plain and saver.engine.serde is plain
    assert tagged.engine.serde is tagged.serde
    assert tagged.engine.storage is saver.engine.storage  # one store, one set of caches


class SlottedStorage:
    """A storage of one's own that takes no weak reference (``__slots__``, no base class):
    ``MemoryStorage``'s records behind it."""

    __slots__ = ("inner",)

    def __init__(self) -> None:
        from langgraph_checkpoint_verified.storage import MemoryStorage

        self.inner = MemoryStorage()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def test_a_storage_that_takes_no_weak_reference_is_used_and_its_damage_reported():
    storage = SlottedStorage()
    with pytest.raises(TypeError):
        weakref.ref(storage)
    saver = VerifiedSaver(storage=storage)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    first = saver.put(config, generate_checkpoint(), generate_metadata(step=0), {})
    second = saver.put(first, generate_checkpoint(), generate_metadata(step=1), {})
    key = checkpoint_key("t", "", second["configurable"]["checkpoint_id"])
    data = bytearray(storage.read(key))
    data[len(data) // 2] ^= 0xFF
    storage.write(key, bytes(data))
    found = VerifiedSaver(storage=storage).get_tuple(config)
    assert found is not None and found.config == first  # fell back past the damage
