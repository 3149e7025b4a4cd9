"""A graph ``tests/test_server.py`` serves to write a memory from inside a run.

Its one node puts ``{"text": ...}`` under ``("notes", "from-a-run")`` with the
store the server gives the run (``get_store()``), without a ``ttl``: the store's
``default_ttl`` and ``index`` from ``langgraph.json`` apply to it.
"""

from __future__ import annotations

from langgraph.config import get_store
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict


class Note(TypedDict):
    key: str
    text: str


def take_note(state: Note) -> Note:
    get_store().put(("notes", "from-a-run"), state["key"], {"text": state["text"]})
    return state


builder = StateGraph(Note)
builder.add_node("take_note", take_note)
builder.add_edge(START, "take_note")
# No store or checkpointer here: the server gives the graph the ones langgraph.json names.
graph = builder.compile()
