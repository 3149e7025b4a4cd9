"""Self-healing logs: one bad bit or one lost 4 KB sector anywhere costs no checkpoint.

The torture tests are layout-blind, like a disk: they damage a thread's files at random
offsets (a fixed seed), whatever lies there, and then check what a new saver returns
against what was put. One damage in a stripe of a log is rebuilt from the log's parity
and served; ``repair`` writes it back, byte for byte. Two damages in one stripe may cost
checkpoints, as without parity, and never return wrong data.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from faultfs import FaultFS
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from logtools import view_log

from langgraph_checkpoint_verified import FileStorage, VerifiedSaver
from langgraph_checkpoint_verified.storage.log.entries import scan
from langgraph_checkpoint_verified.storage.log.parity import (
    BLOCK_SIZE,
    HEADER_SIZE,
    RECORD_SIZE,
    STRIPE_SIZE,
    OpenStripe,
    decode_record,
    encode_parity,
    parity_holds,
    rebuild,
    record_offset,
)

THREAD = {"configurable": {"thread_id": "chat"}}
STEPS = 30


def chat_graph(saver: VerifiedSaver) -> Any:
    """A chat that adds a ~6 KB message a step: a chain of records, as real chats make
    (few steps, so that reading back every checkpoint's messages stays cheap)."""

    def reply(state: MessagesState) -> dict:
        text = random.Random(len(state["messages"])).randbytes(3000).hex()  # compresses little
        return {"messages": [AIMessage(f"reply {len(state['messages'])} {text}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def history(saver: VerifiedSaver) -> dict[str, Any]:
    """checkpoint id -> its channel values, newest first, as the saver reads them."""
    return {
        t.config["configurable"]["checkpoint_id"]: t.checkpoint["channel_values"]
        for t in saver.list(THREAD)
    }


@pytest.fixture(scope="module")
def chat_store(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("chat") / "store"
    graph = chat_graph(VerifiedSaver(root))
    for step in range(STEPS):
        graph.invoke({"messages": [HumanMessage(f"message {step}")]}, THREAD)
    truth = history(VerifiedSaver(root))
    log = root / "threads" / "chat" / "log"
    assert log.stat().st_size > 2 * STRIPE_SIZE, "the chat spans several stripes"
    return root, truth


def thread_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "threads" / "chat").iterdir() if p.is_file())


def held(data: bytes | bytearray) -> int:
    """How many of a file's bytes hold something: all but the zeros it ends with (a
    log's room, which the next append overwrites: ``test_a_flipped_bit_in_the_room...``)."""
    return len(bytes(data).rstrip(b"\0"))


def flip_bit(path: Path, rng: random.Random) -> int:
    data = bytearray(path.read_bytes())
    offset = rng.randrange(held(data))
    data[offset] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return offset


def zero_block(path: Path, rng: random.Random) -> int:
    data = bytearray(path.read_bytes())
    offset = rng.randrange(0, held(data), BLOCK_SIZE)
    data[offset : offset + BLOCK_SIZE] = bytes(len(data[offset : offset + BLOCK_SIZE]))
    path.write_bytes(bytes(data))
    return offset


def damage_once(root: Path, rng: random.Random, kind: str) -> str:
    """One damage in the bytes of one of the thread's files, chosen by size as a disk would."""
    files = [p for p in thread_files(root) if p.stat().st_size]
    path = rng.choices(files, [held(p.read_bytes()) for p in files])[0]
    offset = (flip_bit if kind == "bit" else zero_block)(path, rng)
    return f"{kind} at {path.name}@{offset}"


@pytest.mark.parametrize("kind", ["bit", "block"])
def test_one_damage_anywhere_costs_no_checkpoint_and_repair_restores_every_byte(
    chat_store, tmp_path, kind
):
    root, truth = chat_store
    newest = next(iter(truth))
    originals = {p.name: p.read_bytes() for p in thread_files(root)}
    rng = random.Random(f"self-healing-{kind}")
    for trial in range(12):
        copy = tmp_path / f"{kind}-{trial}"
        shutil.copytree(root, copy)
        where = damage_once(copy, rng, kind)
        seen = []
        saver = VerifiedSaver(copy, on_corruption=seen.append)
        latest = saver.get_tuple(THREAD)
        assert latest.config["configurable"]["checkpoint_id"] == newest, where
        assert history(saver) == truth, where
        assert saver.stats.fallbacks == saver.stats.quarantined_records == 0, where
        assert all(d.healed for d in seen), where

        report = saver.verify(repair=True)
        assert report.damaged == [] and report.unusable_checkpoints == [], where
        assert all(h.written_back for h in report.healed), where
        after = VerifiedSaver(copy)
        assert after.verify().ok, where
        assert history(after) == truth, where
        log = (copy / "threads" / "chat" / "log").read_bytes()
        assert log == originals["log"], f"{where}: repair wrote every byte back"
        shutil.rmtree(copy)


def test_a_flipped_bit_in_the_room_costs_nothing_and_the_next_append_overwrites_it(
    chat_store, tmp_path
):
    """The room (zeros after the last entry, ``storage.log.room``) holds nothing: a bit
    flipped there is no damage to report, and the next append writes over it."""
    root, truth = chat_store
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    log = copy / "threads" / "chat" / "log"
    data = bytearray(log.read_bytes())
    stray = held(data) + 100
    assert stray < len(data), "the log has room"
    data[stray] ^= 0x10
    log.write_bytes(bytes(data))
    seen = []
    saver = VerifiedSaver(copy, on_corruption=seen.append)
    assert history(saver) == truth
    one_more_step(saver)
    entries, damaged, _ = scan(log.read_bytes())
    assert damaged == [] and any(e.offset <= stray < e.end for e in entries)  # written over
    after = VerifiedSaver(copy, on_corruption=seen.append)
    later = history(after)
    assert len(later) > len(truth) and all(later[id_] == values for id_, values in truth.items())
    assert after.verify().ok and seen == []


def test_a_damaged_block_is_reported_healed_once_and_verify_names_it(chat_store, tmp_path):
    root, truth = chat_store
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    log = copy / "threads" / "chat" / "log"
    data = bytearray(log.read_bytes())
    data[STRIPE_SIZE + 5 * BLOCK_SIZE : STRIPE_SIZE + 6 * BLOCK_SIZE] = bytes(BLOCK_SIZE)
    log.write_bytes(bytes(data))
    seen = []
    saver = VerifiedSaver(copy, on_corruption=seen.append)
    assert history(saver) == truth
    assert history(saver) == truth  # read again: served healed, not reported again
    assert [d.location for d in seen] == [f"{log}@{STRIPE_SIZE + 5 * BLOCK_SIZE}"]
    assert seen[0].healed and seen[0].quarantined_to is None
    assert saver.stats.healed_blocks == 1
    assert not (copy / "quarantine").exists() or not any((copy / "quarantine").iterdir())

    report = VerifiedSaver(copy).verify()
    assert not report.ok and report.needs_repair
    assert [h.location for h in report.healed] == [f"{log}@{STRIPE_SIZE + 5 * BLOCK_SIZE}"]
    assert report.damaged == []


class LogCalls:
    """The ``os.pwrite`` (offset) and ``os.fdatasync`` (``None``) calls on ``log``, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
        self.calls: list[int | None] = []
        real_sync, real_pwrite = os.fdatasync, os.pwrite

        def fdatasync(fd: int) -> None:
            if os.readlink(f"/proc/self/fd/{fd}") == str(log):
                self.calls.append(None)
            real_sync(fd)

        def pwrite(fd: int, data: Any, offset: int) -> int:
            if os.readlink(f"/proc/self/fd/{fd}") == str(log):
                self.calls.append(offset)
            return real_pwrite(fd, data, offset)

        monkeypatch.setattr(os, "fdatasync", fdatasync)
        monkeypatch.setattr(os, "pwrite", pwrite)


def one_more_step(saver: VerifiedSaver) -> None:
    """One more step of the chat, each call stored before the next is made."""
    chat_graph(saver).invoke({"messages": [HumanMessage("one more")]}, THREAD, durability="sync")


def damaged_copy(root: Path, copy: Path) -> tuple[Path, bytes, int]:
    """A copy of the store with one 4 KB block of the chat's log lost: the log, its
    bytes before, and where the block is."""
    shutil.copytree(root, copy)
    log = copy / "threads" / "chat" / "log"
    written = log.read_bytes()
    block = STRIPE_SIZE + 5 * BLOCK_SIZE
    data = bytearray(written)
    data[block : block + BLOCK_SIZE] = bytes(BLOCK_SIZE)
    log.write_bytes(bytes(data))
    return log, written, block


def test_the_next_append_writes_a_rebuilt_block_back_within_its_own_sync(
    chat_store, tmp_path, monkeypatch
):
    """A thread in use heals on disk: the block a read rebuilt is written back in its
    place by the thread's next append, just before its entries, and made durable by that
    append's sync (none of its own); the next process reads the log whole, with nothing
    to rebuild or report."""
    root, truth = chat_store
    log, written, block = damaged_copy(root, tmp_path / "damaged")
    intact = view_log(written, "threads/chat").end
    saver = VerifiedSaver(log.parents[2])
    assert history(saver) == truth
    assert saver.stats.healed_blocks == 1
    assert log.read_bytes()[block : block + BLOCK_SIZE] == bytes(BLOCK_SIZE), "reads write nothing"

    calls = LogCalls(monkeypatch, log).calls
    one_more_step(saver)
    assert calls.count(block) == 1
    at = calls.index(block)
    assert calls[at + 1] is not None and calls[at + 1] >= intact, "then the entries"
    assert None in calls[at + 1 :], "synced with them"
    assert log.read_bytes()[:intact] == written[:intact], "every byte back"

    seen: list[Any] = []
    after = VerifiedSaver(log.parents[2], on_corruption=seen.append)
    assert len(history(after)) == len(truth) + 3  # the step's three checkpoints
    assert seen == [] and after.stats.healed_blocks == 0
    assert after.verify().ok


def test_a_block_written_back_by_another_first_is_left_as_it_is(chat_store, tmp_path, monkeypatch):
    """The stripe is rebuilt afresh under the log's lock: a block ``repair`` (or another
    process's append) already wrote back has nothing to rebuild, and is not written again."""
    root, truth = chat_store
    log, written, block = damaged_copy(root, tmp_path / "damaged")
    saver = VerifiedSaver(log.parents[2])
    assert history(saver) == truth
    repaired = VerifiedSaver(log.parents[2]).verify(repair=True)
    assert [h.written_back for h in repaired.healed] == [True]
    calls = LogCalls(monkeypatch, log).calls
    one_more_step(saver)
    assert block not in calls
    assert log.read_bytes()[: block + BLOCK_SIZE] == written[: block + BLOCK_SIZE]
    assert VerifiedSaver(log.parents[2]).verify().ok


def test_two_damaged_blocks_in_one_stripe_never_return_wrong_data(chat_store, tmp_path):
    root, truth = chat_store
    rng = random.Random("two-in-a-stripe")
    for trial in range(6):
        copy = tmp_path / f"two-{trial}"
        shutil.copytree(root, copy)
        log = copy / "threads" / "chat" / "log"
        data = bytearray(log.read_bytes())
        stripe = rng.randrange(len(data) // STRIPE_SIZE)
        for block in rng.sample(range(16), 2):
            start = stripe * STRIPE_SIZE + block * BLOCK_SIZE
            data[start + rng.randrange(BLOCK_SIZE)] ^= 0x10
        log.write_bytes(bytes(data))
        saver = VerifiedSaver(copy)
        returned = history(saver)
        for checkpoint_id, values in returned.items():
            assert values == truth[checkpoint_id], "a checkpoint returned is exact"
        assert saver.get_tuple(THREAD) is not None
        shutil.rmtree(copy)


def test_a_store_written_before_parity_reads_as_it_is_and_repair_adds_it(chat_store, tmp_path):
    root, truth = chat_store
    copy = tmp_path / "old"
    shutil.copytree(root, copy)
    parity = copy / "threads" / "chat" / "log.parity"
    expected = parity.read_bytes()
    parity.unlink()
    saver = VerifiedSaver(copy)
    assert history(saver) == truth
    report = saver.verify()
    assert report.ok and report.needs_repair
    written = view_log((copy / "threads" / "chat" / "log").read_bytes(), "threads/chat").end
    assert report.unprotected_bytes == written  # every entry (not the room after them)
    repaired = saver.verify(repair=True)
    assert repaired.protected_bytes == report.unprotected_bytes
    assert repaired.unprotected_bytes == 0
    assert parity.read_bytes() == expected, "the parity an append-by-append writer leaves"
    assert VerifiedSaver(copy).verify().unprotected_bytes == 0


def test_compaction_writes_the_parity_of_the_log_it_writes(chat_store, tmp_path):
    root, truth = chat_store
    copy = tmp_path / "compacted"
    shutil.copytree(root, copy)
    (copy / "threads" / "chat" / "log.parity").unlink()
    saver = VerifiedSaver(copy)
    saver.prune(["chat"], strategy="keep_latest")
    log = (copy / "threads" / "chat" / "log").read_bytes()
    parity = (copy / "threads" / "chat" / "log.parity").read_bytes()
    assert parity == encode_parity(log)
    assert saver.verify().unprotected_bytes == 0


def test_appending_to_a_log_without_parity_protects_the_stripe_it_ends_in(tmp_path):
    storage = FileStorage(tmp_path, fsync=False)
    for n in range(30):
        storage.write(f"threads/t/ns/~/r{n}", os.urandom(3000))
    log = tmp_path / "threads" / "t" / "log"
    (tmp_path / "threads" / "t" / "log.parity").unlink()
    again = FileStorage(tmp_path, fsync=False)
    again.write("threads/t/ns/~/last", b"last")
    ((_, found),) = again.scrub("threads/t", repair=False)
    size = log.stat().st_size
    assert found.unprotected == [(0, STRIPE_SIZE)], "only the full stripe before it"
    assert size > STRIPE_SIZE


def test_a_parity_write_that_fails_does_not_fail_the_put(tmp_path, monkeypatch):
    saver = VerifiedSaver(tmp_path / "store")
    graph = chat_graph(saver)
    graph.invoke({"messages": [HumanMessage("first")]}, THREAD)
    real = os.pwrite

    def full_disk(fd: int, data: Any, offset: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("log.parity"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", full_disk)
    graph.invoke({"messages": [HumanMessage("second")]}, THREAD)
    monkeypatch.undo()
    truth = history(saver)
    assert len(truth) == 6  # three checkpoints an invoke: nothing of the second was lost
    report = VerifiedSaver(tmp_path / "store").verify()
    assert report.ok and report.unprotected_bytes > 0
    assert VerifiedSaver(tmp_path / "store").verify(repair=True).unprotected_bytes == 0
    assert history(VerifiedSaver(tmp_path / "store")) == truth


def test_a_torn_tail_cut_off_drops_the_parity_of_what_it_held(tmp_path):
    """The log is cut back to its intact end: a record of a stripe past it would describe
    bytes that are gone, and the next appends write new bytes there."""
    storage = FileStorage(tmp_path, fsync=False)
    for n in range(40):
        storage.write(f"threads/t/ns/~/r{n}", os.urandom(3000))
    log = tmp_path / "threads" / "t" / "log"
    parity = tmp_path / "threads" / "t" / "log.parity"
    intact = log.stat().st_size
    with open(log, "ab") as f:  # a write cut short, and an old record past its end
        f.write(b"LGCE\x01\x00" + os.urandom(STRIPE_SIZE))
    with open(parity, "r+b") as f:
        f.seek(record_offset(intact // STRIPE_SIZE + 1))
        f.write(OpenStripe.from_bytes(intact // STRIPE_SIZE + 1, os.urandom(100)).record())
    FileStorage(tmp_path, fsync=False).write("threads/t/ns/~/next", b"next")
    assert parity.stat().st_size <= record_offset(intact // STRIPE_SIZE + 1)
    ((_, found),) = [*FileStorage(tmp_path).scrub("threads/t", repair=False)] or [(None, None)]
    assert found is None or not (found.healed or found.unhealable or found.unprotected)


def test_two_writers_keep_one_parity_in_step(tmp_path):
    """Two processes' appends interleave (here two ``FileStorage`` objects: each keeps its
    own idea of the stripe being appended to): the parity always describes the log."""
    first, second = FileStorage(tmp_path, fsync=False), FileStorage(tmp_path, fsync=False)
    rng = random.Random(7)
    for n in range(60):
        writer = rng.choice([first, second])
        writer.write(f"threads/t/ns/~/r{n}", os.urandom(rng.randrange(1, 5000)))
    assert FileStorage(tmp_path).scrub("threads/t", repair=False) == []
    log = tmp_path / "threads" / "t" / "log"
    data = bytearray(log.read_bytes())
    data[BLOCK_SIZE * 3 + 100] ^= 1
    log.write_bytes(bytes(data))
    ((_, found),) = FileStorage(tmp_path).scrub("threads/t", repair=False)
    assert found.healed == [BLOCK_SIZE * 3]


def test_a_bit_flipped_in_the_stripe_another_writer_extended_is_still_rebuilt(tmp_path):
    """A writer that did not append last reads the stripe it goes on appending to from
    the log, to extend its parity: it checks those bytes against the stripe's record
    first. A bit flipped there since is rebuilt, not taken into the parity (which would
    then describe the damage, and the record holding that bit would be lost)."""
    first, second = FileStorage(tmp_path), FileStorage(tmp_path)
    rng = random.Random(3)
    written = {f"threads/t/ns/~/r{n}": rng.randbytes(3000) for n in range(6)}
    for key, data in written.items():
        (second if key.endswith("r5") else first).write(key, data)
    log = tmp_path / "threads" / "t" / "log"
    assert held(log.read_bytes()) < STRIPE_SIZE, "one stripe, still being appended to"
    with open(log, "r+b") as f:  # in r1, which ``first`` does not read again
        f.seek(BLOCK_SIZE + 100)
        damaged = bytes([f.read(1)[0] ^ 1])
        f.seek(BLOCK_SIZE + 100)
        f.write(damaged)
    first.write("threads/t/ns/~/next", b"next")
    scrubbed = FileStorage(tmp_path).scrub("threads/t", repair=False)
    assert [(found.healed, found.unhealable) for _, found in scrubbed] == [([BLOCK_SIZE], [])]
    reader = FileStorage(tmp_path)
    assert {key: reader.read(key) for key in written} == written


def test_an_append_made_without_a_sync_is_protected_once_one_follows(tmp_path):
    """A parity record written before the bytes it covers are synced could reach the disk
    without them, and after a power cut describe bytes the log never kept: a false alarm,
    or bytes "rebuilt" that nobody acknowledged (``test_power_loss`` cuts the power that
    way). Deletions, made without a sync, are covered by the sync of the next append."""
    storage = FileStorage(tmp_path)
    for n in range(3):
        storage.write(f"threads/t/ns/~/r{n}", os.urandom(1000))
    assert storage.scrub("threads/t", repair=False) == []
    storage.delete_many(["threads/t/ns/~/r0", "threads/t/ns/~/r1"])
    ((_, found),) = storage.scrub("threads/t", repair=False)
    assert len(found.unprotected) == 1 and not (found.healed or found.unhealable)
    storage.write("threads/t/ns/~/next", b"next")
    assert storage.scrub("threads/t", repair=False) == []
    # or by a sync of their own when the store is closed (``VerifiedSaver.close``)
    storage.delete_many(["threads/t/ns/~/next"])
    assert storage.scrub("threads/t", repair=False) != []
    storage.close_idle()
    assert storage.scrub("threads/t", repair=False) == []
    # a store that never syncs has no power cut to guard against: covered as written
    unsynced = FileStorage(tmp_path / "unsynced", fsync=False)
    unsynced.write("threads/t/ns/~/r0", b"r0")
    unsynced.delete_many(["threads/t/ns/~/r0"])
    assert unsynced.scrub("threads/t", repair=False) == []


def test_what_a_close_covers_never_replaces_the_parity_of_a_later_writer(tmp_path):
    """A deletion, made without a sync, is covered at the next sync or at ``close``. A
    writer that appended after it covered it already, with its own entries: the close
    must not write the stripe's record again from what it knows of the stripe, which
    ends before those entries (they would be left unprotected)."""
    first, second = FileStorage(tmp_path), FileStorage(tmp_path)
    for n in range(3):
        first.write(f"threads/t/ns/~/r{n}", os.urandom(1000))
    first.delete_many(["threads/t/ns/~/r0"])
    second.write("threads/t/ns/~/s0", os.urandom(1000))
    assert FileStorage(tmp_path).scrub("threads/t", repair=False) == []
    first.close_idle()
    assert FileStorage(tmp_path).scrub("threads/t", repair=False) == []


def test_appends_left_without_a_sync_get_one_once_a_stripe_of_them_waits(tmp_path):
    """What is unprotected stays bounded when nothing durable follows (a store pruned in a
    loop, say): each stripe's worth of such appends costs one ``fdatasync``."""
    FileStorage(tmp_path).write("threads/t/ns/~/first", b"first")
    with FaultFS.counting(tmp_path) as disk:
        storage = FileStorage(tmp_path)
        for n in range(40):  # about 1.9 stripes
            storage.write(f"threads/t/ns/~/r{n}", os.urandom(3000), durable=False)
    assert [op.path for op in disk.ops if op.kind in ("sync", "dirsync")] == ["threads/t/log"]
    ((_, found),) = storage.scrub("threads/t", repair=False)
    assert len(found.unprotected) == 1 and not (found.healed or found.unhealable)
    start, end = found.unprotected[0]
    assert start > STRIPE_SIZE and end - start < STRIPE_SIZE


# -- the parity format, alone --------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    log=st.binary(min_size=1, max_size=3 * STRIPE_SIZE // 2),
    cuts=st.lists(st.integers(min_value=1, max_value=9000), max_size=30),
    data=st.data(),
)
def test_parity_built_append_by_append_rebuilds_any_one_block(log, cuts, data):
    stripe = OpenStripe(0)
    records: dict[int, bytes] = {}
    at = 0
    for cut in [*cuts, len(log)]:
        piece = log[at : at + cut]
        if not piece:
            break
        for touched in stripe.extend(piece):
            records[touched.number] = touched.record()
        at += len(piece)
    assert b"".join(records[n] for n in sorted(records)) == encode_parity(log[:at])
    number = data.draw(st.sampled_from(sorted(records)))
    record = decode_record(records[number], number)
    start = number * STRIPE_SIZE
    original = log[start : min(start + STRIPE_SIZE, at)]
    block = data.draw(st.integers(0, (len(original) - 1) // BLOCK_SIZE))
    damaged = bytearray(original)
    offset = block * BLOCK_SIZE + data.draw(
        st.integers(0, min(BLOCK_SIZE, len(original) - block * BLOCK_SIZE) - 1)
    )
    damaged[offset] ^= data.draw(st.integers(1, 255))
    rebuilt = rebuild(bytes(damaged), record)
    assert rebuilt is not None and rebuilt.data == original and rebuilt.blocks == [block]


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32), at=st.integers(0, RECORD_SIZE - 1), bit=st.integers(0, 7))
def test_a_damaged_parity_record_is_refused_or_rebuilds_nothing(seed, at, bit):
    """A damaged header is refused; a damaged parity rebuilds no block (each rebuilt block
    fails its CRC), and a scrub sees that the parity no longer matches the blocks."""
    payload = random.Random(seed).randbytes(STRIPE_SIZE)
    record = bytearray(OpenStripe.from_bytes(0, payload).record())
    record[at] ^= 1 << bit
    decoded = decode_record(bytes(record), 0)
    if at < HEADER_SIZE:
        assert decoded is None
        return
    assert not parity_holds(payload, decoded)
    for block in range(16):
        damaged = bytearray(payload)
        damaged[block * BLOCK_SIZE] ^= 0x80
        assert rebuild(bytes(damaged), decoded) is None


def test_two_damaged_blocks_are_not_rebuilt():
    payload = random.Random(3).randbytes(STRIPE_SIZE)
    record = decode_record(OpenStripe.from_bytes(0, payload).record(), 0)
    damaged = bytearray(payload)
    damaged[10] ^= 1
    damaged[BLOCK_SIZE * 7 + 10] ^= 1
    assert rebuild(bytes(damaged), record) is None


def test_a_damaged_parity_is_found_by_verify_and_written_again_by_repair(chat_store, tmp_path):
    root, truth = chat_store
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    parity = copy / "threads" / "chat" / "log.parity"
    data = bytearray(parity.read_bytes())
    data[record_offset(1) + HEADER_SIZE + 100] ^= 0x01  # stripe 1's parity, not its header
    parity.write_bytes(bytes(data))
    saver = VerifiedSaver(copy)
    assert history(saver) == truth
    report = saver.verify()
    assert report.ok and report.unprotected_bytes == STRIPE_SIZE
    assert saver.verify(repair=True).protected_bytes == STRIPE_SIZE
    log = view_log((copy / "threads" / "chat" / "log").read_bytes(), "threads/chat")
    assert parity.read_bytes() == encode_parity(log.written)  # the entries, not the room


def test_reads_that_see_the_log_as_it_was_try_each_unhealable_stripe_once(tmp_path, monkeypatch):
    """Eight records damaged, since they were written, in two blocks of one stripe: the
    parity cannot rebuild it. Reads inside one ``consistent_reads`` block (a fallback
    past damaged checkpoints) try that stripe once; reads outside one try it each time
    (the log may have been repaired in between)."""
    import langgraph_checkpoint_verified.storage.log.redundancy as redundancy

    storage = FileStorage(tmp_path)
    keys = [f"threads/t/ns/{n}" for n in range(8)]
    for key in keys:
        storage.write(key, random.Random(key).randbytes(1500))
    log = tmp_path / "threads" / "t" / "log"
    data = bytearray(log.read_bytes())
    view = view_log(bytes(data), "threads/t")
    damaged_blocks = set()
    for key in keys:
        entry = view.entry(key)
        at = entry.data_offset + entry.data_size // 2
        data[at] ^= 0xFF
        damaged_blocks.add(at // BLOCK_SIZE)
    assert len(damaged_blocks) >= 2 and view.end <= STRIPE_SIZE
    log.write_bytes(bytes(data))

    tries = []
    real_rebuild = redundancy.rebuild

    def counted_rebuild(stripe, record):
        tries.append(record.number)
        return real_rebuild(stripe, record)

    monkeypatch.setattr(redundancy, "rebuild", counted_rebuild)
    reader = storage  # knows the entries as intact: each read checks its entry's checksum
    with reader.consistent_reads("threads/t"):
        read = [reader.read(key) for key in keys]
    assert tries == [0]
    for key, found in zip(keys, read, strict=True):  # as they are, for the record's checks
        assert found != random.Random(key).randbytes(1500) and len(found) == 1500
    tries.clear()
    assert [reader.read(key) for key in keys] == read
    assert tries == [0] * len(keys)
