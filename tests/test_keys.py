"""Strange names: every thread id, namespace, checkpoint id and task id stays inside
the store, never collides with another, and round-trips; wrong types are refused.

A thread's records are entries of its log, ``threads/<T>/log``, each under a key
made of encoded segments: a strange name must stay inside its thread's
directory on disk and inside its thread's keys in the log."""

from __future__ import annotations

import os
import re
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.engine.marker import STORE_MARKER_KEY
from langgraph_checkpoint_verified.records.keys import MAX_SEGMENT, decode_segment, encode_segment
from langgraph_checkpoint_verified.storage.base import LOCK_NAME
from langgraph_checkpoint_verified.storage.files import RecordFileStorage
from langgraph_checkpoint_verified.storage.log.entries import PUT, scan
from langgraph_checkpoint_verified.storage.log.file_storage import (
    HINT_NAME,
    LOG_NAME,
    PARITY_NAME,
    FileStorage,
)
from langgraph_checkpoint_verified.storage.log.room import all_zeros

LONG_PREFIX = "p" * 200
STRANGE = [
    "../../etc",
    "/",
    "\\",
    "\0",
    "a\0b",
    "",
    "x" * 10_240,
    "Thread Ü",
    "日本語のスレッド",
    "😀",
    "👩‍👩‍👧",
    "A",
    "a",
    ".",
    "..",
    "~",
    "~~",
    "~41",
    ".tmp-1-abc",
    "quarantine",
    "x.ckpt",
    "name with spaces",
    LONG_PREFIX + "1",
    LONG_PREFIX + "2",
    LONG_PREFIX + "A",
    LONG_PREFIX + "a",
]
# a checkpoint id cannot be empty (LangGraph reads it as "no checkpoint id")
STRANGE_CHECKPOINT_IDS = [s for s in STRANGE if s]


def config(thread_id, checkpoint_ns="", checkpoint_id=None):
    configurable = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def put_value(saver, thread_id, checkpoint_ns, checkpoint_id, value):
    return saver.put(
        config(thread_id, checkpoint_ns),
        generate_checkpoint(
            checkpoint_id=checkpoint_id, channel_values={"v": value}, channel_versions={"v": 1}
        ),
        generate_metadata(),
        {"v": 1},
    )


def assert_store_safe(root):
    """Everything under ``root`` is a private regular file or directory inside it, and
    every thread's log holds intact entries under keys inside that thread's directory.

    Returns how many records the logs hold, after checking the store reads the same.
    """
    root = os.path.realpath(root)
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    folded = set()
    logs = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            assert os.path.commonpath([root, os.path.realpath(path)]) == root
            assert len(name.encode()) <= 255
            # the only dot names are the thread lock files the saver itself creates
            assert not name.startswith(".") or name == LOCK_NAME
            # distinct even on a case-insensitive file system
            assert path.lower() not in folded
            folded.add(path.lower())
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                assert stat.S_IMODE(mode) == 0o700, path
            else:
                assert stat.S_ISREG(mode), path
                assert stat.S_IMODE(mode) == 0o600, path
                names = (LOCK_NAME, STORE_MARKER_KEY, LOG_NAME, HINT_NAME, PARITY_NAME)
                assert name in names, path
                if name == LOG_NAME:
                    logs.append(path)
    keys = set()
    for log in logs:
        thread_dir = os.path.relpath(os.path.dirname(log), root)
        assert thread_dir.count("/") == 1 and thread_dir.startswith("threads/"), log
        with open(log, "rb") as f:
            data = f.read()
        entries, damaged, end = scan(data)
        assert damaged == [] and all_zeros(data, end), log  # entries, then room
        live = {}
        for entry in entries:
            if entry.kind == PUT:
                live[entry.key] = entry
            else:
                live.pop(entry.key, None)
        for key in live:
            # a key never leaves its thread, and is made of safe segments only
            assert key.startswith(f"{thread_dir}/"), (log, key)
            for segment in key.split("/"):
                assert segment not in ("", ".", "..") and "\0" not in segment, key
                assert not segment.startswith(".") and len(segment.encode()) <= 255, key
            assert key not in keys  # never in two logs
            keys.add(key)
    assert len({key.lower() for key in keys}) == len(keys)
    assert set(FileStorage(root).walk("threads")) == keys
    return len(keys)


