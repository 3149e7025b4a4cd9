"""Section 9: a retention sweep of a store of many threads, most of them expired.

The store: ``sweep_threads`` threads of three checkpoints each (a small chat
state, written with ``put`` as LangGraph writes it), nine in ten of them last
written long ago. Three jobs, each on a fresh copy of the same threads:

* ``VerifiedSaver.sweep(RetentionPolicy(idle=30 days))``: judges every thread by
  its checkpoints' times and deletes the expired ones;
* the same deletions with ``VerifiedSaver.delete_thread``, one per expired thread
  (the list of expired threads given);
* ``SqliteSaver.delete_thread`` per expired thread (the list given): the baseline.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from chat import SQLITE, VERIFIED_FILES
from langgraph.checkpoint.sqlite import SqliteSaver

from langgraph_checkpoint_verified import RetentionPolicy, VerifiedSaver

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
OLD = NOW - timedelta(days=400)
RECENT = NOW - timedelta(days=1)
STEPS = 3


def write_threads(saver: Any, count: int) -> list[str]:
    """``count`` threads, every tenth recent; returns the expired ones."""
    expired = []
    for n in range(count):
        thread_id = f"user-{n:05d}"
        when = RECENT if n % 10 == 0 else OLD
        if when is OLD:
            expired.append(thread_id)
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        messages: list[str] = []
        for step in range(STEPS):
            messages = [*messages, f"message {step} of {thread_id}"]
            checkpoint = {
                "v": 1,
                "id": f"{step:04d}",
                "ts": (when + timedelta(minutes=step)).isoformat(),
                "channel_values": {"messages": messages, "step": step},
                "channel_versions": {"messages": step + 1, "step": step + 1},
                "versions_seen": {},
            }
            config = saver.put(
                config, checkpoint, {"step": step}, {"messages": step + 1, "step": step + 1}
            )
    return expired


def retention_section(settings: Any, workdir: Path) -> dict[str, Any]:
    workdir.mkdir()
    count = settings.sweep_threads
    origin = workdir / "origin"
    expired = write_threads(VerifiedSaver(origin, fsync=False), count)
    db_origin = workdir / "origin.db"
    with sqlite3.connect(db_origin, check_same_thread=False) as conn:
        assert write_threads(SqliteSaver(conn), count) == expired

    seconds: dict[str, float] = {}

    store = workdir / "sweep"
    shutil.copytree(origin, store)
    saver = VerifiedSaver(store)
    started = time.perf_counter()
    report = saver.sweep(RetentionPolicy(idle=timedelta(days=30)), now=NOW)
    seconds["sweep"] = time.perf_counter() - started
    assert sorted(report.threads_deleted) == expired, "the sweep deleted other threads"

    store = workdir / "delete"
    shutil.copytree(origin, store)
    saver = VerifiedSaver(store)
    started = time.perf_counter()
    for thread_id in expired:
        saver.delete_thread(thread_id)
    seconds[VERIFIED_FILES] = time.perf_counter() - started

    db = workdir / "delete.db"
    shutil.copyfile(db_origin, db)
    conn = sqlite3.connect(db, check_same_thread=False)
    sqlite = SqliteSaver(conn)
    started = time.perf_counter()
    for thread_id in expired:
        sqlite.delete_thread(thread_id)
    seconds[SQLITE] = time.perf_counter() - started
    conn.close()
    return {
        "retention": {
            "threads": count,
            "expired": len(expired),
            "checkpoints_dropped": report.checkpoints_dropped,
            "bytes_freed": report.bytes_freed,
            "seconds": seconds,
            "ratio_sweep_vs_sqlite": seconds["sweep"] / seconds[SQLITE],
            "ratio_delete_vs_sqlite": seconds[VERIFIED_FILES] / seconds[SQLITE],
        }
    }
