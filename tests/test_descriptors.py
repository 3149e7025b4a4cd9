"""Descriptors kept open between calls: what a warm thread's turn costs in file-system calls,
and the locks and appends that share one open file stay correct across threads and forks.

The counts are of calls that look a file up or lock it (``open``, ``close``, ``stat``,
``fstat``, ``flock``), made by every thread of the process during real graph turns.
"""

from __future__ import annotations

import fcntl
import gc
import os
import sys
import threading
import weakref
from collections import Counter
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from echo_graph import build_graph

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.storage import locks
from langgraph_checkpoint_verified.storage.files import RecordFileStorage
from langgraph_checkpoint_verified.storage.log import file_storage
from langgraph_checkpoint_verified.storage.log.commits import CommitGroup
from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage
from langgraph_checkpoint_verified.storage.log.thread_log import ThreadLog

TURNS = 10


class FileCalls:
    """Counts ``os.open``, ``os.close``, ``os.stat``, ``os.fstat`` and ``fcntl.flock`` of
    the files under ``root`` (a path, or a descriptor of one): not those another test's
    leftover thread (a sweeper, a server) makes meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.calls: Counter[str] = Counter()
        self.counting = False
        self.root = str(root)
        for module, name in ((os, "open"), (os, "close"), (os, "stat"), (os, "fstat")):
            self._wrap(monkeypatch, module, name)
        self._wrap(monkeypatch, fcntl, "flock")

    def _under_root(self, target: object) -> bool:
        if isinstance(target, int):
            try:
                target = os.readlink(f"/proc/self/fd/{target}")
            except OSError:
                return False
        return isinstance(target, (str, os.PathLike)) and os.fspath(target).startswith(self.root)

    def _wrap(self, monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
        real = getattr(module, name)

        def counted(*args: object, **kwargs: object) -> object:
            if self.counting and args and self._under_root(args[0]):
                self.calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


def path_calls(
    monkeypatch: pytest.MonkeyPatch, *functions: str
) -> tuple[list[tuple[str, str]], dict[int, str]]:
    """Record the calls of the ``os`` functions named, which take a path, as
    ``(name, path)`` in order, and the path each descriptor ``os.open`` gave names."""
    calls: list[tuple[str, str]] = []
    names: dict[int, str] = {}

    def wrapped(name, real):
        def call(path, *args, **kwargs):
            result = real(path, *args, **kwargs)
            calls.append((name, os.fspath(path)))
            if name == "open":
                names[result] = os.fspath(path)
            return result

        return call

    for name in functions:
        monkeypatch.setattr(os, name, wrapped(name, getattr(os, name)))
    return calls, names


def warm_thread(root: Path):
    graph = build_graph(VerifiedSaver(root))
    config = {"configurable": {"thread_id": "t"}}
    for turn in range(3):
        graph.invoke({"messages": [("user", f"warm {turn}")]}, config)
    return graph, config


def test_a_warm_threads_turns_lock_the_log_once_per_durable_call_and_look_nothing_up(
    tmp_path, monkeypatch
):
    """Each durable call (``put``, ``put_writes``) takes the thread's lock, its log's
    ``flock``, and lets it go: two calls, or none for a call that finds the lock passed
    on to it by the call before (``storage.log.commits``). Nothing else looks a file up:
    the log stays open, and zeros where this process knows it to end say nobody appended
    or moved it (the retirement protocol). SQLite's turn makes 2 such calls; strace
    counted 77 for this saver before descriptors were kept open."""
    graph, config = warm_thread(tmp_path / "store")
    counter = FileCalls(monkeypatch, tmp_path / "store")
    passes = []
    real_pass_on = CommitGroup.pass_on
    monkeypatch.setattr(
        CommitGroup, "pass_on", lambda group: passes.append(1) or real_pass_on(group)
    )
    saver = graph.checkpointer
    durable = []
    for name in ("put", "put_writes"):
        real = getattr(saver, name)
        monkeypatch.setattr(
            saver,
            name,
            lambda *a, _real=real, _name=name, **k: durable.append(_name) or _real(*a, **k),
        )
    # stores of earlier tests, collected now, would close their descriptors in the turns
    gc.collect()
    gc.disable()
    try:
        counter.counting = True
        for turn in range(TURNS):
            graph.invoke({"messages": [("user", f"turn {turn}")]}, config)
        counter.counting = False
    finally:
        gc.enable()
    calls = counter.calls
    assert calls["open"] == calls["close"] == 0, calls  # the log stays open
    assert calls["stat"] == calls["fstat"] == 0, calls
    assert len(durable) >= 3 * TURNS
    assert calls["flock"] == 2 * (len(durable) - len(passes)), (calls, len(durable), passes)
    assert graph.get_state(config).values["turns"] == 3 + TURNS


def test_threads_share_a_lock_file_and_an_exclusive_holder_waits_for_all_of_them(tmp_path):
    storage = RecordFileStorage(tmp_path / "store", fsync=False)
    both_in, release, exclusive_in = threading.Barrier(3), threading.Event(), threading.Event()

    def shared_holder() -> None:
        with storage.lock("threads/t", exclusive=False):
            both_in.wait()
            release.wait()

    def exclusive_holder() -> None:
        with storage.lock("threads/t", exclusive=True):
            exclusive_in.set()

    holders = [threading.Thread(target=shared_holder) for _ in range(2)]
    writer = threading.Thread(target=exclusive_holder)
    for thread in holders:
        thread.start()
    both_in.wait()  # both shared holders are in
    writer.start()  # ...and the exclusive one cannot be until they are out
    probe = os.open(tmp_path / "store/threads/t/.lock", os.O_RDONLY)
    with pytest.raises(BlockingIOError):  # the file's flock is held for them all
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert not exclusive_in.is_set()
    release.set()
    assert exclusive_in.wait(timeout=60)
    for thread in [*holders, writer]:
        thread.join()
    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # everyone let go
    os.close(probe)


def test_the_file_lock_is_let_go_of_by_the_last_shared_holder_not_the_first(tmp_path):
    """Two threads of one process hold a thread's lock shared: when the first lets go,
    another process (here another open file, which ``flock`` tells apart the same way)
    still cannot take it exclusive: the second holder is still writing."""
    storage = RecordFileStorage(tmp_path / "store", fsync=False)
    both_in = threading.Barrier(3)
    releases = [threading.Event(), threading.Event()]

    def shared_holder(release: threading.Event) -> None:
        with storage.lock("threads/t", exclusive=False):
            both_in.wait()
            release.wait()

    holders = [threading.Thread(target=shared_holder, args=(r,)) for r in releases]
    for thread in holders:
        thread.start()
    both_in.wait()
    probe = os.open(tmp_path / "store/threads/t/.lock", os.O_RDONLY)
    try:
        releases[0].set()
        holders[0].join()
        with pytest.raises(BlockingIOError):  # the second holder still holds it
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        releases[1].set()
        holders[1].join()
    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # now everyone let go
    os.close(probe)


def test_a_thread_directory_deleted_meanwhile_is_locked_anew(tmp_path):
    storage = RecordFileStorage(tmp_path / "store", fsync=False)
    with storage.lock("threads/t", exclusive=False):
        pass
    old = tmp_path / "store/threads/t/.lock"
    first = old.stat().st_ino
    os.rename(tmp_path / "store/threads/t", tmp_path / "store/threads/gone")
    with storage.lock("threads/t", exclusive=True):
        current = (tmp_path / "store/threads/t/.lock").stat().st_ino
        probe = os.open(tmp_path / "store/threads/t/.lock", os.O_RDONLY)
        with pytest.raises(BlockingIOError):  # the lock is on the file at the path now
            fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        os.close(probe)
    assert current != first


def open_descriptors() -> list[int]:
    return [int(name) for name in os.listdir("/proc/self/fd")]


def is_lock_or_append(fd: int, root: Path) -> bool:
    """A lock file, or a log opened for appending (not one open for reading only): a log's
    ``flock`` is its thread's lock."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
        flags = int(Path(f"/proc/self/fdinfo/{fd}").read_text().split("flags:")[1].split()[0], 8)
    except (OSError, IndexError, ValueError):
        return False
    return path.startswith(str(root)) and (
        path.endswith("/.lock") or (path.endswith("/log") and flags & os.O_ACCMODE == os.O_RDWR)
    )


