"""What the logs' parity costs a durable ``put`` and a ``get_tuple``, measured alone.

Two ``VerifiedSaver(path)`` in one process, on two directories, called in turn: one as
it is, one whose logs get a parity file that does nothing. Everything else is the same
code, so the paired ratio of their times is parity's own cost::

    python benchmarks/parity_cost.py            # 600 rounds of a chat-shaped put + get_tuple
    python benchmarks/parity_cost.py --big 40   # and 40 rounds of a put of a 1 MB state
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.storage.log import thread_log
from langgraph_checkpoint_verified.storage.log.redundancy import ParityFile

THREAD = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


class NoParity(ParityFile):
    """A parity sidecar that protects and rebuilds nothing; everything else (making,
    binding, closing it) is the real one's, so the savers differ in parity's work only."""

    def protect(self, log_fd: int, log_ino: int, at: int, appended: bytes) -> None:
        pass

    def heal(self, *args: Any, **kwargs: Any) -> dict[int, bytes]:
        return {}


def open_saver(parity: bool) -> tuple[VerifiedSaver, dict]:
    real = thread_log.ParityFile
    if not parity:
        thread_log.ParityFile = NoParity  # type: ignore[misc]
    try:
        saver = VerifiedSaver(tempfile.mkdtemp(prefix="parity-cost-"))
        checkpoint = generate_checkpoint(channel_values={"x": 0}, channel_versions={"x": 1})
        config = saver.put(THREAD, checkpoint, generate_metadata(), {"x": 1})
    finally:
        thread_log.ParityFile = real  # type: ignore[misc]
    return saver, config


def paired(
    rounds: int, make_values: Any
) -> tuple[dict[bool, list[float]], list[float], list[float]]:
    savers = {True: open_saver(True), False: open_saver(False)}
    puts: dict[bool, list[float]] = {True: [], False: []}
    put_ratios, get_ratios = [], []
    for i in range(rounds):
        values = make_values(i)
        put_time, get_time = {}, {}
        for parity in (True, False) if i % 2 else (False, True):
            saver, config = savers[parity]
            versions = dict.fromkeys(values, i + 2)
            checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
            start = time.perf_counter()
            config = saver.put(config, checkpoint, generate_metadata(step=i), versions)
            put_time[parity] = time.perf_counter() - start
            start = time.perf_counter()
            saver.get_tuple(THREAD)
            get_time[parity] = time.perf_counter() - start
            savers[parity] = (saver, config)
            puts[parity].append(put_time[parity])
        put_ratios.append(put_time[True] / put_time[False])
        get_ratios.append(get_time[True] / get_time[False])
    for parity, (saver, _) in savers.items():
        directory = Path(saver.storage.location("threads/t"))
        sizes = {p.name: p.stat().st_size for p in directory.iterdir()}
        print(f"  files with{'' if parity else 'out'} parity: {sizes}")
    return puts, put_ratios, get_ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--big", type=int, default=0, help="rounds of a 1 MB put")
    args = parser.parse_args()
    message = "m" * 1000
    puts, put_ratios, get_ratios = paired(args.rounds, lambda i: {"x": i, "msgs": [message] * 3})
    print(
        f"put p50: {statistics.median(puts[True]) * 1e3:.3f} ms with parity, "
        f"{statistics.median(puts[False]) * 1e3:.3f} ms without; "
        f"paired ratio {statistics.median(put_ratios):.3f}"
    )
    print(f"get_tuple: paired ratio {statistics.median(get_ratios):.3f}")
    if args.big:
        puts, put_ratios, _ = paired(
            args.big, lambda i: {"msgs": [os.urandom(500).hex() for _ in range(1000)]}
        )
        print(
            f"1 MB put p50: {statistics.median(puts[True]) * 1e3:.1f} ms with parity, "
            f"{statistics.median(puts[False]) * 1e3:.1f} ms without; "
            f"paired ratio {statistics.median(put_ratios):.3f}"
        )


if __name__ == "__main__":
    main()
