"""A log's retirement: how a process that keeps a log open learns that it moved away.

A process knows a log up to some point, with zeros (room) after it. While those zeros
are there, nobody appended, and the file is still the thread's log: whoever moves it
away (a compaction renames a new log over it, a deletion renames the thread away)
first appends its retirement, under the log's lock. So a warm thread is read and
appended to with no look at its path; a retirement read sends the reader to the path,
and keeps sending it there until the path names another file.

Two ``FileStorage`` objects on one directory are two processes here: each opens its own
descriptors, and a ``flock`` belongs to the open file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from logtools import append_entry

from langgraph_checkpoint_verified.errors import StoreWriteError
from langgraph_checkpoint_verified.storage.log import file_storage
from langgraph_checkpoint_verified.storage.log.entries import DELETE, encode_entry, scan
from langgraph_checkpoint_verified.storage.log.file_storage import (
    LOG_NAME,
    RETIRED_NAME,
    FileStorage,
)

T = "threads/t"
RETIRED = f"{T}/{RETIRED_NAME}"


def log_of(root: Path) -> Path:
    return root / T / LOG_NAME


class PathLooks:
    """Counts the looks at the log's path: an ``os.stat`` of it, or an ``os.open`` by it
    (a process opens a log it has not opened yet with no ``stat`` first)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
        self.count = 0

        def counting(real):
            def counted(path, *args, **kwargs):
                if str(path) == str(log):
                    self.count += 1
                return real(path, *args, **kwargs)

            return counted

        monkeypatch.setattr(os, "stat", counting(os.stat))
        monkeypatch.setattr(os, "open", counting(os.open))


def test_a_warm_log_is_appended_to_and_read_with_no_look_at_its_path(tmp_path, monkeypatch):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/warm", b"up")
    looks = PathLooks(monkeypatch, log_of(tmp_path))
    for n in range(20):
        storage.write(f"{T}/ns/{n}", b"x" * n)
        assert storage.read(f"{T}/ns/{n}") == b"x" * n
    assert looks.count == 0
    # another process appends: the zeros are gone where this one knew the log to end,
    # so it looks at the path (once) and reads what was appended
    FileStorage(tmp_path).write(f"{T}/ns/other", b"theirs")
    looks.count = 0
    assert storage.read(f"{T}/ns/other") == b"theirs"
    assert storage.read(f"{T}/ns/other") == b"theirs"
    assert looks.count == 1


@pytest.mark.parametrize("move", ["compact", "delete"])
def test_a_writer_that_knew_the_old_log_appends_to_the_one_in_its_place(tmp_path, move):
    writer, mover = FileStorage(tmp_path), FileStorage(tmp_path)
    writer.write(f"{T}/ns/kept", b"before")
    writer.write(f"{T}/ns/dropped", b"before")
    old = log_of(tmp_path).stat().st_ino
    if move == "compact":
        mover.compact(T, changes={f"{T}/ns/dropped": None})
    else:
        mover.delete_tree(T)
    writer.write(f"{T}/ns/after", b"acknowledged")
    if move == "compact":  # (a deleted log's inode number may come back)
        assert log_of(tmp_path).stat().st_ino != old
    for reader in (writer, mover, FileStorage(tmp_path)):
        assert reader.read(f"{T}/ns/after") == b"acknowledged"
        assert reader.read(f"{T}/ns/dropped") is None
        assert reader.read(f"{T}/ns/kept") == (b"before" if move == "compact" else None)


def test_a_reader_that_read_a_retirement_before_the_rename_follows_it(tmp_path, monkeypatch):
    """Between a compaction's retirement and its rename, a reader finds the same file at
    the path: it must look again later, or it would read the old log for good."""
    reader, compactor = FileStorage(tmp_path), FileStorage(tmp_path)
    reader.write(f"{T}/ns/a", b"old")
    assert reader.read(f"{T}/ns/a") == b"old"
    real_replace = os.replace
    read_meanwhile = []

    def replace(source, target):
        if str(target) == str(log_of(tmp_path)):
            read_meanwhile.append(reader.read(f"{T}/ns/a"))  # the retirement, same file
        real_replace(source, target)

    monkeypatch.setattr(file_storage.os, "replace", replace)
    compactor.compact(T, changes={f"{T}/ns/a": b"new"})
    monkeypatch.undo()
    assert read_meanwhile == [b"old"]
    assert reader.read(f"{T}/ns/a") == b"new"


def test_a_retirement_a_crash_left_in_a_log_in_use_costs_a_look_until_the_next_append(
    tmp_path, monkeypatch
):
    """A compaction that died between its retirement and its rename leaves the log where
    it was, retirement included: readers look at the path (it is the same file) and read
    on; the next append makes the retirement void."""
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/a", b"kept")
    append_entry(log_of(tmp_path), encode_entry(DELETE, RETIRED, b""))
    looks = PathLooks(monkeypatch, log_of(tmp_path))
    assert storage.read(f"{T}/ns/a") == b"kept"
    assert storage.read(f"{T}/ns/a") == b"kept"
    assert looks.count == 2  # each read looks at the path while the retirement is last
    storage.write(f"{T}/ns/b", b"after")
    looks.count = 0
    assert storage.read(f"{T}/ns/b") == b"after"
    assert FileStorage(tmp_path).read(f"{T}/ns/b") == b"after"
    assert looks.count == 1  # the new process opens the log; the first looks no more
    entries = scan(log_of(tmp_path).read_bytes())[0]
    assert [e.key for e in entries] == [f"{T}/ns/a", RETIRED, f"{T}/ns/b"]


@pytest.mark.parametrize("failing", ["the log's rename", "the parity's rename"])
def test_a_compaction_that_fails_leaves_its_own_process_looking_at_the_path(
    tmp_path, monkeypatch, failing
):
    """The process that retired a log and then failed knows the log may have moved (the
    new log renamed in, the step after it failed) or may move yet: it reads on from
    whichever file is at the path."""
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/a", b"old")
    real_replace = os.replace

    def full_disk(source, target):
        if str(target).endswith(LOG_NAME if failing == "the log's rename" else ".parity"):
            raise OSError(28, "No space left on device")
        real_replace(source, target)

    monkeypatch.setattr(file_storage.os, "replace", full_disk)
    with pytest.raises(StoreWriteError):
        storage.compact(T, changes={f"{T}/ns/a": b"new"})
    monkeypatch.undo()
    moved = failing == "the parity's rename"
    assert storage.read(f"{T}/ns/a") == (b"new" if moved else b"old")
    FileStorage(tmp_path).compact(T, changes={f"{T}/ns/a": b"newer"})
    assert storage.read(f"{T}/ns/a") == b"newer"
