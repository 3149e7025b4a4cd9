"""A simulated disk for power-loss tests, and a syscall counter, at the level of ``os`` calls.

``FaultFS(root)`` replaces ``os.open``, ``os.write``, ``os.fsync``, ``os.replace`` and the
other calls that change files (see ``PATCHED``) on the ``os`` module itself, so every
``os.xxx(...)`` call site of any module sees it, whatever the storage engine looks like.
Calls on paths (or descriptors of files) outside ``root`` go straight through.

For every file under ``root`` it keeps the content as of its last ``fsync``/``fdatasync``
(the *durable* content); for every directory, the entries created, renamed and removed
since that directory was last fsynced. ``cut_power()`` then rewrites the real directory
to what a power cut could leave, in the spirit of SQLite's crash-test VFS and RocksDB's
``FaultInjectionTestFS``:

* a file holds its durable content: bytes written and not synced are dropped. With
  ``torn_writes=True``, a random prefix of what changed since the sync survives, from
  the first byte that differs on (an append torn, or an overwrite of bytes the file
  held, such as a log's room, torn);
* with ``written_back=True``, the kernel may also have written a file's dirty pages
  back before the cut, each file on its own and in no order between files: each
  file's unsynced content survives whole, or is dropped (or torn), at random. A file
  written without a sync can then be newer than one synced before it was written;
* every directory operation not followed by an fsync of its directory is kept or lost at
  random: a lost create means the file is gone, a lost rename means the old name (and
  the file it named) is back, a lost unlink means the file is back. A rename between
  two directories is kept or lost as one, and is durable only once both are synced;
* files and directories that existed when the layer was entered count as durable.

``cut_after(k)`` arms a cut: the ``k``-th intercepted operation that changes the disk is
carried out, then raises ``PowerCut`` (a ``BaseException``, so ordinary ``except
Exception`` handlers in the code under test do not swallow it), and every later one
raises it too without doing anything: the machine is off. A test iterates ``k`` over
``1..len(disk.ops)`` of an uncut run of the same sequence.

Every such operation is also recorded (``disk.ops``, and per thread with ``capture()``),
which is what the syscall-count tests read (``Tally.of(ops)``).

The real ``fsync`` is never called for files under ``root``: the disk under test is this
model, not the machine's, and skipping it keeps the tests fast. Writes made through the
builtin ``open()`` are not seen (reads through it are fine); anything the layer finds on
disk without having seen it made is listed in ``unmodelled``.

Example:
    >>> import os, tempfile
    >>> def write(path, data, *, sync_file, sync_dir):
    ...     fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    ...     os.write(fd, data)
    ...     if sync_file:
    ...         os.fsync(fd)
    ...     os.close(fd)
    ...     if sync_dir:
    ...         fd = os.open(os.path.dirname(path), os.O_RDONLY)
    ...         os.fsync(fd)
    ...         os.close(fd)
    >>> with tempfile.TemporaryDirectory() as root:
    ...     with FaultFS(root, seed=3) as disk:
    ...         write(f"{root}/kept", b"durable", sync_file=True, sync_dir=True)
    ...         write(f"{root}/lost", b"never synced", sync_file=False, sync_dir=False)
    ...         report = disk.cut_power()
    ...     print(open(f"{root}/kept", "rb").read(), os.path.exists(f"{root}/lost"))
    b'durable' False
    >>> report.lost
    ['lost']

Limits: directory operations are kept or lost each on its own (a journaling file system
would keep a prefix of them in order: any outcome it allows, this allows too); a torn
write keeps a prefix, where a disk may keep any set of its sectors; a synced file is
read back through ``/proc/self/fd`` where there is one (Linux), else through its path.
"""

from __future__ import annotations

import os
import random
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

PATCHED = (
    "open",
    "close",
    "write",
    "pwrite",
    "writev",
    "pwritev",
    "ftruncate",
    "truncate",
    "fsync",
    "fdatasync",
    "rename",
    "replace",
    "link",
    "unlink",
    "remove",
    "mkdir",
    "rmdir",
)
"""The ``os`` functions the layer replaces while it is active (those this platform has)."""

_real: dict[str, Callable[..., Any]] = {
    name: getattr(os, name) for name in PATCHED if hasattr(os, name)
}
_active_lock = threading.Lock()
_active: FaultFS | None = None
_PROC_FD = "/proc/self/fd"
_HAVE_PROC_FD = os.path.isdir(_PROC_FD)


