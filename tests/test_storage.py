"""The storage backends on their own: what the saver's speed relies on stays correct.

* ``MemoryStorage`` indexes keys by prefix; ``list`` and ``walk`` must answer
  exactly what a scan of every key would, whatever changed the records
  (the storage's own methods, or the dict changed by hand as tests do).
* ``RecordFileStorage`` remembers the directories it made; one removed since
  (``delete_thread``, ``prune``, another process, a person) is made again.
* Quarantine moves the exact bytes aside with a reason (a record damaged in
  a thread's log, out of the log), and its writes are the only ones that skip
  a sync: acknowledged writes stay durable.
* The log ``FileStorage`` has its own tests in ``test_log_storage.py``.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import sys
import time

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from logtools import lose_parity

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.records import keys as record_keys
from langgraph_checkpoint_verified.records.format import RecordKind
from langgraph_checkpoint_verified.records.keys import TEMP_PREFIX
from langgraph_checkpoint_verified.storage import memory
from langgraph_checkpoint_verified.storage.files import PID_SPACE, RecordFileStorage, copy_range
from langgraph_checkpoint_verified.storage.log.entries import scan
from langgraph_checkpoint_verified.storage.log.file_storage import LOG_NAME
from langgraph_checkpoint_verified.storage.memory import MemoryStorage

# -- MemoryStorage's index ------------------------------------------------------


def scanned_list(records: dict[str, bytes], prefix: str) -> set[str]:
    start = f"{prefix}/"
    return {k[len(start) :].split("/", 1)[0] for k in records if k.startswith(start)}


def scanned_walk(records: dict[str, bytes], prefix: str) -> list[str]:
    return sorted(k for k in records if k.startswith(f"{prefix}/"))


def assert_index_matches_records(storage: MemoryStorage, prefixes: list[str]) -> None:
    records = dict(storage.records)
    for prefix in prefixes:
        listed = storage.list(prefix)
        assert len(listed) == len(set(listed))
        assert set(listed) == scanned_list(records, prefix), prefix
        assert list(storage.walk(prefix)) == scanned_walk(records, prefix), prefix
    # nothing is indexed that no key needs any more
    assert storage.records.children == memory._IndexedRecords(records).children


def random_key(rng: random.Random) -> str:
    depth = rng.randint(1, 4)
    # "b" and "b-x" and "b/..." sort differently as names and as keys: walk must sort keys
    return "/".join(rng.choice(["a", "b", "b-x", "c", "q"]) for _ in range(depth))


PREFIXES = ["a", "b", "b-x", "a/b", "b/b", "b-x/a", "q", "", "a/b/c", "missing"]


def test_memory_index_agrees_with_a_full_scan_after_every_kind_of_change():
    rng = random.Random(7)
    storage = MemoryStorage()
    for step in range(3000):
        key = random_key(rng)
        action = rng.randrange(10)
        if action < 4:
            storage.write(key, b"x", replace=rng.random() < 0.5)
        elif action == 4:
            storage.delete(key)
        elif action == 5:
            storage.delete_tree(key)
        elif action == 6:
            storage.move_aside(key, random_key(rng))
        elif action == 7:  # by hand, as the mayhem tests change records
            storage.records[key] = b"by hand"
        elif action == 8:
            storage.records.pop(key, None)
        else:
            storage.records.update({random_key(rng): b"u", random_key(rng): b"v"})
        if step % 100 == 0:
            assert_index_matches_records(storage, PREFIXES)
    assert_index_matches_records(storage, PREFIXES)


def test_memory_records_changed_as_a_dict_keep_the_index():
    storage = MemoryStorage()
    storage.records.update({"t/1/x": b"1", "t/2/y": b"2"}, **{"u": b"3"})
    storage.records.setdefault("t/3", b"3")
    storage.records |= {"t/4/z": b"4"}
    del storage.records["t/1/x"]
    assert sorted(storage.list("t")) == ["2", "3", "4"]
    storage.records.popitem()
    storage.records.clear()
    assert storage.list("t") == [] and list(storage.walk("t")) == []
    storage.records = {"t/9/r": b"9"}  # replaced wholesale
    assert storage.list("t") == ["9"] and list(storage.walk("t")) == ["t/9/r"]
    assert_index_matches_records(storage, ["t", "t/9", "u"])


def test_memory_list_of_a_thread_ignores_other_threads():
    saver = VerifiedSaver.in_memory()
    for n in range(30):
        saver.put(
            {"configurable": {"thread_id": f"other-{n}", "checkpoint_ns": ""}},
            generate_checkpoint(channel_values={"x": n}, channel_versions={"x": 1}),
            generate_metadata(),
            {"x": 1},
        )
    saver.put(
        {"configurable": {"thread_id": "mine", "checkpoint_ns": ""}},
        generate_checkpoint(channel_values={"x": "mine"}, channel_versions={"x": 1}),
        generate_metadata(),
        {"x": 1},
    )
    prefix = record_keys.checkpoints_prefix("mine", "")
    assert len(saver.storage.list(prefix)) == 1
    assert saver.get_tuple({"configurable": {"thread_id": "mine"}}).checkpoint[
        "channel_values"
    ] == {"x": "mine"}
    saver.delete_thread("mine")
    assert saver.storage.list(prefix) == []
    assert saver.get_tuple({"configurable": {"thread_id": "mine"}}) is None
    assert len(saver.storage.list("threads")) == 30


# -- RecordFileStorage's directories --------------------------------------------------


def put_one(saver: VerifiedSaver, thread_id: str, value: int, parent: dict | None = None) -> dict:
    return saver.put(
        parent or {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}},
        generate_checkpoint(channel_values={"x": value}, channel_versions={"x": value}),
        generate_metadata(),
        {"x": value},
    )


def latest_value(saver: VerifiedSaver, thread_id: str):
    found = saver.get_tuple({"configurable": {"thread_id": thread_id}})
    return None if found is None else found.checkpoint["channel_values"]["x"]


@pytest.mark.parametrize("deleted_by", ["same saver", "another saver", "rmtree"])
def test_put_after_the_thread_was_deleted_makes_its_directories_again(tmp_path, deleted_by):
    saver = VerifiedSaver(tmp_path / "store")
    config = put_one(saver, "t", 1)
    saver.put_writes(config, [("x", 1)], "task")
    if deleted_by == "same saver":
        saver.delete_thread("t")
    elif deleted_by == "another saver":
        VerifiedSaver(tmp_path / "store").delete_thread("t")
    else:
        # removed by hand, with no process using the store: a process that keeps a log
        # open learns of its move only from the log (its retirement), as a process using
        # an SQLite database does not see it unlinked (docs/format.md, "Sharing a store")
        del saver
        shutil.rmtree(tmp_path / "store" / "threads")
        saver = VerifiedSaver(tmp_path / "store")
    assert latest_value(saver, "t") is None

    config = put_one(saver, "t", 2)
    saver.put_writes(config, [("x", 2)], "task")
    saver.put_tool_record("t", "", "call-1", "result", fingerprint="f", value="done")

    for reader in (saver, VerifiedSaver(tmp_path / "store")):
        assert latest_value(reader, "t") == 2
        assert reader.get_tuple(config).pending_writes == [("task", "x", 2)]
        assert reader.get_tool_record("t", "", "call-1", "result") == ("f", "done")
        assert reader.verify().ok


def test_put_after_prune_delete_makes_its_directories_again(tmp_path):
    saver = VerifiedSaver(tmp_path / "store", fsync=False)
    put_one(saver, "t", 1)
    saver.prune(["t"], strategy="delete")
    put_one(saver, "t", 2)
    assert latest_value(VerifiedSaver(tmp_path / "store"), "t") == 2


@pytest.mark.parametrize("removed_by", ["another storage", "rmtree"])
def test_file_write_and_lock_make_a_removed_directory_again(tmp_path, removed_by):
    storage = RecordFileStorage(tmp_path / "s")

    def remove():
        if removed_by == "another storage":
            RecordFileStorage(tmp_path / "s").delete_tree("a")
        else:
            shutil.rmtree(tmp_path / "s" / "a")

    storage.write("a/b/one", b"1")
    with storage.lock("a/b", exclusive=True):
        pass
    remove()
    assert storage.write("a/b/two", b"2")
    assert storage.read("a/b/two") == b"2"
    assert storage.list("a/b") == ["two"]
    remove()
    assert storage.write("a/b/three", b"3", replace=False)
    remove()
    with storage.lock("a/b", exclusive=False):
        assert (tmp_path / "s" / "a" / "b" / ".lock").exists()


def flip_middle_byte(root, key: str) -> tuple[bytes, bytes]:
    """Flip a byte in the middle of ``key``'s record in its thread's log, and lose the
    log's parity; the record's bytes and its whole entry's bytes, as they now are."""
    log = root / key.split("/ns/")[0] / LOG_NAME
    lose_parity(log)  # damage beyond what parity rebuilds
    damaged = bytearray(log.read_bytes())
    (entry,) = [e for e in scan(bytes(damaged))[0] if e.key == key][-1:]
    damaged[entry.data_offset + entry.data_size // 2] ^= 0xFF
    log.write_bytes(bytes(damaged))
    record = bytes(damaged[entry.data_offset : entry.data_offset + entry.data_size])
    return record, bytes(damaged[entry.offset : entry.end])


def test_quarantine_after_its_directory_was_removed(tmp_path):
    root = tmp_path / "store"
    saver = VerifiedSaver(root, fsync=False)
    configs = [put_one(saver, "t", value) for value in (1, 2, 3)]
    # entries after the checkpoints': damage to them is in the middle of the log, not a torn tail
    saver.put_writes(configs[0], [("x", 0)], "task")
    keys = [
        record_keys.checkpoint_key("t", "", c["configurable"]["checkpoint_id"]) for c in configs
    ]
    flip_middle_byte(root, keys[2])
    assert latest_value(saver, "t") == 2
    shutil.rmtree(root / "quarantine")  # a person clears the quarantine

    damaged, _ = flip_middle_byte(root, keys[1])
    assert latest_value(saver, "t") == 1
    assert saver.stats.quarantined_records == 2
    assert saver.storage.read(keys[1]) is None
    moved = list((root / "quarantine").glob("*.record"))
    assert [p.read_bytes() for p in moved] == [damaged]


def test_file_list_hides_temp_and_lock_files_whatever_the_other_names(tmp_path):
    storage = RecordFileStorage(tmp_path / "store", fsync=False)
    storage.write("d/-first", b"1")  # sorts before "." : the careful path
    storage.write("d/plain", b"2")
    with storage.lock("d", exclusive=True):
        pass
    (tmp_path / "store" / "d" / f"{record_keys.TEMP_PREFIX}{os.getpid()}-abc").write_bytes(b"t")
    assert sorted(storage.list("d")) == ["-first", "plain"]
    storage.delete("d/-first")
    assert storage.list("d") == ["plain"]
    storage.delete("d/plain")
    assert storage.list("d") == []
    (tmp_path / "store" / "e").mkdir()
    (tmp_path / "store" / "e" / "only").write_bytes(b"3")
    assert storage.list("e") == ["only"]


# -- what is durable and what is not ---------------------------------------------


class FsyncCounter:
    """Counts syncs of any kind: ``fsync`` (files, directories) and ``fdatasync`` (logs)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)

            def counting(fd, _real=real):
                self.calls += 1
                return _real(fd)

            monkeypatch.setattr(os, name, counting)

    def during(self, action):
        before = self.calls
        action()
        return self.calls - before


def test_acknowledged_writes_are_fsynced_and_quarantine_notes_are_not(tmp_path, monkeypatch):
    saver = VerifiedSaver(tmp_path / "store")
    fsyncs = FsyncCounter(monkeypatch)
    configs = []
    # at least the log's fdatasync for each acknowledged call
    assert fsyncs.during(lambda: configs.append(put_one(saver, "t", 1))) >= 1
    assert fsyncs.during(lambda: configs.append(put_one(saver, "t", 2, configs[0]))) >= 1
    assert fsyncs.during(lambda: saver.put_writes(configs[-1], [("x", 2)], "task")) >= 1
    assert fsyncs.during(lambda: saver.put_writes(configs[-1], [("__error__", "e")], "t2")) >= 1
    assert (
        fsyncs.during(lambda: saver.put_tool_record("t", "", "c", "intent", fingerprint="f")) >= 1
    )

    key = record_keys.checkpoint_key("t", "", configs[-1]["configurable"]["checkpoint_id"])
    # a reader that has not seen the log yet finds the damaged entry by its key
    _, damaged = flip_middle_byte(tmp_path / "store", key)

    reader = VerifiedSaver(tmp_path / "store")
    found = []
    assert fsyncs.during(lambda: found.append(latest_value(reader, "t"))) == 0
    assert found == [1]
    assert reader.stats.quarantined_records == 1

    # the exact bytes were moved aside, with a reason that says what and why
    quarantine = tmp_path / "store" / "quarantine"
    records = sorted(quarantine.glob("*.record"))
    reasons = sorted(quarantine.glob("*.reason"))
    assert len(records) == len(reasons) == 1
    assert records[0].read_bytes() == damaged
    assert records[0].name[: -len(".record")] == reasons[0].name[: -len(".reason")]
    note = json.loads(
        reader.codec.decode(reasons[0].read_bytes(), RecordKind.QUARANTINE_REASON, None)
    )
    assert note["original_key"] == key
    assert note["kind"] == "checkpoint"
    # the whole entry was moved aside, framing included: the note names the record by
    # its key, not by an identity read from inside the damaged bytes
    # and a later read that names the quarantined checkpoint still falls back to its parent
    fallback = VerifiedSaver(tmp_path / "store").get_tuple(configs[-1])
    assert (
        fallback.config["configurable"]["checkpoint_id"]
        == (configs[0]["configurable"]["checkpoint_id"])
    )


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_write_not_durable_is_still_a_whole_record(tmp_path, backend):
    storage = RecordFileStorage(tmp_path / "s") if backend == "files" else MemoryStorage()
    assert storage.write("q/a", b"first", durable=False)
    assert storage.write("q/a", b"second", durable=False)
    assert not storage.write("q/a", b"third", replace=False, durable=False)
    assert storage.read("q/a") == b"second"
    assert storage.list("q") == ["a"]


def test_usage_counts_every_record_damaged_ones_included(tmp_path):
    """``usage`` is what deleting the records frees: their lengths, damaged ones too,
    without reading them (files: the key directory; S3: a LIST)."""
    saver = VerifiedSaver(tmp_path / "s")
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for _ in range(3):
        config = saver.put(config, generate_checkpoint(), generate_metadata(), {})
    prefix = record_keys.thread_prefix("t")
    keys = list(saver.storage.walk(prefix))
    assert saver.storage.usage(prefix) == sum(len(saver.storage.read(k)) for k in keys)
    log = tmp_path / "s" / prefix / LOG_NAME
    entries, _, _ = scan(log.read_bytes())
    data = bytearray(log.read_bytes())
    data[entries[1].data_offset + 10] ^= 0xFF  # in the second entry: damage, not a torn tail
    log.write_bytes(bytes(data))
    fresh = VerifiedSaver(tmp_path / "s")
    assert fresh.storage.usage(prefix) == sum(len(fresh.storage.read(k) or b"") for k in keys)


@pytest.mark.parametrize("kernel", ["copies", "refuses", "is not asked"])
def test_copy_range_copies_in_the_kernel_or_in_this_process(tmp_path, monkeypatch, kernel):
    """A hint's carried blocks are copied from the earlier hint file: by
    ``copy_file_range`` where the kernel can, else read and written here (another file
    system, an old kernel, a platform without it); a source too short is an error."""
    source_bytes = random.Random(7).randbytes(1_000_000)
    (tmp_path / "source").write_bytes(source_bytes)
    source = os.open(tmp_path / "source", os.O_RDONLY)
    target = os.open(tmp_path / "target", os.O_RDWR | os.O_CREAT)
    in_kernel = []
    real = getattr(os, "copy_file_range", None)
    if kernel == "refuses":

        def refused(*args):
            in_kernel.append(args)
            raise OSError(errno.EXDEV, "not between these file systems")

        monkeypatch.setattr(os, "copy_file_range", refused, raising=False)
    elif kernel == "is not asked":
        monkeypatch.delattr(os, "copy_file_range", raising=False)
    elif real is not None:
        monkeypatch.setattr(os, "copy_file_range", lambda *a: in_kernel.append(a) or real(*a))
    try:
        os.pwrite(target, b"head", 0)
        copy_range(source, 1_000, 600_000, target, 4)
        assert os.pread(target, 600_004, 0) == b"head" + source_bytes[1_000:601_000]
        with pytest.raises(OSError) as short:
            copy_range(source, 900_000, 200_000, target, 4)
        assert short.value.errno == errno.EIO
    finally:
        os.close(source)
        os.close(target)
    assert bool(in_kernel) == (kernel != "is not asked" and real is not None)


def test_writes_that_need_not_last_make_their_directory_once_and_never_vouch_for_one_that_must(
    tmp_path, monkeypatch
):
    """The quarantine's copies are written without a sync: the first makes the directory,
    the next ones make no call for it. A durable write into that directory afterwards
    still makes the directory's entry durable: after a power cut its file is there."""
    from faultfs import FaultFS, Tally

    for seed in range(8):  # an unsynced directory entry is lost or kept at random
        root = tmp_path / f"s{seed}"
        storage = RecordFileStorage(root)
        with FaultFS(root, seed=seed) as disk:
            for name in "abc":
                storage.write(f"quarantine/{name}.record", name.encode(), durable=False)
            assert Tally.of(disk.ops).new_dirs == 1
            assert not [op for op in disk.ops if op.kind in ("sync", "dirsync")]
            storage.write("quarantine/kept.record", b"kept")
            disk.cut_power()
        assert (root / "quarantine" / "kept.record").read_bytes() == b"kept", seed

    storage = RecordFileStorage(tmp_path / "counted")
    made = []
    real_mkdir = os.mkdir
    monkeypatch.setattr(
        os, "mkdir", lambda path, *args: made.append(path) or real_mkdir(path, *args)
    )
    for name in "abc":
        storage.write(f"quarantine/{name}.record", name.encode(), durable=False)
    assert made == [str(tmp_path / "counted" / "quarantine")]  # not one call per write


@pytest.mark.parametrize("grown", [0, 1, 70_000])
def test_a_record_file_is_read_whole_however_the_reads_come(tmp_path, monkeypatch, grown):
    """``read_all`` reads to the file's end: a file longer than its ``fstat`` said (it grew
    in between), reads that return less than asked, and an empty file."""
    from langgraph_checkpoint_verified.storage import files

    data = os.urandom(5_000 + grown)
    path = tmp_path / "record"
    path.write_bytes(data)
    real_fstat, real_read = os.fstat, os.read
    said = os.stat(path).st_size - grown

    class Sized:
        st_size = said

    monkeypatch.setattr(os, "fstat", lambda fd: Sized)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert files.read_all(fd) == data
    finally:
        os.close(fd)
    monkeypatch.setattr(os, "fstat", real_fstat)
    monkeypatch.setattr(os, "read", lambda fd, n: real_read(fd, min(n, 777)))
    assert RecordFileStorage(tmp_path / "store").read("missing") is None
    fd = os.open(path, os.O_RDONLY)
    try:
        assert files.read_all(fd) == data
    finally:
        os.close(fd)
    (tmp_path / "empty").write_bytes(b"")
    fd = os.open(tmp_path / "empty", os.O_RDONLY)
    try:
        assert files.read_all(fd) == b""
    finally:
        os.close(fd)


def test_a_temp_file_is_removed_only_once_its_writer_is_gone(tmp_path):
    """A temp file names its writer (pid and pid space): one whose writer still runs may
    be about to be renamed into place and stays; one whose writer exited is removed by
    the next listing. A writer of another pid space (another host or container) cannot
    be asked: its temp file stays until it is an hour old."""
    storage = RecordFileStorage(tmp_path / "store", fsync=False)
    storage.write("cache/kept", b"k")
    directory = tmp_path / "store" / "cache"
    live = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        names = {
            "live": f"{TEMP_PREFIX}{live.pid}-{PID_SPACE}-aaaa",
            "gone": f"{TEMP_PREFIX}{gone.pid}-{PID_SPACE}-bbbb",
            "elsewhere": f"{TEMP_PREFIX}1-00000000-cccc",
            "elsewhere, old": f"{TEMP_PREFIX}1-00000000-dddd",
        }
        for name in names.values():
            (directory / name).write_bytes(b"half written")
        hour_ago = time.time() - 3700
        os.utime(directory / names["elsewhere, old"], (hour_ago, hour_ago))
        assert storage.list("cache") == ["kept"]
        left = {what for what, name in names.items() if (directory / name).exists()}
        assert left == {"live", "elsewhere"}
    finally:
        live.communicate(b"")
    storage.list("cache")  # its writer exited since
    assert not (directory / names["live"]).exists()


@pytest.mark.parametrize("storage_class", [RecordFileStorage, MemoryStorage])
def test_move_aside_without_replace_never_moves_over_a_record(tmp_path, storage_class):
    """``replace=False`` (the quarantine's names, a record moved back): a target that exists
    is kept, the source stays where it was, and the call says it moved nothing."""
    storage = (
        storage_class(tmp_path / "store", fsync=False)
        if storage_class is RecordFileStorage
        else storage_class()
    )
    storage.write("quarantine/a", b"first")
    storage.write("quarantine/b", b"second")
    assert storage.move_aside("quarantine/a", "quarantine/b", replace=False) is False
    assert (storage.read("quarantine/a"), storage.read("quarantine/b")) == (b"first", b"second")
    assert storage.move_aside("quarantine/a", "quarantine/c", replace=False) is True
    assert (storage.read("quarantine/a"), storage.read("quarantine/c")) == (None, b"first")
    assert storage.move_aside("quarantine/c", "quarantine/b") is True  # replace: over it
    assert (storage.read("quarantine/b"), storage.read("quarantine/c")) == (b"first", None)