@pytest.fixture(params=["files", "memory"])
def saver(request, tmp_path):
    if request.param == "files":
        return VerifiedSaver(tmp_path / "store", fsync=False)
    return VerifiedSaver.in_memory()


def test_strange_thread_ids_round_trip_in_isolation(saver, tmp_path):
    for thread_id in STRANGE:
        stored = put_value(saver, thread_id, "", "1", thread_id)
        saver.put_writes(stored, [("w", thread_id)], "task")
    for thread_id in STRANGE:
        found = saver.get_tuple(config(thread_id))
        assert found.checkpoint["channel_values"] == {"v": thread_id}
        assert found.config["configurable"]["thread_id"] == thread_id
        assert found.pending_writes == [("task", "w", thread_id)]
        assert [t.checkpoint["channel_values"]["v"] for t in saver.list(config(thread_id))] == [
            thread_id
        ]
    listed = [t.config["configurable"]["thread_id"] for t in saver.list(None)]
    assert sorted(listed) == sorted(STRANGE)
    assert saver.verify().ok
    if saver.storage.__class__.__name__ == "FileStorage":
        assert assert_store_safe(tmp_path / "store") == 2 * len(STRANGE)
        # one log each, in a directory of its own
        assert len(list((tmp_path / "store" / "threads").glob("*/log"))) == len(STRANGE)
    # deleting one strange thread leaves every other one alone
    saver.delete_thread("..")
    saver.delete_thread("")
    remaining = sorted(t.config["configurable"]["thread_id"] for t in saver.list(None))
    assert remaining == sorted(s for s in STRANGE if s not in ("..", ""))
    assert saver.get_tuple(config(".")).checkpoint["channel_values"] == {"v": "."}


def test_strange_namespaces_round_trip_in_isolation(saver, tmp_path):
    for checkpoint_ns in STRANGE:
        stored = put_value(saver, "t", checkpoint_ns, "1", checkpoint_ns)
        saver.put_writes(stored, [("w", checkpoint_ns)], "task")
    for checkpoint_ns in STRANGE:
        found = list(saver.list(config("t", checkpoint_ns)))
        assert [t.checkpoint["channel_values"] for t in found] == [{"v": checkpoint_ns}]
        assert found[0].config["configurable"]["checkpoint_ns"] == checkpoint_ns
        assert found[0].pending_writes == [("task", "w", checkpoint_ns)]
    every = list(saver.list({"configurable": {"thread_id": "t"}}))
    assert sorted(t.config["configurable"]["checkpoint_ns"] for t in every) == sorted(STRANGE)
    assert saver.verify().ok
    if saver.storage.__class__.__name__ == "FileStorage":
        assert assert_store_safe(tmp_path / "store") == 2 * len(STRANGE)
    saver.copy_thread("t", "copy")
    copied = list(saver.list({"configurable": {"thread_id": "copy"}}))
    assert sorted(t.config["configurable"]["checkpoint_ns"] for t in copied) == sorted(STRANGE)


def test_strange_checkpoint_ids_round_trip_in_isolation(saver, tmp_path):
    for checkpoint_id in STRANGE_CHECKPOINT_IDS:
        stored = put_value(saver, "t", "", checkpoint_id, checkpoint_id)
        assert stored["configurable"]["checkpoint_id"] == checkpoint_id
        saver.put_writes(stored, [("w", checkpoint_id)], "task")
    for checkpoint_id in STRANGE_CHECKPOINT_IDS:
        found = saver.get_tuple(config("t", checkpoint_id=checkpoint_id))
        assert found.checkpoint["id"] == checkpoint_id
        assert found.checkpoint["channel_values"] == {"v": checkpoint_id}
        assert found.pending_writes == [("task", "w", checkpoint_id)]
    listed = [t.checkpoint["id"] for t in saver.list(config("t"))]
    assert listed == sorted(STRANGE_CHECKPOINT_IDS, reverse=True)
    assert saver.get_tuple(config("t")).checkpoint["id"] == max(STRANGE_CHECKPOINT_IDS)
    assert saver.verify().ok
    if saver.storage.__class__.__name__ == "FileStorage":
        assert assert_store_safe(tmp_path / "store") == 2 * len(STRANGE_CHECKPOINT_IDS)


