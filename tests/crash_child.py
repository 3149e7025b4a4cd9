"""Runs a thread of a multi-step graph to its end on a file store; killed at random by
``test_crash.py``.

Usage: ``python crash_child.py STORE LOG THREAD_ID GATE``

Every node execution appends ``run <step> <pid>`` to LOG, and every ``put`` that
returns appends ``put <count> <pid>`` (the checkpoint holding the result of
step ``<count>`` is acknowledged), each line fsynced before going on. A new
process resumes the thread from its newest checkpoint. Once the thread is
finished the child appends ``end`` and waits for the file GATE before
appending ``done`` and exiting, so the parent's kill never comes too late.
"""

from __future__ import annotations

import operator
import os
import sys
import time
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import VerifiedSaver

STEPS = 12


class State(TypedDict):
    count: int
    trace: Annotated[list, operator.add]
    rare: str


def append_line(log: str, line: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line} {os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


class LoggingSaver(VerifiedSaver):
    """Records in LOG that a ``put`` returned, i.e. that a checkpoint was acknowledged."""

    log = ""

    def put(self, config, checkpoint, metadata, new_versions):
        returned = super().put(config, checkpoint, metadata, new_versions)
        count = checkpoint["channel_values"].get("count")
        if count is not None:
            append_line(self.log, f"put {count}")
        return returned


def build(saver: VerifiedSaver, log: str):
    def step(state):
        count = state["count"] + 1
        append_line(log, f"run {count}")  # the side effect
        update = {"count": count, "trace": [count]}
        if count == STEPS // 2:
            update["rare"] = "changed"
        return update

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["count"] < STEPS else END)
    return builder.compile(checkpointer=saver)


def main(store: str, log: str, thread_id: str, gate: str) -> None:
    LoggingSaver.log = log
    saver = LoggingSaver(store)
    graph = build(saver, log)
    config = {"configurable": {"thread_id": thread_id}}
    if saver.get_tuple(config) is None:
        graph.invoke({"count": 0, "trace": [], "rare": "initial"}, config, durability="sync")
    else:
        graph.invoke(None, config, durability="sync")
    append_line(log, "end")
    while not os.path.exists(gate):
        time.sleep(0.005)  # waiting to be killed or let go; the parent decides
    append_line(log, "done")


if __name__ == "__main__":
    main(*sys.argv[1:5])
