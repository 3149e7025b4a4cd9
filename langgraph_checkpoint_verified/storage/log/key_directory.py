"""A thread's key directory: every key of its log and where its latest entry lies.

``KeyDirectory`` is built by reading the log once and kept up to date by the
log's appends; ``HintedDirectory`` is the same directory opened from a hint
file (``log.hint``), reading the hint's blocks only as they are needed.

Either remembers the hint it was last written to or read from (``LastHint``) and
which of that hint's blocks hold a key changed since: the next hint copies the
others from it as they are, and encodes only those (``hint_parts``). A writer
appending to a long thread then rewrites its hint at a cost that grows with what
it appended, not with every key the thread holds.
"""

from __future__ import annotations

import bisect
import builtins
import heapq
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from langgraph_checkpoint_verified.storage.log.entries import (
    HintIndex,
    KeptBlock,
    hint_block_columns,
)


@dataclass
class LastHint:
    """The hint file a directory was last read from or written to, and which of its
    blocks hold a key changed since (a block holds the keys from its first key up to
    the next block's; block 0 also the keys before its first, the last block those
    after it)."""

    path: str
    identity: tuple[int, int]
    """The file's (inode, size) then: its blocks are copied only from that very file."""
    first_keys: builtins.list[str]
    blocks: builtins.list[tuple[int, int, int]]
    """Each block's offset in the file, size and CRC-32 (``HintIndex.blocks``)."""
    changed: set[int] = field(default_factory=set)

    def block_of(self, key: str) -> int:
        return max(bisect.bisect_right(self.first_keys, key) - 1, 0)

    def touch(self, key: str) -> None:
        """``key`` changed (was set, or deleted): its block is not carried as it is."""
        self.changed.add(self.block_of(key))


@dataclass(frozen=True)
class UnreadHint:
    """What a ``HintedDirectory`` still reads from the hint it uses: handed to a
    directory that takes its place (``HintedDirectory._adopt``)."""

    path: str
    identity: tuple[int, int]
    """The file's (inode, size): its blocks are read only from that very file."""
    index: HintIndex
    unread: set[int]
    """The blocks not taken into the directory yet."""
    decoded: dict[int, Any]
    """Those of them decoded already (``HintedDirectory._columns``)."""


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
        self.last_hint: LastHint | None = None
        """The hint this directory was last read from or written to (``hinted``)."""

    def __setitem__(self, key: str, value: Any) -> None:
        if not dict.__contains__(self, key):
            self._add_name(key)
        super().__setitem__(key, value)
        if self.last_hint is not None:
            self.last_hint.touch(key)

    def add_names(self, parent: str, names: list[str], positions: list[Any]) -> None:
        """Keys ``parent/name``, none of them in the directory yet, each at its position:
        a directory at a time (a stretch of log applied at once), not a key at a time."""
        if not names:
            return
        if self.last_hint is not None:
            for name in names:
                self.last_hint.touch(f"{parent}/{name}")
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
                    if self.last_hint is not None:
                        self.last_hint.touch(key)
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
        if self.last_hint is not None:
            self.last_hint.touch(key)
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

    # -- the next hint ---------------------------------------------------------------------

    def hinted(self, path: str, identity: tuple[int, int], index: HintIndex) -> None:
        """The directory was just written to the hint file ``path`` (``identity``: its
        inode and size), whose index is ``index``: no key changed since."""
        self.last_hint = LastHint(path, identity, index.first_keys, index.blocks)

    def follow_replaced_hint(self) -> bool:
        """Read on from the hint now at the path if the one this directory reads its
        blocks from was replaced since (``HintedDirectory``); whether it did. A directory
        that reads no block has nothing to follow."""
        return False

    def hint_parts(self) -> builtins.list[Any] | None:
        """The directory as the parts of a new hint (``encode_hint_parts``), in key order:
        each block of the last hint that holds no key changed since (``LastHint``), where
        that file holds it, and the keys of the other blocks, as ``(key, where)``, between
        them. ``None`` if the directory knows of no hint (encode its items). The blocks are
        copied from the file ``last_hint`` names, which must still be that file.

        A key is changed only after its block is in the directory (``HintedDirectory``
        reads it first), so every block not carried has all its keys here."""
        last = self.last_hint
        if last is None:
            return None
        # the keys alone sorted (no pair made for a key whose block is carried)
        loaded = sorted(dict.keys(self))
        parts: builtins.list[Any] = []
        taken = 0
        count = len(last.first_keys)
        for number, (first_key, (offset, size, crc)) in enumerate(
            zip(last.first_keys, last.blocks, strict=True)
        ):
            if number in last.changed:
                continue  # its keys go with the run of keys around it
            parts.append(self._run(loaded[taken : bisect.bisect_left(loaded, first_key)]))
            parts.append(KeptBlock(first_key, offset, size, crc))
            # the block's own keys, if they are in the directory too, are in the copy
            taken = (
                bisect.bisect_left(loaded, last.first_keys[number + 1])
                if number + 1 < count
                else len(loaded)
            )
        parts.append(self._run(loaded[taken:]))
        return parts

    def _run(self, keys: builtins.list[str]) -> builtins.list[tuple[str, Any]]:
        get = dict.__getitem__
        return [(key, get(self, key)) for key in keys]

    # Changed through dict's own methods (none of this package's code does), the directory
    # no longer knows which blocks of its last hint still hold: the next hint is encoded
    # whole.

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.last_hint = None
        super().update(*args, **kwargs)

    def pop(self, *args: Any) -> Any:
        self.last_hint = None
        return super().pop(*args)

    def popitem(self) -> tuple[str, Any]:
        self.last_hint = None
        return super().popitem()

    def setdefault(self, key: str, default: Any = None) -> Any:
        self.last_hint = None
        return super().setdefault(key, default)

    def clear(self) -> None:
        self.last_hint = None
        super().clear()