def test_strange_task_ids_round_trip_in_isolation(saver, tmp_path):
    stored = put_value(saver, "t", "", "1", "value")
    for task_id in STRANGE:
        saver.put_writes(stored, [("w", task_id)], task_id)
        saver.put_writes(stored, [("__error__", f"error of {task_id}")], task_id)
    writes = saver.get_tuple(stored).pending_writes
    assert sorted(writes, key=repr) == sorted(
        [(t, "w", t) for t in STRANGE] + [(t, "__error__", f"error of {t}") for t in STRANGE],
        key=repr,
    )
    assert saver.verify().ok
    if saver.storage.__class__.__name__ == "FileStorage":
        assert assert_store_safe(tmp_path / "store") == 1 + 2 * len(STRANGE)


def test_int_thread_id_is_the_same_thread_as_its_string(saver):
    put_value(saver, 42, "", "1", "int")
    assert saver.get_tuple(config("42")).checkpoint["channel_values"] == {"v": "int"}


@pytest.mark.parametrize(
    "bad_config, error, words",
    [
        (None, TypeError, "config must be a dict"),
        ("thread-1", TypeError, "config must be a dict"),
        ({"thread_id": "t"}, TypeError, "config must be a dict"),
        ({"configurable": "t"}, TypeError, "config must be a dict"),
        ({"configurable": {}}, ValueError, "thread_id"),
        ({"configurable": {"thread_id": None}}, TypeError, "thread_id must be a str"),
        ({"configurable": {"thread_id": object()}}, TypeError, "thread_id must be a str"),
        ({"configurable": {"thread_id": True}}, TypeError, "thread_id must be a str"),
        ({"configurable": {"thread_id": 1.5}}, TypeError, "thread_id must be a str"),
        ({"configurable": {"thread_id": "t", "checkpoint_ns": 3}}, TypeError, "checkpoint_ns"),
        ({"configurable": {"thread_id": "t", "checkpoint_id": 3}}, TypeError, "checkpoint_id"),
    ],
)
def test_wrong_config_types_are_refused_clearly(saver, bad_config, error, words):
    with pytest.raises(error, match=words):
        saver.get_tuple(bad_config)
    with pytest.raises(error, match=words):
        saver.put(bad_config, generate_checkpoint(), generate_metadata(), {})
    if bad_config is not None:
        with pytest.raises(error, match=words):
            list(saver.list(bad_config))
    assert list(saver.list(None)) == []


@pytest.mark.parametrize("storage_class", [FileStorage, RecordFileStorage])
@pytest.mark.parametrize("key", ["../escape", "/tmp/escape", "cache/../../escape", "threads/.."])
def test_a_storage_key_that_would_leave_the_store_is_refused(tmp_path, storage_class, key):
    """Keys are made of encoded segments only; the storage refuses any other that names a
    path outside the store (a second line of defence), for every call, and makes nothing."""
    storage = storage_class(tmp_path / "store", fsync=False)
    for call in (
        lambda: storage.write(key, b"x"),
        lambda: storage.read(key),
        lambda: storage.delete(key),
        lambda: storage.list(key),
    ):
        with pytest.raises(ValueError, match="unsafe storage key"):
            call()
    assert sorted(os.listdir(tmp_path)) == ["store"]


@pytest.mark.parametrize("bad_thread_id", [None, object(), 1.5, b"bytes"])
def test_wrong_thread_id_types_are_refused_by_thread_operations(saver, bad_thread_id):
    with pytest.raises(TypeError, match="thread_id must be a str"):
        saver.delete_thread(bad_thread_id)
    with pytest.raises(TypeError, match="thread_id must be a str"):
        saver.copy_thread(bad_thread_id, "target")
    with pytest.raises(TypeError, match="thread_id must be a str"):
        saver.prune([bad_thread_id])


