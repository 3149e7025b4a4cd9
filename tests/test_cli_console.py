"""The ``langgraph-verified`` console script as a real process, on stores written by real graphs.

Covers threads, history, show, stats, prune, export and import, ``--json``, ``--version``,
colour (none when piped or with ``NO_COLOR``) and one-line errors.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from test_cli import (
    build_graph,
    by_step,
    checkpoint_entry,
    config,
    flip_byte,
    history,
    replace_record,
    run_conversations,
)
from typing_extensions import TypedDict

import langgraph_checkpoint_verified
from langgraph_checkpoint_verified import VerifiedSaver

SCRIPT = Path(sys.executable).parent / "langgraph-verified"
ESCAPE = re.compile(r"\x1b\[")


def console(*argv: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def ok_json(*argv: Any) -> Any:
    done = console(*argv, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class Approval(TypedDict):
    request: str
    answer: str


def ask(state: Approval) -> dict[str, Any]:
    return {"answer": interrupt({"question": f"approve {state['request']}?"})}


def fill_store(saver: VerifiedSaver) -> None:
    """The echo chat's threads alpha and beta, and a thread waiting at an interrupt."""
    run_conversations(build_graph(saver))
    builder = StateGraph(Approval)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    builder.compile(checkpointer=saver).invoke({"request": "refund"}, config("waiting"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("console") / "store"
    fill_store(VerifiedSaver(path))
    return path


def test_version_and_help() -> None:
    done = console("--version")
    assert (done.returncode, done.stdout) == (
        0,
        f"langgraph-verified {version('langgraph-checkpoint-verified')}\n",
    )
    usage = console("--help")
    for command in ("threads", "history", "show", "stats", "prune", "export", "import", "migrate"):
        assert command in usage.stdout


def test_the_script_runs_the_package_under_test() -> None:
    """The script's interpreter, with this environment, imports the package these tests
    import (``PYTHONPATH`` passes through), not another installed copy."""
    interpreter = SCRIPT.read_text().splitlines()[0].removeprefix("#!").strip()
    if "python" not in os.path.basename(interpreter):  # a launcher: /bin/sh re-executing
        interpreter = sys.executable
    done = subprocess.run(
        [interpreter, "-c", "import langgraph_checkpoint_verified as p; print(p.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
        check=True,
    )
    assert done.stdout.strip() == langgraph_checkpoint_verified.__file__


def test_threads_names_counts_and_interrupts(store: Path) -> None:
    found = {t["thread_id"]: t for t in ok_json("threads", store)["threads"]}
    assert sorted(found) == ["alpha", "beta", "waiting"]
    assert (found["alpha"]["checkpoints"], found["alpha"]["last_step"]) == (6, 4)
    assert found["alpha"]["interrupts"] == [] and found["alpha"]["bytes"] > 0
    (waiting,) = found["waiting"]["interrupts"]
    assert waiting["value"] == {"question": "approve refund?"}
    table = console("threads", store)
    assert table.returncode == 0 and "approve refund?" in table.stdout


def test_history_newest_first_with_changed_channels(store: Path) -> None:
    rows = ok_json("history", store, "alpha")["checkpoints"]
    assert [r["step"] for r in rows] == [4, 3, 2, 1, 0, -1]
    assert {"messages", "turns"} <= set(rows[0]["changed_channels"])
    assert rows[0]["parent_checkpoint_id"] == rows[1]["checkpoint_id"]
    assert all(r["status"] == "ok" for r in rows)
    assert len(ok_json("history", store, "alpha", "--limit", "2")["checkpoints"]) == 2


def test_show_reads_messages_next_nodes_and_interrupts(store: Path) -> None:
    state = ok_json("show", store, "alpha")
    assert state["step"] == 4 and sorted(state["channels"]) == ["messages", "turns"]
    text = console("show", store, "alpha").stdout
    assert "human: how are you?" in text and "ai: echo: how are you?" in text
    waiting = ok_json("show", store, "waiting")
    assert waiting["next"] == ["ask"]
    assert waiting["interrupts"][0]["value"] == {"question": "approve refund?"}
    assert "branch:to:ask" in ok_json("show", store, "waiting", "--all")["channels"]
    first = history(store, "alpha")[-1].config["configurable"]["checkpoint_id"]
    assert ok_json("show", store, "alpha", "--checkpoint", first)["step"] == -1


class Document(TypedDict):
    text: str


def test_stats(store: Path, tmp_path: Path) -> None:
    stats = ok_json("stats", store)
    assert (stats["threads"], stats["quarantined_records"]) == (3, 0)
    # a chat's records are a few hundred bytes each: kept as they are, not compressed
    assert stats["checkpoints"] >= 11 and stats["compression_ratio"] == 1.0
    assert stats["uncompressed_bytes"] == stats["bytes"]
    # a long text is compressed, and counted at its length
    builder = StateGraph(Document)
    builder.add_node("write", lambda state: {"text": "many words " * 2000})
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    graph = builder.compile(checkpointer=VerifiedSaver(tmp_path / "docs"))
    graph.invoke({"text": ""}, config("doc"))
    stats = ok_json("stats", tmp_path / "docs")
    assert stats["compression_ratio"] > 10
    assert stats["uncompressed_bytes"] > len("many words " * 2000)


def test_piped_and_no_color_output_has_no_escape_codes(store: Path) -> None:
    items = history(store, "alpha")
    a, b = by_step(items, -1), by_step(items, 4)
    for env in ({}, {"NO_COLOR": "1", "FORCE_COLOR": ""}):
        for argv in (
            ("threads", store),
            ("history", store, "alpha"),
            ("show", store, "waiting"),
            ("diff", store, "alpha", a, b),
        ):
            done = console(*argv, env=env)
            assert done.returncode == 0
            assert not ESCAPE.search(done.stdout + done.stderr)


def test_bad_input_is_one_line_and_nonzero(store: Path, tmp_path: Path) -> None:
    sqlite_file = tmp_path / "db.sqlite"
    sqlite_file.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    not_a_store = tmp_path / "notes"
    not_a_store.mkdir()
    (not_a_store / "a.txt").write_text("x")
    key_file = tmp_path / "key"
    key_file.write_bytes(b"k" * 32)
    for argv in (
        ("threads", tmp_path / "missing"),
        ("threads", not_a_store),
        ("stats", sqlite_file),
        ("history", store, "gamma"),
        ("show", store, "alpha", "--checkpoint", "nope"),
        ("show", store, "alpha", "--key-file", key_file),
        ("prune", store, "alpha", "--strategy", "all"),
        ("nonsense",),
    ):
        done = console(*argv)
        assert done.returncode != 0, argv
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, argv
        assert done.stderr.startswith("langgraph-verified: error: "), argv
    sqlite_given = console("threads", sqlite_file).stderr
    assert "is a SQLite database, not a store" in sqlite_given and "migrate" in sqlite_given


def test_history_counts_each_checkpoint_s_bytes(store: Path) -> None:
    rows = ok_json("history", store, "alpha")["checkpoints"]
    assert all(isinstance(r["bytes"], int) and r["bytes"] > 0 for r in rows), rows


@pytest.mark.parametrize(
    ("damage", "step", "newest_usable"),
    [
        # the newest record replaced by an entry that frames other bytes
        ("record replaced", 4, 3),
        # a byte flipped inside step 1's entry: steps 2 to 4 keep values in it
        ("entry flipped in place", 1, 0),
    ],
)
def test_a_damaged_store_is_marked_not_hidden(
    tmp_path: Path, damage: str, step: int, newest_usable: int
) -> None:
    store = tmp_path / "store"
    run_conversations(build_graph(VerifiedSaver(store)))
    items = history(store, "alpha")
    damaged = by_step(items, step)
    log, entry = checkpoint_entry(store, damaged)
    if damage == "record replaced":
        replace_record(log, entry)
    else:
        flip_byte(log, entry)
    log_bytes = log.read_bytes()

    rows = {r["checkpoint_id"]: r for r in ok_json("history", store, "alpha")["checkpoints"]}
    assert rows[damaged]["status"] != "ok" and rows[damaged]["problem"]
    assert {r["step"] for r in rows.values() if r["status"] == "ok"} == set(
        range(-1, newest_usable + 1)
    )
    assert console("history", store, "alpha").returncode == 0
    assert ok_json("show", store, "alpha")["step"] == newest_usable  # the newest that verifies
    assert ok_json("threads", store)["threads"][0]["last_step"] == newest_usable
    stats = ok_json("stats", store)
    assert (stats["threads"], stats["quarantined_records"]) == (2, 0)
    verify = console("verify", store, "--json")
    assert verify.returncode == 1 and json.loads(verify.stdout)["ok"] is False
    (found,) = json.loads(verify.stdout)["damaged"]
    assert found["key"] == entry.key
    # looking moved nothing: the log is as it was and there is no quarantine
    assert log.read_bytes() == log_bytes
    assert not (store / "quarantine").exists()

    repair = console("repair", store)
    assert repair.returncode == 0 and repair.stdout.splitlines()[-1] == "the store verifies now"
    moved = repair.stdout.count("\nmoved ") + repair.stdout.startswith("moved ")
    assert ok_json("stats", store)["quarantined_records"] == moved >= 1
    assert ok_json("show", store, "alpha")["step"] == newest_usable
    assert {r["status"] for r in ok_json("history", store, "alpha")["checkpoints"]} == {"ok"}


def test_prune_dry_run_then_keep_latest(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run_conversations(build_graph(VerifiedSaver(store)))
    dry = console("prune", store, "alpha", "--dry-run")
    assert dry.returncode == 0 and "would drop 5 checkpoint(s)" in dry.stdout
    assert len(history(store, "alpha")) == 6
    assert console("prune", store, "alpha").returncode == 0
    assert len(history(store, "alpha")) == 1
    assert console("prune", store, "beta", "--strategy", "delete").returncode == 0
    assert history(store, "beta") == []


def on_a_terminal(*argv: Any, env: dict[str, str]) -> bytes:
    """What the command prints to a terminal (a pseudo-terminal as its stdout)."""
    import pty

    main, child = pty.openpty()
    try:
        subprocess.run(
            [str(SCRIPT), *map(str, argv)],
            stdout=child,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TERM": "xterm-256color", **env},
            timeout=120,
            check=True,
        )
    finally:
        os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the terminal's other side is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    return b"".join(chunks)


def test_colour_on_a_terminal_and_none_with_no_color(store: Path) -> None:
    argv = ("history", store, "alpha", "--limit", "1")
    assert b"\x1b[" in on_a_terminal(*argv, env={"NO_COLOR": ""})
    plain = on_a_terminal(*argv, env={"NO_COLOR": "1"})
    assert b"\x1b[" not in plain and b"STATUS" in plain


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def agent(state: Chat) -> dict[str, Any]:
    if isinstance(state["messages"][-1], ToolMessage):
        return {"messages": [AIMessage("it is sunny")]}
    call = {"name": "weather", "args": {"city": "Oslo"}, "id": "call-1"}
    return {"messages": [AIMessage("", tool_calls=[call])]}


def weather(state: Chat) -> dict[str, Any]:
    return {"messages": [ToolMessage("sunny, 21 C", tool_call_id="call-1")]}


def test_show_puts_tool_results_under_their_calls(tmp_path: Path) -> None:
    store = tmp_path / "store"
    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("weather", weather)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges(
        "agent", lambda s: "weather" if s["messages"][-1].tool_calls else END
    )
    builder.add_edge("weather", "agent")
    graph = builder.compile(checkpointer=VerifiedSaver(store))
    graph.invoke({"messages": [("user", "weather in Oslo?")]}, config("tools"))
    lines = console("show", store, "tools").stdout.splitlines()
    calls = lines.index("    calls weather({'city': 'Oslo'})")
    assert lines[calls + 1] == "      -> sunny, 21 C"
    assert "  ai: it is sunny" in lines and "  human: weather in Oslo?" in lines
