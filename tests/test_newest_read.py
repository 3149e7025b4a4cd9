"""``get_tuple`` of a thread's newest checkpoint, again while the thread is unchanged.

The saver keeps the parts of the newest checkpoint it read (records, serialized
values, pending writes) with the log's stamp. While the stamp holds, the next
``get_tuple`` reads only the records it was made of, compares them with the bytes
it verified, and deserializes the values anew: no listing, no lookup of the
newest id, no decode. Every change to the thread, by this process or another,
changes the stamp; damage since changes the bytes (``test_record_cache``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from logtools import view_log

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.engine import reads
from langgraph_checkpoint_verified.storage import MemoryStorage
from langgraph_checkpoint_verified.storage.files import RecordFileStorage
from langgraph_checkpoint_verified.storage.log import file_storage
from langgraph_checkpoint_verified.storage.log.entries import HEADER_SIZE
from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage

THREAD = {"configurable": {"thread_id": "t"}}


def put_step(saver: VerifiedSaver, config: dict, step: int) -> dict:
    """A checkpoint whose ``messages`` changed and whose ``profile`` is held by the first."""
    values = {"messages": [f"m{i}" for i in range(step)], "profile": {"name": "p"}}
    versions = {"messages": step, "profile": 1}
    return saver.put(
        config,
        generate_checkpoint(channel_values=values, channel_versions=versions),
        generate_metadata(step=step),
        {"messages": step} if step > 1 else dict(versions),
    )


def put_steps(saver: VerifiedSaver, steps: int) -> list[dict]:
    config: dict = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    configs = []
    for step in range(1, steps + 1):
        config = put_step(saver, config, step)
        configs.append(config)
    return configs


class Looks:
    """What ``get_tuple`` asks of a store: ``pread`` sizes, listings, lookups, decodes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.preads: list[int] = []
        self.listings = 0
        self.decodes = 0
        real_pread = os.pread
        real_list, real_greatest = FileStorage.list, FileStorage.greatest_name
        real_decode = reads.decode_checkpoint

        def pread(fd, size, offset):
            self.preads.append(size)
            return real_pread(fd, size, offset)

        def listing(storage, prefix):
            self.listings += 1
            return real_list(storage, prefix)

        def greatest(storage, prefix):
            self.listings += 1
            return real_greatest(storage, prefix)

        def decode(*args, **kwargs):
            self.decodes += 1
            return real_decode(*args, **kwargs)

        monkeypatch.setattr(file_storage.os, "pread", pread)
        monkeypatch.setattr(FileStorage, "list", listing)
        monkeypatch.setattr(FileStorage, "greatest_name", greatest)
        monkeypatch.setattr(reads, "decode_checkpoint", decode)


def test_an_unchanged_thread_is_read_as_its_records_and_nothing_else(tmp_path, monkeypatch):
    saver = VerifiedSaver(tmp_path / "store", fsync=False)
    configs = put_steps(saver, 4)
    saver.put_writes(configs[-1], [("messages", "w")], "task")
    first = saver.get_tuple(THREAD)
    looks = Looks(monkeypatch)
    for _ in range(10):
        assert saver.get_tuple(THREAD) == first
    # per read: one 16-byte look at the log's end, for its stamp and for its three
    # records (the checkpoint's, the one holding `profile`, the pending writes), read
    # again and compared with the bytes verified then: one catch-up serves them all
    assert looks.preads.count(HEADER_SIZE) == 10
    assert len(looks.preads) == 40
    assert (looks.listings, looks.decodes) == (0, 0)


def test_what_a_read_hands_out_is_the_callers_own(tmp_path):
    saver = VerifiedSaver(tmp_path / "store", fsync=False)
    configs = put_steps(saver, 3)
    saver.put_writes(configs[-1], [("messages", ["w"])], "task")
    first = saver.get_tuple(THREAD)
    first.checkpoint["channel_values"]["messages"].append("changed by the caller")
    first.checkpoint["channel_versions"]["messages"] = 99
    first.metadata["step"] = 99
    first.pending_writes[0][2].append("changed")
    first.config["configurable"]["checkpoint_id"] = "changed"
    again = saver.get_tuple(THREAD)
    assert again.checkpoint["channel_values"]["messages"] == ["m0", "m1", "m2"]
    assert again.checkpoint["channel_versions"]["messages"] == 3
    assert again.metadata["step"] == 3
    assert again.pending_writes == [("task", "messages", ["w"])]
    assert again.config == configs[-1]


