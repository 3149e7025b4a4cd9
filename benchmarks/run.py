"""Benchmarks of VerifiedSaver against LangGraph's own savers, measured side by side.

Every figure is taken in the same run as the ``InMemorySaver`` and
``SqliteSaver`` figures it is compared with, interleaved step by step, and
reported as a ratio (median over blocks or repetitions), because a shared
machine's speed drifts more than the differences being measured.

Usage::

    python benchmarks/run.py                 # full run (~3-5 minutes)
    python benchmarks/run.py --quick         # smoke run (seconds)
    python benchmarks/run.py --output out.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiosqlite  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver  # noqa: E402
from workload import (  # noqa: E402
    TextSource,
    build_chat_graph,
    human_turns,
    raw_checkpoints,
)

from langgraph_checkpoint_verified import VerifiedSaver  # noqa: E402

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "latest.json"
MEMORY = "InMemorySaver"
SQLITE = "SqliteSaver"
VERIFIED_FSYNC = "VerifiedSaver files fsync=True"
VERIFIED_NOFSYNC = "VerifiedSaver files fsync=False"
VERIFIED_MEMORY = "VerifiedSaver.in_memory()"
SAVERS = (MEMORY, SQLITE, VERIFIED_FSYNC, VERIFIED_NOFSYNC, VERIFIED_MEMORY)
BASELINES = (MEMORY, SQLITE)


@dataclass
class Settings:
    chat_steps: int
    blocks: int
    put_count: int
    read_rounds: int
    list_limit: int
    recovery_checkpoints: int
    recovery_damaged: tuple[int, ...]
    recovery_repeats: int


FULL = Settings(
    chat_steps=500,
    blocks=10,
    put_count=1000,
    read_rounds=7,
    list_limit=10,
    recovery_checkpoints=10_000,
    recovery_damaged=(0, 1, 10, 100),
    recovery_repeats=3,
)
QUICK = Settings(
    chat_steps=50,
    blocks=5,
    put_count=100,
    read_rounds=3,
    list_limit=20,
    recovery_checkpoints=1_000,
    recovery_damaged=(0, 1, 10, 100),
    recovery_repeats=1,
)


# -- helpers ---------------------------------------------------------------


def thread_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def open_sync_saver(name: str, workdir: Path) -> Any:
    if name == MEMORY:
        return InMemorySaver()
    if name == SQLITE:
        return SqliteSaver(sqlite3.connect(workdir / "sqlite.db", check_same_thread=False))
    if name == VERIFIED_FSYNC:
        return VerifiedSaver(workdir / "verified-fsync")
    if name == VERIFIED_NOFSYNC:
        return VerifiedSaver(workdir / "verified-nofsync", fsync=False)
    if name == VERIFIED_MEMORY:
        return VerifiedSaver.in_memory()
    raise ValueError(name)


async def open_async_saver(name: str, workdir: Path) -> Any:
    # SqliteSaver has no async methods; LangGraph's async twin is AsyncSqliteSaver
    if name == SQLITE:
        return AsyncSqliteSaver(await aiosqlite.connect(workdir / "sqlite.db"))
    return open_sync_saver(name, workdir)


def block_ratios(times: dict[str, list[float]], blocks: int) -> dict[str, dict[str, float]]:
    """Per saver and baseline: the median over blocks of (block time / baseline block time)."""
    steps = len(times[MEMORY])
    size = max(1, steps // blocks)
    bounds = [(start, min(start + size, steps)) for start in range(0, steps, size)]
    ratios: dict[str, dict[str, float]] = {}
    for name, series in times.items():
        ratios[name] = {}
        for baseline in BASELINES:
            per_block = [sum(series[a:b]) / sum(times[baseline][a:b]) for a, b in bounds if b > a]
            ratios[name][baseline] = statistics.median(per_block)
    return ratios


def dir_bytes(path: Path) -> tuple[int, int, int]:
    """(apparent bytes, allocated bytes, files) of everything under ``path``."""
    apparent = allocated = files = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            st = os.stat(os.path.join(dirpath, name))
            apparent += st.st_size
            allocated += st.st_blocks * 512
            files += 1
    return apparent, allocated, files


def sqlite_bytes(db: Path) -> tuple[int, int, int]:
    apparent = allocated = files = 0
    for suffix in ("", "-wal", "-shm", "-journal"):
        candidate = Path(f"{db}{suffix}")
        if candidate.exists():
            st = candidate.stat()
            apparent += st.st_size
            allocated += st.st_blocks * 512
            files += 1
    return apparent, allocated, files


def rotated(names: tuple[str, ...], turn: int) -> list[str]:
    # a different saver goes first each turn, so none always runs on a cold cache
    shift = turn % len(names)
    return list(names[shift:] + names[:shift])


# -- 1. the chat graph, sync and async -------------------------------------


def chat_sync(settings: Settings, workdir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    savers = {name: open_sync_saver(name, workdir) for name in SAVERS}
    graphs = {
        name: build_chat_graph(TextSource(seed=1)).compile(checkpointer=saver)
        for name, saver in savers.items()
    }
    inputs = {name: human_turns(TextSource(seed=2), settings.chat_steps) for name in SAVERS}
    config = thread_config("chat")
    times: dict[str, list[float]] = {name: [] for name in SAVERS}
    gc.collect()
    for step in range(settings.chat_steps):
        for name in rotated(SAVERS, step):
            started = time.perf_counter()
            graphs[name].invoke(inputs[name][step], config)
            times[name].append(time.perf_counter() - started)
    result = chat_summary(times, settings)
    reads = read_latency(savers, config, settings)
    size = store_sizes(savers, workdir, settings)
    return {"chat_sync": result, "reads": reads}, {"size": size}


def chat_async(settings: Settings, workdir: Path) -> dict[str, Any]:
    async def main() -> dict[str, list[float]]:
        savers = {name: await open_async_saver(name, workdir) for name in SAVERS}
        graphs = {
            name: build_chat_graph(TextSource(seed=1)).compile(checkpointer=saver)
            for name, saver in savers.items()
        }
        inputs = {name: human_turns(TextSource(seed=2), settings.chat_steps) for name in SAVERS}
        config = thread_config("chat-async")
        times: dict[str, list[float]] = {name: [] for name in SAVERS}
        gc.collect()
        for step in range(settings.chat_steps):
            for name in rotated(SAVERS, step):
                started = time.perf_counter()
                await graphs[name].ainvoke(inputs[name][step], config)
                times[name].append(time.perf_counter() - started)
        await savers[SQLITE].conn.close()
        return times

    return chat_summary(asyncio.run(main()), settings)


def chat_summary(times: dict[str, list[float]], settings: Settings) -> dict[str, Any]:
    ratios = block_ratios(times, settings.blocks)
    return {
        "steps": settings.chat_steps,
        "blocks": settings.blocks,
        "savers": {
            name: {
                "ms_per_step_mean": 1000 * sum(series) / len(series),
                "ms_per_step_median": 1000 * statistics.median(series),
                "ratio_vs": ratios[name],
            }
            for name, series in times.items()
        },
    }


# -- 4. reads of the finished chat thread ----------------------------------


def read_latency(savers: dict[str, Any], config: dict[str, Any], settings: Settings) -> dict:
    get_times: dict[str, list[float]] = {name: [] for name in savers}
    list_times: dict[str, list[float]] = {name: [] for name in savers}
    listed: dict[str, int] = {}
    for turn in range(settings.read_rounds):
        for name in rotated(SAVERS, turn):
            saver = savers[name]
            started = time.perf_counter()
            found = saver.get_tuple(config)
            get_times[name].append(time.perf_counter() - started)
            assert found is not None
            started = time.perf_counter()
            items = list(saver.list(config, limit=settings.list_limit))
            list_times[name].append(time.perf_counter() - started)
            listed[name] = len(items)

    def summary(samples: dict[str, list[float]]) -> dict[str, Any]:
        ratio_samples = {
            name: {
                baseline: statistics.median(
                    s / b for s, b in zip(samples[name], samples[baseline], strict=True)
                )
                for baseline in BASELINES
            }
            for name in samples
        }
        return {
            name: {"ms_median": 1000 * statistics.median(series), "ratio_vs": ratio_samples[name]}
            for name, series in samples.items()
        }

    return {
        "rounds": settings.read_rounds,
        "get_tuple_latest": summary(get_times),
        "list": {"limit": settings.list_limit, "returned": listed, **summary(list_times)},
    }


# -- 2. size on disk --------------------------------------------------------


def store_sizes(savers: dict[str, Any], workdir: Path, settings: Settings) -> dict[str, Any]:
    savers[SQLITE].conn.close()  # folds the WAL back into the database file
    sqlite = sqlite_bytes(workdir / "sqlite.db")
    out: dict[str, Any] = {
        "steps": settings.chat_steps,
        SQLITE: {"apparent_bytes": sqlite[0], "allocated_bytes": sqlite[1], "files": sqlite[2]},
    }
    for name, sub in ((VERIFIED_FSYNC, "verified-fsync"), (VERIFIED_NOFSYNC, "verified-nofsync")):
        apparent, allocated, files = dir_bytes(workdir / sub)
        out[name] = {
            "apparent_bytes": apparent,
            "allocated_bytes": allocated,
            "files": files,
            "ratio_vs_sqlite_apparent": apparent / sqlite[0],
            "ratio_vs_sqlite_allocated": allocated / sqlite[1],
        }
    memory_records = savers[VERIFIED_MEMORY].storage.records
    out[VERIFIED_MEMORY] = {"record_bytes": sum(len(v) for v in memory_records.values())}
    return out


# -- put throughput with direct calls ---------------------------------------


def put_throughput(settings: Settings, workdir: Path) -> dict[str, Any]:
    (workdir / "put").mkdir()
    savers = {name: open_sync_saver(name, workdir / "put") for name in SAVERS}
    calls = list(raw_checkpoints(TextSource(seed=3), settings.put_count, thread_id="put"))
    times: dict[str, list[float]] = {name: [] for name in SAVERS}
    block = 10
    for turn, start in enumerate(range(0, len(calls), block)):
        for name in rotated(SAVERS, turn):
            saver = savers[name]
            started = time.perf_counter()
            for config, checkpoint, metadata, new_versions in calls[start : start + block]:
                saver.put(config, checkpoint, metadata, new_versions)
            times[name].append(time.perf_counter() - started)
    savers[SQLITE].conn.close()
    ratios = block_ratios(times, settings.blocks)
    return {
        "checkpoints": settings.put_count,
        "savers": {
            name: {
                "ms_per_put": 1000 * sum(series) / settings.put_count,
                "ratio_vs": ratios[name],
            }
            for name, series in times.items()
        },
    }


# -- 3. recovery ------------------------------------------------------------


def recovery(settings: Settings, workdir: Path) -> dict[str, Any]:
    base = workdir / "recovery"
    store = base / "store"
    db = base / "sqlite.db"
    base.mkdir()
    built = time.perf_counter()
    writer = VerifiedSaver(store, fsync=False)
    sqlite_writer = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
    ids: list[str] = []
    for config, checkpoint, metadata, new_versions in raw_checkpoints(
        TextSource(seed=4), settings.recovery_checkpoints
    ):
        writer.put(config, checkpoint, metadata, new_versions)
        sqlite_writer.put(config, checkpoint, metadata, new_versions)
        ids.append(checkpoint["id"])
    sqlite_writer.conn.close()
    build_seconds = time.perf_counter() - built
    files = sorted(store.rglob("*.ckpt"), key=lambda p: p.name, reverse=True)
    assert len(files) == settings.recovery_checkpoints
    config = thread_config("recovery")
    newest_first = sorted(ids, reverse=True)

    samples: dict[int, dict[str, list[float]]] = {
        damaged: {"first": [], "second": [], "sqlite": []} for damaged in settings.recovery_damaged
    }
    for repeat in range(settings.recovery_repeats):
        for damaged in settings.recovery_damaged:
            copy = base / f"copy-{damaged}-{repeat}"
            # hard links: a byte-for-byte copy would leave ~80 MB of dirty pages whose
            # writeback lands on the first fsync and measures the disk, not the saver
            shutil.copytree(store, copy, copy_function=os.link)
            for path in sorted(copy.rglob("*.ckpt"), key=lambda p: p.name, reverse=True)[:damaged]:
                flip_byte(path)
            os.sync()
            expected = newest_first[damaged]

            started = time.perf_counter()
            saver = VerifiedSaver(copy)
            found = saver.get_tuple(config)
            first = time.perf_counter() - started
            assert found is not None and found.config["configurable"]["checkpoint_id"] == expected
            assert saver.stats.quarantined_records == damaged

            started = time.perf_counter()
            found = VerifiedSaver(copy).get_tuple(config)
            second = time.perf_counter() - started
            assert found is not None and found.config["configurable"]["checkpoint_id"] == expected

            started = time.perf_counter()
            sqlite_saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
            baseline = sqlite_saver.get_tuple(config)
            sqlite_time = time.perf_counter() - started
            sqlite_saver.conn.close()
            assert baseline is not None

            samples[damaged]["first"].append(first)
            samples[damaged]["second"].append(second)
            samples[damaged]["sqlite"].append(sqlite_time)
            shutil.rmtree(copy)

    cases = {}
    for damaged, series in samples.items():
        first = statistics.median(series["first"])
        second = statistics.median(series["second"])
        sqlite_time = statistics.median(series["sqlite"])
        cases[str(damaged)] = {
            "first_read_ms": 1000 * first,
            "second_read_ms": 1000 * second,
            "sqlite_open_get_tuple_ms": 1000 * sqlite_time,
            "first_ratio_vs_sqlite": statistics.median(
                f / s for f, s in zip(series["first"], series["sqlite"], strict=True)
            ),
            "second_ratio_vs_sqlite": statistics.median(
                f / s for f, s in zip(series["second"], series["sqlite"], strict=True)
            ),
        }
    return {
        "checkpoints": settings.recovery_checkpoints,
        "repeats": settings.recovery_repeats,
        "build_seconds_both_stores": build_seconds,
        "store_bytes": dir_bytes(store)[0],
        "cases": cases,
    }


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.unlink()  # break the hard link: the pristine store must stay intact
    path.write_bytes(bytes(data))


# -- output -------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    lines: list[str] = []

    def ratio(entry: dict[str, Any], baseline: str) -> str:
        return f"{entry['ratio_vs'][baseline]:.2f}x"

    for key, title in (("chat_sync", "graph.invoke"), ("chat_async", "graph.ainvoke")):
        section = results[key]
        lines += [
            f"### {title}: {section['steps']}-step chat, time per step "
            f"(ratio = median over {section['blocks']} interleaved blocks)",
            "",
            "| saver | ms/step (mean) | vs InMemorySaver | vs SqliteSaver |",
            "|---|---:|---:|---:|",
        ]
        for name, entry in section["savers"].items():
            shown = name if key == "chat_sync" or name != SQLITE else "AsyncSqliteSaver"
            lines.append(
                f"| {shown} | {entry['ms_per_step_mean']:.2f} | {ratio(entry, MEMORY)} "
                f"| {ratio(entry, SQLITE)} |"
            )
        lines.append("")

    put = results["put"]
    lines += [
        f"### put: {put['checkpoints']} direct calls (chat-shaped checkpoints, "
        "only changed channels in new_versions)",
        "",
        "| saver | ms/put | vs InMemorySaver | vs SqliteSaver |",
        "|---|---:|---:|---:|",
    ]
    for name, entry in put["savers"].items():
        lines.append(
            f"| {name} | {entry['ms_per_put']:.3f} | {ratio(entry, MEMORY)} "
            f"| {ratio(entry, SQLITE)} |"
        )
    lines.append("")

    reads = results["reads"]
    for key, title in (
        ("get_tuple_latest", "get_tuple (latest) on the finished chat thread"),
        ("list", f"list(limit={reads['list']['limit']}) on the finished chat thread"),
    ):
        lines += [
            f"### {title} (median of {reads['rounds']} interleaved rounds)",
            "",
            "| saver | ms | vs InMemorySaver | vs SqliteSaver |",
            "|---|---:|---:|---:|",
        ]
        for name in SAVERS:
            entry = reads[key][name]
            lines.append(
                f"| {name} | {entry['ms_median']:.2f} | {ratio(entry, MEMORY)} "
                f"| {ratio(entry, SQLITE)} |"
            )
        lines.append("")

    size = results["size"]
    sqlite = size[SQLITE]
    lines += [
        f"### Size after the {size['steps']}-step chat",
        "",
        "| store | bytes | allocated on disk | files | vs SQLite (bytes) |",
        "|---|---:|---:|---:|---:|",
        f"| SqliteSaver db | {sqlite['apparent_bytes'] / 1e6:.1f} MB "
        f"| {sqlite['allocated_bytes'] / 1e6:.1f} MB | {sqlite['files']} | 1.00x |",
    ]
    for name in (VERIFIED_FSYNC, VERIFIED_NOFSYNC):
        entry = size[name]
        lines.append(
            f"| {name} | {entry['apparent_bytes'] / 1e6:.1f} MB "
            f"| {entry['allocated_bytes'] / 1e6:.1f} MB | {entry['files']} "
            f"| {entry['ratio_vs_sqlite_apparent']:.2f}x |"
        )
    lines.append(
        f"| {VERIFIED_MEMORY} (record bytes) "
        f"| {size[VERIFIED_MEMORY]['record_bytes'] / 1e6:.1f} MB | | | |"
    )
    lines.append("")

    rec = results["recovery"]
    lines += [
        f"### Recovery: open + get_tuple on a {rec['checkpoints']:,}-checkpoint thread "
        f"with its newest N checkpoints damaged (median of {rec['repeats']})",
        "",
        "| damaged | first read (quarantines) | second read | SqliteSaver open + get_tuple, "
        "undamaged | first vs SqliteSaver |",
        "|---:|---:|---:|---:|---:|",
    ]
    for damaged, case in rec["cases"].items():
        lines.append(
            f"| {damaged} | {case['first_read_ms']:.1f} ms | {case['second_read_ms']:.1f} ms "
            f"| {case['sqlite_open_get_tuple_ms']:.1f} ms | {case['first_ratio_vs_sqlite']:.2f}x |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run (seconds)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON results path")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    # Damage is logged as warnings; with no handler configured Python would print
    # every one to stderr, and the terminal's speed would become part of the figure.
    logging.getLogger("langgraph_checkpoint_verified").addHandler(logging.NullHandler())

    results: dict[str, Any] = {
        "command": "python benchmarks/run.py" + (" --quick" if args.quick else ""),
        "settings": settings.__dict__ | {"recovery_damaged": list(settings.recovery_damaged)},
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="verified-bench-") as temp:
        workdir = Path(temp)
        for name, run in _sections(settings, workdir):
            section_started = time.perf_counter()
            print(f"running {name}...", file=sys.stderr, flush=True)
            results.update(run())
            gc.collect()
            print(
                f"  {name} took {time.perf_counter() - section_started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    results["total_seconds"] = time.perf_counter() - started

    print(markdown(results))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    temp_output = args.output.with_name(args.output.name + ".tmp")
    temp_output.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    os.replace(temp_output, args.output)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _sections(settings: Settings, workdir: Path) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    def sync_part() -> dict[str, Any]:
        (workdir / "sync").mkdir()
        chat, size = chat_sync(settings, workdir / "sync")
        shutil.rmtree(workdir / "sync")
        return {**chat, **size}

    def async_part() -> dict[str, Any]:
        (workdir / "async").mkdir()
        out = {"chat_async": chat_async(settings, workdir / "async")}
        shutil.rmtree(workdir / "async")
        return out

    return [
        ("chat (sync) + reads + size", sync_part),
        ("chat (async)", async_part),
        ("put", lambda: {"put": put_throughput(settings, workdir)}),
        ("recovery", lambda: {"recovery": recovery(settings, workdir)}),
    ]


if __name__ == "__main__":
    sys.exit(main())
