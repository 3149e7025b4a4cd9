"""What one durable write costs on this file system, by how the file is grown.

A log append changes the file's size, so ``fdatasync`` must commit metadata too;
an overwrite of space already written and synced (what SQLite's WAL mostly does)
flushes data alone. This writes ``--size`` bytes ``--writes`` times and syncs each,
three ways, in fresh files under ``--dir``, and prints the median per write:

* ``append``: ``O_APPEND`` writes, the file growing each time (the log today);
* ``append, preallocated (KEEP_SIZE)``: the same after ``fallocate(KEEP_SIZE)`` of
  the space (Linux; skipped where it is refused);
* ``overwrite of zeroed space``: ``pwrite`` into space zero-filled and synced first.

    python benchmarks/sync_probe.py --dir /path/on/the/store/file/system
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import statistics
import tempfile
import time
from pathlib import Path

FALLOC_FL_KEEP_SIZE = 1


def timed_writes(path: Path, mode: str, size: int, writes: int) -> float | None:
    data = b"x" * size
    flags = os.O_RDWR | os.O_CREAT | (0 if mode == "overwrite" else os.O_APPEND)
    fd = os.open(path, flags, 0o600)
    try:
        if mode == "keep_size":
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
            if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, size * writes) != 0:
                return None
            os.fsync(fd)
        if mode == "overwrite":
            os.pwrite(fd, b"\0" * (size * writes), 0)
            os.fsync(fd)
        samples = []
        for n in range(writes):
            started = time.perf_counter()
            if mode == "overwrite":
                os.pwrite(fd, data, n * size)
            else:
                os.write(fd, data)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    parser.add_argument("--size", type=int, default=6 * 1024)
    parser.add_argument("--writes", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    modes = {
        "append": "append",
        "append, preallocated (KEEP_SIZE)": "keep_size",
        "overwrite of zeroed space": "overwrite",
    }
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for round_ in range(args.rounds):
            figures = []
            for name, mode in modes.items():
                median = timed_writes(
                    Path(directory) / f"{mode}-{round_}", mode, args.size, args.writes
                )
                shown = "refused" if median is None else f"{median * 1e6:.0f} us"
                figures.append(f"{name}: {shown}")
            print(f"round {round_ + 1}: " + "; ".join(figures))


if __name__ == "__main__":
    main()
