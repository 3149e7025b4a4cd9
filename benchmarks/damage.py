"""Where a checkpoint's bytes lie in a store, and flipping one of them (recovery figures).

Two layouts are known, both described in docs/format.md:

* a file per record, named after its checkpoint id (``.../checkpoints/<C>.ckpt``);
* a log per thread (``threads/<T>/log``): entries of a 16-byte header (magic
  ``LGCE``, kind, reserved, key length u16, data length u64, little-endian), the
  key, the data (one record) and a CRC-32. The key of a checkpoint's record is
  the path it would have as a file, so it ends with ``/checkpoints/<C>.ckpt``;
  beside it, its hint (``log.hint``), whose header says how much of the log it covers.

Nothing here is imported from the package: the benchmark damages a store the way
a disk would, from the outside.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ENTRY_MAGIC = b"LGCE"
_ENTRY_HEADER = struct.Struct("<4sBBHQ")  # magic, kind, reserved, key length, data length
_ENTRY_PUT = 1
_HINT_MAGIC = b"LGCH"
_HINT_HEADER = struct.Struct("<4sB3x8sQ")  # magic, version, the log's tail, bytes covered

Span = tuple[Path, int, int]
"""(file, offset, size) of a checkpoint's record, relative to the store."""


def checkpoint_spans(store: Path) -> dict[str, Span]:
    """Checkpoint id -> where its record lies, for every checkpoint found in ``store``."""
    spans: dict[str, Span] = {}
    for dirpath, _, filenames in os.walk(store):
        for name in filenames:
            path = Path(dirpath, name)
            relative = path.relative_to(store)
            if name.endswith(".ckpt"):
                match = _UUID.search(name)
                if match:
                    spans[match.group(0)] = (relative, 0, path.stat().st_size)
            elif name == "log" and relative.parts[0] == "threads":
                spans.update(_log_spans(path, relative))
    return spans


def log_entries(data: bytes, offset: int = 0) -> Iterator[tuple[int, int, str, int, int]]:
    """``(offset, kind, key, data offset, data length)`` of each entry from ``offset`` on."""
    while offset + _ENTRY_HEADER.size <= len(data):
        magic, kind, _, key_length, data_length = _ENTRY_HEADER.unpack_from(data, offset)
        if magic != _ENTRY_MAGIC:
            return  # a store just written is intact: this is its end (or a format we do not know)
        key_end = offset + _ENTRY_HEADER.size + key_length
        key = data[offset + _ENTRY_HEADER.size : key_end].decode("utf-8", "replace")
        yield offset, kind, key, key_end, data_length
        offset = key_end + data_length + 4


def _log_spans(path: Path, relative: Path) -> dict[str, Span]:
    spans: dict[str, Span] = {}
    for _, kind, key, data_offset, data_length in log_entries(path.read_bytes()):
        if kind == _ENTRY_PUT and key.endswith(".ckpt"):
            match = _UUID.search(key.rsplit("/", 1)[-1])
            if match:
                spans[match.group(0)] = (relative, data_offset, data_length)  # the last PUT wins
    return spans


def past_hint(thread_dir: Path, hint: Path | None = None) -> tuple[int, int]:
    """``(entries, bytes)`` of a thread's log past what its hint covers (``log.hint``, or
    ``hint``: a 24-byte header whose last 8 bytes say how much of the log it covers),
    which the first process to open the thread reads; the whole log if it has no hint."""
    log = (thread_dir / "log").read_bytes()
    try:
        header = (hint or thread_dir / "log.hint").read_bytes()
        magic, _, _, covered = _HINT_HEADER.unpack_from(header)
    except (OSError, struct.error):
        magic, covered = b"", 0
    if magic != _HINT_MAGIC:
        covered = 0
    entries = list(log_entries(log, covered))
    if not entries:
        return 0, 0
    _, _, _, data_offset, data_length = entries[-1]
    return len(entries), data_offset + data_length + 4 - covered


def flip_bytes(copy: Path, spans: Iterable[Span]) -> None:
    """Flip the middle byte of each span in ``copy``, a hard-linked copy of the store.

    Each file touched is written anew (the pristine store shares its inode
    otherwise) and fsynced, so no dirty page is left for a timed saver's fsync.
    """
    by_file: dict[Path, list[Span]] = {}
    for span in spans:
        by_file.setdefault(span[0], []).append(span)
    for relative, file_spans in by_file.items():
        path = copy / relative
        data = bytearray(path.read_bytes())
        for _, offset, size in file_spans:
            data[offset + size // 2] ^= 0xFF
        write_anew(path, bytes(data))


def write_anew(path: Path, data: bytes) -> None:
    """Replace ``path`` with a new file (a new inode: a hard link to it keeps the old
    bytes) holding ``data``, fsynced, so no dirty page is left for a timed saver's fsync."""
    path.unlink()
    with path.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
