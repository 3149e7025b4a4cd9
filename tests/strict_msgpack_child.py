"""A chat graph run under ``LANGGRAPH_STRICT_MSGPACK=true`` on VerifiedSaver and InMemorySaver.

The variable is read when LangGraph is imported, so the tests run this in a
process of its own: ``python strict_msgpack_child.py STORE MODE`` where STORE
is a directory or ``memory`` and MODE is ``sync`` or ``async``. Prints one
JSON object: what each saver's graph returned, turn by turn, and how many
distinct ``with_allowlist`` clones of the VerifiedSaver LangGraph was given.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde import _msgpack
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from pydantic import BaseModel
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import VerifiedSaver


class Profile(BaseModel):
    name: str
    visits: int


class Stray(BaseModel):
    """Not named by the state schema: strict mode reads it back as a plain dict."""

    secret: str


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    profile: Profile
    extra: Any


def reply(state: State) -> dict[str, Any]:
    profile = state["profile"]
    return {
        "messages": [AIMessage(f"hi {profile.name} #{profile.visits}")],
        "profile": Profile(name=profile.name, visits=profile.visits + 1),
        "extra": Stray(secret=f"s{profile.visits}"),
    }


def describe(value: Any) -> Any:
    if isinstance(value, list):
        return [describe(item) for item in value]
    if isinstance(value, BaseModel):
        return [type(value).__name__, value.model_dump(exclude={"id"})]
    if isinstance(value, dict):
        return {key: describe(item) for key, item in value.items()}
    return [type(value).__name__, repr(value)]


async def run(saver: Any, mode: str) -> list[Any]:
    builder = StateGraph(State)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}
    seen: list[Any] = []
    for turn in range(4):
        graph_input: dict[str, Any] = {"messages": [HumanMessage(f"turn {turn}")]}
        if turn == 0:
            graph_input["profile"] = Profile(name="ann", visits=0)
        if mode == "sync":
            result = graph.invoke(graph_input, config)
            state = graph.get_state(config)
            history = list(graph.get_state_history(config))
        else:
            result = await graph.ainvoke(graph_input, config)
            state = await graph.aget_state(config)
            history = [s async for s in graph.aget_state_history(config)]
        seen.append(
            {
                "result": describe(result),
                "state": describe(state.values),
                "history": [describe(s.values) for s in history],
            }
        )
    return seen


def main() -> None:
    store, mode = sys.argv[1], sys.argv[2]
    saver = VerifiedSaver.in_memory() if store == "memory" else VerifiedSaver(store)
    clones: set[int] = set()
    made = VerifiedSaver.with_allowlist

    def recording(self: VerifiedSaver, extra: Any) -> VerifiedSaver:
        clone = made(self, extra)
        clones.add(id(clone))
        return clone

    VerifiedSaver.with_allowlist = recording  # type: ignore[method-assign]
    ours = asyncio.run(run(saver, mode))
    theirs = asyncio.run(run(InMemorySaver(), mode))
    print(
        json.dumps(
            {
                "strict": _msgpack.STRICT_MSGPACK_ENABLED,
                "ours": ours,
                "theirs": theirs,
                "clones": len(clones),
            }
        )
    )


if __name__ == "__main__":
    main()
