"""What one durable write costs on this file system, by how the file is grown.

A log append changes the file's size, so ``fdatasync`` must commit metadata too;
an overwrite of space already written and synced (what SQLite's WAL mostly does)
flushes data alone. This writes ``--size`` bytes ``--writes`` times and syncs each,
three ways, in fresh files under ``--dir``, and prints the median per write:

* ``append``: ``O_APPEND`` writes, the file growing each time (the log today);
* ``append, preallocated (KEEP_SIZE)``: the same after ``fallocate(KEEP_SIZE)`` of
  the space (Linux; skipped where it is refused);
* ``overwrite of zeroed space``: ``pwrite`` into space zero-filled and synced first;
* ``overwrite of allocated space``: ``pwrite`` into space ``posix_fallocate`` made and
  synced first (the log's room as it is made today), the mean beside the median: a
  write into a block still unwritten costs the file system a note that it is.

Then what making the room costs: on a 2 MB file, one append of 1,200 bytes that
outgrows it, with ``--room``-sized room after it written as zeros or allocated, and
the sync (the median of ``--writes`` / 10 fresh files each).

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


def timed_writes(path: Path, mode: str, size: int, writes: int) -> tuple[float, float] | None:
    """(median, mean) seconds per write and sync; ``None`` where the mode is refused."""
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
        if mode == "allocated":
            os.posix_fallocate(fd, 0, size * writes)
            os.fsync(fd)
        samples = []
        for n in range(writes):
            started = time.perf_counter()
            if mode in ("overwrite", "allocated"):
                os.pwrite(fd, data, n * size)
            else:
                os.write(fd, data)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - started)
        return statistics.median(samples), statistics.mean(samples)
    finally:
        os.close(fd)


LOG_SIZE = 2_000_000
ENTRY = 1_200


def room_making(directory: Path, room: int, how: str, files: int) -> float:
    """The median time of an append that outgrows a 2 MB file, room made ``how``, synced."""
    samples = []
    for n in range(files):
        path = directory / f"room-{how}-{n}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, b"x" * LOG_SIZE, 0)
            os.fsync(fd)
            started = time.perf_counter()
            if how == "written":
                os.pwrite(fd, bytes(room), LOG_SIZE + ENTRY)
            else:
                os.posix_fallocate(fd, LOG_SIZE + ENTRY, room)
            os.pwrite(fd, b"e" * ENTRY, LOG_SIZE)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - started)
        finally:
            os.close(fd)
            path.unlink()
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    parser.add_argument("--size", type=int, default=6 * 1024)
    parser.add_argument("--writes", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--room", type=int, nargs="+", default=[20_380, 262_144, 1_048_576], help="bytes"
    )
    args = parser.parse_args()
    modes = {
        "append": "append",
        "append, preallocated (KEEP_SIZE)": "keep_size",
        "overwrite of zeroed space": "overwrite",
        "overwrite of allocated space": "allocated",
    }
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for round_ in range(args.rounds):
            figures = []
            for name, mode in modes.items():
                timed = timed_writes(
                    Path(directory) / f"{mode}-{round_}", mode, args.size, args.writes
                )
                if timed is None:
                    shown = "refused"
                else:
                    shown = f"{timed[0] * 1e6:.0f} us (mean {timed[1] * 1e6:.0f} us)"
                figures.append(f"{name}: {shown}")
            print(f"round {round_ + 1}: " + "; ".join(figures))
        for round_ in range(args.rounds):
            figures = []
            for room in args.room:
                written, allocated = (
                    room_making(Path(directory), room, how, max(args.writes // 10, 1))
                    for how in ("written", "allocated")
                )
                figures.append(
                    f"{room} B: written {written * 1e6:.0f} us, allocated {allocated * 1e6:.0f} us"
                )
            print(f"making room, round {round_ + 1}: " + "; ".join(figures))


if __name__ == "__main__":
    main()
