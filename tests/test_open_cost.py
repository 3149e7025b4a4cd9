"""Opening a store is O(1): neither ``VerifiedSaver(path)`` nor loading the latest
checkpoint of a long thread reads a number of records that grows with the store.

Counted in records read (``FileStorage.read`` calls), not in seconds.
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified import FileStorage

# a latest checkpoint is one record, plus the records holding its unchanged
# values (one per channel at most) and its pending writes: a small constant
MAX_READS_FOR_LATEST = 8


def build_store(root, checkpoints: int, other_threads: int) -> dict:
    saver = VerifiedSaver(root, fsync=False)
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


def count_reads(monkeypatch, root):
    """Open ``root`` and load the latest checkpoint of "long"; records read by each step."""
    reads = []
    original = FileStorage.read

    def counting_read(self, key):
        reads.append(key)
        return original(self, key)

    monkeypatch.setattr(FileStorage, "read", counting_read)
    saver = VerifiedSaver(root)
    opening = len(reads)
    latest = saver.get_tuple({"configurable": {"thread_id": "long"}})
    monkeypatch.setattr(FileStorage, "read", original)
    return opening, len(reads) - opening, latest


@pytest.mark.parametrize("checkpoints", [20, 2_000])
def test_open_and_load_latest_read_a_bounded_number_of_records(tmp_path, monkeypatch, checkpoints):
    root = tmp_path / "store"
    last = build_store(root, checkpoints, other_threads=50)

    opening, loading, latest = count_reads(monkeypatch, root)

    assert opening <= 1  # the store marker, nothing else
    assert latest.config["configurable"]["checkpoint_id"] == last["configurable"]["checkpoint_id"]
    assert latest.checkpoint["channel_values"] == {
        "constant": "set once",
        "counter": checkpoints - 1,
    }
    assert latest.pending_writes == [("task", "out", checkpoints - 1)]
    assert 1 <= loading <= MAX_READS_FOR_LATEST


def test_reads_do_not_grow_with_the_number_of_checkpoints(tmp_path, monkeypatch):
    build_store(tmp_path / "small", 20, other_threads=0)
    build_store(tmp_path / "large", 2_000, other_threads=0)
    _, small, _ = count_reads(monkeypatch, tmp_path / "small")
    _, large, _ = count_reads(monkeypatch, tmp_path / "large")
    assert large <= small + 1