class HintedDirectory(KeyDirectory):
    """A key directory taken from a hint a block at a time, as it is used.

    Opening a thread reads the hint's index; the blocks a call needs are read
    and verified when it needs them: the block of a key looked up, written or
    deleted (so a block read later never holds a key changed since), the blocks
    of a prefix listed, the last blocks of a prefix whose greatest name is asked
    for. Whatever needs every key (iterating, counting) reads every block. A
    block that does not verify makes the directory read the log itself instead. A
    hint file replaced since its index was read (another process wrote a newer one)
    makes it read on from the one at the path now, if that one covers no more of the
    log than the directory does, and the log after it: a long thread's other readers
    and writers keep rewriting its hint, and each of them would otherwise cost every
    reader a read of the whole log. The blocks a call was reading are then those of
    the same keys in the new hint.

    Args:
        hint_path: The hint file.
        hint_identity: Its (inode, size) when its index was read.
        index: Its index.
        rescan: The directory again: from the log read in full (``False``), or from
            the hint now at the path and the log after it where it can (``True``: the
            hint was replaced), a ``HintedDirectory`` of that hint then, read on from.
    """

    def __init__(
        self,
        hint_path: str,
        hint_identity: tuple[int, int],
        index: HintIndex,
        rescan: Callable[[bool], KeyDirectory],
    ) -> None:
        super().__init__()
        self._hint_path = hint_path
        self._hint_identity = hint_identity
        self._index: HintIndex | None = index
        self._unread = set(range(len(index.blocks)))
        self._decoded: dict[int, tuple[builtins.list[str], Any, Any]] = {}
        """Unread blocks decoded for lookups, not yet taken into the directory."""
        self._rescan = rescan
        self._replaced = False
        """Whether the hint file was found replaced by another since its index was read."""
        self.last_hint = LastHint(hint_path, hint_identity, index.first_keys, index.blocks)
        if not self._unread:
            self._index = None

    # -- reading blocks -------------------------------------------------------------------

    def _read_blocks(self, numbers: Iterable[int]) -> None:
        """Take blocks ``numbers`` into the directory, those not read yet. Read on from
        another hint meanwhile, the blocks taken are that one's of the same keys (all of
        them: the keys of the blocks read before are that hint's unread blocks now)."""
        index = self._index
        asked = builtins.list(numbers)
        at = 0
        while at < len(asked):
            number = asked[at]
            at += 1
            if self._index is None:
                return
            if number not in self._unread:
                continue
            found = self._columns(number)
            if found is None:
                if self._index is None or index is None:
                    return  # the log read in full: every key is in the directory
                ranges = [self._key_range(index, n) for n in asked]
                index = self._index
                asked = sorted({n for low, high in ranges for n in self._blocks_between(low, high)})
                at = 0
                continue
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
                self._adopt(self._rescan(self._replaced))
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
            # the log read in full, or another hint read on from: asked again
            return self._look_up(key)
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
            self._replaced = True  # gone (a compaction's): there may be another by now
            return [b""] * len(spans)
        try:
            st = os.fstat(fd)
            if (st.st_ino, st.st_size) != self._hint_identity:
                self._replaced = True
                return [b""] * len(spans)  # it does not verify against this index
            return [os.pread(fd, size, offset) for offset, size in spans]
        finally:
            os.close(fd)

    def follow_replaced_hint(self) -> bool:
        if self._index is None:
            return False
        try:
            st = os.stat(self._hint_path)
            if (st.st_ino, st.st_size) == self._hint_identity:
                return False
        except OSError:
            pass  # gone: there may be another by now
        self._adopt(self._rescan(True))
        return True

    def unread_hint(self) -> UnreadHint | None:
        """What is still read from the hint as it is used; ``None`` once every block is
        read."""
        if self._index is None:
            return None
        return UnreadHint(
            self._hint_path, self._hint_identity, self._index, self._unread, self._decoded
        )

    # -- writing the next hint ---------------------------------------------------------------

    def hinted(self, path: str, identity: tuple[int, int], index: HintIndex) -> None:
        """Read on from the hint just written from ``hint_parts``: the blocks it carried
        that were never read are still unread, the rest is in the directory already."""
        kept = {self._index.first_keys[n] for n in self._unread} if self._index else set()
        self._hint_path, self._hint_identity = path, identity
        self._index = index
        self._unread = {n for n, first in enumerate(index.first_keys) if first in kept}
        self._decoded = {}
        if not self._unread:
            self._index = None
        super().hinted(path, identity, index)

    def _block_of(self, key: str) -> int:
        assert self._index is not None
        return max(bisect.bisect_right(self._index.first_keys, key) - 1, 0)

    @staticmethod
    def _key_range(index: HintIndex, number: int) -> tuple[str | None, str | None]:
        """The keys block ``number`` of ``index`` holds: from its first key (block 0: from
        the smallest) up to the next block's (the last block: to the greatest)."""
        first_keys = index.first_keys
        low = first_keys[number] if number else None
        high = first_keys[number + 1] if number + 1 < len(first_keys) else None
        return low, high

    def _blocks_between(self, low: str | None, high: str | None) -> range:
        """The blocks of this hint that may hold keys ``low <= key < high`` (``None``: no
        bound on that side)."""
        assert self._index is not None
        first_keys = self._index.first_keys
        start = 0 if low is None else self._block_of(low)
        return range(
            start, len(first_keys) if high is None else bisect.bisect_left(first_keys, high)
        )

    def _for_key(self, key: str) -> None:
        if self._index is not None:
            self._read_blocks((self._block_of(key),))

    def _for_prefix(self, prefix: str) -> None:
        if self._index is not None:
            self._read_blocks(self._blocks_between(f"{prefix}/", f"{prefix}0"))  # "0" follows "/"

    def _for_all(self) -> None:
        while self._index is not None:  # again if another hint is read on from meanwhile
            self._read_blocks(sorted(self._unread))

    def _adopt(self, complete: KeyDirectory) -> None:
        """Become ``complete``: the log read in full, dropping the hint; or a directory of
        the hint now at the path and the log after it, read on from as this one was."""
        self._index = None
        self._unread = set()
        self._decoded = {}
        self._replaced = False
        # this hint is gone, or a block of it did not verify: nothing is copied from it
        self.last_hint = None
        if isinstance(complete, HintedDirectory):
            self.last_hint = complete.last_hint  # the next hint copies from that one
            unread = complete.unread_hint()
            if unread is not None:
                self._hint_path, self._hint_identity = unread.path, unread.identity
                self._index, self._unread, self._decoded = (
                    unread.index,
                    unread.unread,
                    unread.decoded,
                )
        dict.clear(self)
        dict.update(self, dict.items(complete))  # what it holds, no block read for it
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
            index = self._index
            blocks = self._blocks_between(f"{prefix}/", f"{prefix}0")
            pending = [n for n in blocks if n in self._unread]
            if not pending:
                return
            last = pending[-1]
            if last != blocks[-1] and enough(index.first_keys[last + 1]):
                return  # the blocks after it are read (a write into them, say) and suffice
            self._read_blocks((last,))
            if self._index is not index:
                continue  # read in full (done), or another hint read on from: looked at anew
            if enough(index.first_keys[last]):
                return
