"""Figure 5: the ``langgraph-verified`` console script, run as a subprocess and timed.

Two stores are written by the chat graph of ``workload`` (so they hold what a
user's store holds: growing message lists, pending writes, three checkpoints
per turn): ``threads x turns`` for ``inspect`` and ``threads`` (16 x 50 = 2,400
checkpoints in the full run) and one thread of ``export_turns`` for ``export``
(200 turns = 600 checkpoints). They are built with ``fsync=False``, which writes
the same files faster; nothing is timed while building.

The baseline is the console script's own start-up (``langgraph-verified
--help``: the command line built, nothing read), timed in the same rounds. Each
round runs the commands in rotated order. The package's bytecode is compiled
first, as ``pip install`` compiles it: an editable install under
``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module from source in
every timed process. One untimed ``--help`` warms the interpreter; building left
the stores in the page cache.

Run alone, it builds one such store (kept, and reused by the next run) and times
``threads`` and ``inspect`` on it against ``--help``::

    python benchmarks/cli_bench.py --threads 8 --turns 100 --store /tmp/cli-store
"""

from __future__ import annotations

import argparse
import compileall
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from measure import rotated
from workload import TextSource, build_chat_graph, human_turns

import langgraph_checkpoint_verified
from langgraph_checkpoint_verified import VerifiedSaver


def compile_bytecode() -> None:
    """Write the package's ``.pyc`` files, as installing it from a wheel does.

    ``compileall`` writes them even under ``PYTHONDONTWRITEBYTECODE`` (which only
    stops an import from writing them): without them each timed process would
    compile every module it imports from source.
    """
    compileall.compile_dir(Path(langgraph_checkpoint_verified.__file__).parent, quiet=1)


def console_script() -> list[str]:
    """The installed ``langgraph-verified`` next to this interpreter, else ``python -m``."""
    here = Path(sys.executable).parent
    for name in ("langgraph-verified", "langgraph-verified.exe"):
        if (here / name).exists():
            return [str(here / name)]
    found = shutil.which("langgraph-verified")
    if found:
        return [found]
    return [sys.executable, "-m", "langgraph_checkpoint_verified"]


def export_arguments(script: list[str], store: Path, output: Path) -> list[str]:
    """``export`` of thread ``user-000`` into ``output``, in the form this script takes."""
    usage = subprocess.run([*script, "export", "--help"], capture_output=True, text=True).stdout
    if "--output" in usage:  # export STORE --thread T -o FILE
        return ["export", str(store), "--thread", "user-000", "-o", str(output)]
    return ["export", str(store), str(output), "--thread", "user-000"]  # export STORE FILE


def exported_checkpoints(path: Path) -> int:
    """Lines of an export that hold a checkpoint (all lines if they carry no type)."""
    lines = typed = 0
    with path.open() as exported:
        for line in exported:
            lines += 1
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("type") == "checkpoint":
                typed += 1
    return typed or lines


def build_chat_store(path: Path, threads: int, turns: int, seed: int) -> None:
    saver = VerifiedSaver(path, fsync=False)
    graph = build_chat_graph(TextSource(seed=seed)).compile(checkpointer=saver)
    inputs = human_turns(TextSource(seed=seed + 1), turns)
    for turn in range(turns):
        for thread in range(threads):
            graph.invoke(inputs[turn], {"configurable": {"thread_id": f"user-{thread:03}"}})


def cli_section(settings: Any, workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    script = console_script()
    inspect_store = workdir / "cli-inspect"
    export_store = workdir / "cli-export"
    export_file = workdir / "export.jsonl"
    started = time.perf_counter()
    build_chat_store(inspect_store, settings.cli_threads, settings.cli_turns, seed=6)
    build_chat_store(export_store, 1, settings.export_turns, seed=8)
    build_seconds = time.perf_counter() - started

    commands = {
        "startup (--help)": [*script, "--help"],
        "inspect": [*script, "inspect", str(inspect_store)],
        "threads": [*script, "threads", str(inspect_store)],
        "export": [*script, *export_arguments(script, export_store, export_file)],
    }

    inspect_checkpoints: list[int] = []

    def run(name: str) -> float:
        # output goes to a pipe, as to a terminal or `| less`; export writes its file (-o)
        began = time.perf_counter()
        done = subprocess.run(commands[name], capture_output=True, text=True)
        elapsed = time.perf_counter() - began
        if done.returncode != 0:
            raise RuntimeError(f"{commands[name]} exited {done.returncode}: {done.stderr[-500:]!r}")
        if name == "inspect":
            # the summary's header says how many checkpoints it found ("checkpoints: N")
            found = re.search(r"checkpoints:\s*(\d+)", done.stdout)
            if found:
                inspect_checkpoints.append(int(found.group(1)))
        return elapsed

    compile_bytecode()
    run("startup (--help)")  # untimed: a warm interpreter; the stores are in the page cache
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(settings.cli_rounds):
        for name in rotated(list(commands), round_):
            samples[name].append(run(name))
    export_checkpoints = exported_checkpoints(export_file)
    export_bytes = export_file.stat().st_size
    startup = statistics.median(samples["startup (--help)"])
    return {
        "cli": {
            "command": script,
            "rounds": settings.cli_rounds,
            "build_seconds": build_seconds,
            "inspect_store": {
                "threads": settings.cli_threads,
                "turns": settings.cli_turns,
                "checkpoints": inspect_checkpoints[-1] if inspect_checkpoints else None,
            },
            "export_thread": {
                "turns": settings.export_turns,
                "checkpoints": export_checkpoints,
                "output_bytes": export_bytes,
            },
            "median_s": {name: statistics.median(s) for name, s in samples.items()},
            "min_s": {name: min(s) for name, s in samples.items()},
            "ratio_vs_startup": {
                name: statistics.median(samples[name]) / startup for name in commands
            },
        }
    }


def time_commands(commands: dict[str, list[str]], rounds: int) -> dict[str, list[float]]:
    """Each command's wall times as a subprocess, ``rounds`` rounds in rotated order.

    The package's bytecode compiled, then one untimed run of each first (the
    store in the page cache).
    """
    compile_bytecode()
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(-1, rounds):
        for name in rotated(list(commands), max(round_, 0)):
            began = time.perf_counter()
            done = subprocess.run(commands[name], capture_output=True, text=True)
            elapsed = time.perf_counter() - began
            if done.returncode != 0:
                raise RuntimeError(f"{commands[name]} exited {done.returncode}: {done.stderr!r}")
            if round_ >= 0:
                samples[name].append(elapsed)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8, help="threads in the store")
    parser.add_argument("--turns", type=int, default=100, help="chat turns per thread")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds")
    parser.add_argument("--store", type=Path, required=True, help="built here if missing")
    args = parser.parse_args(argv)
    if not args.store.exists():
        started = time.perf_counter()
        build_chat_store(args.store, args.threads, args.turns, seed=6)
        print(f"built {args.store} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    script = console_script()
    commands = {
        "--help": [*script, "--help"],
        "threads": [*script, "threads", str(args.store)],
        "inspect": [*script, "inspect", str(args.store)],
    }
    samples = time_commands(commands, args.rounds)
    print(f"{' '.join(script)} on {args.store}, {args.rounds} rounds, wall seconds")
    for name, times in samples.items():
        print(
            f"  {name:8} median {statistics.median(times):.3f}  "
            f"min {min(times):.3f}  max {max(times):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