def any_open(descriptors: list[int]) -> bool:
    """Whether any of ``descriptors`` is open (in a forked child: kept from its parent)."""
    for fd in descriptors:
        try:
            os.fstat(fd)
        except OSError:
            continue
        return True
    return False


@pytest.mark.skipif(not os.path.isdir("/proc/self/fdinfo"), reason="needs /proc")
def test_a_forked_child_shares_no_open_lock_or_log_with_its_parent(tmp_path):
    """``flock`` belongs to the open file, which fork shares: a child using its parent's
    descriptors would hold its parent's locks. It opens its own."""
    root = tmp_path / "store"
    saver = VerifiedSaver(root)
    graph = build_graph(saver)
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [("user", "hi")]}, config)
    inherited = [fd for fd in open_descriptors() if is_lock_or_append(fd, root)]
    assert inherited, "the parent keeps its log (for appending) and its lock open"
    pid = os.fork()
    if pid == 0:  # the child: none of them may be open, and the store still works
        code = 0
        try:
            code = int(any_open(inherited))
            child = build_graph(saver)
            result = child.invoke({"messages": [("user", "from the child")]}, config)
            code = code or int(result["turns"] != 2)
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert graph.get_state(config).values["turns"] == 2


@pytest.mark.skipif(not os.path.isdir("/proc/self/fdinfo"), reason="needs /proc")
def test_a_forked_child_keeps_none_of_its_parent_s_lock_files(tmp_path):
    """The lock files a store keeps open (``DirectoryLocks``) are closed in a forked child,
    even one forked while its parent holds the lock: the child locks on files of its own,
    so it waits for its parent, then takes the lock and writes."""
    storage = RecordFileStorage(tmp_path / "store", fsync=False)
    with storage.lock("threads/t", exclusive=False):
        pass
    inherited = [fd for fd in open_descriptors() if is_lock_or_append(fd, tmp_path / "store")]
    assert inherited, "the lock file stays open"
    with storage.lock("threads/t", exclusive=True):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                code = int(any_open(inherited))
                if not code:
                    with storage.lock("threads/t", exclusive=True):
                        storage.write("threads/t/from-child", b"child")
            except BaseException:
                code = 2
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert storage.read("threads/t/from-child") == b"child"


