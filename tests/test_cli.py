"""The command line, run in-process (``main([...])``) and as a real process.

Every store here is written by a real ``StateGraph`` (an echo chat with a
message list and a turn counter), and every damage is done to the real files:
each thread's records are entries of one log, ``threads/<T>/log``, so a record
is damaged in place by flipping a byte of its entry, or replaced by appending
an entry that holds other bytes under its key (a record damaged before it was
framed: the entry verifies, the record does not).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from echo_graph import build_graph
from langchain_core.load import load as langchain_load
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from logtools import append_entry, lose_parity

from langgraph_checkpoint_verified import VerifiedSaver, cli
from langgraph_checkpoint_verified.cli import main
from langgraph_checkpoint_verified.storage.log import entries as log_entries
from langgraph_checkpoint_verified.storage.log.room import all_zeros

CONVERSATIONS = {"alpha": ["hi", "how are you?"], "beta": ["hello"]}


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def run_conversations(graph: Any) -> None:
    for thread_id, texts in CONVERSATIONS.items():
        for text in texts:
            graph.invoke({"messages": [("user", text)]}, config(thread_id))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    run_conversations(build_graph(VerifiedSaver(path)))
    return path


def load(dumped: Any) -> Any:
    """A message back from the JSON form the CLI writes (LangChain's own loader)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # load() is marked beta
        return langchain_load(dumped, allowed_objects="messages")


def run(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


def history(store: Path, thread_id: str) -> list[Any]:
    """Verified checkpoints of a thread, newest first."""
    return list(VerifiedSaver(store).list(config(thread_id)))


def checkpoint_entry(store: Path, checkpoint_id: str) -> tuple[Path, log_entries.Entry]:
    """The log holding a checkpoint and its record's entry (the last one for its key)."""
    found = []
    for log in sorted(store.glob("threads/*/log")):
        latest = {e.key: e for e in log_entries.scan(log.read_bytes())[0]}
        found += [
            (log, entry)
            for key, entry in latest.items()
            if entry.kind == log_entries.PUT and key.endswith(f"/checkpoints/{checkpoint_id}.ckpt")
        ]
    (only,) = found
    return only


def located(log: Path, entry: log_entries.Entry) -> str:
    """How the store names where an intact entry's record lies."""
    return f"{log}@{entry.data_offset} ({entry.key})"


def flip_byte(log: Path, entry: log_entries.Entry) -> bytes:
    """Flip a byte in the middle of an entry's record, in place, and lose the log's parity;
    the entry's bytes now.

    Intact entries must follow it: damage in the last entry is a torn tail.
    """
    data = bytearray(log.read_bytes())
    assert entry.end < len(data), "the entry is the log's last: a torn tail, not damage"
    lose_parity(log)  # damage beyond what parity rebuilds
    data[entry.data_offset + entry.data_size // 2] ^= 0x01
    log.write_bytes(bytes(data))
    return bytes(data[entry.offset : entry.end])


def replace_record(log: Path, entry: log_entries.Entry) -> tuple[bytes, str]:
    """Append an entry holding the record with one byte flipped: the entry verifies, the
    record does not. Returns the record's bytes now and where the store says they are."""
    data = log.read_bytes()
    record = bytearray(data[entry.data_offset : entry.data_offset + entry.data_size])
    record[len(record) // 2] ^= 0x01
    forged = log_entries.encode_entry(log_entries.PUT, entry.key, bytes(record))
    at = append_entry(log, forged)
    (appended,), _, _ = log_entries.scan(forged)
    where = f"{log}@{at + appended.data_offset} ({entry.key})"
    return bytes(record), where


def log_keys(log: Path) -> set[str]:
    """The keys a log holds a record for now."""
    latest = {e.key: e for e in log_entries.scan(log.read_bytes())[0]}
    return {key for key, entry in latest.items() if entry.kind == log_entries.PUT}


def by_step(items: list[Any], step: int) -> str:
    (found,) = [i for i in items if i.metadata["step"] == step]
    return found.config["configurable"]["checkpoint_id"]


# -- inspect -------------------------------------------------------------------------


def test_inspect_summarises_every_thread(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", store, "--json")
    assert (code, err) == (0, "")
    summary = json.loads(out)
    newest = {t: history(store, t)[0] for t in CONVERSATIONS}
    assert summary["checkpoints"] == 9
    assert summary["quarantined_records"] == 0
    assert [
        (
            t["thread_id"],
            ns["checkpoint_ns"],
            ns["checkpoints"],
            ns["newest_checkpoint_id"],
            ns["newest_step"],
        )
        for t in summary["threads"]
        for ns in t["namespaces"]
    ] == [
        ("alpha", "", 6, newest["alpha"].config["configurable"]["checkpoint_id"], 4),
        ("beta", "", 3, newest["beta"].config["configurable"]["checkpoint_id"], 1),
    ]

    code, out, _ = run(capsys, "inspect", store)
    assert code == 0
    assert "threads: 2  checkpoints: 9  quarantined records: 0" in out
    alpha_row = next(line for line in out.splitlines() if line.startswith("alpha"))
    assert alpha_row.split() == [
        "alpha",
        "(root)",
        "6",
        newest["alpha"].config["configurable"]["checkpoint_id"],
        "4",
    ]


def test_inspect_thread_shows_its_history(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", store, "--thread", "alpha", "--json")
    assert code == 0
    (namespace,) = json.loads(out)["namespaces"]
    expected = history(store, "alpha")
    assert [c["checkpoint_id"] for c in namespace["checkpoints"]] == [
        e.config["configurable"]["checkpoint_id"] for e in expected
    ]
    assert [c["parent_checkpoint_id"] for c in namespace["checkpoints"]] == [
        e.parent_config["configurable"]["checkpoint_id"] if e.parent_config else None
        for e in expected
    ]
    assert [(c["step"], c["source"]) for c in namespace["checkpoints"]] == [
        (4, "loop"),
        (3, "loop"),
        (2, "input"),
        (1, "loop"),
        (0, "loop"),
        (-1, "input"),
    ]
    newest = namespace["checkpoints"][0]
    assert newest["channels"] == ["messages", "turns"]
    assert newest["updated_channels"] is not None
    assert {"messages", "turns"} <= set(newest["updated_channels"])

    code, out, _ = run(capsys, "inspect", store, "--thread", "alpha")
    assert code == 0
    first_row = out.splitlines()[2].split()
    assert first_row[:4] == [newest["checkpoint_id"], "4", "loop", newest["parent_checkpoint_id"]]
    assert "messages*," in first_row and "turns*" in first_row


# -- verify and repair -----------------------------------------------------------------


def test_verify_clean_store_exits_0(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "verify", store)
    assert code == 0
    assert out.splitlines() == [
        f"checked 15 records (9 checkpoints) in {store}",
        "ok: every record verifies",
    ]
    code, out, _ = run(capsys, "verify", store, "--json", "--thread", "beta")
    report = json.loads(out)
    assert (code, report["ok"], report["checkpoints_checked"], report["damaged"]) == (
        0,
        True,
        3,
        [],
    )


def test_verify_reports_a_flipped_byte_and_moves_nothing(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newest = history(store, "alpha")[0].config["configurable"]["checkpoint_id"]
    log, entry = checkpoint_entry(store, newest)
    _, damaged = replace_record(log, entry)
    log_bytes = log.read_bytes()

    code, out, _ = run(capsys, "verify", store)
    assert code == 1
    lines = out.splitlines()
    assert lines[1] == "damaged records: 1"
    assert lines[2] == f"  checkpoint  {damaged}"
    assert lines[3].strip() == "record checksum mismatch"
    assert "unusable checkpoints: 1" in lines
    assert f"  thread 'alpha'  namespace (root)  {newest}" in lines
    assert lines[-1] == f"run `langgraph-verified repair {store}` to move the damage to quarantine/"

    code, out, _ = run(capsys, "verify", store, "--json")
    report = json.loads(out)
    assert code == 1
    assert [(d["kind"], d["location"], d["reason"]) for d in report["damaged"]] == [
        ("checkpoint", damaged, "record checksum mismatch")
    ]
    # checking is read-only: the log is as it was, nothing appended, nothing cut
    assert log.read_bytes() == log_bytes
    assert not (store / "quarantine").exists()
    # the other thread alone is fine
    assert run(capsys, "verify", store, "--thread", "beta")[0] == 0


def test_inspect_skips_damage_without_moving_it(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newest = history(store, "alpha")[0].config["configurable"]["checkpoint_id"]
    log, entry = checkpoint_entry(store, newest)
    replace_record(log, entry)
    log_bytes = log.read_bytes()
    code, out, err = run(capsys, "inspect", store, "--json")
    assert code == 0
    alpha = json.loads(out)["threads"][0]["namespaces"][0]
    assert (alpha["checkpoints"], alpha["newest_step"]) == (5, 3)
    assert err.startswith("warning: 1 damaged record(s) found")
    assert log.read_bytes() == log_bytes
    assert not (store / "quarantine").exists()


def test_repair_quarantines_the_damaged_newest_checkpoint(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = history(store, "alpha")
    newest = before[0].config["configurable"]["checkpoint_id"]
    log, entry = checkpoint_entry(store, newest)
    damaged_bytes, damaged = replace_record(log, entry)

    code, out, _ = run(capsys, "repair", store)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"moved {damaged}"
    quarantined = Path(lines[1].split("to ", 1)[1])
    assert quarantined.parent == store / "quarantine"
    assert quarantined.read_bytes() == damaged_bytes
    assert quarantined.with_suffix(".reason").exists()
    assert lines[2].strip() == "(checkpoint: record checksum mismatch)"
    assert entry.key not in log_keys(log)  # gone from the log, intact bytes and damaged
    assert lines[-2:] == [
        f"quarantined 1 record(s) under {store / 'quarantine'}",
        "the store verifies now",
    ]
    assert run(capsys, "verify", store)[0] == 0
    code, out, _ = run(capsys, "repair", store)
    assert (code, out.splitlines()[-1]) == (0, "nothing to repair")
    code, out, _ = run(capsys, "inspect", store, "--json")
    assert json.loads(out)["quarantined_records"] == 1
    # the thread carries on from the newest checkpoint left (step 3), whose
    # pending writes still hold the second reply: nothing of the turn is lost
    state = build_graph(VerifiedSaver(store)).get_state(config("alpha"))
    assert state.config["configurable"]["checkpoint_id"] == by_step(before, 3)
    assert state.values["turns"] == 2
    assert state.values["messages"][-1].content == "echo: how are you?"


def test_repair_moves_aside_checkpoints_that_can_never_load(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = history(store, "alpha")
    # step 1's record holds values that later checkpoints refer to
    log, holder = checkpoint_entry(store, by_step(items, 1))
    damaged_entry = flip_byte(log, holder)
    start = holder.data_offset - holder.offset
    damaged_record = damaged_entry[start : start + holder.data_size]
    code, out, _ = run(capsys, "verify", store, "--thread", "alpha")
    assert code == 1
    unusable = [line.split()[-1] for line in out.splitlines() if line.startswith("  thread")]
    assert by_step(items, 1) in unusable and len(unusable) >= 2
    intact = [checkpoint_entry(store, c) for c in unusable if c != by_step(items, 1)]
    looking = VerifiedSaver(store, quarantine=False)
    usable = [i.metadata["step"] for i in looking.list(config("alpha"))]

    code, out, _ = run(capsys, "repair", store, "--thread", "alpha")
    assert code == 0
    lines = out.splitlines()
    for _, entry in intact:  # where exactly: test_repair_names_where_it_moved_a_record_from
        assert [line for line in lines if line.startswith("moved ") and entry.key in line]
    (at,) = [i for i, line in enumerate(lines) if line.startswith("moved ") and holder.key in line]
    quarantined = Path(lines[at + 1].split("to ", 1)[1])
    assert damaged_record in quarantined.read_bytes()  # what the entry held, moved aside
    assert lines[-1] == "the store verifies now"
    assert not {holder.key, *(entry.key for _, entry in intact)} & log_keys(log)
    # reads return what they returned before: repair only moved what they skipped
    assert [i.metadata["step"] for i in history(store, "alpha")] == usable
    assert run(capsys, "verify", store, "--thread", "alpha")[0] == 0


def test_a_record_damaged_in_place_is_located_in_its_log(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The damaged entry's header still names its key: verify and repair point at
    the log and the key, not at a file of the layout before logs that is not there."""
    log, holder = checkpoint_entry(store, by_step(history(store, "alpha"), 1))
    flip_byte(log, holder)
    code, out, _ = run(capsys, "verify", store, "--json")
    assert code == 1
    (damaged,) = json.loads(out)["damaged"]
    assert damaged["key"] == holder.key
    assert damaged["location"].startswith(f"{log}@"), damaged["location"]
    assert damaged["location"].endswith(f" ({holder.key})")


def test_repair_names_where_it_moved_a_record_from(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint that can never load is moved out of the log: repair names the entry
    it was, not a file of the layout before logs."""
    items = history(store, "alpha")
    log, holder = checkpoint_entry(store, by_step(items, 1))
    log, dependent = checkpoint_entry(store, by_step(items, 4))
    flip_byte(log, holder)
    code, out, _ = run(capsys, "repair", store)
    assert code == 0
    assert f"moved {located(log, dependent)}" in out.splitlines()


def test_a_store_opened_afresh_locates_a_record_in_its_log(store: Path) -> None:
    """``location`` before anything was read names the log too (the CLI prints it)."""
    log, entry = checkpoint_entry(store, by_step(history(store, "alpha"), 1))
    assert VerifiedSaver(store).storage.location(entry.key) == located(log, entry)


def test_a_flipped_byte_in_the_last_entry_is_damage_not_a_torn_tail(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A last entry complete by its own header but failing its checksum was written
    whole, and may have been acknowledged: it is reported like damage anywhere else,
    and never cut off as a torn tail would be."""
    log = store / "threads" / "alpha" / "log"
    entries, _, _ = log_entries.scan(log.read_bytes())
    last = entries[-1]
    assert all_zeros(log.read_bytes(), last.end)  # the last entry: only room after it
    lose_parity(log)  # damage beyond what parity rebuilds
    data = bytearray(log.read_bytes())
    data[last.data_offset + last.data_size // 2] ^= 0x01
    log.write_bytes(bytes(data))

    report = VerifiedSaver(store, quarantine=False).verify()
    assert last.key in {d.key for d in report.damaged}
    saver = VerifiedSaver(store)
    result = build_graph(saver).invoke({"messages": [("user", "again")]}, config("alpha"))
    assert [m.content for m in result["messages"]][-2:] == ["again", "echo: again"]
    # the damaged entry is still there, whole, with the new entries after it
    assert log.read_bytes()[: last.end] == bytes(data[: last.end])
    code, _, _ = run(capsys, "repair", store)
    assert code == 0
    assert VerifiedSaver(store).verify().ok


def test_damage_naming_no_key_is_reported_copied_once_and_compacted_away(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry whose header is zeroed names no record: verify reports the bytes by
    where they are in the log (and the checkpoint they held as missing); repair
    copies them to the quarantine and compacts the log without them."""
    log, lost = checkpoint_entry(store, by_step(history(store, "alpha"), 1))
    lose_parity(log)  # damage beyond what parity rebuilds
    data = bytearray(log.read_bytes())
    data[lost.offset : lost.offset + log_entries.HEADER_SIZE] = bytes(log_entries.HEADER_SIZE)
    log.write_bytes(bytes(data))
    span = bytes(data[lost.offset : lost.end])

    code, out, _ = run(capsys, "verify", store, "--json")
    assert code == 1
    damaged = {d["location"]: d for d in json.loads(out)["damaged"]}
    assert damaged[f"{log}@{lost.offset}"]["reason"].startswith("damaged log entry: ")
    assert [d["key"] for d in damaged.values() if d["kind"] == "checkpoint"] == [lost.key]
    assert log.read_bytes() == data and not (store / "quarantine").exists()

    code, out, _ = run(capsys, "repair", store)
    assert (code, out.splitlines()[-1]) == (0, "the store verifies now")
    (copy,) = (store / "quarantine").glob("span-*.record")
    assert copy.read_bytes() == span
    assert copy.with_suffix(".reason").exists()
    assert log_entries.scan(log.read_bytes())[1:] == ([], log.stat().st_size)
    assert lost.key not in log_keys(log)
    assert run(capsys, "verify", store)[0] == 0


def test_a_keyed_store_is_not_repaired_without_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = b"k" * 32
    store = tmp_path / "keyed"
    run_conversations(build_graph(VerifiedSaver(store, key=key)))
    files_before = sorted(store.rglob("*.ckpt"))
    code, out, err = run(capsys, "repair", store)
    assert code == 2
    assert "pass --key-file" in err
    assert sorted(store.rglob("*.ckpt")) == files_before
    key_file = tmp_path / "key"
    key_file.write_bytes(key)
    assert run(capsys, "verify", store, "--key-file", key_file)[0] == 0
    assert run(capsys, "verify", store)[0] == 2  # refused at open, nothing read


def test_no_progress_on_a_pipe(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "verify", store)[2] == ""
    monkeypatch.setattr("langgraph_checkpoint_verified.cli.verify.PROGRESS_MIN_RECORDS", 10)
    code, out, err = run(capsys, "verify", store, "--json")
    assert code == 0
    assert json.loads(out)["ok"] is True
    assert err == ""  # the bar is drawn on a terminal only (tests/test_migrate_api.py)


# -- errors ------------------------------------------------------------------------------


def test_errors_are_one_line_and_exit_2(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "stroe"
    code, out, err = run(capsys, "inspect", typo)
    assert (code, out) == (2, "")
    assert err == f"langgraph-verified: error: no store at {typo}: the directory does not exist\n"
    assert not typo.exists()  # inspecting a typo creates nothing
    assert run(capsys, "verify", typo)[0] == 2
    assert not typo.exists()

    not_a_store = tmp_path / "elsewhere"
    not_a_store.mkdir()
    (not_a_store / "notes.txt").write_text("x")
    code, _, err = run(capsys, "verify", not_a_store)
    assert code == 2 and "is not a store" in err

    code, _, err = run(capsys, "inspect", store, "--thread", "gamma")
    assert code == 2
    assert err.count("\n") == 1 and "no thread 'gamma'" in err

    items = history(store, "alpha")
    code, _, err = run(capsys, "diff", store, "alpha", "nope", by_step(items, 1))
    assert code == 2 and "no verified checkpoint 'nope'" in err
    code, _, err = run(capsys, "diff", store, "alpha", "1", by_step(items, 1))
    assert code == 2 and "is the start of 6 checkpoint ids" in err

    code, _, err = run(capsys, "diff", store, "A")  # missing arguments
    assert (code, err) == (2, "langgraph-verified: error: Missing argument 'A'.\n")

    (tmp_path / "short-key").write_bytes(b"short")
    code, _, err = run(capsys, "verify", store, "--key-file", tmp_path / "short-key")
    assert code == 2 and "16 to 64 bytes" in err


# -- diff and export -------------------------------------------------------------------


def test_diff_names_changed_channels_and_added_messages(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = history(store, "alpha")
    first_turn, second_turn = by_step(items, 1), by_step(items, 4)
    code, out, _ = run(capsys, "diff", store, "alpha", first_turn[:13], second_turn)
    assert code == 0
    assert out.splitlines() == [
        "thread 'alpha'  namespace (root)",
        f"A {first_turn}  step 1",
        f"B {second_turn}  step 4",
        "~ messages: 2 added",
        "    + human: 'how are you?'",
        "    + ai: 'echo: how are you?'",
        "~ turns: 1 -> 2",
    ]

    code, out, _ = run(capsys, "diff", store, "alpha", by_step(items, -1), first_turn, "--json")
    changes = {c["channel"]: c for c in json.loads(out)["changes"]}
    assert code == 0
    assert changes["__start__"]["change"] == "removed"
    assert changes["turns"] == {"channel": "turns", "change": "added", "b": 1}
    added = [load(m) for m in changes["messages"]["b"]]
    assert [type(m) for m in added] == [HumanMessage, AIMessage]

    code, out, _ = run(capsys, "diff", store, "alpha", second_turn, second_turn)
    assert (code, out.splitlines()[-1]) == (0, "no channel differs")


# -- migrate -------------------------------------------------------------------------------


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoints.sqlite"
    with sqlite3.connect(path, check_same_thread=False) as conn:
        run_conversations(build_graph(SqliteSaver(conn)))
    conn.close()
    return path


def test_migrate_copies_every_thread_from_sqlite(
    sqlite_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source_digest = hashlib.sha256(sqlite_db.read_bytes()).hexdigest()
    target = tmp_path / "migrated"
    code, out, _ = run(capsys, "migrate", sqlite_db, target)
    assert code == 0
    assert out.splitlines() == [
        f"migrated 2 thread(s), 9 checkpoint(s) and 12 pending write(s) from {sqlite_db} "
        f"to {target}",
        f"checked 15 records (9 checkpoints) in {target}",
        "ok: every record verifies",
    ]
    assert hashlib.sha256(sqlite_db.read_bytes()).hexdigest() == source_digest

    conn = sqlite3.connect(sqlite_db, check_same_thread=False)
    try:
        sqlite_graph = build_graph(SqliteSaver(conn))
        verified_graph = build_graph(VerifiedSaver(target))
        for thread_id in CONVERSATIONS:
            expected, migrated = (
                sqlite_graph.get_state(config(thread_id)),
                verified_graph.get_state(config(thread_id)),
            )
            assert migrated.values == expected.values
            assert migrated.config == expected.config
            assert migrated.metadata == expected.metadata
            assert [s.config for s in verified_graph.get_state_history(config(thread_id))] == [
                s.config for s in sqlite_graph.get_state_history(config(thread_id))
            ]
            # pending writes came along: the step -1 input checkpoint still has them
            oldest = list(VerifiedSaver(target).list(config(thread_id)))[-1]
            sqlite_oldest = list(SqliteSaver(conn).list(config(thread_id)))[-1]
            assert oldest.pending_writes == sqlite_oldest.pending_writes
    finally:
        conn.close()

    # the graph continues the migrated thread where SQLite left it
    result = verified_graph.invoke({"messages": [("user", "still there?")]}, config("beta"))
    assert result["turns"] == 2
    assert [m.content for m in result["messages"]] == [
        "hello",
        "echo: hello",
        "still there?",
        "echo: still there?",
    ]

    code, _, err = run(capsys, "migrate", sqlite_db, target)
    assert code == 2 and "already has thread(s) 'alpha', 'beta'" in err


def test_migrate_explains_a_missing_sqlite_package(
    sqlite_db: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.sqlite", None)
    code, out, err = run(capsys, "migrate", sqlite_db, tmp_path / "migrated")
    assert (code, out) == (2, "")
    assert "pip install langgraph-checkpoint-sqlite" in err
    assert not (tmp_path / "migrated").exists()


def test_migrate_refuses_what_is_not_a_sqlite_saver_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    code, _, err = run(capsys, "migrate", other, tmp_path / "migrated")
    assert code == 2 and "is not a SqliteSaver database" in err
    code, _, err = run(capsys, "migrate", tmp_path / "missing.sqlite", tmp_path / "migrated")
    assert code == 2 and "no SQLite database" in err


# -- as a real process -------------------------------------------------------------------


def test_runs_as_a_real_process(store: Path, tmp_path: Path) -> None:
    def cli_process(*argv: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "langgraph_checkpoint_verified", *map(str, argv)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    clean = cli_process("verify", store, "--json")
    assert (clean.returncode, json.loads(clean.stdout)["ok"]) == (0, True)

    newest = history(store, "beta")[0].config["configurable"]["checkpoint_id"]
    _, damaged = replace_record(*checkpoint_entry(store, newest))
    found = cli_process("verify", store)
    assert found.returncode == 1
    assert f"  checkpoint  {damaged}" in found.stdout.splitlines()
    assert found.stderr == ""

    missing = cli_process("inspect", tmp_path / "nowhere")
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert missing.stderr.startswith("langgraph-verified: error: no store at")
    assert missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr

    usage = cli_process("--help")
    assert usage.returncode == 0
    for command in ("inspect", "verify", "repair", "diff", "export", "migrate"):
        assert command in usage.stdout

    # the process ran this checkout's package, not another installed copy
    imported = subprocess.run(
        [sys.executable, "-c", "import langgraph_checkpoint_verified as p; print(p.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert imported.stdout.strip() == str(Path(cli.__file__).parent.with_name("__init__.py"))


def test_looking_at_a_store_writes_nothing_even_a_damaged_marker(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = store / "store.marker"
    damaged = marker.read_bytes()[:-1] + b"?"
    marker.write_bytes(damaged)
    for command in ("inspect", "verify"):
        run(capsys, command, store)
        assert marker.read_bytes() == damaged
    assert not (store / "quarantine").exists()
