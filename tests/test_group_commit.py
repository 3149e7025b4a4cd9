"""Group commit (``storage.log.commits``): lock blocks of one log that share one sync.

A durable append inside a lock block, made while another thread waits to begin
one on the same log, is not synced: the block passes its hold on as it ends, the
next block appends, and one ``fdatasync`` makes both durable; the first block's
caller returns only after it. Counted, not timed:

* two blocks, the second queued behind the first: one ``fdatasync`` for both, the
  first returns after it, both records read back, and the parity covers both;
* the shared sync fails: both callers raise ``StoreWriteError``, and the next
  append works;
* a block that excludes the others (maintenance) settles an open hold before it
  runs; a hold passed to a thread that then gives up waiting is settled by the
  block that passed it; a block that finds the log free takes a hold passed on,
  and a write outside blocks settles it first;
* a block with nobody queued behind it syncs each append as it makes it;
* a real graph on LangGraph's background threads syncs no more often than it makes
  durable calls, and every checkpoint it acknowledged reads back.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import StoreWriteError, VerifiedSaver
from langgraph_checkpoint_verified.storage.log.file_storage import LOG_NAME, FileStorage

T = "threads/t"


class Syncs:
    """Counts ``fdatasync`` calls on the thread's log, and can make them fail."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.log = os.path.realpath(root / T / LOG_NAME)
        self.calls = 0
        self.failing = False
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            if os.path.realpath(f"/proc/self/fd/{fd}") == self.log:
                self.calls += 1
                if self.failing:
                    raise OSError(errno.EIO, "I/O error")
            real(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)


def queued_behind(storage: FileStorage, count: int = 1) -> None:
    """Wait until ``count`` threads wait to begin a lock block on the log of ``T``."""
    group = storage._log(T).commits
    group.wait_for(lambda: group.queued >= count)


