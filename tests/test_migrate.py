"""``migrate`` keeps what order-sensitive channels need: each pending write's ``task_path``.

A graph fans out to two parallel branches at every step; both append to a
``DeltaChannel`` (whose value LangGraph rebuilds from the stored writes) and to
a plain list channel. Within a step, LangGraph applies the branches' writes in
``writes_sort_key`` order: by ``task_path`` first, then by task id. A task id is
a hash, so a copy that loses ``task_path`` puts the branches' writes in an order
that changes from step to step, and the rebuilt value changes with it (``R11``
before ``L11``). The run is done on a real ``SqliteSaver`` file, one branch fails
once (leaving a checkpoint with a finished task's writes and an error write),
the thread is resumed, and the database is migrated with the command line.
Afterwards every checkpoint of the store has SQLite's pending writes in SQLite's
order, and every state LangGraph rebuilds from it is the one it rebuilds from SQLite.
"""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.cli import main

THREAD = "fan-out"
CONFIG = {"configurable": {"thread_id": THREAD}}
FAIL_AT = 4  # the step at which the right branch fails once
STEPS = 12


def extend(state: list, batches: list[list]) -> list:
    """Order-sensitive and batching-invariant, as ``DeltaChannel`` requires."""
    out = list(state)
    for batch in batches:
        out.extend(batch)
    return out


class State(TypedDict):
    items: Annotated[list, DeltaChannel(extend, snapshot_frequency=5)]
    trace: Annotated[list, operator.add]
    count: int


def build(checkpointer: Any, fail_once: set[int]) -> Any:
    """Left and right in parallel, then a join, ``STEPS`` times.

    ``right`` raises the first time it runs at a step in ``fail_once``.
    """

    def left(state: State) -> dict:
        return {"items": [f"L{state['count']}"], "trace": [f"L{state['count']}"]}

    def right(state: State) -> dict:
        if state["count"] in fail_once:
            fail_once.discard(state["count"])
            raise RuntimeError(f"right fails at step {state['count']}")
        return {"items": [f"R{state['count']}"], "trace": [f"R{state['count']}"]}

    def join(state: State) -> dict:
        return {"count": state["count"] + 1}

    def again(state: State) -> list[str] | str:
        return ["left", "right"] if state["count"] < STEPS else END

    builder = StateGraph(State)
    builder.add_node("left", left)
    builder.add_node("right", right)
    builder.add_node("join", join)
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge(["left", "right"], "join")
    builder.add_conditional_edges("join", again, ["left", "right", END])
    return builder.compile(checkpointer=checkpointer)


def run_with_one_failure(graph: Any) -> None:
    with pytest.raises(RuntimeError, match=f"right fails at step {FAIL_AT}"):
        graph.invoke({"items": ["in"], "trace": [], "count": 0}, CONFIG)
    graph.invoke(None, CONFIG)  # resumes: left's writes are kept, right runs again


def live_order() -> list[str]:
    """What the run itself produced, each step's left before right."""
    graph = build(InMemorySaver(), fail_once={FAIL_AT})
    run_with_one_failure(graph)
    items = graph.get_state(CONFIG).values["items"]
    assert items == ["in"] + [f"{side}{n}" for n in range(STEPS) for side in "LR"]
    return items


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoints.sqlite"
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        run_with_one_failure(build(SqliteSaver(conn), fail_once={FAIL_AT}))
    finally:
        conn.close()
    return path


@pytest.fixture
def sqlite_saver(sqlite_db: Path) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(sqlite_db, check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def migrate(sqlite_db: Path, store: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["migrate", str(sqlite_db), str(store)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_every_checkpoint_keeps_sqlites_pending_writes_in_sqlites_order(
    sqlite_db: Path, sqlite_saver: SqliteSaver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    migrate(sqlite_db, store, capsys)
    saver = VerifiedSaver(store)

    theirs = list(sqlite_saver.list(CONFIG))
    ours = list(saver.list(CONFIG))
    assert [t.config for t in ours] == [t.config for t in theirs]
    parallel = 0
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.pending_writes == reference.pending_writes, mine.config
        assert mine.checkpoint["channel_values"] == reference.checkpoint["channel_values"]
        tasks = {task_id for task_id, channel, _ in reference.pending_writes if channel == "items"}
        parallel += len(tasks) == 2
    # the comparison is not vacuous: most checkpoints hold both branches' writes
    assert parallel >= STEPS - 1
    # the special write came along too: right's error, at the step where it failed
    failed = [t for t in ours if any(channel == "__error__" for _, channel, _ in t.pending_writes)]
    assert [t.checkpoint["channel_values"]["count"] for t in failed] == [FAIL_AT]


def test_rebuilt_states_and_history_are_sqlites(
    sqlite_db: Path, sqlite_saver: SqliteSaver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    migrate(sqlite_db, store, capsys)
    from_sqlite = build(sqlite_saver, fail_once=set())
    from_store = build(VerifiedSaver(store), fail_once=set())

    expected = live_order()
    assert from_sqlite.get_state(CONFIG).values["items"] == expected
    assert from_store.get_state(CONFIG).values == from_sqlite.get_state(CONFIG).values

    theirs = list(from_sqlite.get_state_history(CONFIG))
    ours = list(from_store.get_state_history(CONFIG))
    assert [s.config for s in ours] == [s.config for s in theirs]
    assert [s.values for s in ours] == [s.values for s in theirs]
    assert [s.next for s in ours] == [s.next for s in theirs]
    assert [s.metadata for s in ours] == [s.metadata for s in theirs]

    # the migrated thread goes on as the SQLite one does
    more = {"items": ["more"]}
    assert from_store.invoke(more, CONFIG) == from_sqlite.invoke(more, CONFIG)


def test_a_database_from_before_task_path_migrates_as_sqlite_reads_it(
    sqlite_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Older SqliteSaver versions wrote no ``task_path`` column; SQLite reads it as ''."""
    with sqlite3.connect(sqlite_db) as conn:
        conn.execute("ALTER TABLE writes DROP COLUMN task_path")
        rows = conn.execute("SELECT count(*) FROM writes").fetchone()[0]
    conn.close()
    store = tmp_path / "store"
    out = migrate(sqlite_db, store, capsys)
    assert f"and {rows} pending write(s)" in out.splitlines()[0]

    # SqliteSaver adds the column back (as '') when it opens the file for writing
    conn = sqlite3.connect(sqlite_db, check_same_thread=False)
    try:
        theirs = list(SqliteSaver(conn).list(CONFIG))
    finally:
        conn.close()
    ours = list(VerifiedSaver(store).list(CONFIG))
    assert [t.pending_writes for t in ours] == [t.pending_writes for t in theirs]
