"""The ``Storage`` interface: where record bytes live, whatever the backend.

The engine only ever talks to ``Storage``: immutable named records that are
written whole, read whole, listed by prefix and deleted, with locks per thread.
Keys are ``/``-joined segments that ``records.keys`` has already made safe.
Backends: ``MemoryStorage`` (``memory``), ``FileStorage`` (``log``: one
append-only log per thread), ``RecordFileStorage`` (``files``: one file per
record) and ``ObjectStorage`` (``objects``: S3).
"""

from __future__ import annotations

import builtins
import errno
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import NamedTuple, Protocol, runtime_checkable

QUARANTINE_PREFIX = "quarantine"
LOCK_NAME = ".lock"
DIR_MODE = 0o700
FILE_MODE = 0o600
CANNOT_WRITE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
"""``OSError`` numbers that say this process cannot change the store (permissions, a
read-only mount): damage is then read past and reported, and left where it is."""


@runtime_checkable
class Storage(Protocol):
    """What a record store offers: whole records, written, read, listed and removed by key.

    ``MemoryStorage``, ``FileStorage`` and ``ObjectStorage`` implement it.
    """

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        """Store ``data`` under ``key`` atomically and durably.

        Returns ``False`` (and changes nothing) when ``replace`` is false and
        the key already exists. Raises ``StoreWriteError`` when the write
        cannot be made durable; the previous content of ``key`` is then intact.
        ``durable=False`` keeps the write atomic but lets a machine crash lose
        it: only for records that are made again if lost (quarantine notes).
        """
        ...

    def read(self, key: str) -> bytes | None:
        """The bytes stored under ``key``, or ``None`` if there are none."""
        ...

    def still_holds(self, items: Sequence[tuple[str, bytes]]) -> bool:
        """Whether each ``(key, data)``'s key holds exactly ``data`` now, read again (one
        look at whether a thread changed, where the store needs one, for all of them)."""
        ...

    def list(self, prefix: str) -> list[str]:
        """Names directly under ``prefix`` (records and sub-prefixes), unsorted."""
        ...

    def walk(self, prefix: str) -> Iterator[str]:
        """Every record key under ``prefix``, at any depth."""
        ...

    def delete(self, key: str) -> None:
        """Remove one record; a missing key is not an error."""
        ...

    def delete_tree(self, prefix: str) -> None:
        """Remove every record under ``prefix``."""
        ...

    def deleting_together(self) -> AbstractContextManager[None]:
        """Within the block, this thread's ``delete_tree`` calls are made durable together
        (one sync where the store would make one each), by the time the block ends; each
        is atomic and seen by every reader as soon as it returns, as outside the block.
        For a sweep that deletes many threads. A crash inside the block may undo some of
        them, each whole."""
        ...

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        """Rename ``key`` to ``new_key`` (used for quarantine); ``False`` if ``key`` is gone.

        With ``replace=False`` nothing already at ``new_key`` is overwritten
        (``False`` is returned and ``key`` stays where it is).

        Atomic, not durable: after a machine crash the record may be back at
        ``key``, where the next read finds it damaged and moves it again.
        """
        ...

    def move_aside_unchanged(
        self, moves: Sequence[tuple[str, bytes]], aside: str
    ) -> builtins.list[MovedAside | None]:
        """Move aside each record ``(key, expected)`` that still holds exactly ``expected``
        (what a reader found damaged there): a record written at ``key`` since stays.
        For each, in order, where its bytes went, or ``None`` if it was not moved.

        For the quarantine: ``aside`` is a name nothing has, and the records go to
        names made from it. A store that renames records gives each its own
        (``aside_names``); ``FileStorage`` copies those of one thread's log into
        one file, ``<aside>.records``, back to back, and deletes them from the log
        with one append (a file made is what a move costs most; one record alone
        still goes to ``<aside>.record``). Atomic per record and not durable, as
        ``move_aside``.
        """
        ...

    def location(self, key: str) -> str:
        """Where ``key`` lives, for messages (a file path, or ``memory:key``)."""
        ...

    def stamp(self, key: str) -> Hashable | None:
        """A cheap token that changes whenever ``key`` is written, moved or deleted."""
        ...

    def written_stamp(self, key: str) -> Hashable | None:
        """The stamp of what this process just wrote under ``key`` (right after ``write``),
        where the store can tell it without asking anyone; ``stamp(key)`` otherwise."""
        ...

    def thread_stamp(self, prefix: str) -> Hashable | None:
        """A cheap token that changes whenever anything under the thread ``prefix``
        (``threads/<T>``) is written, moved or deleted, by this process or another;
        ``None`` where the store cannot tell that without reading the records."""
        ...

    def lock(self, prefix: str, *, exclusive: bool) -> AbstractContextManager[None]:
        """Hold a lock on ``prefix``, shared or exclusive, across processes using the store."""
        ...

    def consistent_reads(self, prefix: str) -> AbstractContextManager[None]:
        """Within the block, this thread's reads under a thread ``prefix`` see the thread
        as it was at the first of them (or as this thread's own writes left it): one
        look at whether anything changed, instead of one per read."""
        ...

    def write_many(
        self, items: Sequence[tuple[str, bytes]], *, replace: bool = True, durable: bool = True
    ) -> builtins.list[bool]:
        """``write`` for several records at once (one durable step where the store can)."""
        ...

    def greatest_name(self, prefix: str) -> str | None:
        """``max(self.list(prefix))``, or ``None``: the newest checkpoint without listing all."""
        ...

    def greatest_names(self, prefix: str, count: int) -> builtins.list[str]:
        """The greatest names of ``self.list(prefix)``, greatest first: the ``count``
        greatest (all of them if there are fewer), or every name where the store lists
        them all to answer (so that a caller wanting more need not list again): the newest
        checkpoints, without listing the others where the store can."""
        ...

    def compact(self, prefix: str, *, changes: Mapping[str, bytes | None] | None = None) -> None:
        """Reclaim the space of records deleted or replaced under a thread ``prefix``.

        ``changes`` (key -> new bytes, or ``None`` to delete; every key under
        ``prefix``) is applied as part of the same rewrite: where the store can
        (``FileStorage``, ``MemoryStorage``), all of it or, after a crash, none
        of it. Elsewhere its writes are made first, then its deletions.
        """
        ...

    def usage(self, prefix: str) -> int:
        """Bytes of the records at ``prefix`` or under it (what deleting them frees)."""
        ...

    def close_idle(self) -> None:
        """Close what the store keeps open between calls (a log's descriptors) that no call
        is using now; the store stays usable and opens it again when needed."""
        ...


