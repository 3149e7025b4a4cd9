"""Runs a thread of a multi-step graph to its end on a file store; killed at random by
``test_crash.py``.

Usage: ``python crash_child.py STORE LOG THREAD_ID REPORT_FD``

Every node execution appends ``run <step> <pid>`` to LOG, and every ``put`` that
returns appends ``put <count> <pid>`` (the checkpoint holding the result of
step ``<count>`` is acknowledged), each line fsynced before going on and then
written to the pipe REPORT_FD too, so the parent waits for these lines as they
happen instead of looking for them. A new process resumes the thread from its
newest checkpoint. After each line it waits for a byte on its stdin: the parent
sends them a few lines ahead of the lines it has read. Once the thread is finished
the child appends ``end`` and reads its stdin to the end before appending ``done``
and exiting: the parent closes a child's stdin to let it go, or kills it, so the
kill never comes too late.
"""

from __future__ import annotations

import operator
import os
import sys
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import VerifiedSaver

STEPS = 12


class State(TypedDict):
    count: int
    trace: Annotated[list, operator.add]
    rare: str


REPORT_FD = -1  # set by main: the pipe the parent reads progress from


def append_line(log: str, line: str) -> None:
    data = f"{line} {os.getpid()}\n".encode()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    # only once the line is durable: a line the parent has heard of is in the log
    os.write(REPORT_FD, data)
    if not line.startswith(("end", "done")):
        wait_to_go_on()


_LET_GO = False


def wait_to_go_on() -> None:
    """Wait for the parent's leave to go past the line just reported: one byte on stdin
    per line, sent a few lines ahead, so a child stays close to where the parent
    stands however slowly the parent runs; a closed stdin lets it go for good."""
    global _LET_GO
    if not _LET_GO and not os.read(0, 1):
        _LET_GO = True


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


def main(store: str, log: str, thread_id: str, report_fd: str) -> None:
    global REPORT_FD
    REPORT_FD = int(report_fd)
    LoggingSaver.log = log
    saver = LoggingSaver(store)
    graph = build(saver, log)
    config = {"configurable": {"thread_id": thread_id}}
    if saver.get_tuple(config) is None:
        graph.invoke({"count": 0, "trace": [], "rare": "initial"}, config, durability="sync")
    else:
        graph.invoke(None, config, durability="sync")
    append_line(log, "end")
    sys.stdin.buffer.read()  # until the parent closes it (lets go) or kills this process
    append_line(log, "done")


if __name__ == "__main__":
    main(*sys.argv[1:5])