if sys.platform == "win32":  # pragma: no cover
    pytestmark = pytest.mark.skip("flock")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_store_no_longer_used_closes_the_files_it_kept_open(tmp_path):
    """Savers made and dropped (a test suite, a server per request) leave no descriptor
    behind: each store closes its logs, their parity and its lock files when it goes."""
    import gc

    gc.collect()
    before = len(open_descriptors())
    for n in range(20):
        saver = VerifiedSaver(tmp_path / f"store-{n}")
        graph = build_graph(saver)
        for thread in ("a", "b"):
            graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": thread}})
        assert any(is_lock_or_append(fd, tmp_path) for fd in open_descriptors())
        del saver, graph
    gc.collect()
    assert len(open_descriptors()) <= before + 2


def left_behind(make: Any, use: Any, times: int = 20) -> tuple[list[Any], int]:
    """Make a saver or memory store ``times`` over (``make()``), ``use`` it, drop it; once
    collected, the stores still alive, and how many more descriptors are open than
    before."""
    gc.collect()
    before = len(open_descriptors())
    stores = []
    for _ in range(times):
        face = make()
        stores.append(weakref.ref(face.storage))
        use(face)
        del face
    gc.collect()
    return [ref() for ref in stores if ref() is not None], max(0, len(open_descriptors()) - before)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_savers_that_opened_a_thread_from_its_hint_are_collected_with_their_files(tmp_path):
    """A saver made per request on a store whose threads have hints: each one that reads
    (and writes) a thread, then is dropped, goes whole, its store and the log it opened
    with it. Nothing a log keeps (its hinted key directory) holds on to the store."""
    from langgraph.checkpoint.conformance.test_utils import (
        generate_checkpoint,
        generate_metadata,
    )

    root = tmp_path / "store"
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    writer = VerifiedSaver(root, fsync=False)
    for step in range(200):
        config = writer.put(config, generate_checkpoint(), generate_metadata(step=step), {})
    del writer
    assert VerifiedSaver(root).get_tuple(config) is not None  # a long scan: leaves a hint
    assert (root / "threads/t/log.hint").exists()

    def read_and_write(saver: VerifiedSaver) -> None:
        nonlocal config
        assert saver.get_tuple(config) is not None  # the log opened from its hint
        assert len(list(saver.list({"configurable": {"thread_id": "t"}}, limit=3))) == 3
        config = saver.put(config, generate_checkpoint(), generate_metadata(step=1), {})

    assert left_behind(lambda: VerifiedSaver(root), read_and_write) == ([], 0)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_dropped_saver_closes_its_files_at_once_without_the_garbage_collector(tmp_path):
    """A saver and its store hold no reference cycle: dropped, they go at once (as a
    ``sqlite3`` connection does), their descriptors with them, not at some later
    collection. Here after graph turns, a damaged record reported and quarantined, and
    a thread opened from its hint."""
    from logtools import lose_parity

    from langgraph_checkpoint_verified.storage.log.entries import scan

    root = tmp_path / "store"
    config = {"configurable": {"thread_id": "t"}}
    warm = VerifiedSaver(root)
    graph = build_graph(warm)
    for turn in range(40):
        graph.invoke({"messages": [("user", f"turn {turn}")]}, config)
    del graph, warm
    assert VerifiedSaver(root).get_tuple(config) is not None  # reads it whole: leaves a hint
    gc.collect()
    log = root / "threads/t/log"
    lose_parity(log)  # damage beyond what parity rebuilds: quarantined
    newest = [e for e in scan(log.read_bytes())[0] if e.key.endswith(".ckpt")][-1]
    with open(log, "r+b") as f:
        f.seek(newest.data_offset + newest.data_size // 2)
        f.write(b"\xff" * 8)
    assert (root / "threads/t/log.hint").exists()
    before = len(open_descriptors())
    gc.disable()
    try:
        saver = VerifiedSaver(root)
        storage = weakref.ref(saver.engine.storage)
        result = build_graph(saver).invoke({"messages": [("user", "again")]}, config)
        assert result["turns"] >= 40
        assert saver.stats.quarantined_records == 1
        del saver, result
        assert storage() is None
        assert len(open_descriptors()) <= before
    finally:
        gc.enable()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_memory_stores_that_opened_a_label_from_its_hint_are_collected_with_their_files(
    tmp_path,
):
    """The same for the long-term memory store, whose labels are logs with hints too."""
    from langgraph_checkpoint_verified import VerifiedStore

    root = tmp_path / "memories"
    writer = VerifiedStore(root)
    for n in range(300):
        writer.put(("user", "1"), f"note-{n}", {"text": "x" * 300})
    writer.close()
    assert len(VerifiedStore(root).search(("user", "1"), limit=500)) == 300  # leaves a hint
    assert list(root.glob("**/log.hint"))

    def read_and_write(store: VerifiedStore) -> None:
        assert store.get(("user", "1"), "note-7") is not None
        store.put(("user", "1"), "more", {"text": "y"})

    assert left_behind(lambda: VerifiedStore(root), read_and_write) == ([], 0)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_close_lets_go_of_the_files_kept_open_at_once(tmp_path):
    """``close`` of a saver or a memory store closes the logs it kept open
    (descriptors and ``flock``) then, not when the object is collected. A saver sharing
    the storage goes on using it: its logs are opened again."""
    from langgraph_checkpoint_verified import VerifiedStore
    from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage

    def open_under(root: Path) -> list[str]:
        found = []
        for fd in open_descriptors():
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if path.startswith(str(root)):
                found.append(path)
        return found

    storage = FileStorage(tmp_path / "shared")
    saver, other = VerifiedSaver(storage=storage), VerifiedSaver(storage=storage)
    graph = build_graph(saver)
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [("user", "hi")]}, config)
    assert any(path.endswith("/log") for path in open_under(tmp_path / "shared"))
    saver.close()
    assert open_under(tmp_path / "shared") == []
    result = build_graph(other).invoke({"messages": [("user", "again")]}, config)
    assert result["turns"] == 2
    other.close()
    assert open_under(tmp_path / "shared") == []

    store = VerifiedStore(tmp_path / "memories")
    store.put(("user", "1"), "profile", {"name": "Ada"})
    assert open_under(tmp_path / "memories")
    store.close()
    assert open_under(tmp_path / "memories") == []


