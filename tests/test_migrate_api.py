"""``migrate`` copies any checkpointer's threads into a ``VerifiedSaver``, and graphs go on.

Real graphs run on a source saver: a chat whose model calls a tool and then stops
at an ``interrupt()`` for approval, one thread per conversation, and a parent graph
whose subgraph stops at an interrupt (checkpoints in a child namespace). After the
copy, every checkpoint of the target (with its metadata, parent and pending writes)
is the source's, and resuming the interrupt on the target gives what resuming it
on the source gives.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import MigrationReport, VerifiedSaver, migrate
from langgraph_checkpoint_verified.cli import main


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def build_chat(checkpointer: BaseCheckpointSaver) -> Any:
    """A model that calls ``weather``, answers, then waits for a person's approval."""

    def model(state: MessagesState) -> dict:
        last = state["messages"][-1]
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage(f"it is {last.content}", id=f"answer-{last.id}")]}
        call = {"name": "weather", "args": {"city": last.content}, "id": f"call-{last.id}"}
        return {"messages": [AIMessage("", tool_calls=[call], id=f"ai-{last.id}")]}

    def route(state: MessagesState) -> str:
        return "tools" if state["messages"][-1].tool_calls else "approve"

    def approve(state: MessagesState) -> dict:
        verdict = interrupt({"answer": state["messages"][-1].content})
        return {"messages": [AIMessage(f"approved: {verdict}", id="verdict")]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([weather]))
    builder.add_node("approve", approve)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", "approve"])
    builder.add_edge("tools", "model")
    builder.add_edge("approve", END)
    return builder.compile(checkpointer=checkpointer)


class Nested(TypedDict):
    steps: list[str]


def build_nested(checkpointer: BaseCheckpointSaver) -> Any:
    """A parent graph whose subgraph stops at an interrupt: checkpoints in two namespaces."""

    def first(state: Nested) -> dict:
        return {"steps": [*state["steps"], "first"]}

    def ask(state: Nested) -> dict:
        return {"steps": [*state["steps"], f"asked: {interrupt('go on?')}"]}

    inner = StateGraph(Nested)
    inner.add_node("first", first)
    inner.add_node("ask", ask)
    inner.add_edge(START, "first")
    inner.add_edge("first", "ask")

    outer = StateGraph(Nested)
    outer.add_node("inner", inner.compile())
    outer.add_node("last", lambda state: {"steps": [*state["steps"], "last"]})
    outer.add_edge(START, "inner")
    outer.add_edge("inner", "last")
    return outer.compile(checkpointer=checkpointer)


def run_chat(graph: Any) -> None:
    for thread_id, city in (("alice", "Paris"), ("bob", "Oslo")):
        graph.invoke({"messages": [("user", city)]}, config(thread_id))


def run_nested(graph: Any) -> None:
    graph.invoke({"steps": []}, config("nested"))


def resume_chat(graph: Any) -> list[str]:
    result = graph.invoke(Command(resume="yes"), config("alice"))
    return [m.content for m in result["messages"]]


def resume_nested(graph: Any) -> list[str]:
    return list(graph.invoke(Command(resume="sure"), config("nested"))["steps"])


SCENARIOS: dict[str, tuple[Callable[..., Any], Callable[..., None], Callable[..., list[str]]]] = {
    "chat": (build_chat, run_chat, resume_chat),
    "subgraph": (build_nested, run_nested, resume_nested),
}


@pytest.fixture(params=["files", "memory"])
def make_target(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], VerifiedSaver]:
    if request.param == "files":
        return lambda: VerifiedSaver(tmp_path / "store")
    return VerifiedSaver.in_memory


def snapshot(saver: BaseCheckpointSaver) -> list[tuple[Any, ...]]:
    """Everything ``list`` returns, in a form two savers can be compared by."""
    return sorted(
        (
            item.config["configurable"]["thread_id"],
            item.config["configurable"]["checkpoint_ns"],
            item.config["configurable"]["checkpoint_id"],
            item.checkpoint,
            item.metadata,
            item.parent_config["configurable"]["checkpoint_id"] if item.parent_config else None,
            item.pending_writes,
        )
        for item in saver.list(None)
    )


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_checkpoint_is_copied_and_the_graph_resumes_on_the_target(
    scenario: str, make_target: Callable[[], VerifiedSaver]
) -> None:
    build, run, resume = SCENARIOS[scenario]
    source = InMemorySaver()
    run(build(source))
    target = make_target()

    report = migrate(source, target)

    assert isinstance(report, MigrationReport)
    assert report.ok and report.verify_report.ok
    theirs = snapshot(source)
    assert snapshot(target) == theirs
    assert report.checkpoints == len(theirs)
    assert report.pending_writes == sum(len(item[-1]) for item in theirs)
    assert report.threads == len({item[0] for item in theirs})
    if scenario == "subgraph":  # not vacuous: the subgraph's checkpoints came along
        assert {item[1] for item in theirs} > {""}
    # both stopped at the same interrupt, and carry on the same way from it
    assert build(target).get_state(config(theirs[0][0])).interrupts
    assert resume(build(target)) == resume(build(source))


def test_only_the_given_threads_are_copied() -> None:
    source = InMemorySaver()
    run_chat(build_chat(source))
    target = VerifiedSaver.in_memory()

    report = migrate(source, target, thread_ids=["bob", "bob"])

    assert report.threads == 1
    assert {item[0] for item in snapshot(target)} == {"bob"}
    assert [item for item in snapshot(source) if item[0] == "bob"] == snapshot(target)


def test_a_target_holding_one_of_the_threads_is_refused_and_left_alone() -> None:
    source = InMemorySaver()
    run_chat(build_chat(source))
    target = VerifiedSaver.in_memory()
    migrate(source, target, thread_ids=["alice"])
    before = snapshot(target)

    with pytest.raises(ValueError, match="already has thread\\(s\\) 'alice'"):
        migrate(source, target)

    assert snapshot(target) == before  # bob was not copied either


def test_a_sqlite_saver_is_a_source_too(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "chat.sqlite", check_same_thread=False)
    try:
        source = SqliteSaver(conn)
        run_chat(build_chat(source))
        target = VerifiedSaver(tmp_path / "store")

        report = migrate(source, target)

        assert report.ok and report.threads == 2
        assert snapshot(target) == snapshot(source)
        assert resume_chat(build_chat(target)) == resume_chat(build_chat(source))
    finally:
        conn.close()


# -- the command line's progress bar --------------------------------------------------


@pytest.fixture
def big_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    source = InMemorySaver()
    run_chat(build_chat(source))
    migrate(source, VerifiedSaver(tmp_path / "store"))
    monkeypatch.setattr("langgraph_checkpoint_verified.cli.verify.PROGRESS_MIN_RECORDS", 2)
    return tmp_path / "store"


@pytest.mark.parametrize("command", ["verify", "repair"])
def test_verify_and_repair_draw_the_bar_on_a_terminal(
    command: str,
    big_store: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main([command, str(big_store)]) == 0
    out, err = capsys.readouterr()
    assert "verifying records" in err
    assert "verifying records" not in out
    assert out.splitlines()[-1] in {"ok: every record verifies", "nothing to repair"}


@pytest.mark.parametrize("command", ["verify", "repair"])
def test_nothing_is_drawn_on_a_pipe(
    command: str, big_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, str(big_store)]) == 0
    assert capsys.readouterr().err == ""
