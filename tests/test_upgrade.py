"""Stores written one file per record (before thread logs) open, read, continue and convert.

The old layout is what ``RecordFileStorage`` writes; ``VerifiedSaver(path)`` reads
those files under its logs, appends new records to the log, and its first
compaction (``prune``) folds the files into the log and removes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.storage.files import RecordFileStorage

CONFIG = {"configurable": {"thread_id": "old"}}


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def chat_graph(checkpointer: Any) -> Any:
    def reply(state: Chat) -> dict:
        return {"messages": [AIMessage(content=f"reply {len(state['messages'])}")]}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=checkpointer)


def old_store(path: Path, turns: int = 4) -> list[Any]:
    """A store as earlier versions wrote it: one file per record, no log."""
    graph = chat_graph(VerifiedSaver(storage=RecordFileStorage(path)))
    for turn in range(turns):
        graph.invoke({"messages": [HumanMessage(content=f"turn {turn}")]}, CONFIG)
    assert not (path / "threads" / "old" / "log").exists()
    assert list((path / "threads" / "old" / "ns").rglob("*.ckpt"))
    return snapshots(graph)


def snapshots(graph: Any) -> list[Any]:
    return [
        ([(type(m).__name__, m.content) for m in s.values["messages"]], s.next, s.config)
        for s in graph.get_state_history(CONFIG)
    ]


def record_files(path: Path) -> list[Path]:
    return [p for p in (path / "threads").rglob("*") if p.suffix in (".ckpt", ".wr")]


def test_an_old_store_opens_reads_and_continues(tmp_path):
    store = tmp_path / "store"
    before = old_store(store)
    graph = chat_graph(VerifiedSaver(store))
    assert snapshots(graph) == before
    graph.invoke({"messages": [HumanMessage(content="after the upgrade")]}, CONFIG)
    after = snapshots(graph)
    assert after[len(after) - len(before) :] == before  # the old history, unchanged
    assert after[0][0][-2:] == [("HumanMessage", "after the upgrade"), ("AIMessage", "reply 9")]
    assert (store / "threads" / "old" / "log").exists()
    # another process (a new saver) sees old and new records alike
    assert snapshots(chat_graph(VerifiedSaver(store))) == after
    assert VerifiedSaver(store).verify().ok


def test_compaction_folds_the_old_files_into_the_log(tmp_path):
    store = tmp_path / "store"
    old_store(store)
    saver = VerifiedSaver(store)
    graph = chat_graph(saver)
    history = snapshots(graph)
    saver.storage.compact("threads/old")
    assert record_files(store) == []
    assert snapshots(chat_graph(VerifiedSaver(store))) == history
    saver.prune(["old"])
    reopened = chat_graph(VerifiedSaver(store))
    assert snapshots(reopened)[0][0] == history[0][0]
    assert VerifiedSaver(store).verify().ok


def test_damage_in_an_old_file_is_still_caught_and_quarantined(tmp_path):
    store = tmp_path / "store"
    before = old_store(store)
    newest = max(record_files(store), key=lambda p: p.name if p.suffix == ".ckpt" else "")
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    damage: list[Any] = []
    saver = VerifiedSaver(store, on_corruption=damage.append)
    found = saver.get_tuple(CONFIG)
    assert (
        found.config["configurable"]["checkpoint_id"]
        == before[1][2]["configurable"]["checkpoint_id"]
    )
    assert len(damage) == 1 and damage[0].quarantined_to
    assert not newest.exists()  # moved aside, byte for byte
    assert Path(damage[0].quarantined_to).read_bytes() == bytes(data)
