"""Benchmarks of VerifiedSaver next to LangGraph's own savers, interleaved in one process.

Usage::

    python benchmarks/run.py                  # full run (make bench), ~8-10 minutes
                                              # + the damage trials (--only damage: 338 s)
    python benchmarks/run.py --quick          # smoke run, well under a minute
    python benchmarks/run.py --out DIR        # write DIR/results.md, DIR/results/*
    python benchmarks/run.py --only s3 --out DIR   # one section (or several: --only s3,cli)

Writes ``results.md`` (the tables, also printed on stdout), ``results/latest.json``
(every figure and the settings) and the PNG plots in ``results/`` (if matplotlib is
installed: ``pip install -e '.[bench]'``). What each figure means: README.md.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import logging
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import measure  # noqa: E402, F401  (first: wraps os.fsync before the package is imported)
from chat import chat_section  # noqa: E402
from cli_bench import cli_section  # noqa: E402
from damage_trials import damage_section  # noqa: E402
from fuse import fuse_section  # noqa: E402
from ops import calls_section, history_section  # noqa: E402
from report import markdown, plot  # noqa: E402
from retention import retention_section  # noqa: E402
from s3 import s3_section  # noqa: E402
from store_bench import store_section  # noqa: E402

import langgraph_checkpoint_verified  # noqa: E402


@dataclass(frozen=True)
class Settings:
    chat_lengths: tuple[int, ...]  # chat lengths (steps) the per-step figures are given at
    chat_half_window: int  # figures at length L: median of steps L-h .. L+h
    size_every: int  # bytes on disk taken every this many steps (and at each length)
    growth: tuple[int, int]  # bytes on disk growth: size at [1] / size at [0]
    call_rounds: int  # put + get_tuple + list rounds
    big_rounds: int  # put of a 1 MB state rounds
    history_checkpoints: int  # length of the long thread
    history_rounds: int  # get_tuple rounds on it
    history_list_every: int  # list(limit=10) in every this many of those rounds
    memory_threads: int  # threads whose newest checkpoint one process reads (memory gained)
    open_rounds: int  # open + get_tuple rounds on it
    process_rounds: int  # the same in a new process, first after the writer
    recovery_damaged: tuple[int, ...]
    recovery_repeats: int
    cli_threads: int  # inspect store: threads x turns (3 checkpoints per turn)
    cli_turns: int
    export_turns: int  # export: one thread of this many turns
    cli_rounds: int
    s3_chat_steps: int  # S3: graph.invoke steps of the chat, per saver
    s3_thread_sizes: tuple[int, ...]  # S3: newest checkpoint read at these thread lengths
    s3_get_rounds: int  # S3: get_tuple rounds (open saver, new saver) at each length
    sweep_threads: int  # retention: threads in the swept store (nine in ten expire)
    store_items: int  # store: items in each memory store (put, get, searched)
    store_rounds: int  # store: put/get/cache-hit rounds (searches: max(3, rounds // 10))
    damage_steps: int  # damage trials: graph.invoke steps of the chat damaged
    damage_bit_trials: int  # damage trials: one bit flipped, trials per saver
    damage_block_trials: int  # damage trials: one 4 KB block zeroed, trials per saver
    fuse_rounds: int  # FUSE: invoke rounds of the two-node graph (one thread, new threads)
    fuse_chat_turns: int  # FUSE: chat turns on one thread
    fuse_short_chats: int  # FUSE: chats of 10 turns, a new thread each, default durability


FULL = Settings(
    chat_lengths=(50, 100, 300, 600, 1000),
    chat_half_window=5,
    size_every=50,
    growth=(300, 600),
    call_rounds=300,
    big_rounds=50,
    history_checkpoints=10_000,
    history_rounds=300,
    history_list_every=3,
    memory_threads=2_000,
    open_rounds=100,
    process_rounds=7,
    recovery_damaged=(0, 1, 10, 100),
    recovery_repeats=9,
    cli_threads=16,
    cli_turns=50,
    export_turns=200,
    cli_rounds=3,
    s3_chat_steps=100,
    # 2,000: past S3's 1,000 keys per LIST page, where listing a thread takes more requests
    s3_thread_sizes=(100, 1000, 2000),
    s3_get_rounds=5,
    sweep_threads=10_000,
    store_items=10_000,
    store_rounds=200,
    damage_steps=200,
    damage_bit_trials=40,
    damage_block_trials=20,
    fuse_rounds=100,
    fuse_chat_turns=50,
    fuse_short_chats=12,
)
QUICK = Settings(
    chat_lengths=(10, 20, 40),
    chat_half_window=2,
    size_every=10,
    growth=(20, 40),
    call_rounds=30,
    big_rounds=4,
    history_checkpoints=300,
    history_rounds=20,
    history_list_every=2,
    memory_threads=50,
    open_rounds=10,
    process_rounds=1,
    recovery_damaged=(0, 1, 10, 100),
    recovery_repeats=1,
    cli_threads=2,
    cli_turns=10,
    export_turns=10,
    cli_rounds=1,
    s3_chat_steps=6,
    s3_thread_sizes=(10, 30),
    s3_get_rounds=2,
    sweep_threads=100,
    store_items=200,
    store_rounds=10,
    damage_steps=50,
    damage_bit_trials=4,
    damage_block_trials=2,
    fuse_rounds=6,
    fuse_chat_turns=6,
    fuse_short_chats=2,
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def package_sources() -> dict[str, str]:
    """A digest of each source file of the package, to tell what changed during the run."""
    root = Path(langgraph_checkpoint_verified.__file__).parent
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        for path in sorted(root.rglob("*.py"))
    }


def changed_sources(before: dict[str, str]) -> list[str]:
    after = package_sources()
    return sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )


def code_state() -> str:
    """The commit, and whether the package had uncommitted changes."""
    root = Path(langgraph_checkpoint_verified.__file__).parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "not a git checkout"
    changed = [line for line in git("status", "--porcelain", "--", ".").splitlines() if line]
    state = f"commit {commit}"
    if changed:
        state += f", with uncommitted changes in {len(changed)} file(s) of the package"
    return state


def sections(settings: Settings, workdir: Path) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    return [
        ("chat", lambda: chat_section(settings, workdir / "chat", log)),
        ("history", lambda: history_section(settings, workdir / "history")),
        ("calls", lambda: calls_section(settings, workdir / "calls")),
        ("cli", lambda: cli_section(settings, workdir / "cli")),
        ("s3", lambda: s3_section(settings, workdir / "s3")),
        ("retention", lambda: retention_section(settings, workdir / "retention")),
        ("store", lambda: store_section(settings, workdir / "store")),
        ("damage", lambda: damage_section(settings, workdir / "damage")),
        ("fuse", lambda: fuse_section(settings, workdir / "fuse")),
    ]


SECTIONS = ("chat", "history", "calls", "cli", "s3", "retention", "store", "damage", "fuse")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run (seconds)")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE,
        help="directory for results.md and results/ (default: benchmarks/)",
    )
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        metavar="SECTION[,SECTION...]",
        help=f"run only these sections (of {', '.join(SECTIONS)}); needs --out, so that "
        "benchmarks/results.md is not replaced by a partial report",
    )
    args = parser.parse_args(argv)
    only = args.only
    if only is not None:
        unknown = sorted(set(only) - set(SECTIONS))
        if unknown or not only:
            parser.error(f"--only takes sections of {', '.join(SECTIONS)}, not {unknown or only}")
        if args.out.resolve() == HERE:
            parser.error("--only writes a partial report: give --out DIR")
    settings = QUICK if args.quick else FULL
    # Damage is logged as warnings; with no handler Python would print every one to
    # stderr, and the terminal's speed would become part of the recovery figures.
    logging.getLogger("langgraph_checkpoint_verified").addHandler(logging.NullHandler())

    sources_before = package_sources()
    results: dict[str, Any] = {
        "command": "python benchmarks/run.py"
        + (" --quick" if args.quick else "")
        + (f" --only {','.join(only)} --out DIR" if only else ""),
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "code": code_state(),
        "settings": asdict(settings),
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": " ".join(f"{v:.2f}" for v in os.getloadavg()),
            "sqlite": sqlite3.sqlite_version,
        },
        "section_seconds": {},
        "not_run": [name for name in SECTIONS if only and name not in only],
    }
    started = time.perf_counter()
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="verified-bench-") as temp:
        for name, run in sections(settings, Path(temp)):
            if name in results["not_run"]:
                continue
            log(f"running {name}...")
            section_started = time.perf_counter()
            try:
                results.update(run())
            except Exception as exc:  # the other sections still run and are written
                failed[name] = f"{type(exc).__name__}: {exc}"
                log(traceback.format_exc())
            results["section_seconds"][name] = time.perf_counter() - section_started
            log(f"  {name} took {results['section_seconds'][name]:.1f} s")
            # its files go now: gigabytes of dirty pages would otherwise be written back
            # while the next section times fsyncs
            shutil.rmtree(Path(temp) / name, ignore_errors=True)
            gc.collect()
    results["total_seconds"] = time.perf_counter() - started
    results["failed"] = failed
    changed = changed_sources(sources_before)
    if changed:
        # the sections ran the code loaded at the start; the CLI's subprocesses may not have
        results["code"] += f"; changed during the run (after it was loaded): {', '.join(changed)}"

    out = args.out
    plots, plot_note = plot(results, out / "results")
    if plots is None:
        log(f"plots skipped: {plot_note}")
    text = markdown(results, plots, plot_note)
    print(text)
    (out / "results").mkdir(parents=True, exist_ok=True)
    write(out / "results" / "latest.json", json.dumps(results, indent=1, sort_keys=True) + "\n")
    write(out / "results.md", text + "\n")
    log(f"wrote {out / 'results.md'} and {out / 'results'}/")
    for name, why in failed.items():
        log(f"section {name} failed: {why}")
    return 1 if failed else 0


def write(path: Path, text: str) -> None:
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(text)
    os.replace(temp, path)


if __name__ == "__main__":
    sys.exit(main())
