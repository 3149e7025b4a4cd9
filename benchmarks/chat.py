"""Figures 1, 2 and 7: a chat graph run by every saver side by side, step by step.

Six savers each run the same chat (``workload.build_chat_graph``: identical
human inputs and AI replies, ~1 KB of new messages per step) in their own
graph. Step ``i`` of every saver runs in one round, in an order rotated per
round; the round's figures are paired, so a slow moment of the machine hits
every saver of that round alike.

Per step and saver the harness records:

* ``step``: the wall time of ``graph.invoke`` (``ainvoke``), what the caller waits;
* ``saver``: the wall time covered by the saver's own ``put``/``put_writes``/
  ``get_tuple`` calls (``aput``/... for ``ainvoke``) during that step. This is
  the per-step overhead reported: see ``measure.SaverCallTimer``;
* ``fsyncs``: calls of ``os.fsync``/``os.fdatasync`` during that step.

After the steps listed in ``size_at``, the bytes of the file stores are taken
(the SQLite database with its -wal and -shm files, as they are while open).

Most threads are short: ``run_short_chats`` then runs many chats of
``SHORT_CHAT_TURNS`` turns, each on a new thread, with the savers of
``SHORT_SAVERS`` taking turns the same way, and gives the saver time per turn
over all of them. Two more figures say where that time goes: the same chats
with ``VerifiedSaver(path, fsync=False)`` beside them (what this saver costs with
no ``fsync`` at all, against a SqliteSaver that syncs every commit), and again
with ``durability="sync"`` (LangGraph waits for each step's checkpoint before the
next step starts: the next step's nodes no longer run beside that ``put``).
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from measure import (
    FSYNCS,
    SaverCallTimer,
    paired_ratio,
    rotated,
    sqlite_bytes,
    tree_bytes,
)
from workload import TextSource, build_chat_graph, human_turns

from langgraph_checkpoint_verified import VerifiedSaver

VERIFIED_FILES = "VerifiedSaver(path)"
VERIFIED_FILES_ASYNC = "VerifiedSaver(path), ainvoke"
VERIFIED_MEMORY = "VerifiedSaver.in_memory()"
MEMORY = "InMemorySaver"
SQLITE = "SqliteSaver"
SQLITE_ASYNC = "AsyncSqliteSaver, ainvoke"

SAVERS = (VERIFIED_FILES, VERIFIED_FILES_ASYNC, VERIFIED_MEMORY, MEMORY, SQLITE, SQLITE_ASYNC)
ASYNC_SAVERS = (VERIFIED_FILES_ASYNC, SQLITE_ASYNC)

COMPARISONS = (
    (VERIFIED_FILES, SQLITE),
    (VERIFIED_FILES_ASYNC, SQLITE_ASYNC),
    (VERIFIED_MEMORY, MEMORY),
    (VERIFIED_FILES, MEMORY),
)
"""(VerifiedSaver variant, the LangGraph saver it is compared with)."""

SHORT_CHAT_TURNS = 10
"""Turns (``graph.invoke`` calls) of each short chat."""
VERIFIED_UNSYNCED = "VerifiedSaver(path, fsync=False)"
"""Not durable: beside the others in the short chats only, to show what syncing costs."""
SHORT_COMPARISONS = (
    (VERIFIED_FILES, SQLITE),
    (VERIFIED_MEMORY, MEMORY),
    (VERIFIED_UNSYNCED, SQLITE),
)
SHORT_DURABLE_SAVERS = (VERIFIED_FILES, SQLITE, VERIFIED_MEMORY, MEMORY)
SHORT_SAVERS = (*SHORT_DURABLE_SAVERS, VERIFIED_UNSYNCED)
SHORT_SYNC_SAVERS = (VERIFIED_FILES, SQLITE)
"""The savers of the short chats run again with ``durability="sync"``."""

SIZED = {VERIFIED_FILES: "verified", SQLITE: "sqlite.db"}
"""The stores whose bytes on disk are measured: the two driven by ``graph.invoke``."""


@dataclass
class Participant:
    name: str
    saver: Any
    graph: Any
    timer: SaverCallTimer
    is_async: bool


def open_participants(workdir: Path, loop: asyncio.AbstractEventLoop) -> list[Participant]:
    async def async_sqlite() -> AsyncSqliteSaver:
        # AsyncSqliteSaver binds to the running loop: made inside it
        return AsyncSqliteSaver(await aiosqlite.connect(workdir / "sqlite-async.db"))

    savers: dict[str, Any] = {
        VERIFIED_FILES: VerifiedSaver(workdir / "verified"),
        VERIFIED_FILES_ASYNC: VerifiedSaver(workdir / "verified-async"),
        VERIFIED_MEMORY: VerifiedSaver.in_memory(),
        MEMORY: InMemorySaver(),
        SQLITE: SqliteSaver(sqlite3.connect(workdir / "sqlite.db", check_same_thread=False)),
        SQLITE_ASYNC: loop.run_until_complete(async_sqlite()),
    }
    participants = []
    for name in SAVERS:
        saver = savers[name]
        timer = SaverCallTimer(saver)  # on the instance, before the graph reads its methods
        graph = build_chat_graph(TextSource(seed=1)).compile(checkpointer=saver)
        participants.append(Participant(name, saver, graph, timer, name in ASYNC_SAVERS))
    return participants


def store_sizes(workdir: Path) -> dict[str, dict[str, int]]:
    return {
        VERIFIED_FILES: tree_bytes(workdir / SIZED[VERIFIED_FILES]),
        SQLITE: sqlite_bytes(workdir / SIZED[SQLITE]),
    }


def run_chat(workdir: Path, steps: int, size_at: set[int], progress: Any = None) -> dict[str, Any]:
    """Run ``steps`` rounds; return the raw per-step series and the sizes."""
    loop = asyncio.new_event_loop()
    try:
        participants = open_participants(workdir, loop)
        sqlite_sync = (
            participants[SAVERS.index(SQLITE)]
            .saver.conn.execute("PRAGMA synchronous")
            .fetchone()[0]
        )
        inputs = human_turns(TextSource(seed=2), steps)
        config = {"configurable": {"thread_id": "chat"}}
        series: dict[str, dict[str, list[float]]] = {
            p.name: {"step": [], "saver": [], "calls": [], "fsyncs": []} for p in participants
        }
        sizes: dict[int, dict[str, dict[str, int]]] = {}
        gc.collect()
        started_all = time.perf_counter()
        for step in range(steps):
            for p in rotated(participants, step):
                p.timer.take()
                fsyncs_before = FSYNCS.calls
                started = time.perf_counter()
                if p.is_async:
                    loop.run_until_complete(p.graph.ainvoke(inputs[step], config))
                else:
                    p.graph.invoke(inputs[step], config)
                elapsed = time.perf_counter() - started
                saver_seconds, calls = p.timer.take()
                record = series[p.name]
                record["step"].append(elapsed)
                record["saver"].append(saver_seconds)
                record["calls"].append(calls)
                record["fsyncs"].append(FSYNCS.calls - fsyncs_before)
            if step + 1 in size_at:
                sizes[step + 1] = store_sizes(workdir)
            if progress is not None and (step + 1) % 100 == 0:
                progress(f"chat step {step + 1}/{steps}, {time.perf_counter() - started_all:.0f} s")
        # every saver ran the same graph: SQLite's row count says how many checkpoints
        # each holds (listing them through a saver would decode every one)
        sqlite_conn = participants[SAVERS.index(SQLITE)].saver.conn
        checkpoints = sqlite_conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]

        async def close_async() -> None:
            await participants[SAVERS.index(SQLITE_ASYNC)].saver.conn.close()

        loop.run_until_complete(close_async())
        participants[SAVERS.index(SQLITE)].saver.conn.close()
    finally:
        loop.close()
    return {
        "series": series,
        "sizes": sizes,
        "checkpoints": checkpoints,
        "sqlite_pragma_synchronous": sqlite_sync,
    }


def window(values: list[float], length: int, half: int) -> list[float]:
    """The values of steps ``length - half .. length + half`` (1-based step numbers)."""
    return values[max(0, length - 1 - half) : length + half]


def summarize(raw: dict[str, Any], lengths: list[int], half: int) -> dict[str, Any]:
    """Medians over the window of rounds around each chat length, and paired ratios."""
    series = raw["series"]
    at: dict[str, Any] = {}
    for length in lengths:
        entry: dict[str, Any] = {"rounds": len(window(series[MEMORY]["step"], length, half))}
        for name in SAVERS:
            record = series[name]
            entry[name] = {
                "saver_ms": 1000 * statistics.median(window(record["saver"], length, half)),
                "step_ms": 1000 * statistics.median(window(record["step"], length, half)),
                "calls": statistics.median(window(record["calls"], length, half)),
                "fsyncs": statistics.median(window(record["fsyncs"], length, half)),
            }
        entry["ratios"] = {
            f"{name} / {base}": {
                "saver": paired_ratio(
                    window(series[name]["saver"], length, half),
                    window(series[base]["saver"], length, half),
                ),
                "step": paired_ratio(
                    window(series[name]["step"], length, half),
                    window(series[base]["step"], length, half),
                ),
            }
            for name, base in COMPARISONS
        }
        at[str(length)] = entry
    steps = len(series[MEMORY]["step"])
    fsyncs = {
        name: {
            "per_step_mean": sum(series[name]["fsyncs"]) / steps,
            "per_saver_call_mean": sum(series[name]["fsyncs"]) / max(1, sum(series[name]["calls"])),
        }
        for name in (VERIFIED_FILES, VERIFIED_FILES_ASYNC, VERIFIED_MEMORY)
    }
    return {"at_length": at, "fsyncs": fsyncs}


def size_summary(raw: dict[str, Any], lengths: list[int], growth: tuple[int, int]) -> dict:
    sizes = raw["sizes"]
    out: dict[str, Any] = {
        "at_length": {str(length): sizes[length] for length in lengths},
        "every": {str(length): sizes[length] for length in sorted(sizes)},
    }
    low, high = growth
    out["growth"] = {
        "from": low,
        "to": high,
        **{name: sizes[high][name]["allocated"] / sizes[low][name]["allocated"] for name in SIZED},
    }
    return out


def tile_medians(raw: dict[str, Any], every: int) -> dict[str, Any]:
    """For the plots: per saver, the median of each run of ``every`` steps, at its middle.

    Every step is in exactly one tile, so the curve uses the whole chat; the
    tables' figures (medians of the few steps around each length) are the dots.
    """
    series = raw["series"]
    steps = len(series[MEMORY]["step"])
    tiles = [(start, min(start + every, steps)) for start in range(0, steps, every)]
    tiles = [(a, b) for a, b in tiles if b - a >= max(1, every // 2)]
    return {
        "tile_steps": every,
        "lengths": [(a + 1 + b) / 2 for a, b in tiles],
        **{
            name: {
                key: [1000 * statistics.median(series[name][key][a:b]) for a, b in tiles]
                for key in ("saver", "step")
            }
            for name in SAVERS
        },
        "ratios": {
            f"{name} / {base}": {
                key: [
                    paired_ratio(series[name][key][a:b], series[base][key][a:b]) for a, b in tiles
                ]
                for key in ("saver", "step")
            }
            for name, base in COMPARISONS
        },
    }


def open_short_savers(workdir: Path, names: tuple[str, ...]) -> dict[str, Any]:
    """The savers ``names`` of the short chats, the file ones on stores of their own
    under ``workdir``."""
    makers = {
        VERIFIED_FILES: lambda: VerifiedSaver(workdir / "short-verified"),
        SQLITE: lambda: SqliteSaver(
            sqlite3.connect(workdir / "short-sqlite.db", check_same_thread=False)
        ),
        VERIFIED_MEMORY: VerifiedSaver.in_memory,
        MEMORY: InMemorySaver,
        VERIFIED_UNSYNCED: lambda: VerifiedSaver(workdir / "short-unsynced", fsync=False),
    }
    return {name: makers[name]() for name in names}


def run_short_chats(
    workdir: Path,
    chats: int,
    turns: int = SHORT_CHAT_TURNS,
    names: tuple[str, ...] = SHORT_SAVERS,
    durability: str | None = None,
) -> dict[str, Any]:
    """``chats`` chats of ``turns`` turns, each on a new thread of the savers ``names``.

    Turn ``i`` of a chat runs on every saver in one round, in an order rotated
    per round; figures are medians over every turn of every chat, ratios the
    median of the per-turn ratios. ``durability``: LangGraph's, for every turn
    (``None``: its default).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    savers = open_short_savers(workdir, names)
    timers = {name: SaverCallTimer(saver) for name, saver in savers.items()}
    graphs = {
        name: build_chat_graph(TextSource(seed=1)).compile(checkpointer=saver)
        for name, saver in savers.items()
    }
    inputs = human_turns(TextSource(seed=2), turns)
    per_turn: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    for chat in range(chats):
        config = {"configurable": {"thread_id": f"short-{chat}"}}
        for turn in range(turns):
            for name in rotated(names, chat * turns + turn):
                timers[name].take()
                graphs[name].invoke(inputs[turn], config, durability=durability)
                per_turn[name].append(timers[name].take()[0])
    if SQLITE in savers:
        savers[SQLITE].conn.close()
    return {
        "chats": chats,
        "turns": turns,
        "durability": durability or "async",
        **{name: {"saver_ms": 1000 * statistics.median(per_turn[name])} for name in names},
        "ratios": {
            f"{name} / {base}": paired_ratio(per_turn[name], per_turn[base])
            for name, base in SHORT_COMPARISONS
            if name in savers and base in savers
        },
    }


def chat_section(settings: Any, workdir: Path, progress: Any = None) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    lengths = list(settings.chat_lengths)
    half = settings.chat_half_window
    steps = max(lengths) + half
    size_at = {*lengths, *range(settings.size_every, steps + 1, settings.size_every)}
    size_at = {n for n in size_at if n <= steps}
    started = time.perf_counter()
    raw = run_chat(workdir, steps, size_at, progress)
    seconds = time.perf_counter() - started
    # about as many short chats as the long chat has steps / 35 (28 in make bench)
    short = run_short_chats(workdir, max(3, steps // 35))
    short_sync = run_short_chats(
        workdir / "sync", max(3, steps // 35), names=SHORT_SYNC_SAVERS, durability="sync"
    )
    return {
        "chat": {
            "steps": steps,
            "lengths": lengths,
            "half_window": half,
            "seconds": seconds,
            "sqlite_pragma_synchronous": raw["sqlite_pragma_synchronous"],
            "checkpoints": raw["checkpoints"],
            **summarize(raw, lengths, half),
            "tiles": tile_medians(raw, settings.size_every),
            "short": short,
            "short_sync": short_sync,
        },
        "disk": size_summary(raw, lengths, tuple(settings.growth)),
    }
