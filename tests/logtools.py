"""Reading a thread's log the way ``FileStorage`` does, for tests that damage it on purpose.

Only ``_entries.scan`` is used: these helpers never open a store, so a test can
look at a log without a reader's side effects (reports, quarantine copies).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph_checkpoint_verified.storage.log.entries import PUT, DamagedSpan, Entry, scan
from langgraph_checkpoint_verified.storage.log.reading import LogReader
from langgraph_checkpoint_verified.storage.log.room import all_zeros


@dataclass(frozen=True)
class LogView:
    """One scan of a log: its entries, damaged spans, and the key directory they make."""

    data: bytes
    entries: list[Entry]
    damaged: list[DamagedSpan]
    end: int
    """Where the intact log ends; bytes after it are room, or a torn tail."""
    directory: dict[str, Entry | DamagedSpan]
    """key -> its latest PUT entry, or the damaged span whose header still names it."""

    @property
    def written(self) -> bytes:
        """The log up to where its intact part ends: without the room (zeros written ahead
        of the entries, for appends to overwrite) or a torn tail after it."""
        return self.data[: self.end]

    @property
    def whole(self) -> bool:
        """Whether the log is intact entries, then nothing but room."""
        return not self.damaged and all_zeros(self.data, self.end)

    def read(self, key: str) -> bytes | None:
        """The bytes a reader returns for ``key`` (a damaged span's whole bytes), or ``None``."""
        where = self.directory.get(key)
        if where is None:
            return None
        if isinstance(where, DamagedSpan):
            return self.data[where.offset : where.end]
        return self.data[where.data_offset : where.data_offset + where.data_size]

    def entry(self, key: str) -> Entry:
        """The intact entry ``key`` reads from."""
        where = self.directory[key]
        assert isinstance(where, Entry), f"{key} is damaged: {where}"
        return where

    def is_last(self, key: str) -> bool:
        """Whether ``key``'s entry is the last of the log (damage to it is a torn tail)."""
        return bool(self.entries) and self.entries[-1] == self.directory.get(key)


def view_log(data: bytes, thread_key: str) -> LogView:
    """Scan ``data``, the log of ``thread_key`` (``threads/<T>``), as its reader would.

    A damaged span whose header names a key of this thread counts as that key's
    latest version (the reader returns its bytes, which do not verify).

    Example:
        >>> from langgraph_checkpoint_verified.storage.log.entries import DELETE, encode_entry
        >>> log = encode_entry(PUT, "threads/t/a", b"1") + encode_entry(PUT, "threads/t/b", b"2")
        >>> log += encode_entry(DELETE, "threads/t/a")
        >>> view = view_log(log, "threads/t")
        >>> sorted(view.directory), view.read("threads/t/b")
        (['threads/t/b'], b'2')
    """
    entries, damaged, end = scan(data)
    directory: dict[str, Entry | DamagedSpan] = {}
    events: list[Entry | DamagedSpan] = sorted([*entries, *damaged], key=lambda e: e.offset)
    for event in events:
        if isinstance(event, DamagedSpan):
            if event.key is not None and event.key.startswith(f"{thread_key}/"):
                directory[event.key] = event
        elif event.kind == PUT:
            directory[event.key] = event
        else:
            directory.pop(event.key, None)
    return LogView(bytes(data), entries, damaged, end, directory)


def append_entry(log: Path, entry: bytes) -> int:
    """Write ``entry`` (whole entries' bytes) where a writer appends: into the room after
    the log's intact entries, the file growing if it must. Returns where it starts."""
    data = log.read_bytes()
    at = scan(data)[2]
    assert all_zeros(data, at), "a torn tail after the entries: a writer cuts it first"
    with log.open("r+b") as out:
        out.seek(at)
        out.write(entry)
    return at


def lose_parity(log: Path) -> None:
    """Remove the parity beside a thread's ``log``: damage made to the log afterwards is
    beyond what parity rebuilds, as if the parity of its stripe were damaged as well (or
    the store were written before logs had parity). For tests of what the saver does
    with damage it cannot heal: report, quarantine, fall back."""
    log.with_name(log.name + ".parity").unlink(missing_ok=True)


def counted_rereads(monkeypatch: Any) -> list[dict[str, bool]]:
    """Each time a process reads a log's key directory again from the log, or from the hint
    now at its path (``LogReader._read_whole``), from then on: how it was asked to."""
    calls: list[dict[str, bool]] = []
    read_whole = LogReader._read_whole

    def counting(self: LogReader, log: Any, **how: bool) -> Any:
        calls.append(how)
        return read_whole(self, log, **how)

    monkeypatch.setattr(LogReader, "_read_whole", counting)
    return calls