def test_a_durable_call_on_a_warm_thread_reads_two_headers(tmp_path, monkeypatch):
    """What a ``put`` or ``put_writes`` reads, once the thread is warm: under the log's
    ``flock``, the entry header where this process knows the log to end (zeros: nobody
    appended) and the header of that stripe's parity record (it covers nothing there: no
    synced entry was lost in the room; its parity is not read). Nothing else, not even
    the look again when the put reads its parent's stamp: nobody can append while the
    lock is held. A call that the call before passed the held lock on to
    (``storage.log.commits``) knows that much without the first read."""
    from langgraph_checkpoint_verified.storage.log.entries import HEADER_SIZE as ENTRY_HEADER
    from langgraph_checkpoint_verified.storage.log.parity import HEADER_SIZE as PARITY_HEADER

    graph, config = warm_thread(tmp_path / "store")
    saver = graph.checkpointer
    measuring: dict[int, list[int]] = {}
    real_pread = os.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        me = threading.get_ident()
        if me in measuring:
            measuring[me].append(size)
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", pread)
    passes = []
    real_pass_on = CommitGroup.pass_on
    monkeypatch.setattr(
        CommitGroup, "pass_on", lambda group: passes.append(1) or real_pass_on(group)
    )
    per_call: list[tuple[str, list[int]]] = []
    for name in ("put", "put_writes"):
        real = getattr(saver, name)

        def measured(*a, _real=real, _name=name, **k):
            me = threading.get_ident()
            measuring[me] = []
            try:
                return _real(*a, **k)
            finally:
                per_call.append((_name, sorted(measuring.pop(me))))

        monkeypatch.setattr(saver, name, measured)
    # stores of earlier tests, collected now, would run their finalizers inside a call
    gc.collect()
    gc.disable()
    try:
        for turn in range(TURNS):
            graph.invoke({"messages": [("user", f"turn {turn}")]}, config)
    finally:
        gc.enable()
    assert {name for name, _ in per_call} == {"put", "put_writes"}
    assert len(per_call) >= 3 * TURNS
    joined = [name for name, sizes in per_call if sizes == [PARITY_HEADER]]
    for name, sizes in per_call:
        assert sizes in ([PARITY_HEADER], sorted([ENTRY_HEADER, PARITY_HEADER])), (name, sizes)
    assert len(joined) == len(passes)
    assert graph.get_state(config).values["turns"] == 3 + TURNS