class PowerCut(BaseException):
    """The power went out during (just after) this operation; nothing later reaches the disk.

    A ``BaseException`` so that the code under test cannot mistake it for an I/O error
    it may handle and carry on from.
    """


@dataclass(frozen=True)
class Op:
    """One intercepted operation that changed (or made durable) something under the root.

    Attributes:
        index: Its position, from 1, among the operations since the layer was entered.
        kind: ``create`` (a new file), ``mkdir``, ``write``, ``truncate``, ``sync`` (fsync
            or fdatasync of a file), ``dirsync`` (of a directory), ``rename`` (``rename``
            or ``replace``), ``link``, ``unlink`` or ``rmdir``.
        path: Relative to the root (``""`` is the root itself).
        target: The new name, for ``rename`` and ``link``.
        size: Bytes written, for ``write``.
        thread: ``threading.get_ident()`` of the caller.
    """

    index: int
    kind: str
    path: str
    target: str | None = None
    size: int = 0
    thread: int = 0

    def __str__(self) -> str:
        where = f"{self.path} -> {self.target}" if self.target is not None else self.path
        extra = f" ({self.size} bytes)" if self.kind == "write" else ""
        return f"#{self.index} {self.kind} {where or '<root>'}{extra}"


@dataclass
class Tally:
    """How many operations of each kind a sequence of ``Op`` holds.

    Example:
        >>> ops = [Op(1, "create", "a/.tmp"), Op(2, "write", "a/.tmp", size=5),
        ...        Op(3, "sync", "a/.tmp"), Op(4, "rename", "a/.tmp", "a/x"),
        ...        Op(5, "dirsync", "a")]
        >>> tally = Tally.of(ops)
        >>> tally.syncs, tally.file_syncs, tally.dir_syncs, tally.renames, tally.new_files
        (2, 1, 1, 1, 1)
    """

    file_syncs: int = 0
    dir_syncs: int = 0
    new_files: int = 0
    new_dirs: int = 0
    renames: int = 0
    links: int = 0
    removals: int = 0
    writes: int = 0
    bytes_written: int = 0
    truncates: int = 0

    @property
    def syncs(self) -> int:
        """Every fsync and fdatasync, of files and directories alike."""
        return self.file_syncs + self.dir_syncs

    @classmethod
    def of(cls, ops: Iterable[Op]) -> Tally:
        tally = cls()
        field_of = {
            "sync": "file_syncs",
            "dirsync": "dir_syncs",
            "create": "new_files",
            "mkdir": "new_dirs",
            "rename": "renames",
            "link": "links",
            "unlink": "removals",
            "rmdir": "removals",
            "write": "writes",
            "truncate": "truncates",
        }
        for op in ops:
            name = field_of[op.kind]
            setattr(tally, name, getattr(tally, name) + 1)
            tally.bytes_written += op.size
        return tally


@dataclass
class CutReport:
    """What a power cut changed, compared with the directory just before it.

    Paths are relative to the root; directories end with ``/``.

    Attributes:
        lost: Names that were there and are gone (a create or rename not made durable).
        restored: Names that were gone and are back (a lost unlink, or the old name of a
            lost rename).
        changed: Files still there whose content is not what it was (unsynced bytes
            dropped, or the file a lost rename had replaced).
        torn: Files that kept only part of their unsynced appended bytes.
    """

    lost: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)

    def touches(self, path: str) -> bool:
        """Whether the cut lost, brought back or changed ``path``."""
        return path in self.lost or path in self.restored or path in self.changed

    def __str__(self) -> str:
        parts = [
            f"{label}: {', '.join(paths)}"
            for label, paths in (
                ("lost", self.lost),
                ("restored", self.restored),
                ("changed", self.changed),
                ("torn", self.torn),
            )
            if paths
        ]
        return "; ".join(parts) or "nothing changed"


class _Node:
    """A file or directory: what a name points at (several names may share a file)."""

    __slots__ = ("is_dir", "entries", "durable", "links")

    def __init__(self, *, is_dir: bool, durable: bytes = b"") -> None:
        self.is_dir = is_dir
        self.entries: dict[str, _Node] = {}  # directories: the current entries
        self.durable = durable  # files: the content as of the last sync
        self.links: set[tuple[_Node, str]] = set()  # (directory, name) naming it now


