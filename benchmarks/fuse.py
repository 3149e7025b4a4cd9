"""Figure 12: ``graph.invoke(..., durability="sync")`` on a FUSE file system.

On a network or user-space file system (NFS, EFS, gcsfuse) every file-system
call is a round trip to another process, so the calls a saver makes per step
count as much as its syncs. This section mounts ``bindfs`` (a FUSE pass-through:
each call goes from the kernel to the ``bindfs`` process and back) over a
directory of the run's work directory, writes both savers' stores through it,
and times whole ``invoke`` calls with ``durability="sync"`` (each step's
checkpoint and writes stored before the next step runs):

* a two-node graph with a small state (an int and a list of node names), one
  thread, then a new thread per ``invoke``;
* the chat graph of section 1 (growing message lists), one thread;
* chats of 10 turns of that graph, each on a new thread, with LangGraph's default
  durability (a step's checkpoint stored on a background thread while the next
  step runs): the saver time per turn of section 1's short chats
  (``chat.run_short_chats``), where calls that meet on a thread's lock share a sync.

``VerifiedSaver(path)`` and ``SqliteSaver`` run in the same rounds, alternately
first; ratios are medians of the per-round ratios. The section needs ``bindfs``
and ``/dev/fuse`` (``apt-get install bindfs``); without them it says why and
measures nothing.
"""

from __future__ import annotations

import operator
import os
import shutil
import sqlite3
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from chat import SHORT_DURABLE_SAVERS, SQLITE, VERIFIED_FILES, run_short_chats
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from measure import paired_ratio, rotated
from workload import TextSource, build_chat_graph, human_turns

from langgraph_checkpoint_verified import VerifiedSaver

FUSE_VERIFIED = "VerifiedSaver (files)"
FUSE_SQLITE = "SqliteSaver"
FUSE_SAVERS = (FUSE_VERIFIED, FUSE_SQLITE)


class SmallState(TypedDict):
    count: int
    visited: Annotated[list[str], operator.add]


def _first(state: SmallState) -> dict[str, Any]:
    return {"count": state["count"] + 1, "visited": ["first"]}


def _second(state: SmallState) -> dict[str, Any]:
    return {"count": state["count"] * 2, "visited": ["second"]}


def build_two_node_graph() -> StateGraph:
    graph = StateGraph(SmallState)
    graph.add_node("first", _first)
    graph.add_node("second", _second)
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    return graph


def fuse_unavailable() -> str | None:
    """Why the section cannot run here, or ``None``."""
    if shutil.which("bindfs") is None:
        return "bindfs is not installed (apt-get install bindfs)"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        return "fusermount is not installed (apt-get install fuse3)"
    return None


def mount_bindfs(source: Path, mountpoint: Path) -> str | None:
    """Mount ``source`` at ``mountpoint`` through bindfs; why it could not, or ``None``."""
    source.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["bindfs", "--no-allow-other", str(source), str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return f"bindfs could not mount ({done.stderr.strip() or done.returncode})"
    return None


def unmount(mountpoint: Path) -> None:
    """Unmount, lazily if something still holds a file there (the run's clean-up must
    not find a mount point it cannot remove)."""
    command = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount"
    if subprocess.run([command, "-u", str(mountpoint)], capture_output=True).returncode:
        subprocess.run([command, "-uz", str(mountpoint)], capture_output=True)


def _timed_rounds(
    graphs: dict[str, Any],
    rounds: int,
    make_input: Callable[[int], Any],
    thread_of: Callable[[int], str],
) -> dict[str, Any]:
    samples: dict[str, list[float]] = {name: [] for name in graphs}
    for i in range(rounds):
        config = {"configurable": {"thread_id": thread_of(i)}}
        for name in rotated(FUSE_SAVERS, i):
            started = time.perf_counter()
            graphs[name].invoke(make_input(i), config, durability="sync")
            samples[name].append(time.perf_counter() - started)
    return {
        "rounds": rounds,
        "median_ms": {name: 1000 * statistics.median(s) for name, s in samples.items()},
        "ratio": paired_ratio(samples[FUSE_VERIFIED], samples[FUSE_SQLITE]),
    }


def run_on(root: Path, rounds: int, chat_turns: int) -> dict[str, Any]:
    savers: dict[str, Any] = {
        FUSE_VERIFIED: VerifiedSaver(root / "verified"),
        FUSE_SQLITE: SqliteSaver(sqlite3.connect(root / "sqlite.db", check_same_thread=False)),
    }
    small = {name: build_two_node_graph().compile(checkpointer=s) for name, s in savers.items()}
    chat = {
        name: build_chat_graph(TextSource(seed=1)).compile(checkpointer=s)
        for name, s in savers.items()
    }
    turns = human_turns(TextSource(seed=2), chat_turns)
    try:
        return {
            "small state, one thread": _timed_rounds(
                small, rounds, lambda i: {"count": i, "visited": []}, lambda i: "small"
            ),
            "small state, a new thread per invoke": _timed_rounds(
                small, rounds, lambda i: {"count": i, "visited": []}, lambda i: f"small-{i}"
            ),
            "chat, one thread": _timed_rounds(
                chat, chat_turns, turns.__getitem__, lambda i: "chat"
            ),
        }
    finally:
        savers[FUSE_VERIFIED].close()  # its log files open: the mount could not go
        savers[FUSE_SQLITE].conn.close()


def fuse_section(settings: Any, workdir: Path) -> dict[str, Any]:
    why = fuse_unavailable() or mount_bindfs(workdir / "source", workdir / "mounted")
    if why is not None:
        return {"fuse": {"not_measured": why}}
    try:
        figures = run_on(workdir / "mounted", settings.fuse_rounds, settings.fuse_chat_turns)
        short = run_short_chats(
            workdir / "mounted" / "short", settings.fuse_short_chats, names=SHORT_DURABLE_SAVERS
        )
    finally:
        unmount(workdir / "mounted")
    short_chats = {
        "chats": short["chats"],
        "turns": short["turns"],
        "saver_ms": {
            FUSE_VERIFIED: short[VERIFIED_FILES]["saver_ms"],
            FUSE_SQLITE: short[SQLITE]["saver_ms"],
        },
        "ratio": short["ratios"][f"{VERIFIED_FILES} / {SQLITE}"],
    }
    return {"fuse": {"mount": "bindfs", "figures": figures, "short_chats": short_chats}}