def test_a_new_threads_first_put_makes_its_directory_and_log_and_looks_for_nothing_else(
    tmp_path, monkeypatch
):
    """Every new conversation is a new thread, and on a network file system every call
    is a round trip. Its first ``put`` makes the directory (one ``mkdir``, no look at
    each level first), its parity and its log, and reads nothing back: no listing of
    the directory it just made for record files of the layout before logs, no hint of
    a log it just created empty, no parity record of a stripe nothing was written to."""
    from langgraph.checkpoint.base import empty_checkpoint

    root = tmp_path / "store"
    saver = VerifiedSaver(root)
    graph = build_graph(saver)
    graph.invoke({"messages": [("user", "warm")]}, {"configurable": {"thread_id": "old"}})
    real_pread = os.pread
    calls, names = path_calls(monkeypatch, "open", "stat", "mkdir", "listdir", "scandir")
    monkeypatch.setattr(
        os,
        "pread",
        lambda fd, *a: calls.append(("pread", names.get(fd, "?"))) or real_pread(fd, *a),
    )
    thread_dir = str(root / "threads" / "new")
    checkpoint = empty_checkpoint()
    saver.put({"configurable": {"thread_id": "new", "checkpoint_ns": ""}}, checkpoint, {}, {})
    under = [(name, path) for name, path in calls if path.startswith(thread_dir)]
    assert ("mkdir", thread_dir) in under
    assert not [call for call in under if call[0] in ("listdir", "scandir")], under
    assert not [call for call in under if call[0] == "stat" and call[1] == thread_dir], under
    assert not [call for call in under if call[1].endswith(".hint")], under
    assert not [call for call in under if call[0] == "pread"], under
    # the parity sidecar, made before the log, is opened once: its first record is
    # written through the descriptor that made it
    parity = f"{thread_dir}/log.parity"
    assert [call for call in under if call == ("open", parity)] == [("open", parity)], under
    assert (
        saver.get_tuple({"configurable": {"thread_id": "new"}}).checkpoint["id"] == checkpoint["id"]
    )