def beside_a_block(
    storage: FileStorage,
    second: Callable[[], None],
    *,
    data: bytes = b"a",
    syncs: Syncs | None = None,
) -> dict[str, Any]:
    """Run a block that writes ``data`` at ``a`` once another thread waits for the log,
    and ``second`` on a thread of its own, begun once the block is in: what each did
    ("returned" or the ``StoreWriteError`` raised), and the syncs made when the
    block's caller got control back."""
    outcome: dict[str, Any] = {}
    first_in = threading.Event()

    def first() -> None:
        try:
            with storage.lock(T, exclusive=False):
                first_in.set()
                queued_behind(storage)
                storage.write(f"{T}/ns/a", data)
            outcome["first"] = "returned"
        except StoreWriteError as exc:
            outcome["first"] = exc
        finally:
            first_in.set()
            if syncs is not None:
                outcome["syncs when first returned"] = syncs.calls

    def after_first_is_in() -> None:
        first_in.wait()
        try:
            second()
            outcome["second"] = "returned"
        except StoreWriteError as exc:
            outcome["second"] = exc

    threads = [threading.Thread(target=first), threading.Thread(target=after_first_is_in)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcome


def two_blocks(storage: FileStorage, syncs: Syncs) -> dict[str, Any]:
    """A block writing ``a`` that ends with a second block (writing ``b``) queued."""

    def second() -> None:
        with storage.lock(T, exclusive=False):
            storage.write(f"{T}/ns/b", b"b" * 3000)

    return beside_a_block(storage, second, data=b"a" * 3000, syncs=syncs)


def test_a_block_queued_behind_another_shares_its_sync(tmp_path, monkeypatch):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/warm", b"w")  # the log exists: no directory syncs below
    syncs = Syncs(monkeypatch, tmp_path)
    assert two_blocks(storage, syncs) == {
        "first": "returned",
        "second": "returned",
        "syncs when first returned": 1,  # the first block waited for the shared sync
    }
    assert syncs.calls == 1  # one fdatasync for the two blocks' appends
    assert storage.read(f"{T}/ns/a") == b"a" * 3000
    assert storage.read(f"{T}/ns/b") == b"b" * 3000
    # the parity was written after the sync, for both appends: nothing unprotected
    assert storage.scrub(T, repair=False) == []
    assert FileStorage(tmp_path).read(f"{T}/ns/b") == b"b" * 3000  # a new reader too


def test_a_durable_append_is_synced_when_the_block_that_settles_it_writes_without_sync(
    tmp_path, monkeypatch
):
    """The block the hold is passed to appends without a sync of its own (``durable=False``):
    what settles the chain still syncs, for the durable append before it."""
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/warm", b"w")
    syncs = Syncs(monkeypatch, tmp_path)

    def second() -> None:
        with storage.lock(T, exclusive=False):
            storage.write(f"{T}/ns/b", b"b" * 3000, durable=False)

    outcome = beside_a_block(storage, second, data=b"a" * 3000, syncs=syncs)
    assert outcome == {"first": "returned", "second": "returned", "syncs when first returned": 1}
    assert storage.read(f"{T}/ns/a") == b"a" * 3000


def test_when_the_shared_sync_fails_both_callers_raise(tmp_path, monkeypatch):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/warm", b"w")
    syncs = Syncs(monkeypatch, tmp_path)
    syncs.failing = True
    outcome = two_blocks(storage, syncs)
    assert isinstance(outcome["first"], StoreWriteError), outcome
    assert isinstance(outcome["second"], StoreWriteError), outcome
    assert "I/O error" in str(outcome["first"])
    syncs.failing = False
    storage.write(f"{T}/ns/c", b"c")  # the log takes appends again
    assert storage.read(f"{T}/ns/c") == b"c"
    assert storage.read(f"{T}/ns/warm") == b"w"


def test_a_block_alone_syncs_each_append_as_it_makes_it(tmp_path, monkeypatch):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/warm", b"w")
    syncs = Syncs(monkeypatch, tmp_path)
    with storage.lock(T, exclusive=False):
        storage.write(f"{T}/ns/a", b"a")
        assert syncs.calls == 1  # nobody waits for the log: synced at once
        storage.write(f"{T}/ns/b", b"b")
        assert syncs.calls == 2
    assert syncs.calls == 2
    storage.write(f"{T}/ns/c", b"c")  # outside every block: synced before it returns
    assert syncs.calls == 3
    assert storage.scrub(T, repair=False) == []


def test_an_open_hold_is_settled_before_a_block_that_excludes_the_others(tmp_path, monkeypatch):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/warm", b"w")
    syncs = Syncs(monkeypatch, tmp_path)
    group = storage._log(T).commits
    seen: dict[str, Any] = {}

    def maintenance() -> None:
        # queued behind the first block, which passes its hold on: maintenance finds
        # its appends synced and protected before it runs
        with storage.lock(T, exclusive=True):
            seen["unsettled"] = list(group.unsettled)
            seen["syncs"] = syncs.calls
            storage.delete(f"{T}/ns/warm")

    outcome = beside_a_block(storage, maintenance, syncs=syncs)
    assert outcome == {"first": "returned", "second": "returned", "syncs when first returned": 1}
    assert seen == {"unsettled": [], "syncs": 1}
    assert storage.read(f"{T}/ns/a") == b"a"
    assert storage.read(f"{T}/ns/warm") is None
    assert not group.unsettled and not group.open
    # the deletion, made without a sync, is covered by the parity after the next sync
    ((_, found),) = storage.scrub(T, repair=False)
    assert len(found.unprotected) == 1 and not (found.healed or found.unhealable)
    storage.write(f"{T}/ns/next", b"n")
    assert storage.scrub(T, repair=False) == []


def test_a_hold_passed_to_a_thread_that_gives_up_is_settled_by_the_block_that_passed_it(
    tmp_path, monkeypatch
):
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/warm", b"w")
    syncs = Syncs(monkeypatch, tmp_path)
    group = storage._log(T).commits

    def gives_up() -> None:
        # what ``FileStorage.lock`` does for a thread interrupted while it waits for the
        # log: it queues, and leaves once the first block passed the hold on to it
        group.queue()
        group.wait_for(lambda: group.open)
        group.leave()

    outcome = beside_a_block(storage, gives_up, syncs=syncs)
    assert outcome == {"first": "returned", "second": "returned", "syncs when first returned": 1}
    assert not group.open and not group.unsettled and group.queued == 0
    assert storage.read(f"{T}/ns/a") == b"a"
    storage.write(f"{T}/ns/b", b"b")  # the flock was let go of: the log takes appends
    assert storage.scrub(T, repair=False) == []


@pytest.mark.parametrize("next_call", ["a block that finds the log free", "a write outside blocks"])
def test_a_hold_passed_on_is_taken_by_whoever_gets_the_log_first(tmp_path, monkeypatch, next_call):
    """The thread a hold is passed to may not be the next to get the log: a block that
    finds it free takes the hold on (its append shares the sync), and a write outside
    blocks settles it before its own append."""
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/warm", b"w")
    syncs = Syncs(monkeypatch, tmp_path)
    group = storage._log(T).commits
    next_done = threading.Event()

    def queued_until_the_next_call_is_done() -> None:
        # waits for the log (the first block passes its hold on to it), then gives up
        # (a thread that really waits would get the log once the next call let it go)
        group.queue()
        next_done.wait()
        group.leave()

    def next_call_then_give_up() -> None:
        # runs once the first block's caller waits on its hold: the log is free
        waiter = threading.Thread(target=queued_until_the_next_call_is_done)
        waiter.start()
        group.wait_for(lambda: group.open)
        seen["hold"] = group.hold
        if next_call == "a block that finds the log free":
            with storage.lock(T, exclusive=False):
                seen["took the hold"] = not group.open
                storage.write(f"{T}/ns/b", b"b")
                next_done.set()  # nobody waits for the log as this block ends
                waiter.join()
        else:
            storage.write(f"{T}/ns/b", b"b")
            seen["took the hold"] = not group.open
            next_done.set()
            waiter.join()
        seen["unsettled"] = list(group.unsettled)

    seen: dict[str, Any] = {}
    outcome = beside_a_block(storage, next_call_then_give_up, syncs=syncs)
    assert outcome["first"] == "returned" and outcome["second"] == "returned"
    assert seen["took the hold"] and seen["unsettled"] == []
    if next_call == "a block that finds the log free":
        assert syncs.calls == 1  # the two blocks' appends, synced once
        assert group.hold == seen["hold"]  # no flock taken anew
    else:
        assert syncs.calls == 2  # the first block's settled, then the write's own
    assert outcome["syncs when first returned"] >= 1
    assert storage.read(f"{T}/ns/a") == b"a" and storage.read(f"{T}/ns/b") == b"b"
    assert not group.open and group.queued == 0
    assert storage.scrub(T, repair=False) == []


class Loop(TypedDict):
    count: int


def test_a_graph_on_background_threads_syncs_no_more_than_it_calls_and_loses_nothing(
    tmp_path, monkeypatch
):
    calls = {"put": 0, "put_writes": 0}
    saver = VerifiedSaver(tmp_path)
    for name in calls:
        method = getattr(saver, name)

        def counted(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _method(*args, **kwargs)

        monkeypatch.setattr(saver, name, counted)
    synced: list[int] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    def step(state: Loop) -> dict:
        return {"count": state["count"] + 1}

    builder = StateGraph(Loop)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["count"] % 40 else END)
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"count": 0}, config)  # the thread's directory and log exist now
    first_run = len(list(saver.list(config)))
    for name in calls:
        calls[name] = 0
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    graph.invoke({"count": 0}, config)  # LangGraph's default durability: puts in background
    durable_calls = calls["put"] + calls["put_writes"]
    assert durable_calls >= 2 * 40  # a put and a put_writes per step, and the input's
    # each call is durable when it returns, and no call syncs more than once
    assert len(synced) <= durable_calls
    history = list(saver.list(config))
    assert len(history) == 2 * first_run
    assert graph.get_state(config).values == {"count": 40}
    reopened = VerifiedSaver(tmp_path)
    assert [c.checkpoint["id"] for c in reopened.list(config)] == [
        c.checkpoint["id"] for c in history
    ]


def test_settling_appends_to_a_file_no_longer_open_here_raises_and_appends_go_on(
    tmp_path, monkeypatch
):
    # never the case (a log leaves its path only after its retirement settled it); were
    # it, nothing appended could be called durable: the caller is told, and the log
    # takes appends again, cutting whatever follows its end first
    storage = FileStorage(tmp_path)
    storage.write(f"{T}/ns/warm", b"w")
    log = storage._log(T)
    gone = SimpleNamespace(ino=log.append_ino + 1, at=log.end, appended=b"x")
    monkeypatch.setattr(log.commits, "take", lambda: ([gone], True))
    with pytest.raises(StoreWriteError, match="appended file is gone"):
        storage.appender._settle(log)
    assert log.room is False
    monkeypatch.undo()
    storage.write(f"{T}/ns/c", b"c")
    assert storage.read(f"{T}/ns/c") == b"c"
    assert FileStorage(tmp_path).read(f"{T}/ns/warm") == b"w"