def test_wrong_checkpoint_and_task_id_types_are_refused(saver):
    with pytest.raises(TypeError, match="checkpoint must be a dict"):
        saver.put(config("t"), "not a checkpoint", generate_metadata(), {})
    for bad_id, error in (
        ("", ValueError),
        (None, ValueError),
        (7, TypeError),
        ("\ud800", ValueError),
    ):
        bad = generate_checkpoint()
        bad["id"] = bad_id
        with pytest.raises(error, match="non-empty string|must be a str|not valid Unicode"):
            saver.put(config("t"), bad, generate_metadata(), {})
    with pytest.raises(ValueError, match="lone surrogate"):
        saver.put(config("\ud800"), generate_checkpoint(), generate_metadata(), {})
    stored = put_value(saver, "t", "", "1", "v")
    with pytest.raises(TypeError, match="task_id must be a str"):
        saver.put_writes(stored, [("w", 1)], None)
    assert saver.get_tuple(stored).pending_writes == []


# -- encode_segment properties ----------------------------------------------------------------

# every code point, lone surrogates included
any_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=120)
SAFE_SEGMENT = re.compile(
    r"~|(?:[a-z0-9_-]|~[0-9a-f]{2})+|(?:[a-z0-9_-]|~[0-9a-f]{2})*~~[0-9a-f]{64}"
)


@settings(max_examples=300, deadline=None)
@given(st.lists(any_text, unique=True, max_size=30))
def test_encode_segment_is_injective(values):
    encoded = [encode_segment(v) for v in values]
    assert len(set(encoded)) == len(values)
    # and stays injective when the file system ignores case
    assert len({e.lower() for e in encoded}) == len(values)


@settings(max_examples=300, deadline=None)
@given(any_text)
def test_encode_segment_uses_only_safe_characters_and_bounded_length(value):
    encoded = encode_segment(value)
    assert SAFE_SEGMENT.fullmatch(encoded), encoded
    assert 1 <= len(encoded) <= MAX_SEGMENT
    assert encoded not in (".", "..")
    assert not encoded.startswith(".")


@settings(max_examples=300, deadline=None)
@given(any_text)
def test_decode_segment_inverts_short_encodings(value):
    encoded = encode_segment(value)
    raw = value.encode("utf-8", "surrogatepass")
    escaped_length = sum(
        1 if chr(b) in "abcdefghijklmnopqrstuvwxyz0123456789_-" else 3 for b in raw
    )
    if escaped_length <= MAX_SEGMENT:
        assert decode_segment(encoded) == value
    else:
        # hashed: not reversible, and recognisably so
        assert "~~" in encoded
        assert decode_segment(encoded) is None


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=50), st.text(min_size=1, max_size=50))
def test_long_values_differing_only_at_the_end_do_not_collide(tail1, tail2):
    head = "h" * 300
    if tail1 != tail2:
        assert encode_segment(head + tail1) != encode_segment(head + tail2)
    assert len(encode_segment(head + tail1)) <= MAX_SEGMENT


def test_encode_segment_refuses_non_strings():
    for value in (None, 1, b"bytes", object()):
        with pytest.raises(TypeError, match="expected a string"):
            encode_segment(value)


NAME_PARTS = st.sampled_from(["1f0", "a", "-", "_", "~41", ".", "\n", "A", "ckpt", ".ckpt", "ü"])


@settings(max_examples=500, deadline=None)
@given(st.lists(st.lists(NAME_PARTS, max_size=4).map("".join), max_size=6))
def test_split_checkpoint_names_is_checkpoint_id_of_name_by_name(names):
    from langgraph_checkpoint_verified.records.keys import checkpoint_id_of, split_checkpoint_names

    ids, others = split_checkpoint_names(names)
    # every plain checkpoint name gives its id, and nothing else is dropped
    plain = [n for n in names if re.fullmatch(r"[a-z0-9_-]+\.ckpt", n)]
    if any("\n" in n for n in names):
        assert ids == [] and others == names  # the careful path takes every name
    else:
        assert ids == [n[: -len(".ckpt")] for n in plain]
        assert others == [n for n in names if n not in plain]
    for name in plain:
        assert checkpoint_id_of(name) == name[: -len(".ckpt")]