@dataclass
class _DirOp:
    """A directory operation, and the directories whose fsync it still waits for."""

    node: _Node
    source: tuple[_Node, str] | None  # the name it removes
    target: tuple[_Node, str] | None  # the name it adds
    waiting: set[_Node]


class FaultFS:
    """While entered, a simulated disk under ``root`` (see the module docstring).

    Args:
        root: The directory to watch (created if missing; it and everything in it when
            the layer is entered count as durable).
        seed: Seeds the choices a power cut makes (which unsynced directory operations
            survive, how much of a torn append).
        torn_writes: Let a random prefix of unsynced appended bytes survive a cut,
            instead of dropping them all.
        written_back: Let each file's unsynced content survive a cut whole, at random
            and file by file (the kernel wrote its dirty pages back in time).
        model: ``False`` only records operations (for counting): contents are not read
            at each sync, and ``cut_power`` is refused.

    Only one layer can be active at a time: it patches the process-wide ``os`` module.
    The layer is thread-safe; operations are carried out one at a time.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        seed: int = 0,
        torn_writes: bool = False,
        written_back: bool = False,
        model: bool = True,
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self._real_root = os.path.realpath(self.root)
        self.torn_writes = torn_writes
        self.written_back = written_back
        self.model = model
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._local = threading.local()
        self.ops: list[Op] = []
        """Every operation that changed something under the root, in order."""
        self.unmodelled: list[str] = []
        """Paths found on disk that the layer did not see being made (see the module doc)."""
        self._cut_at: int | None = None
        self._off = False
        self._fds: dict[int, tuple[_Node, int, int]] = {}  # fd -> (node, st_dev, st_ino)
        self._tree = _Node(is_dir=True)
        self._initial: dict[_Node, dict[str, _Node]] = {}
        self._dir_ops: list[_DirOp] = []
        self._unsynced_dirs: dict[_Node, list[_DirOp]] = {}

    @classmethod
    def counting(cls, root: str | os.PathLike[str]) -> FaultFS:
        """A layer that only records operations, for counting syscalls.

        Example:
            >>> import os, tempfile
            >>> with tempfile.TemporaryDirectory() as root, FaultFS.counting(root) as disk:
            ...     fd = os.open(f"{root}/x", os.O_WRONLY | os.O_CREAT, 0o600)
            ...     _ = os.write(fd, b"data")
            ...     os.fsync(fd)
            ...     os.close(fd)
            >>> [op.kind for op in disk.ops]
            ['create', 'write', 'sync']
        """
        return cls(root, model=False)

    # -- entering and leaving ----------------------------------------------------

    def __enter__(self) -> FaultFS:
        global _active
        with _active_lock:
            if _active is not None:
                raise RuntimeError("a FaultFS layer is already active: they patch os globally")
            if not os.path.isdir(self.root):
                os.makedirs(self.root, mode=0o700)
            self._start_epoch()
            _active = self
            for name in _real:
                setattr(os, name, getattr(self, f"_{name}"))
        return self

    def __exit__(self, *exc_info: object) -> None:
        global _active
        with _active_lock:
            for name, function in _real.items():
                setattr(os, name, function)
            _active = None

    def _start_epoch(self) -> None:
        """Take what is on disk now as durable (on entering, and after a cut)."""
        self._fds.clear()
        self._dir_ops.clear()
        self._unsynced_dirs.clear()
        self._initial.clear()
        self._tree = self._scan(self.root)
        self._off = False
        self._cut_at = None

    def _scan(self, path: str) -> _Node:
        node = _Node(is_dir=True)
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    child = self._scan(entry.path)
                else:
                    child = _Node(is_dir=False, durable=_read(entry.path) if self.model else b"")
                node.entries[entry.name] = child
                child.links.add((node, entry.name))
        self._initial[node] = dict(node.entries)
        return node

    # -- arming a cut and reading what happened ----------------------------------------

    def cut_after(self, k: int) -> None:
        """Cut the power just after the ``k``-th operation (counted from entering the layer).

        That operation is carried out and then raises ``PowerCut``; so does every later
        one, without being carried out. Call ``cut_power()`` afterwards.
        """
        with self._lock:
            self._cut_at = k
            if len(self.ops) >= k:
                self._off = True

    @property
    def power_is_off(self) -> bool:
        """Whether an armed cut has happened (and ``cut_power`` has not been called since)."""
        return self._off

    @contextmanager
    def capture(self) -> Iterator[list[Op]]:
        """Collect the operations this thread makes inside the block (others' are left out).

        Example:
            >>> import os, tempfile
            >>> with tempfile.TemporaryDirectory() as root, FaultFS.counting(root) as disk:
            ...     os.mkdir(f"{root}/before")
            ...     with disk.capture() as ops:
            ...         os.mkdir(f"{root}/inside")
            >>> [str(op) for op in ops]
            ['#2 mkdir inside']
        """
        collected: list[Op] = []
        stack = self._local.__dict__.setdefault("captures", [])
        stack.append(collected)
        try:
            yield collected
        finally:
            stack.remove(collected)

    def unsynced(self) -> list[str]:
        """What a power cut now could change: files whose content is not durable, and
        directory operations not made durable by an fsync of their directory.

        Example:
            >>> import os, tempfile
            >>> with tempfile.TemporaryDirectory() as root, FaultFS(root) as disk:
            ...     fd = os.open(f"{root}/x", os.O_WRONLY | os.O_CREAT, 0o600)
            ...     _ = os.write(fd, b"data")
            ...     os.close(fd)
            ...     disk.unsynced()
            ['x: 4 bytes written, 0 synced', 'create x']
        """
        self._require_model()
        with self._lock:
            found = []
            for path, node in sorted(self._current_paths().items()):
                if not node.is_dir:
                    content = _read(os.path.join(self.root, path))
                    if content != node.durable:
                        found.append(
                            f"{path}: {len(content)} bytes written, {len(node.durable)} synced"
                        )
            for op in self._dir_ops:
                if op.waiting:
                    found.append(self._describe(op))
            return found

    # -- the cut --------------------------------------------------------------------

    def cut_power(self) -> CutReport:
        """Rewrite the directory to what a power cut now could leave, and report the change.

        The layer then carries on (if still entered) with what is on disk as durable,
        like a machine after a reboot; a pending ``cut_after`` is disarmed.
        """
        self._require_model()
        with self._lock:
            before = self._current_paths()
            current = {
                node: _read(os.path.join(self.root, path))
                for path, node in before.items()
                if not node.is_dir
            }
            entries = self._surviving_entries()
            after: dict[str, _Node] = {}
            self._walk_survivors(self._tree, "", entries, after, set())
            contents: dict[_Node, bytes] = {}
            report = CutReport()
            for path, node in sorted(after.items()):
                if node.is_dir or node in contents:
                    continue
                contents[node] = self._content_after_cut(node, current.get(node))
                if contents[node] != node.durable:
                    report.torn.append(path)
            for path in sorted(set(before) | set(after)):
                shown = path + "/" if (before.get(path) or after.get(path)).is_dir else path
                if path not in after:
                    report.lost.append(shown)
                elif path not in before:
                    report.restored.append(shown)
                elif after[path].is_dir != before[path].is_dir or (
                    not after[path].is_dir and contents[after[path]] != current[before[path]]
                ):
                    report.changed.append(shown)
            self._rewrite(before, current, after, contents)
            self._start_epoch()
            return report

    def _surviving_entries(self) -> dict[_Node, dict[str, _Node]]:
        """Directory entries after the cut: the durable ones, each unsynced op kept or not."""
        entries = {directory: dict(names) for directory, names in self._initial.items()}
        for op in self._dir_ops:
            if op.waiting and self._rng.random() < 0.5:
                continue  # lost with the power
            if op.source is not None:
                directory, name = op.source
                if entries.get(directory, {}).get(name) is op.node:
                    del entries[directory][name]
            if op.target is not None:
                directory, name = op.target
                entries.setdefault(directory, {})[name] = op.node
        return entries

    def _walk_survivors(
        self,
        directory: _Node,
        prefix: str,
        entries: dict[_Node, dict[str, _Node]],
        found: dict[str, _Node],
        seen: set[_Node],
    ) -> None:
        seen.add(directory)
        for name, node in entries.get(directory, {}).items():
            path = f"{prefix}{name}"
            if node.is_dir:
                if node in seen:
                    continue  # a combination of lost renames a real disk cannot show
                found[path] = node
                self._walk_survivors(node, f"{path}/", entries, found, seen)
            else:
                found[path] = node

    def _content_after_cut(self, node: _Node, current: bytes | None) -> bytes:
        durable = node.durable
        if self.written_back and current is not None and self._rng.random() < 0.5:
            return current  # written back before the cut, as if synced
        if not self.torn_writes or current is None or len(current) < len(durable):
            return durable
        # what changed since the sync, from its first changed byte to its last: a prefix
        # of it survives, over the durable bytes (an append torn, or an overwrite torn)
        changed = [i for i, (a, b) in enumerate(zip(current, durable, strict=False)) if a != b]
        start = changed[0] if changed else len(durable)
        end = len(current) if len(current) > len(durable) or not changed else changed[-1] + 1
        kept = current[: start + self._rng.randint(0, end - start)]
        return kept + durable[len(kept) :]

    def _rewrite(
        self,
        before: dict[str, _Node],
        current: dict[_Node, bytes],
        after: dict[str, _Node],
        contents: dict[_Node, bytes],
    ) -> None:
        """Turn the directory from ``before`` into ``after``, touching only what differs
        (removing and remaking a whole store at every cut would cost most of a test's time)."""
        for path in sorted(before, reverse=True):  # children before their directories
            old, new = before[path], after.get(path)
            if new is None or new.is_dir != old.is_dir or (not new.is_dir and new is not old):
                full = os.path.join(self.root, path)
                if os.path.lexists(full):
                    _remove_tree(full)
        paths_of: dict[_Node, list[str]] = {}
        for path, node in sorted(after.items()):  # directories before what they hold
            if node.is_dir:
                if before.get(path) is None or not before[path].is_dir:
                    _real["mkdir"](os.path.join(self.root, path), 0o700)
            else:
                paths_of.setdefault(node, []).append(path)
        for node, paths in paths_of.items():
            kept = [path for path in paths if before.get(path) is node]
            if not kept:
                _write_whole(os.path.join(self.root, paths[0]), contents[node], create=True)
                kept = paths[:1]
            elif current[node] != contents[node]:
                # in place: every name it still has is the same file
                _write_whole(os.path.join(self.root, kept[0]), contents[node], create=False)
            for path in paths:
                if path not in kept:
                    _real["link"](os.path.join(self.root, kept[0]), os.path.join(self.root, path))

    # -- the model ------------------------------------------------------------------

    def _require_model(self) -> None:
        if not self.model:
            raise RuntimeError("this layer only counts (FaultFS.counting): it cannot cut power")

    def _relative(self, path: Any, dir_fd: int | None = None) -> str | None:
        """``path`` relative to the root (``""`` for the root), or ``None`` if outside it."""
        if isinstance(path, int):
            return None  # a descriptor, as some functions accept: handled by fd
        text = os.fsdecode(os.fspath(path))
        if not os.path.isabs(text):
            if dir_fd is None:
                base = os.getcwd()
            else:
                base = self._fd_path(dir_fd)
                if base is None:
                    return None
            text = os.path.join(base, text)
        text = os.path.normpath(text)
        for root in (self.root, self._real_root):
            if text == root:
                return ""
            if text.startswith(root) and text[len(root)] == "/":
                return text[len(root) + 1 :]
        return None

    def _fd_path(self, fd: int) -> str | None:
        """The absolute path a directory descriptor stands for."""
        node = self._node_of_fd(fd)
        if node is not None:
            rel = self._path_of(node)
            if rel is not None:
                return os.path.join(self.root, rel) if rel else self.root
        try:
            return os.readlink(f"{_PROC_FD}/{fd}")
        except OSError:
            return None

    def _node_of_fd(self, fd: int) -> _Node | None:
        """The node ``fd`` refers to, if it is a file or directory under the root."""
        known = self._fds.get(fd)
        try:
            st = os.fstat(fd)
        except OSError:
            self._fds.pop(fd, None)
            return None
        if known is not None:
            if (known[1], known[2]) == (st.st_dev, st.st_ino):
                return known[0]
            del self._fds[fd]  # closed behind our back, and the number reused
        # opened before the layer was entered, or not through os.open: ask the kernel
        try:
            target = os.readlink(f"{_PROC_FD}/{fd}")
        except OSError:
            return None
        rel = self._relative(target)
        if rel is None:
            return None
        node = self._lookup(rel) or self._adopt(rel, is_dir=stat.S_ISDIR(st.st_mode))
        self._fds[fd] = (node, st.st_dev, st.st_ino)
        return node

    def _path_of(self, node: _Node) -> str | None:
        parts: list[str] = []
        seen: set[_Node] = set()
        while node is not self._tree:
            if not node.links or node in seen:
                return None
            seen.add(node)
            directory, name = min(node.links, key=lambda link: link[1])
            parts.append(name)
            node = directory
        return "/".join(reversed(parts))

    def _current_paths(self) -> dict[str, _Node]:
        found: dict[str, _Node] = {}

        def walk(directory: _Node, prefix: str) -> None:
            for name, node in directory.entries.items():
                found[f"{prefix}{name}"] = node
                if node.is_dir:
                    walk(node, f"{prefix}{name}/")

        walk(self._tree, "")
        return found

    def _lookup(self, rel: str) -> _Node | None:
        node = self._tree
        if not rel:
            return node
        for part in rel.split("/"):
            node = node.entries.get(part)  # type: ignore[assignment]
            if node is None:
                return None
        return node

    def _parent(self, rel: str) -> tuple[_Node, str]:
        head, _, name = rel.rpartition("/")
        parent = self._lookup(head)
        if parent is None or not parent.is_dir:
            parent = self._adopt(head, is_dir=True)
        return parent, name

    def _adopt(self, rel: str, *, is_dir: bool) -> _Node:
        """A node for something on disk the layer did not see made: taken as durable."""
        self.unmodelled.append(rel)
        if not rel:
            return self._tree
        parent, name = self._parent(rel)
        full = os.path.join(self.root, rel)
        node = _Node(is_dir=is_dir)
        if not is_dir and self.model and os.path.isfile(full):
            node.durable = _read(full)
        parent.entries[name] = node
        node.links.add((parent, name))
        self._initial.setdefault(parent, {})[name] = node
        if is_dir:
            self._initial[node] = {}
        return node

    def _change_entries(
        self,
        node: _Node,
        source: tuple[_Node, str] | None,
        target: tuple[_Node, str] | None,
    ) -> None:
        """Apply a directory operation now, and log it as not yet durable."""
        if source is not None:
            directory, name = source
            if directory.entries.get(name) is node:
                del directory.entries[name]
            node.links.discard(source)
        if target is not None:
            directory, name = target
            replaced = directory.entries.get(name)
            if replaced is not None:
                replaced.links.discard(target)
            directory.entries[name] = node
            node.links.add(target)
        op = _DirOp(
            node,
            source,
            target,
            {link[0] for link in (source, target) if link is not None},
        )
        self._dir_ops.append(op)
        for directory in op.waiting:
            self._unsynced_dirs.setdefault(directory, []).append(op)

    def _describe(self, op: _DirOp) -> str:
        def name(link: tuple[_Node, str]) -> str:
            where = self._path_of(link[0])
            if where is None:
                return f"<removed directory>/{link[1]}"
            return f"{where}/{link[1]}" if where else link[1]

        if op.source is None and op.target is not None:
            return f"create {name(op.target)}"
        if op.target is None and op.source is not None:
            return f"remove {name(op.source)}"
        assert op.source is not None and op.target is not None
        return f"rename {name(op.source)} -> {name(op.target)}"

    def _record(self, kind: str, path: str, target: str | None = None, size: int = 0) -> bool:
        """Log an operation just carried out; ``True`` if the power goes out right after it."""
        op = Op(len(self.ops) + 1, kind, path, target, size, threading.get_ident())
        self.ops.append(op)
        for collected in getattr(self._local, "captures", ()):
            collected.append(op)
        if self._cut_at is not None and op.index >= self._cut_at:
            self._off = True
            return True
        return False

    def _check_power(self, what: str) -> None:
        if self._off:
            raise PowerCut(f"power is off: {what} never happened")

    # -- the patched functions ---------------------------------------------------------
    # Each takes the layer's lock, does the real call, then updates the model: a call
    # that fails changes nothing in it.

    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        rel = self._relative(path, dir_fd)
        if rel is None:
            return _real["open"](path, flags, mode, dir_fd=dir_fd)
        with self._lock:
            self._check_power(f"open {rel}")
            full = os.path.join(self.root, rel)
            try:
                size_before: int | None = os.stat(full).st_size
            except OSError:
                size_before = None
            fd = _real["open"](path, flags, mode, dir_fd=dir_fd)
            st = os.fstat(fd)
            if size_before is None:
                parent, name = self._parent(rel)
                node = _Node(is_dir=False)
                self._change_entries(node, None, (parent, name))
                cut = self._record("create", rel)
            else:
                node = self._lookup(rel) or self._adopt(rel, is_dir=stat.S_ISDIR(st.st_mode))
                cut = bool(flags & os.O_TRUNC and size_before) and self._record("truncate", rel)
            if cut:
                _real["close"](fd)
                raise PowerCut(f"power cut after opening {rel}")
            self._fds[fd] = (node, st.st_dev, st.st_ino)
            return fd

    def _close(self, fd: int) -> None:
        # never refused, even with the power off: closing changes nothing on disk
        with self._lock:
            self._fds.pop(fd, None)
        _real["close"](fd)

    def _write_like(self, name: str, fd: int, *args: Any) -> int:
        with self._lock:
            node = self._node_of_fd(fd)
            if node is None:
                return _real[name](fd, *args)
            rel = self._path_of(node) or f"<fd {fd}>"
            self._check_power(f"{name} to {rel}")
            written = _real[name](fd, *args)
            if self._record("write", rel, size=written):
                raise PowerCut(f"power cut after {name} to {rel}")
            return written

    def _write(self, fd: int, data: Any) -> int:
        return self._write_like("write", fd, data)

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        return self._write_like("pwrite", fd, data, offset)

    def _writev(self, fd: int, buffers: Any) -> int:
        return self._write_like("writev", fd, buffers)

    def _pwritev(self, fd: int, buffers: Any, offset: int, *flags: int) -> int:
        return self._write_like("pwritev", fd, buffers, offset, *flags)

    def _ftruncate(self, fd: int, length: int) -> None:
        with self._lock:
            node = self._node_of_fd(fd)
            if node is None:
                return _real["ftruncate"](fd, length)
            rel = self._path_of(node) or f"<fd {fd}>"
            self._check_power(f"ftruncate {rel}")
            _real["ftruncate"](fd, length)
            if self._record("truncate", rel):
                raise PowerCut(f"power cut after ftruncate {rel}")

    def _truncate(self, path: Any, length: int) -> None:
        if isinstance(path, int):
            return self._ftruncate(path, length)
        rel = self._relative(path)
        if rel is None:
            return _real["truncate"](path, length)
        with self._lock:
            self._check_power(f"truncate {rel}")
            _real["truncate"](path, length)
            if self._record("truncate", rel):
                raise PowerCut(f"power cut after truncate {rel}")

    def _sync(self, name: str, fd: int) -> None:
        with self._lock:
            node = self._node_of_fd(fd)
            if node is None:
                return _real[name](fd)
            rel = self._path_of(node)
            rel = rel if rel is not None else f"<fd {fd}>"
            self._check_power(f"{name} {rel}")
            if node.is_dir:
                for op in self._unsynced_dirs.pop(node, ()):
                    op.waiting.discard(node)
                cut = self._record("dirsync", rel)
            else:
                if self.model:
                    # through /proc the file is read even if it is open write-only or unlinked
                    node.durable = _read(
                        f"{_PROC_FD}/{fd}" if _HAVE_PROC_FD else os.path.join(self.root, rel)
                    )
                cut = self._record("sync", rel)
            if cut:
                raise PowerCut(f"power cut after {name} {rel}")

    def _fsync(self, fd: Any) -> None:
        fd = fd if isinstance(fd, int) else fd.fileno()
        return self._sync("fsync", fd)

    def _fdatasync(self, fd: Any) -> None:
        fd = fd if isinstance(fd, int) else fd.fileno()
        return self._sync("fdatasync", fd)

    def _rename_like(
        self, name: str, src: Any, dst: Any, src_dir_fd: int | None, dst_dir_fd: int | None
    ) -> None:
        source = self._relative(src, src_dir_fd)
        target = self._relative(dst, dst_dir_fd)
        if source is None and target is None:
            return _real[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        with self._lock:
            self._check_power(f"{name} {source or src} -> {target or dst}")
            _real[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            if source is None:
                assert target is not None
                full = os.path.join(self.root, target)
                self._adopt(target, is_dir=os.path.isdir(full))  # moved in from outside
                return
            node = self._lookup(source)
            if node is None:
                node = self._adopt(source, is_dir=os.path.isdir(os.path.join(self.root, target)))
            self._change_entries(
                node,
                self._parent(source),
                self._parent(target) if target is not None else None,
            )
            if self._record("rename", source, target):
                raise PowerCut(f"power cut after {name} {source} -> {target}")

    def _rename(
        self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        return self._rename_like("rename", src, dst, src_dir_fd, dst_dir_fd)

    def _replace(
        self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        return self._rename_like("replace", src, dst, src_dir_fd, dst_dir_fd)

    def _link(
        self,
        src: Any,
        dst: Any,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
        follow_symlinks: bool = True,
    ) -> None:
        source = self._relative(src, src_dir_fd)
        target = self._relative(dst, dst_dir_fd)
        kwargs = {"src_dir_fd": src_dir_fd, "dst_dir_fd": dst_dir_fd}
        if target is None:
            return _real["link"](src, dst, follow_symlinks=follow_symlinks, **kwargs)
        with self._lock:
            self._check_power(f"link {source or src} -> {target}")
            _real["link"](src, dst, follow_symlinks=follow_symlinks, **kwargs)
            node = self._lookup(source) if source is not None else None
            if node is None:
                node = self._adopt(target, is_dir=False)  # a file from outside the root
            else:
                self._change_entries(node, None, self._parent(target))
            if self._record("link", source or os.fsdecode(os.fspath(src)), target):
                raise PowerCut(f"power cut after link {source} -> {target}")

    def _remove_like(self, name: str, kind: str, path: Any, dir_fd: int | None) -> None:
        rel = self._relative(path, dir_fd)
        if not rel:  # outside, or the root itself (which the layer does not model removing)
            return _real[name](path, dir_fd=dir_fd)
        with self._lock:
            self._check_power(f"{name} {rel}")
            _real[name](path, dir_fd=dir_fd)
            parent, entry = self._parent(rel)
            node = parent.entries.get(entry)
            if node is not None:
                self._change_entries(node, (parent, entry), None)
            if self._record(kind, rel):
                raise PowerCut(f"power cut after {name} {rel}")

    def _unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        return self._remove_like("unlink", "unlink", path, dir_fd)

    def _remove(self, path: Any, *, dir_fd: int | None = None) -> None:
        return self._remove_like("remove", "unlink", path, dir_fd)

    def _rmdir(self, path: Any, *, dir_fd: int | None = None) -> None:
        return self._remove_like("rmdir", "rmdir", path, dir_fd)

    def _mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        rel = self._relative(path, dir_fd)
        if not rel:
            return _real["mkdir"](path, mode, dir_fd=dir_fd)
        with self._lock:
            self._check_power(f"mkdir {rel}")
            _real["mkdir"](path, mode, dir_fd=dir_fd)
            node = _Node(is_dir=True)
            self._change_entries(node, None, self._parent(rel))
            if self._record("mkdir", rel):
                raise PowerCut(f"power cut after mkdir {rel}")


def _read(path: str) -> bytes:
    # the builtin open() is not patched: this read is invisible to the layer
    with open(path, "rb") as f:
        return f.read()


def _write_whole(path: str, data: bytes, *, create: bool) -> None:
    flags = os.O_WRONLY | (os.O_CREAT | os.O_EXCL if create else os.O_TRUNC)
    fd = _real["open"](path, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[_real["write"](fd, view) :]
    finally:
        _real["close"](fd)


def _remove_tree(path: str) -> None:
    """``shutil.rmtree`` with the real functions (the patched ones would log it)."""
    if os.path.isdir(path) and not os.path.islink(path):
        with os.scandir(path) as entries:
            for entry in entries:
                _remove_tree(entry.path)
        _real["rmdir"](path)
    else:
        _real["unlink"](path)


if sys.platform == "win32":  # pragma: no cover - the saver's file store needs POSIX
    raise ImportError("faultfs models a POSIX file system")