def test_reading_a_thread_looks_up_no_path_its_directory_listing_answers(tmp_path, monkeypatch):
    """A new conversation begins with ``get_tuple`` of a thread nobody wrote: one listing
    of its directory (there is none) answers it, with no lookup of a log or of anything
    else. A thread a process opens for the first time is listed once too (for records of
    the layout before logs), and the listing says what is there: its log is opened,
    nothing is looked up by ``stat``."""
    root = tmp_path / "store"
    saver = VerifiedSaver(root)
    graph = build_graph(saver)
    graph.invoke({"messages": [("user", "warm")]}, {"configurable": {"thread_id": "old"}})
    calls: list[tuple[str, str]] = []
    real = {name: getattr(os, name) for name in ("open", "stat", "lstat", "listdir", "scandir")}

    def wrapped(name):
        def call(path, *args, **kwargs):
            calls.append((name, os.fspath(path)))
            return real[name](path, *args, **kwargs)

        return call

    for name in real:
        monkeypatch.setattr(os, name, wrapped(name))
    absent = str(root / "threads" / "absent")
    assert saver.get_tuple({"configurable": {"thread_id": "absent"}}) is None
    assert [call for call in calls if call[1].startswith(absent)] == [("listdir", absent)]

    calls.clear()
    old = str(root / "threads" / "old")
    assert VerifiedSaver(root).get_tuple({"configurable": {"thread_id": "old"}}) is not None
    under = [call for call in calls if call[1].startswith(old)]
    assert [call for call in under if call[0] in ("listdir", "scandir")] == [("listdir", old)]
    assert not [call for call in under if call[0] in ("stat", "lstat")], under
    assert ("open", f"{old}/log") in under, under


def test_opening_a_store_looks_at_its_directory_once_and_reads_its_marker_in_one_read(
    tmp_path, monkeypatch
):
    """Every new saver opens its store, and on a network file system every call is a
    round trip. A store that exists is looked at once: a ``stat`` says it is a directory
    (no ``mkdir`` to find it there). Its marker is opened, sized and read in one
    ``read``, then closed: none of the ``ioctl``, ``lseek`` or second ``read`` of
    Python's buffered ``open``."""
    import builtins

    root = tmp_path / "store"
    VerifiedSaver(root)  # makes the store and its marker
    marker = str(root / "store.marker")
    real_builtin_open = builtins.open
    calls, names = path_calls(monkeypatch, "open", "stat", "lstat", "mkdir", "listdir", "scandir")

    def by_descriptor(name, function):
        def call(fd, *args, **kwargs):
            if fd in names:
                calls.append((name, names[fd]))
            return function(fd, *args, **kwargs)

        return call

    for name in ("fstat", "read", "close", "lseek"):
        monkeypatch.setattr(os, name, by_descriptor(name, getattr(os, name)))
    monkeypatch.setattr(
        builtins,
        "open",
        lambda file, *a, **k: (
            calls.append(("builtin open", os.fspath(file))) or real_builtin_open(file, *a, **k)
        ),
    )
    VerifiedSaver(root)
    under = [call for call in calls if call[1].startswith(str(root))]
    assert under == [
        ("stat", str(root)),
        ("open", marker),
        ("fstat", marker),
        ("read", marker),
        ("close", marker),
    ]


def open_logs(root: Path) -> set[str]:
    """The threads whose log this process has open, by name."""
    found = set()
    for fd in open_descriptors():
        with suppress(OSError):
            path = os.readlink(f"/proc/self/fd/{fd}")
            if path.startswith(str(root)) and path.endswith("/log"):
                found.add(Path(path).parent.name)
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_thread_opens_past_the_bound_of_open_logs_while_every_other_is_locked(
    tmp_path, monkeypatch
):
    """Logs in use are not closed to make room, so a new one opens beyond the bound; the
    bound holds again once they are let go, the least recently used closed first."""
    monkeypatch.setattr(file_storage, "_OPEN_LOGS", 2)
    storage = FileStorage(tmp_path, fsync=False)
    for thread in ("a", "b"):
        storage.write(f"threads/{thread}/ns/x", b"1")
    with storage.lock("threads/a", exclusive=True), storage.lock("threads/b", exclusive=True):
        storage.write("threads/c/ns/x", b"2")
        assert storage.read("threads/c/ns/x") == b"2"
        assert open_logs(tmp_path) == {"a", "b", "c"}
    storage.write("threads/d/ns/x", b"3")
    assert open_logs(tmp_path) == {"c", "d"}
    assert [storage.read(f"threads/{t}/ns/x") for t in "abcd"] == [b"1", b"1", b"2", b"3"]


