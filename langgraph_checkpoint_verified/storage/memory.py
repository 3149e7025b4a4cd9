"""``MemoryStorage``: records in a dict, for tests and ``VerifiedSaver.in_memory()``."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from langgraph_checkpoint_verified.storage.base import MovedAside, OneRecordPerWrite, aside_names


class _IndexedRecords(dict[str, Any]):
    """The memory store's records: a dict that also knows what lies under each prefix.

    ``children[prefix]`` holds the names directly under ``prefix`` that some key
    passes through (a dict used as an ordered set), so listing a prefix costs
    the size of the answer, not of the store. Every way of changing a dict keeps
    it up to date, so code (and tests) may still treat ``records`` as a plain dict.

    A name stays under its prefix while a key ends at it or passes through it:
    adding a key only climbs until it meets a prefix already known, and removing
    one only until it meets a prefix still in use, so a put into a known
    directory touches one level, not every level of its key.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.children: dict[str, dict[str, None]] = {}
        # the greatest name under a prefix, once asked for: the newest checkpoint id
        self.newest: dict[str, str] = {}
        self.update(*args, **kwargs)

    def _added(self, key: str) -> None:
        end = key.rfind("/")
        while end != -1:
            parent, name = key[:end], key[end + 1 :]
            names = self.children.get(parent)
            known = names is not None
            if names is None:
                names = self.children[parent] = {}
            elif name in names:
                return
            names[name] = None
            newest = self.newest.get(parent)
            if newest is not None and name > newest:
                self.newest[parent] = name
            if known:
                return  # the parent is in its own parent's names already
            key, end = parent, parent.rfind("/")

    def _removed(self, key: str) -> None:
        end = key.rfind("/")
        while end != -1:
            if key in self.children or dict.__contains__(self, key):
                return  # still a key, or keys still pass through it
            parent, name = key[:end], key[end + 1 :]
            names = self.children.get(parent)
            if names is None:
                return
            names.pop(name, None)
            if self.newest.get(parent) == name:
                del self.newest[parent]  # found again when asked
            if names:
                return
            del self.children[parent]
            key, end = parent, parent.rfind("/")

    def __setitem__(self, key: str, value: Any) -> None:
        new = key not in self
        super().__setitem__(key, value)
        if new:
            self._added(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._removed(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = super().pop(key)
            self._removed(key)
            return value
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, Any]:
        key, value = super().popitem()
        self._removed(key)
        return key, value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> _IndexedRecords:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        super().clear()
        self.children.clear()
        self.newest.clear()

    def names_under(self, prefix: str) -> list[str]:
        return list(self.children.get(prefix, ()))

    def greatest_name_under(self, prefix: str) -> str | None:
        """``max(names_under(prefix))``, kept up to date after the first time."""
        newest = self.newest.get(prefix)
        if newest is None:
            names = self.children.get(prefix)
            if not names:
                return None
            newest = self.newest[prefix] = max(names)
        return newest

    def keys_under(self, prefix: str) -> list[str]:
        """Every key strictly under ``prefix``, unsorted."""
        found = []
        pending = [prefix]
        while pending:
            parent = pending.pop()
            for name in self.children.get(parent, ()):
                key = f"{parent}/{name}"
                if key in self:
                    found.append(key)
                if key in self.children:
                    pending.append(key)
        return found


class MemoryStorage(OneRecordPerWrite):
    """The same records, held in a dict: a drop-in for ``InMemorySaver``'s storage.

    Records are the exact bytes the file store would write, so they are
    verified on every read just the same. ``records`` may be read and changed
    like any dict; it also indexes keys by prefix, so that listing a thread
    does not scan every other thread's records.

    Checkpoint and writes records under ``uncompressed_below`` bytes of content
    are kept uncompressed (the record frame says so; the digests cover them
    the same way): for the few hundred bytes of a step, zstd costs more time
    than the memory it saves, and ``InMemorySaver`` compresses nothing.
    """

    uncompressed_below = 16 * 1024
    """Content size from which the engine compresses a checkpoint or writes record."""

    def __init__(self) -> None:
        self._records = _IndexedRecords()
        self._lock = threading.RLock()
        self._writes = 0
        self._stamps: dict[str, int] = {}

    @property
    def records(self) -> dict[str, bytes]:
        return self._records

    @records.setter
    def records(self, records: dict[str, bytes]) -> None:
        with self._lock:
            self._records = _IndexedRecords(records)

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError("records are bytes")
        with self._lock:
            if not replace and key in self._records:
                return False
            self._records[key] = bytes(data)
            self._writes += 1
            self._stamps[key] = self._writes
            return True

    def read(self, key: str) -> bytes | None:
        return self._records.get(key)

    def list(self, prefix: str) -> list[str]:
        with self._lock:
            return self._records.names_under(prefix)

    def walk(self, prefix: str) -> Iterator[str]:
        with self._lock:
            keys = sorted(self._records.keys_under(prefix))
        yield from keys

    def delete(self, key: str) -> None:
        with self._lock:
            self._records.pop(key, None)

    def compact(self, prefix: str, *, changes: Mapping[str, bytes | None] | None = None) -> None:
        """Apply ``changes`` all at once (one lock held): nothing to reclaim in memory."""
        with self._lock:
            for key, data in (changes or {}).items():
                if data is None:
                    self._records.pop(key, None)
                else:
                    self._records[key] = bytes(data)
                    self._writes += 1
                    self._stamps[key] = self._writes

    def usage(self, prefix: str) -> int:
        with self._lock:
            keys = [prefix, *self._records.keys_under(prefix)]
            return sum(len(self._records.get(key) or b"") for key in keys)

    def delete_tree(self, prefix: str) -> None:
        with self._lock:
            for key in self._records.keys_under(prefix):
                del self._records[key]
            self._records.pop(prefix, None)

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        with self._lock:
            if key not in self._records or (not replace and new_key in self._records):
                return False
            self._records[new_key] = self._records.pop(key)
            return True

    def move_aside_unchanged(
        self, moves: Sequence[tuple[str, bytes]], aside: str
    ) -> builtins.list[MovedAside | None]:
        names = aside_names(aside, len(moves))
        with self._lock:
            moved: builtins.list[MovedAside | None] = []
            for (key, expected), new_key in zip(moves, names, strict=True):
                if self._records.get(key) != expected:
                    moved.append(None)
                    continue
                self._records[new_key] = self._records.pop(key)
                moved.append(MovedAside(new_key, 0, len(expected)))
            return moved

    def location(self, key: str) -> str:
        return f"memory:{key}"

    def stamp(self, key: str) -> Hashable | None:
        with self._lock:
            if key not in self._records:
                return None
            # records changed by hand (as tests do) have no stamp: never trust a cache then
            return (self._stamps.get(key), id(self._records[key]))

    def lock(self, prefix: str, *, exclusive: bool) -> AbstractContextManager[Any]:
        # the store's one re-entrant lock, itself the context manager: a generator
        # based one would cost more than the rest of a small put's locking
        return self._lock

    def greatest_name(self, prefix: str) -> str | None:
        with self._lock:
            return self._records.greatest_name_under(prefix)

    def __repr__(self) -> str:
        return f"MemoryStorage({len(self._records)} records)"
