"""``export`` then ``import``: the portable JSON-lines format restores a store exactly.

Threads and the memories of a ``VerifiedStore`` on the same store; an export of
version 1 (threads only) still imports.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from logtools import lose_parity, view_log
from test_cli import build_graph, config, history, run_conversations
from test_cli_console import console, ok_json

from langgraph_checkpoint_verified import MemoryStorage, VerifiedCache, VerifiedSaver, VerifiedStore
from langgraph_checkpoint_verified.cli.export import (
    memory_lines,
    memory_of,
    read_export,
    stored_item,
)
from langgraph_checkpoint_verified.records.keys import batch_key


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    saver = VerifiedSaver(path)
    run_conversations(build_graph(saver))
    saver.put_tool_record("alpha", "", "call-1", "result", fingerprint="f1", value={"x": {1, 2}})
    return path


def test_export_then_import_gives_the_same_history_and_state(store: Path, tmp_path: Path) -> None:
    dump, copy = tmp_path / "dump.jsonl", tmp_path / "copy"
    assert console("export", store, dump).returncode == 0
    lines = dump.read_text().splitlines()
    assert json.loads(lines[0]) == {"format": "langgraph-verified-export", "version": 2}
    assert all("sha256" in json.loads(line) for line in lines[1:])
    done = console("import", copy, dump)
    assert done.returncode == 0, done.stderr
    for thread_id in ("alpha", "beta"):
        before = ok_json("history", store, thread_id)["checkpoints"]
        after = ok_json("history", copy, thread_id)["checkpoints"]
        for row in before + after:
            row.pop("bytes")
        assert after == before
        assert ok_json("show", copy, thread_id, "--all") == ok_json(
            "show", store, thread_id, "--all"
        )
    for old, new in zip(history(store, "alpha"), history(copy, "alpha"), strict=True):
        assert new.checkpoint == old.checkpoint and new.metadata == old.metadata
        assert new.pending_writes == old.pending_writes
    record = VerifiedSaver(copy).get_tool_record("alpha", "", "call-1", "result")
    assert record == ("f1", {"x": {1, 2}})


def test_export_of_one_thread(store: Path, tmp_path: Path) -> None:
    dump = tmp_path / "beta.jsonl"
    assert console("export", store, dump, "--thread", "beta").returncode == 0
    threads = {json.loads(line).get("thread_id") for line in dump.read_text().splitlines()[1:]}
    assert threads == {"beta"}


def test_a_damaged_line_is_refused_and_nothing_is_written(store: Path, tmp_path: Path) -> None:
    dump, copy = tmp_path / "dump.jsonl", tmp_path / "copy"
    assert console("export", store, dump).returncode == 0
    lines = dump.read_text().splitlines()
    last = json.loads(lines[-1])
    last["thread_id"] = "mallory"
    dump.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    done = console("import", copy, dump)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and f"line {len(lines)} is damaged" in done.stderr
    assert not list(copy.rglob("*.ckpt"))
    assert history(copy, "alpha") == [] if copy.exists() else True


def test_import_refuses_what_is_not_an_export(store: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": 1}\n')
    done = console("import", tmp_path / "copy", other)
    assert done.returncode != 0 and "is not a langgraph-verified-export file" in done.stderr


def test_parallel_branches_keep_their_task_paths_and_order(tmp_path: Path) -> None:
    from test_migrate import FAIL_AT, build, run_with_one_failure

    store, dump, copy = tmp_path / "store", tmp_path / "dump.jsonl", tmp_path / "copy"
    run_with_one_failure(build(VerifiedSaver(store), fail_once={FAIL_AT}))
    assert console("export", store, dump).returncode == 0
    assert console("import", copy, dump).returncode == 0
    (thread_id,) = {t["thread_id"] for t in ok_json("threads", store)["threads"]}
    before = list(VerifiedSaver(store).list(config(thread_id)))
    after = list(VerifiedSaver(copy).list(config(thread_id)))
    assert [a.pending_writes for a in after] == [b.pending_writes for b in before]
    assert [a.checkpoint for a in after] == [b.checkpoint for b in before]
    paths = {json.loads(line).get("task_path") for line in dump.read_text().splitlines()[1:]}
    assert paths - {None, ""}, "the export keeps each batch's task_path"


# -- memories ---------------------------------------------------------------------------


def vectors_of(texts: list[str]) -> list[list[float]]:
    return [[float(len(text)), float(text.count("a")), 1.0] for text in texts]


INDEX = {"dims": 3, "embed": vectors_of, "fields": ["text"]}


def remember(memory: VerifiedStore) -> None:
    """Memories with everything an item keeps: times, a TTL refreshed on read, vectors."""
    memory.put(("users", "ada"), "prefs", {"text": "dark theme", "tags": ["a", 1]}, ttl=90)
    memory.put(("users", "ada"), "prefs", {"text": "darker theme", "tags": ["a", 1]}, ttl=90)
    memory.put(("users", "bob"), "notes", {"text": "likes tea"})
    memory.put(("facts",), "../odd key", {"text": "a key no path could hold"}, index=False)
    memory.get(("users", "ada"), "prefs", refresh_ttl=True)  # a touch record


@pytest.fixture
def with_memories(store: Path) -> Path:
    remember(VerifiedStore(store, index=INDEX, ttl={"refresh_on_read": True}))
    VerifiedCache(store).set({(("node",), "k"): ("computed", None)})
    return store


def test_memories_survive_an_export_and_import(with_memories: Path, tmp_path: Path) -> None:
    dump, copy = tmp_path / "dump.jsonl", tmp_path / "copy"
    done = console("export", with_memories, dump)
    assert done.returncode == 0, done.stderr
    assert "and 3 memory item(s)" in done.stderr
    lines = [json.loads(line) for line in dump.read_text().splitlines()[1:]]
    items = [line for line in lines if line["type"] == "store_item"]
    assert [(i["namespace"], i["key"]) for i in items] == [
        (["facts"], "../odd key"),
        (["users", "ada"], "prefs"),
        (["users", "bob"], "notes"),
    ]
    assert not [line for line in lines if "cache" in line["type"]]  # disposable: not exported
    done = console("import", copy, dump)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported 9 checkpoint(s)")
    assert "and 3 memory item(s) into" in done.stdout
    before = list(VerifiedStore(with_memories).stored_items())
    after = list(VerifiedStore(copy).stored_items())
    assert after == before
    ada = after[1]
    assert ada.created_at < ada.updated_at and ada.ttl == 90 and ada.vectors
    # the refresh was kept: the item expires when the original does
    assert ada.expires_at == before[1].expires_at
    # the vectors came along: a similarity search needs no re-embedding
    found = VerifiedStore(copy, index=INDEX).search(("users",), query="likes tea")
    assert [i.key for i in found] == ["notes", "prefs"]
    assert VerifiedCache(copy).get([(("node",), "k")]) == {}
    assert console("verify", copy).returncode == 0


def test_an_import_refuses_memories_the_store_has_unless_replace(
    with_memories: Path, tmp_path: Path
) -> None:
    dump, target = tmp_path / "dump.jsonl", tmp_path / "target"
    assert console("export", with_memories, dump).returncode == 0
    mine = VerifiedStore(target)
    mine.put(("users", "bob"), "notes", {"text": "mine"})
    done = console("import", target, dump)
    assert done.returncode == 2
    assert "already has memory item(s) 'users.bob/notes'" in done.stderr
    assert "nothing was imported" in done.stderr
    assert VerifiedStore(target).get(("users", "bob"), "notes").value == {"text": "mine"}
    assert VerifiedSaver(target).get_tuple(config("alpha")) is None
    done = console("import", target, dump, "--replace")
    assert done.returncode == 0, done.stderr
    assert VerifiedStore(target).get(("users", "bob"), "notes").value == {"text": "likes tea"}


def test_export_of_one_thread_leaves_memories_out(with_memories: Path, tmp_path: Path) -> None:
    dump = tmp_path / "beta.jsonl"
    assert console("export", with_memories, dump, "--thread", "beta").returncode == 0
    kinds = {json.loads(line)["type"] for line in dump.read_text().splitlines()[1:]}
    assert "store_item" not in kinds


def test_a_damaged_memory_is_left_out_of_an_export(with_memories: Path, tmp_path: Path) -> None:
    """Bob's batch damaged on disk, beyond what the log's parity rebuilds."""
    notes = VerifiedStore(with_memories).logs.current("users").items[(("users", "bob"), "notes")]
    bob = batch_key("users", notes.version.rsplit("/", 1)[0])
    log = with_memories / "memories" / "users" / "log"
    view = view_log(log.read_bytes(), "memories/users")
    assert not view.is_last(bob)  # ada's refresh was written after it
    entry = view.entry(bob)
    lose_parity(log)
    data = bytearray(log.read_bytes())
    data[entry.data_offset + entry.data_size - 3] ^= 1
    log.write_bytes(bytes(data))
    dump = tmp_path / "dump.jsonl"
    done = console("export", with_memories, dump)
    assert done.returncode == 0 and "and 2 memory item(s)" in done.stderr
    exported = [json.loads(line) for line in dump.read_text().splitlines()[1:]]
    assert [i["key"] for i in exported if i["type"] == "store_item"] == ["../odd key", "prefs"]
    assert log.read_bytes() == bytes(data)  # export only looks: nothing is moved
    assert not (with_memories / "quarantine").exists()


def test_memories_round_trip_in_memory() -> None:
    """The lines and the restore the commands use, on memory backends."""
    storage = MemoryStorage()
    saver = VerifiedSaver(storage=storage)
    remember(VerifiedStore(storage=storage, index=INDEX))
    lines = memory_lines(saver, memory_of(saver))
    for line in lines:  # as read_export decodes them
        line["value"] = saver.serde.loads_typed(
            (line["value"]["type"], base64.b64decode(line["value"]["data"]))
        )
    copy = VerifiedSaver.in_memory()
    memory_of(copy).restore_items(stored_item(line) for line in lines)
    assert list(memory_of(copy).stored_items()) == list(memory_of(saver).stored_items())
    # one batch per first label the restore wrote to: users, facts
    assert copy.verify().ok and copy.verify().store_records_checked == 2


def test_an_export_of_version_1_still_imports(store: Path, tmp_path: Path) -> None:
    """A file written before exports held memories: threads only, version 1."""
    dump, copy = tmp_path / "dump.jsonl", tmp_path / "copy"
    assert console("export", store, dump).returncode == 0
    lines = dump.read_text().splitlines()
    old = tmp_path / "old.jsonl"
    old.write_text(
        "\n".join(
            [
                json.dumps({"format": "langgraph-verified-export", "version": 1}),
                *(line for line in lines[1:] if json.loads(line)["type"] != "store_item"),
            ]
        )
        + "\n"
    )
    assert len(read_export(VerifiedSaver.in_memory(), str(old))) == len(lines) - 1
    done = console("import", copy, old)
    assert done.returncode == 0, done.stderr
    assert "memory" not in done.stdout
    for thread_id in ("alpha", "beta"):
        assert ok_json("show", copy, thread_id, "--all") == ok_json(
            "show", store, thread_id, "--all"
        )
    unknown = tmp_path / "future.jsonl"
    unknown.write_text(json.dumps({"format": "langgraph-verified-export", "version": 3}) + "\n")
    done = console("import", tmp_path / "other", unknown)
    assert done.returncode == 2 and "this version reads 1 and 2" in done.stderr