class MovedAside(NamedTuple):
    """Where the bytes of a record moved aside are: ``length`` bytes from ``offset`` of
    the record ``key`` (all of it, for a record renamed)."""

    key: str
    offset: int
    length: int


def aside_names(aside: str, count: int) -> builtins.list[str]:
    """The names ``Storage.move_aside_unchanged`` gives ``count`` records it moves aside
    one by one: ``<aside>-<n>.record`` for the n-th (``<aside>.record`` when it is the
    only one). Those of a log copied out together go to ``<aside>.records`` instead."""
    if count == 1:
        return [f"{aside}.record"]
    return [f"{aside}-{number}.record" for number in range(1, count + 1)]


def move_aside_one_by_one(
    storage: Storage, moves: Sequence[tuple[str, str, bytes]]
) -> builtins.list[MovedAside | None]:
    """``Storage.move_aside_unchanged`` for a store that renames one record at a time,
    each ``(key, new_key, expected)`` to its ``new_key``: renamed, then read where it
    went. A record replaced between the read that judged it and the rename is put
    back, unless a still newer one is there by then (which must not be overwritten,
    and is newer than the one moved anyway)."""
    moved: builtins.list[MovedAside | None] = []
    for key, new_key, expected in moves:
        if not storage.move_aside(key, new_key):
            moved.append(None)  # someone else moved it first
            continue
        found = storage.read(new_key)
        if found is not None and found != expected:
            storage.move_aside(new_key, key, replace=False)
            moved.append(None)
            continue
        moved.append(MovedAside(new_key, 0, len(expected if found is None else found)))
    return moved


class OneRecordPerWrite:
    """For stores where every record is written on its own: a batch is its writes in
    turn, and a deleted record leaves no space to reclaim."""

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        raise NotImplementedError

    def move_aside_unchanged(
        self, moves: Sequence[tuple[str, bytes]], aside: str
    ) -> builtins.list[MovedAside | None]:
        names = aside_names(aside, len(moves))
        return move_aside_one_by_one(
            self,  # type: ignore[arg-type]
            [(key, name, expected) for (key, expected), name in zip(moves, names, strict=True)],
        )

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        raise NotImplementedError

    def write_many(
        self, items: Sequence[tuple[str, bytes]], *, replace: bool = True, durable: bool = True
    ) -> builtins.list[bool]:
        return [self.write(k, d, replace=replace, durable=durable) for k, d in items]

    def compact(self, prefix: str, *, changes: Mapping[str, bytes | None] | None = None) -> None:
        """Nothing to reclaim: ``changes`` are written, then deleted, one record at a time.

        Writes first: a record rewritten to stop depending on one that goes is
        in place before that one is gone, so a crash in between leaves every
        remaining record readable, and more of them than asked.
        """
        for key, data in (changes or {}).items():
            if data is not None:
                self.write(key, data)
        for key, data in (changes or {}).items():
            if data is None:
                self.delete(key)

    def usage(self, prefix: str) -> int:
        """Bytes of the records at ``prefix`` or under it, read one by one."""
        keys = [prefix, *self.walk(prefix)]
        return sum(len(self.read(key) or b"") for key in keys)

    def read(self, key: str) -> bytes | None:
        raise NotImplementedError

    def still_holds(self, items: Sequence[tuple[str, bytes]]) -> bool:
        return all(self.read(key) == data for key, data in items)

    def walk(self, prefix: str) -> Iterator[str]:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def stamp(self, key: str) -> Hashable | None:
        raise NotImplementedError

    def written_stamp(self, key: str) -> Hashable | None:
        return self.stamp(key)

    def thread_stamp(self, prefix: str) -> Hashable | None:
        """Not known without reading: a thread is many records, each changed on its own."""
        return None

    def consistent_reads(self, prefix: str) -> AbstractContextManager[None]:
        """Every read is one request or lookup of its own here: nothing to share."""
        return nullcontext()

    def deleting_together(self) -> AbstractContextManager[None]:
        """Every deletion is one step of its own here: nothing to share."""
        return nullcontext()

    def close_idle(self) -> None:
        """Nothing is kept open between calls."""

    def list(self, prefix: str) -> builtins.list[str]:
        raise NotImplementedError

    def greatest_names(self, prefix: str, count: int) -> builtins.list[str]:
        """Every name, from the whole listing: a record each is listed no faster a few at
        a time, and a caller wanting more than ``count`` has them without a second listing."""
        return sorted(self.list(prefix), reverse=True)
