"""``export`` then ``import``: the portable JSON-lines format restores a store exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import build_graph, config, history, run_conversations
from test_cli_console import console, ok_json

from langgraph_checkpoint_verified import VerifiedSaver


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
    assert json.loads(lines[0]) == {"format": "langgraph-verified-export", "version": 1}
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
