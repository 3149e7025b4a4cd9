"""Memory a process gains reading the newest checkpoint of many threads (section 3).

A store and a SQLite database hold the same ``threads`` threads of ``steps``
chat-shaped checkpoints each (written with fsync off, which writes the same
bytes). Then, for each saver, a new Python process opens it, notes its resident
memory (``VmRSS``), calls ``get_tuple`` on the newest checkpoint of every thread,
and notes it again: the gain is what the saver keeps (caches, open logs, key
directories) plus what the reads left behind. Each saver is measured in
``rounds`` processes, alternating; the figure is the median gain.

    python benchmarks/memory_bench.py --threads 2000 --steps 10
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from chat import SQLITE, VERIFIED_FILES
from langgraph.checkpoint.sqlite import SqliteSaver
from workload import TextSource, raw_checkpoints

from langgraph_checkpoint_verified import VerifiedSaver

READER = """
import json, sqlite3, sys
def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
which, where, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
if which == "verified":
    from langgraph_checkpoint_verified import VerifiedSaver
    saver = VerifiedSaver(where)
else:
    from langgraph.checkpoint.sqlite import SqliteSaver
    saver = SqliteSaver(sqlite3.connect(where, check_same_thread=False))
saver.get_tuple({"configurable": {"thread_id": "warm-up"}})  # imports and first call done
before = rss_kb()
for n in range(threads):
    assert saver.get_tuple({"configurable": {"thread_id": f"t{n}"}}) is not None
print(json.dumps({"gain_kb": rss_kb() - before}))
"""


def build(store: Path, db: Path, threads: int, steps: int) -> None:
    verified = VerifiedSaver(store, fsync=False)
    conn = sqlite3.connect(db, check_same_thread=False)
    conn.execute("PRAGMA synchronous=OFF")
    sqlite = SqliteSaver(conn)
    texts = TextSource(seed=11)
    for n in range(threads):
        for args in raw_checkpoints(texts, steps, thread_id=f"t{n}", window=steps):
            verified.put(*args)
            sqlite.put(*args)
    conn.close()


def gain_kb(which: str, where: Path, threads: int) -> int:
    done = subprocess.run(
        [sys.executable, "-c", READER, which, str(where), str(threads)],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(json.loads(done.stdout.strip().splitlines()[-1])["gain_kb"])


def measure(workdir: Path, threads: int, steps: int, rounds: int) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    store, db = workdir / "verified", workdir / "sqlite.db"
    build(store, db, threads, steps)
    gains: dict[str, list[int]] = {VERIFIED_FILES: [], SQLITE: []}
    for round_ in range(rounds):
        order = [(VERIFIED_FILES, "verified", store), (SQLITE, "sqlite", db)]
        for name, which, where in order if round_ % 2 == 0 else reversed(order):
            gains[name].append(gain_kb(which, where, threads))
    return {
        "threads": threads,
        "steps": steps,
        "rounds": rounds,
        "gain_mb": {name: statistics.median(kb) / 1024 for name, kb in gains.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/memory-bench"))
    args = parser.parse_args()
    print(json.dumps(measure(args.workdir, args.threads, args.steps, args.rounds), indent=1))


if __name__ == "__main__":
    main()
