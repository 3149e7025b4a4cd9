"""``DeltaChannel`` graphs: values rebuilt from ancestors, never silently shortened.

A ``DeltaChannel`` stores a snapshot only every ``snapshot_frequency`` updates;
in between, LangGraph rebuilds its value by walking the parent chain through
``get_delta_channel_history``. These tests run one real ``StateGraph`` (two
parallel nodes appending to an order-sensitive delta channel, then a join) on
both backends and check that:

* every checkpoint rebuilds the value ``InMemorySaver`` rebuilds for the same run;
* ``prune(strategy="keep_latest")`` keeps the ancestors the kept checkpoint
  needs, so its state is unchanged and the graph continues correctly;
* damage to an ancestor the walk needs (its writes or its checkpoint record)
  raises ``CheckpointDamagedError`` naming it, never a shortened value;
* a saver opened again on the same store rebuilds the same value.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import CheckpointDamagedError, MemoryStorage, VerifiedSaver
from langgraph_checkpoint_verified.records import keys

BACKENDS = ["files", "memory"]
THREAD = "delta"
CONFIG = {"configurable": {"thread_id": THREAD}}


def extend(state: list, batches: list[list]) -> list:
    """Order-sensitive and batching-invariant, as ``DeltaChannel`` requires."""
    out = list(state)
    for batch in batches:
        out.extend(batch)
    return out


class State(TypedDict):
    items: Annotated[list, DeltaChannel(extend, snapshot_frequency=4)]
    count: int
    until: int


def build(checkpointer: Any):
    def left(state: State) -> dict:
        return {"items": [f"L{state['count']}"]}

    def right(state: State) -> dict:
        return {"items": [f"R{state['count']}"]}

    def join(state: State) -> dict:
        return {"count": state["count"] + 1}

    def again(state: State) -> list[str] | str:
        return ["left", "right"] if state["count"] < state["until"] else END

    builder = StateGraph(State)
    builder.add_node("left", left)
    builder.add_node("right", right)
    builder.add_node("join", join)
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge(["left", "right"], "join")
    builder.add_conditional_edges("join", again, ["left", "right", END])
    return builder.compile(checkpointer=checkpointer)


RUNS = [
    {"items": ["in"], "count": 0, "until": 3},
    {"items": ["more"], "until": 5},
]


@pytest.fixture(params=BACKENDS)
def open_saver(request, tmp_path: Path) -> Callable[[], VerifiedSaver]:
    """Opens a saver on one store; every call opens it again (a fresh saver, same records)."""
    memory = MemoryStorage()

    def open_() -> VerifiedSaver:
        if request.param == "files":
            return VerifiedSaver(tmp_path / "store", fsync=False)
        return VerifiedSaver(storage=memory)

    return open_


def run_all(graph: Any, runs: list[dict] = RUNS) -> None:
    for payload in runs:
        graph.invoke(payload, CONFIG)


def history_values(graph: Any) -> list[dict]:
    return [snapshot.values for snapshot in graph.get_state_history(CONFIG)]


def reference(runs: list[dict] = RUNS) -> Any:
    graph = build(InMemorySaver())
    run_all(graph, runs)
    return graph


def walk_of(saver: VerifiedSaver) -> list[str]:
    """Ids the history walk of the newest checkpoint reads, newest first (found independently)."""
    newest = saver.get_tuple(CONFIG)
    assert "items" not in newest.checkpoint["channel_values"], "the test needs a rebuilt value"
    ids = []
    parent = newest.parent_config
    while parent is not None:
        ancestor = saver.get_tuple(parent)
        ids.append(ancestor.config["configurable"]["checkpoint_id"])
        if "items" in ancestor.checkpoint["channel_values"]:
            return ids
        parent = ancestor.parent_config
    raise AssertionError("no snapshot on the walk")


def regular_writes_keys(saver: VerifiedSaver, checkpoint_id: str) -> list[str]:
    prefix = keys.writes_prefix(THREAD, "", checkpoint_id)
    return [f"{prefix}/{name}" for name in saver.storage.list(prefix) if name.endswith(".n.wr")]


def damage(saver: VerifiedSaver, key: str) -> None:
    data = bytearray(saver.storage.read(key))
    data[len(data) // 2] ^= 0xFF
    saver.storage.write(key, bytes(data))


def checkpoint_ids(saver: VerifiedSaver) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(CONFIG)]


# -- same values as InMemorySaver --------------------------------------------------------


def test_every_checkpoint_rebuilds_the_in_memory_value(open_saver):
    graph = build(open_saver())
    run_all(graph)
    expected = reference()
    assert graph.get_state(CONFIG).values == expected.get_state(CONFIG).values
    assert history_values(graph) == history_values(expected)
    # the run really goes through both kinds of checkpoint: snapshots and rebuilt values
    stored = [t.checkpoint["channel_values"].get("items") for t in open_saver().list(CONFIG)]
    assert any(isinstance(value, _DeltaSnapshot) for value in stored)
    assert sum(value is None for value in stored) > len(stored) // 2


def test_history_matches_in_memory_saver_checkpoint_by_checkpoint(open_saver):
    saver = open_saver()
    run_all(build(saver))
    memory = InMemorySaver()
    run_all(build(memory))
    ours = list(saver.list(CONFIG))
    theirs = list(memory.list(CONFIG))
    assert len(ours) == len(theirs)

    def comparable(history: dict) -> dict:
        # task ids hash checkpoint ids, which differ between the two runs
        entry = {"writes": [(channel, value) for _, channel, value in history["writes"]]}
        if "seed" in history:
            entry["seed"] = history["seed"]
        return entry

    for mine, reference_tuple in zip(ours, theirs, strict=True):
        got = saver.get_delta_channel_history(config=mine.config, channels=["items"])
        want = memory.get_delta_channel_history(config=reference_tuple.config, channels=["items"])
        assert comparable(got["items"]) == comparable(want["items"])


async def test_async_graph_rebuilds_the_in_memory_value(open_saver):
    graph = build(open_saver())
    for payload in RUNS:
        await graph.ainvoke(payload, CONFIG)
    expected = reference()
    assert (await graph.aget_state(CONFIG)).values == expected.get_state(CONFIG).values
    saver = open_saver()
    newest = await saver.aget_tuple(CONFIG)
    assert await saver.aget_delta_channel_history(
        config=newest.config, channels=["items"]
    ) == saver.get_delta_channel_history(config=newest.config, channels=["items"])


def test_reopened_saver_rebuilds_the_same_value(open_saver):
    graph = build(open_saver())
    run_all(graph)
    before = graph.get_state(CONFIG).values
    reopened = build(open_saver())
    assert reopened.get_state(CONFIG).values == before
    reopened.invoke({"items": ["last"], "until": 6}, CONFIG)
    expected = reference([*RUNS, {"items": ["last"], "until": 6}])
    assert reopened.get_state(CONFIG).values == expected.get_state(CONFIG).values


# -- prune ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_prune_keep_latest_keeps_what_the_delta_channel_needs(open_saver, mode):
    saver = open_saver()
    graph = build(saver)
    run_all(graph)
    before = graph.get_state(CONFIG).values
    needed = walk_of(saver)
    all_ids = checkpoint_ids(saver)
    if mode == "sync":
        saver.prune([THREAD], strategy="keep_latest")
    else:
        await saver.aprune([THREAD], strategy="keep_latest")
    kept = checkpoint_ids(saver)
    assert kept == [all_ids[0], *needed]  # the newest and its walk, nothing else
    assert len(kept) < len(all_ids)
    assert open_saver().verify().ok
    assert graph.get_state(CONFIG).values == before
    assert build(open_saver()).get_state(CONFIG).values == before
    graph.invoke({"items": ["after"], "until": 6}, CONFIG)
    expected = reference([*RUNS, {"items": ["after"], "until": 6}])
    assert graph.get_state(CONFIG).values == expected.get_state(CONFIG).values


def test_prune_keeps_only_the_newest_when_it_holds_a_snapshot(open_saver):
    # until=3 ends just after a snapshot, whose value the newest checkpoint holds: no walk
    saver = open_saver()
    graph = build(saver)
    graph.invoke({"items": ["in"], "count": 0, "until": 3}, CONFIG)
    newest = saver.get_tuple(CONFIG)
    assert isinstance(newest.checkpoint["channel_values"]["items"], _DeltaSnapshot)
    assert newest.metadata["counters_since_delta_snapshot"]
    before = graph.get_state(CONFIG).values
    saver.prune([THREAD], strategy="keep_latest")
    assert len(checkpoint_ids(saver)) == 1
    assert graph.get_state(CONFIG).values == before


def test_prune_refuses_to_cut_a_damaged_history(open_saver):
    saver = open_saver()
    run_all(build(saver))
    walk = walk_of(saver)
    ids = checkpoint_ids(saver)
    damage(saver, regular_writes_keys(saver, walk[1])[0])
    with pytest.raises(CheckpointDamagedError) as raised:
        saver.prune([THREAD], strategy="keep_latest")
    assert raised.value.checkpoint_id == walk[1]
    assert checkpoint_ids(saver) == ids  # nothing deleted


# -- damage on the walk ---------------------------------------------------------------


def test_damaged_ancestor_writes_raise_instead_of_a_short_value(open_saver):
    saver = open_saver()
    graph = build(saver)
    run_all(graph)
    walk = walk_of(saver)
    assert len(walk) >= 3
    damaged_key = regular_writes_keys(saver, walk[1])[0]
    damage(saver, damaged_key)
    for reader in (graph, build(open_saver())):
        with pytest.raises(CheckpointDamagedError) as raised:
            reader.get_state(CONFIG)
        assert raised.value.checkpoint_id == walk[1]
        assert "pending-writes record" in raised.value.reason
        assert saver.storage.location(damaged_key) in raised.value.reason
    # the damaged record is quarantined by now: its absence is not taken for "never written"
    assert saver.storage.read(damaged_key) is None
    list(saver.list(CONFIG))
    with pytest.raises(CheckpointDamagedError):
        graph.invoke({"items": ["next"], "until": 6}, CONFIG)
    # a checkpoint whose walk does not reach the damage still loads
    older = saver.get_tuple(
        {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": walk[-1]}}
    )
    assert graph.get_state(older.config).values == next(
        s.values
        for s in reference().get_state_history(CONFIG)
        if s.metadata["step"] == older.metadata["step"]
    )


async def test_damaged_ancestor_writes_raise_in_async_graphs(open_saver):
    saver = open_saver()
    graph = build(saver)
    run_all(graph)
    walk = walk_of(saver)
    damage(saver, regular_writes_keys(saver, walk[0])[0])
    with pytest.raises(CheckpointDamagedError) as raised:
        await graph.aget_state(CONFIG)
    assert raised.value.checkpoint_id == walk[0]
    with pytest.raises(CheckpointDamagedError):
        await graph.ainvoke({"items": ["next"], "until": 6}, CONFIG)


def test_damaged_ancestor_checkpoint_raises_instead_of_a_short_value(open_saver):
    saver = open_saver()
    graph = build(saver)
    run_all(graph)
    walk = walk_of(saver)
    newest_id = checkpoint_ids(saver)[0]
    target = walk[1]
    damage(saver, keys.checkpoint_key(THREAD, "", target))
    assert saver.get_tuple(CONFIG).config["configurable"]["checkpoint_id"] == newest_id
    with pytest.raises(CheckpointDamagedError) as raised:
        graph.get_state(CONFIG)
    assert raised.value.checkpoint_id == target
    # quarantined by the read above: still an error, not the end of the history
    assert saver.storage.read(keys.checkpoint_key(THREAD, "", target)) is None
    with pytest.raises(CheckpointDamagedError) as raised:
        build(open_saver()).get_state(CONFIG)
    assert raised.value.checkpoint_id == target
    assert "quarantined" in raised.value.reason


def test_damage_off_the_walk_does_not_matter(open_saver):
    saver = open_saver()
    graph = build(saver)
    run_all(graph)
    walk = walk_of(saver)
    before_snapshot = checkpoint_ids(saver)[len(walk) + 1]  # older than the walk's snapshot
    for key in regular_writes_keys(saver, before_snapshot):
        damage(saver, key)
    assert graph.get_state(CONFIG).values == reference().get_state(CONFIG).values


def test_a_deleted_parent_ends_the_walk(open_saver):
    # documented: a parent that does not exist (delete_for_runs) is the end of the history
    saver = open_saver()
    graph = build(saver)
    # two short runs, three updates in all: no snapshot, the walk goes back to the root
    for number, payload in enumerate([{"items": ["in"], "count": 0, "until": 0}, {"until": 0}]):
        # a run_id in the config is copied into each checkpoint's metadata
        graph.invoke(payload, {"configurable": {"thread_id": THREAD, "run_id": f"run-{number}"}})
    newest = saver.get_tuple(CONFIG)
    ancestors = []
    parent = newest.parent_config
    while parent is not None:
        ancestors.append(saver.get_tuple(parent))
        parent = ancestors[-1].parent_config
    before = saver.get_delta_channel_history(config=newest.config, channels=["items"])
    assert "seed" not in before["items"]
    assert [v for _, _, v in before["items"]["writes"]] == [["in"], ["L0"], ["R0"], ["L1"], ["R1"]]

    saver.delete_for_runs(["run-0"])
    after = saver.get_delta_channel_history(config=newest.config, channels=["items"])
    assert "seed" not in after["items"]
    assert [v for _, _, v in after["items"]["writes"]] == [["L1"], ["R1"]]
    assert [a.metadata["run_id"] for a in ancestors[:2]] == ["run-1", "run-1"]
