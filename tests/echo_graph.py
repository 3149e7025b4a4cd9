"""A one-node chat graph that echoes the last message: the store-making graph of the
command-line, read-only and repair tests."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


def reply(state: State) -> dict[str, Any]:
    return {
        "messages": [AIMessage(f"echo: {state['messages'][-1].content}")],
        "turns": state.get("turns", 0) + 1,
    }


def build_graph(checkpointer: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=checkpointer)
