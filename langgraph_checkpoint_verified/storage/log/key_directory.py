"""A thread's key directory: every key of its log and where its latest entry lies.

``KeyDirectory`` is built by reading the log once and kept up to date by the
log's appends; ``HintedDirectory`` is the same directory opened from a hint
file (``log.hint``), reading the hint's blocks only as they are needed.
"""

from __future__ import annotations

import bisect
import builtins
import heapq
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from langgraph_checkpoint_verified.storage.log.entries import (
    HintIndex,
    KeptBlock,
    hint_block_columns,
)


class KeyDirectory(dict[str, Any]):
    """A thread's keys and where each is, listable by prefix.

    Keys are ``/``-joined paths. Each key's parent keeps its names (one split
    per key); the directories above are counted once per parent, not once per
    key, which keeps opening a long thread's log cheap.
    """

    def __init__(self) -> None:
        super().__init__()
        self.leaves: dict[str, dict[str, None]] = {}
        self.subdirs: dict[str, dict[str, None]] = {}
        self.greatest: dict[str, str] = {}

    def __setitem__(self, key: str, value: Any) -> None:
        if not dict.__contains__(self, key):
            self._add_name(key)
        super().__setitem__(key, value)

    def add_names(self, parent: str, names: list[str], positions: list[Any]) -> None:
        """Keys ``parent/name``, none of them in the directory yet, each at its position:
        a directory at a time (a stretch of log applied at once), not a key at a time."""
        if not names:
            return
        self._add_leaves(parent, names)
        super().update(zip([f"{parent}/{name}" for name in names], positions, strict=True))

    def _add_leaves(self, parent: str, names: list[str]) -> None:
        """Note names new to the directory under ``parent``, all at once."""
        leaf = self.leaves.get(parent)
        if leaf is None:
            leaf = self.leaves[parent] = {}
            self._add_dir(parent)
        leaf.update(dict.fromkeys(names))
        self.greatest.pop(parent, None)  # found again when asked

    def add_sorted(self, keys: builtins.list[str], positions: builtins.list[Any]) -> None:
        """Keys in sorted order, none of them in the directory yet, each at its position
        (a hint's block). The keys directly under one directory are one run of them,
        added a run at a time: a name is cut from its key once, never joined again."""
        dict.update(self, zip(keys, positions, strict=True))
        start, count = 0, len(keys)
        while start < count:
            parent = keys[start].rpartition("/")[0]
            cut = len(parent) + 1
            end = bisect.bisect_left(keys, f"{parent}0", start)  # "0" follows "/"
            names = [key[cut:] for key in keys[start:end]]
            if "/" in "".join(names):  # keys deeper down among them: one at a time
                for key in keys[start:end]:
                    self._add_name(key)
            else:
                self._add_leaves(parent, names)
            start = end

    def _add_name(self, key: str) -> None:
        """Note a key new to the directory under its parent."""
        parent, _, name = key.rpartition("/")
        names = self.leaves.get(parent)
        if names is None:
            names = self.leaves[parent] = {}
            self._add_dir(parent)
        names[name] = None
        greatest = self.greatest.get(parent)
        if greatest is not None and name > greatest:
            self.greatest[parent] = name

    def apply(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Set each key of ``changes`` to its value, or remove it where the value is
        ``None``: what a stretch of log left, applied a directory at a time. Returns what
        the keys held before (those that held something)."""
        before: dict[str, Any] = {}
        added: dict[str, tuple[builtins.list[str], builtins.list[Any]]] = {}
        for key, value in changes.items():
            held = dict.get(self, key)
            if held is not None:
                before[key] = held
                if value is None:
                    del self[key]
                else:
                    dict.__setitem__(self, key, value)
            elif value is not None:
                parent, _, name = key.rpartition("/")
                names, positions = added.setdefault(parent, ([], []))
                names.append(name)
                positions.append(value)
        for parent, (names, positions) in added.items():
            greatest = self.greatest.get(parent)
            self.add_names(parent, names, positions)
            if greatest is not None:  # kept up to date rather than found again
                self.greatest[parent] = max(greatest, max(names))
        return before

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        parent, _, name = key.rpartition("/")
        names = self.leaves[parent]
        del names[name]
        if self.greatest.get(parent) == name:
            del self.greatest[parent]  # found again when asked
        if not names:
            del self.leaves[parent]
            self._drop_dir(parent)

    def _add_dir(self, path: str) -> None:
        """Note that ``path`` holds something, in each directory above it that did not know."""
        while "/" in path:
            above, _, name = path.rpartition("/")
            names = self.subdirs.setdefault(above, {})
            if name in names:
                return
            names[name] = None
            if len(names) > 1 or above in self.leaves:
                return  # ``above`` held something already, so its parent knows it
            path = above

    def _drop_dir(self, path: str) -> None:
        """Forget ``path``, and each directory above it that holds nothing more."""
        while "/" in path and path not in self.leaves and not self.subdirs.get(path):
            above, _, name = path.rpartition("/")
            names = self.subdirs.get(above)
            if not names or name not in names:
                return
            del names[name]
            if names:
                return
            del self.subdirs[above]
            path = above

    def names_under(self, prefix: str) -> builtins.list[str]:
        return [*self.leaves.get(prefix, ()), *self.subdirs.get(prefix, ())]

    def keys_under(self, prefix: str) -> builtins.list[str]:
        found = [f"{prefix}/{name}" for name in self.leaves.get(prefix, ())]
        for name in self.subdirs.get(prefix, ()):
            found.extend(self.keys_under(f"{prefix}/{name}"))
        return found

    def greatest_name_under(self, prefix: str) -> str | None:
        """``max(names_under(prefix))`` for a prefix that holds records, kept up to date."""
        greatest = self.greatest.get(prefix)
        if greatest is None:
            names = self.leaves.get(prefix)
            if not names:
                return None
            greatest = self.greatest[prefix] = max(names)
        return greatest

    def greatest_names_under(self, prefix: str, count: int) -> builtins.list[str]:
        """``heapq.nlargest(count, names_under(prefix))`` for a prefix that holds records."""
        return heapq.nlargest(count, self.leaves.get(prefix, ()))


class HintedDirectory(KeyDirectory):
    """A key directory taken from a hint a block at a time, as it is used.

    Opening a thread reads the hint's index; the blocks a call needs are read
    and verified when it needs them: the block of a key looked up, written or
    deleted (so a block read later never holds a key changed since), the blocks
    of a prefix listed, the last blocks of a prefix whose greatest name is asked
    for. Whatever needs every key (iterating, counting) reads every block. A
    block that does not verify, or a hint file replaced since its index was
    read, makes the directory read the log itself instead.

    Args:
        hint_path: The hint file.
        hint_identity: Its (inode, size) when its index was read.
        index: Its index.
        rescan: Reads the whole log into a new, complete directory.
    """

    def __init__(
        self,
        hint_path: str,
        hint_identity: tuple[int, int],
        index: HintIndex,
        rescan: Callable[[], KeyDirectory],
    ) -> None:
        super().__init__()
        self._hint_path = hint_path
        self._hint_identity = hint_identity
        self._index: HintIndex | None = index
        self._unread = set(range(len(index.blocks)))
        self._decoded: dict[int, tuple[builtins.list[str], Any, Any]] = {}
        """Unread blocks decoded for lookups, not yet taken into the directory."""
        self._rescan = rescan
        if not self._unread:
            self._index = None

    # -- reading blocks -------------------------------------------------------------------

    def _read_blocks(self, numbers: Iterable[int]) -> None:
        for number in numbers:
            if self._index is None:
                return
            if number not in self._unread:
                continue
            found = self._columns(number)
            if found is None:
                return
            self._unread.discard(number)
            del self._decoded[number]
            keys, offsets, sizes = found
            self.add_sorted(keys, builtins.list(zip(offsets, sizes, strict=True)))
        if self._index is not None and not self._unread:
            self._index = None  # every block read: a plain directory from now on

    def _columns(self, number: int) -> tuple[builtins.list[str], Any, Any] | None:
        """Unread block ``number`` as verified columns (keys, offsets, sizes), decoded once;
        ``None`` if it does not verify (the directory is then the log read in full)."""
        found = self._decoded.get(number)
        if found is None:
            assert self._index is not None
            found = hint_block_columns(self._read_hint, self._index, number)
            if found is None:
                self._adopt(self._rescan())
                return None
            self._decoded[number] = found
        return found

    def _look_up(self, key: str) -> tuple[bool, Any]:
        """``(True, where)`` when ``key``'s block is unread: its columns answer (``where``
        is ``key``'s position, ``None`` if it has none), and a lookup needs no more than
        that block decoded. ``(False, None)``: ask the directory itself."""
        if self._index is None:
            return False, None
        number = self._block_of(key)
        if number not in self._unread:
            return False, None
        found = self._columns(number)
        if found is None:
            return False, None
        keys, offsets, sizes = found
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            return True, (offsets[at], sizes[at])
        return True, None

    def _read_hint(self, size: int, offset: int) -> bytes:
        """Bytes of the hint file the index was read from; none if it is another file now."""
        return self._read_hint_spans([(offset, size)])[0]

    def _read_hint_spans(self, spans: builtins.list[tuple[int, int]]) -> builtins.list[bytes]:
        """Each ``(offset, size)`` of the hint file the index was read from, with one
        opening of it; none if it is another file now."""
        try:
            fd = os.open(self._hint_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return [b""] * len(spans)
        try:
            st = os.fstat(fd)
            if (st.st_ino, st.st_size) != self._hint_identity:
                return [b""] * len(spans)  # replaced: it does not verify against this index
            return [os.pread(fd, size, offset) for offset, size in spans]
        finally:
            os.close(fd)

    # -- writing the next hint ---------------------------------------------------------------

    def hint_parts(self) -> builtins.list[Any] | None:
        """The directory as the parts of a new hint (``encode_hint_parts``), in key order:
        each block never read, where the hint file holds it (a key changed since would
        have read its block first), and the keys read or changed between them, as
        ``(key, where)``. ``None`` once every block is read (the directory is then
        complete: encode its items). The blocks are copied from ``hint_file``, which
        must still be the file ``hint_identity`` names."""
        index = self._index
        if index is None:
            return None
        loaded = sorted(dict.items(self))
        loaded_keys = [key for key, _ in loaded]
        parts: builtins.list[Any] = []
        taken = 0
        for number in sorted(self._unread):
            offset, size, crc = index.blocks[number]
            first_key = index.first_keys[number]
            cut = bisect.bisect_left(loaded_keys, first_key)
            parts.append(loaded[taken:cut])
            parts.append(KeptBlock(first_key, offset, size, crc))
            taken = cut
        parts.append(loaded[taken:])
        return parts

    @property
    def partly_read(self) -> bool:
        """Whether some blocks of the hint are still unread (``hint_parts`` has parts)."""
        return self._index is not None

    @property
    def hint_file(self) -> str:
        return self._hint_path

    @property
    def hint_identity(self) -> tuple[int, int]:
        """The hint file's (inode, size) when its index was read."""
        return self._hint_identity

    def rebase(self, hint_identity: tuple[int, int], index: HintIndex) -> None:
        """Read on from a new hint written from ``hint_parts``: its carried blocks are
        still unread, the rest is in the directory already."""
        kept = {self._index.first_keys[n] for n in self._unread} if self._index else set()
        self._hint_identity = hint_identity
        self._index = index
        self._unread = {n for n, first in enumerate(index.first_keys) if first in kept}
        self._decoded = {}
        if not self._unread:
            self._index = None

    def _block_of(self, key: str) -> int:
        assert self._index is not None
        return max(bisect.bisect_right(self._index.first_keys, key) - 1, 0)

    def _blocks_between(self, low: str, high: str) -> range:
        """The blocks that may hold keys ``low <= key < high``."""
        assert self._index is not None
        return range(self._block_of(low), bisect.bisect_left(self._index.first_keys, high))

    def _for_key(self, key: str) -> None:
        if self._index is not None:
            self._read_blocks((self._block_of(key),))

    def _for_prefix(self, prefix: str) -> None:
        if self._index is not None:
            self._read_blocks(self._blocks_between(f"{prefix}/", f"{prefix}0"))  # "0" follows "/"

    def _for_all(self) -> None:
        if self._index is not None:
            self._read_blocks(sorted(self._unread))

    def _adopt(self, complete: KeyDirectory) -> None:
        """Become ``complete`` (the log read in full), dropping the hint."""
        self._index = None
        self._unread = set()
        self._decoded = {}
        dict.clear(self)
        dict.update(self, complete)
        self.leaves, self.subdirs, self.greatest = (
            complete.leaves,
            complete.subdirs,
            complete.greatest,
        )

    # -- the directory ---------------------------------------------------------------------

    # A lookup in an unread block reads that block's columns; a change takes the block
    # into the directory first, so an unread block never holds a key changed since.

    def get(self, key: str, default: Any = None) -> Any:
        looked, where = self._look_up(key)
        if looked:
            return default if where is None else where
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            looked, where = self._look_up(key)
            if looked:
                return where is not None
        return super().__contains__(key)

    def __getitem__(self, key: str) -> Any:
        looked, where = self._look_up(key)
        if looked:
            if where is None:
                raise KeyError(key)
            return where
        return super().__getitem__(key)

    def __setitem__(self, key: str, value: Any) -> None:
        self._for_key(key)
        super().__setitem__(key, value)

    def apply(self, changes: dict[str, Any]) -> dict[str, Any]:
        if self._index is not None:
            first_keys = self._index.first_keys
            self._read_blocks(
                sorted({max(bisect.bisect_right(first_keys, key) - 1, 0) for key in changes})
            )
        return super().apply(changes)

    def __delitem__(self, key: str) -> None:
        self._for_key(key)
        super().__delitem__(key)

    def __len__(self) -> int:
        self._for_all()
        return super().__len__()

    def __iter__(self) -> Iterator[str]:
        self._for_all()
        return super().__iter__()

    def keys(self) -> Any:
        self._for_all()
        return super().keys()

    def values(self) -> Any:
        self._for_all()
        return super().values()

    def items(self) -> Any:
        self._for_all()
        return super().items()

    def names_under(self, prefix: str) -> builtins.list[str]:
        self._for_prefix(prefix)
        return super().names_under(prefix)

    def keys_under(self, prefix: str) -> builtins.list[str]:
        self._for_prefix(prefix)
        return super().keys_under(prefix)

    def greatest_name_under(self, prefix: str) -> str | None:
        def enough(start: str) -> bool:
            greatest = KeyDirectory.greatest_name_under(self, prefix)
            return greatest is not None and f"{prefix}/{greatest}" >= start

        self._read_last_blocks(prefix, enough)
        return super().greatest_name_under(prefix)

    def greatest_names_under(self, prefix: str, count: int) -> builtins.list[str]:
        cut = len(prefix) + 1

        def enough(start: str) -> bool:
            known = self.leaves.get(prefix, ())
            if start[:cut] != f"{prefix}/":
                return True  # the blocks read start before the prefix: they hold all of it
            return sum(1 for name in known if name >= start[cut:]) >= count

        self._read_last_blocks(prefix, enough)
        return super().greatest_names_under(prefix, count)

    def _read_last_blocks(self, prefix: str, enough: Callable[[str], bool]) -> None:
        """Read the unread blocks of ``prefix`` from the last one back, until ``enough`` of
        the key the blocks read start at: every key from there on is known, and no block
        before them holds a greater one."""
        while self._index is not None:
            blocks = self._blocks_between(f"{prefix}/", f"{prefix}0")
            pending = [n for n in blocks if n in self._unread]
            if not pending:
                return
            last = pending[-1]
            if last != blocks[-1] and enough(self._index.first_keys[last + 1]):
                return  # the blocks after it are read (a write into them, say) and suffice
            self._read_blocks((last,))
            if self._index is None or enough(self._index.first_keys[last]):
                return
