"""Small things users hit: what they see must tell them what to do."""

from __future__ import annotations

import sqlite3
from typing import Annotated

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import VerifiedSaver, VerifiedToolNode, current_idempotency_key


def test_from_conn_string_on_a_sqlite_file_points_to_migrate(tmp_path):
    database = tmp_path / "chat.sqlite"
    with sqlite3.connect(database) as conn:
        SqliteSaver(conn).setup()
    with pytest.raises(NotADirectoryError, match="langgraph-verified migrate"):
        VerifiedSaver.from_conn_string(str(database))
    other = tmp_path / "notes.txt"
    other.write_text("not a store")
    with pytest.raises(NotADirectoryError, match="a store is a directory"):
        VerifiedSaver(other)


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


keys_seen: list[object] = []


@tool
def send(to: str) -> str:
    """Send a message."""
    keys_seen.append(current_idempotency_key(None))
    return f"sent to {to}"


def tool_graph(node: ToolNode, checkpointer: object) -> object:
    def model(state: Chat) -> dict:
        call = {"name": "send", "args": {"to": "ana"}, "id": "call-1", "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    builder = StateGraph(Chat)
    builder.add_node("model", model)
    builder.add_node("tools", node)
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    return builder.compile(checkpointer=checkpointer)


def test_a_tool_asks_for_its_key_without_raising_under_either_node():
    keys_seen.clear()
    config = {"configurable": {"thread_id": "t"}}
    tool_graph(ToolNode([send]), InMemorySaver()).invoke({"messages": []}, config)
    tool_graph(VerifiedToolNode([send]), VerifiedSaver.in_memory()).invoke({"messages": []}, config)
    assert keys_seen[0] is None
    assert isinstance(keys_seen[1], str) and len(keys_seen[1]) > 8
    with pytest.raises(LookupError, match=r"current_idempotency_key\(None\)"):
        current_idempotency_key()


def test_the_wrong_checkpointer_is_named_with_the_right_article():
    graph = tool_graph(VerifiedToolNode([send], require_records=True), InMemorySaver())
    with pytest.raises(TypeError, match="an InMemorySaver") as raised:
        graph.invoke({"messages": []}, {"configurable": {"thread_id": "t"}})
    assert "a InMemorySaver" not in str(raised.value)
