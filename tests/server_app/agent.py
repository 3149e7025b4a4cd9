"""The graph ``tests/test_server.py`` serves with ``langgraph dev``.

``draft`` -> ``approve`` (asks a person with ``interrupt()``) -> ``publish`` -> end.

Every node appends a line to ``nodes.log`` in the server's working directory,
fsynced, so the test can tell which nodes ran and how often:

* ``draft`` and ``approve`` log once, when they finish (``approve`` runs again
  from its start when resumed, as LangGraph does; it logs after ``interrupt()``
  returns, so the line means "finished");
* ``publish`` logs ``publish started``, then waits until a file ``gate`` exists
  in the working directory, then logs ``publish finished``: the test kills the
  server while it waits.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

LOG = Path("nodes.log")
GATE = Path("gate")


class State(TypedDict, total=False):
    topic: str
    draft: str
    approved: str
    published: bool


def record(line: str) -> None:
    # fsynced: a line the test reads after a SIGKILL was really written before it
    with LOG.open("a") as log:
        log.write(line + "\n")
        log.flush()
        os.fsync(log.fileno())


def draft(state: State) -> State:
    record("draft")
    return {"draft": f"a post about {state['topic']}"}


def approve(state: State) -> State:
    answer = interrupt({"question": "publish this?", "draft": state["draft"]})
    record("approve")
    return {"approved": answer}


def publish(state: State) -> State:
    record("publish started")
    # A sync node runs on a worker thread of the server: polling here blocks nothing.
    while not GATE.exists():
        time.sleep(0.05)
    record("publish finished")
    return {"published": True}


builder = StateGraph(State)
builder.add_node("draft", draft)
builder.add_node("approve", approve)
builder.add_node("publish", publish)
builder.add_edge(START, "draft")
builder.add_edge("draft", "approve")
builder.add_edge("approve", "publish")
builder.add_edge("publish", END)
# No checkpointer here: the server gives the graph the one langgraph.json names.
graph = builder.compile()