def other_process_puts(store: str) -> None:
    """A real second process: it puts step 4 on the thread, then exits."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_newest_read import put_step
        from langgraph_checkpoint_verified import VerifiedSaver
        saver = VerifiedSaver({store!r}, fsync=False)
        newest = saver.get_tuple({{"configurable": {{"thread_id": "t"}}}})
        put_step(saver, newest.config, 4)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


CHANGES = {
    "own put": lambda saver, other, configs, store: put_step(saver, configs[-1], 4),
    "own put_writes": lambda saver, other, configs, store: saver.put_writes(
        configs[-1], [("messages", "w")], "task"
    ),
    "another saver's put": lambda saver, other, configs, store: put_step(other, configs[-1], 4),
    "another saver's put_writes": lambda saver, other, configs, store: other.put_writes(
        configs[-1], [("messages", "w")], "task"
    ),
    "another saver's delete_thread": lambda saver, other, configs, store: other.delete_thread("t"),
    "another saver's prune": lambda saver, other, configs, store: other.prune(
        ["t"], strategy="keep_latest"
    ),
    "another process's put": lambda saver, other, configs, store: other_process_puts(store),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_change_to_the_thread_is_seen_by_the_next_read(tmp_path, change):
    store = str(tmp_path / "store")
    saver = VerifiedSaver(store, fsync=False)
    configs = put_steps(saver, 3)
    assert saver.get_tuple(THREAD) == saver.get_tuple(THREAD)  # read, then kept
    other = VerifiedSaver(store, fsync=False)  # its own descriptors: another process here
    CHANGES[change](saver, other, configs, store)
    # what a saver that never read the thread reads is what the first one must read too
    expected = VerifiedSaver(store, fsync=False).get_tuple(THREAD)
    assert saver.get_tuple(THREAD) == expected
    if change.endswith("delete_thread"):
        assert expected is None
    elif change.endswith("put_writes"):
        assert expected.pending_writes == [("task", "messages", "w")]
    elif change.endswith("put"):
        assert expected.checkpoint["channel_values"]["messages"] == ["m0", "m1", "m2", "m3"]


def test_a_thread_stamp_changes_with_every_change_to_the_log(tmp_path):
    storage, other = FileStorage(tmp_path), FileStorage(tmp_path)  # two processes
    assert storage.thread_stamp("threads/t") is None  # no log yet
    storage.write("threads/t/a", b"1")
    first = storage.thread_stamp("threads/t")
    assert first is not None and storage.thread_stamp("threads/t") == first
    stamps = [first]
    for change in (
        lambda: storage.write("threads/t/b", b"2"),
        lambda: other.write("threads/t/c", b"3"),
        lambda: other.delete("threads/t/c"),
        lambda: other.compact("threads/t"),
        lambda: storage.write("threads/t/d", b"4"),
    ):
        change()
        stamps.append(storage.thread_stamp("threads/t"))
    assert None not in stamps and len(set(stamps)) == len(stamps)
    other.delete_tree("threads/t")
    assert storage.thread_stamp("threads/t") is None
    assert storage.read("threads/t/a") is None


def test_stores_that_cannot_tell_cheaply_have_no_thread_stamp(tmp_path):
    memory = MemoryStorage()
    memory.write("threads/t/a", b"1")
    records = RecordFileStorage(tmp_path)
    records.write("threads/t/a", b"1")
    assert memory.thread_stamp("threads/t") is None
    assert records.thread_stamp("threads/t") is None


def test_a_store_still_holds_bytes_only_if_they_read_the_same_again(tmp_path):
    storage = FileStorage(tmp_path)
    storage.write("threads/t/a", b"one")
    storage.write("threads/t/b", b"two")
    assert storage.still_holds([("threads/t/a", b"one"), ("threads/t/b", b"two")])
    assert not storage.still_holds([("threads/t/a", b"one"), ("threads/t/b", b"tw0")])
    assert not storage.still_holds([("threads/t/a", b"on")])
    storage.delete("threads/t/b")
    assert not storage.still_holds([("threads/t/b", b"two")])
    log = tmp_path / "threads/t/log"
    entry = view_log(log.read_bytes(), "threads/t").entry("threads/t/a")
    with open(log, "r+b") as f:  # a bit flipped on disk since it was read
        f.seek(entry.data_offset)
        f.write(b"n")  # "one" -> "nne"
    assert not storage.still_holds([("threads/t/a", b"one")])
    memory = MemoryStorage()
    memory.write("threads/t/a", b"one")
    assert memory.still_holds([("threads/t/a", b"one")])
    assert not memory.still_holds([("threads/t/a", b"two")])