def test_a_directory_locks_past_the_bound_of_lock_files_while_every_other_is_held(
    tmp_path, monkeypatch
):
    """The same for lock files: the one being opened is never the one closed to make
    room, so taking it does not go round opening and closing it."""
    monkeypatch.setattr(locks, "MAX_OPEN_LOCK_FILES", 2)
    storage = RecordFileStorage(tmp_path / "store", fsync=False)
    locked = threading.Event()

    def lock_a_third() -> None:
        with storage.lock("threads/c", exclusive=True):
            locked.set()

    with storage.lock("threads/a", exclusive=True), storage.lock("threads/b", exclusive=False):
        third = threading.Thread(target=lock_a_third, daemon=True)
        third.start()
        assert locked.wait(timeout=60)
        third.join()
    with storage.lock("threads/d", exclusive=True):
        probe = os.open(tmp_path / "store/threads/d/.lock", os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        os.close(probe)
    lock_files = {
        os.readlink(f"/proc/self/fd/{fd}")
        for fd in open_descriptors()
        if is_lock_or_append(fd, tmp_path)
    }
    assert {Path(path).parent.name for path in lock_files} == {"c", "d"}


class WatchedLock:
    """An ``RLock`` that sets ``contended`` when a thread has to wait for it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.contended = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        self.contended.set()
        return self._lock.acquire(timeout=timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def held_past_the_bound(tmp_path: Path, monkeypatch: Any) -> tuple[FileStorage, ThreadLog]:
    """A store keeping one log open, and thread ``a``'s log as a call holds it that took
    it just before a write to thread ``b`` closed it to keep the bound."""
    monkeypatch.setattr(file_storage, "_OPEN_LOGS", 1)
    storage = FileStorage(tmp_path, fsync=False)
    storage.write("threads/a/ns/x", b"1")
    in_flight = storage._log("threads/a")  # a call about to read or lock it
    storage.write("threads/b/ns/x", b"2")  # closes it to keep the bound
    assert open_logs(tmp_path) == {"b"}
    return storage, in_flight


def test_a_call_holding_a_log_closed_to_keep_the_bound_shares_it_with_the_next_call(
    tmp_path, monkeypatch
):
    """A call that took a thread's log just before another call closed it to keep the
    bound goes on with it, and the next call on that thread gets the same log: two would
    take the thread's ``flock`` through two descriptors, each behind its own locks, and
    could wait for each other for ever (one in ``flock``, holding its log's lock; the
    other, holding the ``flock``, waiting for that lock)."""
    storage, in_flight = held_past_the_bound(tmp_path, monkeypatch)
    in_flight.writing = WatchedLock()  # says when another thread waits for it
    held, release, written = (threading.Event() for _ in range(3))
    seen: list[bytes | None] = []

    def holder() -> None:
        with storage.appender.holding(in_flight, exclusive=True):
            held.set()
            release.wait()
            seen.append(storage.read("threads/a/ns/x"))  # looks the log up again

    def writer() -> None:
        storage.write("threads/a/ns/y", b"3")
        written.set()

    threads = [threading.Thread(target=holder, daemon=True)]
    threads[0].start()
    assert held.wait(timeout=60)
    threads.append(threading.Thread(target=writer, daemon=True))
    threads[1].start()
    assert in_flight.writing.contended.wait(timeout=60), "the writer waits for the same log"
    release.set()
    assert written.wait(timeout=60)
    for thread in threads:
        thread.join()
    assert seen == [b"1"]
    assert storage._log("threads/a") is in_flight
    assert FileStorage(tmp_path).read("threads/a/ns/y") == b"3"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_log_closed_to_keep_the_bound_and_opened_again_by_its_holder_closes_when_let_go(
    tmp_path, monkeypatch
):
    """A call that took a thread's log just before the bound closed it opens it again to
    read. That log is in no table of open logs then: its descriptors close when the
    last call holding it lets go of it, not when the process ends."""
    storage, in_flight = held_past_the_bound(tmp_path, monkeypatch)
    with in_flight.lock:
        storage.reader.refresh(in_flight)  # the call goes on: the log is read again
        assert in_flight.index.get("threads/a/ns/x") is not None
    assert open_logs(tmp_path) == {"a", "b"}
    del in_flight
    gc.collect()
    assert open_logs(tmp_path) == {"b"}
    assert storage.read("threads/a/ns/x") == b"1"
    assert open_logs(tmp_path) == {"a"}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fdinfo"), reason="needs /proc")
def test_a_forked_child_shares_no_lock_of_a_log_closed_to_keep_the_bound(tmp_path, monkeypatch):
    """A log the bound closed while a call held it, and that call then locked (so it is
    in no table of open logs): a forked child does not inherit its ``flock`` either."""
    storage, in_flight = held_past_the_bound(tmp_path, monkeypatch)
    with storage.appender.holding(in_flight, exclusive=True):
        locked = [
            fd
            for fd in open_descriptors()
            if is_lock_or_append(fd, tmp_path)
            and os.readlink(f"/proc/self/fd/{fd}").endswith("/a/log")
        ]
        assert locked, "the call holds the thread's lock through a log it opened again"
        pid = os.fork()
        if pid == 0:  # the child: that descriptor is not open here
            code = 0
            for fd in locked:
                try:
                    os.fstat(fd)
                    code = 1
                except OSError:
                    pass
            os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_lock_waited_for_by_one_thread_does_not_stop_another_from_opening_one(
    tmp_path, monkeypatch
):
    """The lock file a thread waits on (another process holds it) is in use: closing lock
    files to keep the bound passes over it instead of waiting for that thread, so a
    lock on another directory is taken meanwhile."""
    monkeypatch.setattr(locks, "MAX_OPEN_LOCK_FILES", 1)
    storage = RecordFileStorage(tmp_path / "store", fsync=False)
    with storage.lock("threads/x", exclusive=True):
        pass  # its lock file exists, and is the one open
    other_process = os.open(tmp_path / "store/threads/x/.lock", os.O_RDONLY)
    fcntl.flock(other_process, fcntl.LOCK_EX)  # another open file: as another process's
    waiting, locked_x, locked_y = (threading.Event() for _ in range(3))
    real_flock = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if operation == fcntl.LOCK_EX and fd != other_process:
            waiting.set()
        real_flock(fd, operation)

    monkeypatch.setattr(locks.fcntl, "flock", flock)

    def lock(thread: str, done: threading.Event) -> None:
        with storage.lock(f"threads/{thread}", exclusive=True):
            done.set()

    first = threading.Thread(target=lock, args=("x", locked_x), daemon=True)
    first.start()
    assert waiting.wait(timeout=60)
    second = threading.Thread(target=lock, args=("y", locked_y), daemon=True)
    second.start()
    assert locked_y.wait(timeout=60), "a lock on another directory waits for the first"
    assert not locked_x.is_set()
    real_flock(other_process, fcntl.LOCK_UN)
    os.close(other_process)
    assert locked_x.wait(timeout=60)
    first.join()
    second.join()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_log_being_read_is_passed_over_not_waited_for_to_keep_the_bound(tmp_path, monkeypatch):
    """A thread reading a log (a long log opened for the first time) holds what this
    process knows of it; closing logs to keep the bound passes over that log instead of
    waiting for the read, so other threads' logs open meanwhile."""
    monkeypatch.setattr(file_storage, "_OPEN_LOGS", 1)
    storage = FileStorage(tmp_path, fsync=False)
    storage.write("threads/a/ns/x", b"1")
    reading, read_done, written = (threading.Event() for _ in range(3))

    def reader() -> None:
        log = storage._log("threads/a")
        with log.lock:  # as ``LogReader.refresh`` holds it while it reads
            reading.set()
            read_done.wait()

    def writer() -> None:
        storage.write("threads/b/ns/x", b"2")
        written.set()

    threads = [threading.Thread(target=reader, daemon=True)]
    threads[0].start()
    assert reading.wait(timeout=60)
    threads.append(threading.Thread(target=writer, daemon=True))
    threads[1].start()
    assert written.wait(timeout=60), "opening a log waits for the read of another"
    assert open_logs(tmp_path) == {"a", "b"}
    read_done.set()
    for thread in threads:
        thread.join()
    storage.write("threads/c/ns/x", b"3")
    assert open_logs(tmp_path) == {"c"}
    assert [storage.read(f"threads/{t}/ns/x") for t in "abc"] == [b"1", b"2", b"3"]
