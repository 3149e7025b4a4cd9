"""Values stored once: a growing list is stored as the items it gained.

A chat's ``add_messages`` list is stored whole once per chain and then as
extensions, so the store grows with the chat's length, not its square; every
checkpoint still reads back exactly what ``InMemorySaver`` returns, across
runs, new processes, forks, prune and ``delete_for_runs``.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.records.kinds import VALUE_EXTEND, VALUE_FULL, decode_checkpoint

BACKENDS = ["files", "memory"]
WORDS = [f"word{i}" for i in range(3000)]


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def chat_graph(checkpointer: Any) -> Any:
    def reply(state: Chat) -> dict:
        return {"messages": [AIMessage(content=f"reply to {len(state['messages'])} messages")]}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=checkpointer)


def say(rng: random.Random) -> dict:
    return {"messages": [HumanMessage(content=" ".join(rng.choices(WORDS, k=150)))]}


def open_saver(backend: str, path: Path, **kwargs: Any) -> VerifiedSaver:
    if backend == "files":
        return VerifiedSaver(path / "store", fsync=False, **kwargs)
    return VerifiedSaver.in_memory(**kwargs)


def messages_encodings(saver: VerifiedSaver) -> list[int]:
    found = []
    for key in saver.storage.walk("threads"):
        if key.endswith(".ckpt"):
            record = decode_checkpoint(saver.codec, saver.storage.read(key))
            if "messages" in record.values:
                found.append(record.values["messages"].encoding)
    return found


def chat_bytes(steps: int, path: Path) -> int:
    saver = VerifiedSaver(path, fsync=False)
    graph = chat_graph(saver)
    rng = random.Random(3)
    config = {"configurable": {"thread_id": "chat"}}
    for _ in range(steps):
        graph.invoke(say(rng), config)
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def contents(values: dict) -> list[tuple[str, Any]]:
    """A state's messages without their ids (add_messages draws a random id for each)."""
    return [(type(m).__name__, m.content) for m in values["messages"]]


def history(graph: Any, config: dict) -> list[Any]:
    return [
        (contents(s.values), s.next, s.metadata["step"]) for s in graph.get_state_history(config)
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_chat_reads_back_what_in_memory_saver_returns(tmp_path, backend):
    saver = open_saver(backend, tmp_path, list_chain_limit=7)
    ours, reference = chat_graph(saver), chat_graph(InMemorySaver())
    config = {"configurable": {"thread_id": "chat"}}
    for graph in (ours, reference):
        rng = random.Random(1)
        for _ in range(25):
            graph.invoke(say(rng), config)
    assert history(ours, config) == history(reference, config)
    encodings = messages_encodings(saver)
    assert encodings.count(VALUE_EXTEND) > encodings.count(VALUE_FULL) * 3
    # every chain is bounded: a whole value at least every 7 extensions
    assert encodings.count(VALUE_FULL) >= len(encodings) // 8
    # and a new saver on the same records (another process) reads the same
    if backend == "files":
        reopened = chat_graph(VerifiedSaver(tmp_path / "store"))
        assert history(reopened, config) == history(reference, config)


def test_the_store_grows_linearly_with_the_chat(tmp_path):
    # below the chain bound (200 by default) the growth is linear: twice the steps,
    # about twice the bytes (whole lists stored at every step would give four times)
    short = chat_bytes(20, tmp_path / "short")
    long = chat_bytes(40, tmp_path / "long")
    assert long / short < 2.3, (short, long)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_process_continues_a_chat_exactly(tmp_path, backend):
    saver = open_saver(backend, tmp_path)
    config = {"configurable": {"thread_id": "chat"}}
    rng = random.Random(5)
    chat_graph(saver).invoke(say(rng), config)
    # a second saver on the same records knows nothing of the first one's lists
    second = VerifiedSaver(tmp_path / "store", fsync=False) if backend == "files" else saver
    graph = chat_graph(second)
    for _ in range(5):
        graph.invoke(say(rng), config)
    reference = chat_graph(InMemorySaver())
    rng = random.Random(5)
    for _ in range(6):
        reference.invoke(say(rng), config)
    assert history(graph, config) == history(reference, config)


@pytest.mark.parametrize("backend", BACKENDS)
def test_forks_and_replacements_are_stored_as_what_they_are(tmp_path, backend):
    saver = open_saver(backend, tmp_path)
    config = {"configurable": {"thread_id": "chat"}}

    def fork_and_edit(graph: Any) -> None:
        rng = random.Random(9)
        for _ in range(4):
            graph.invoke(say(rng), config)
        past = list(graph.get_state_history(config))[4]
        # a fork from the past, then a message replaced by id
        forked = graph.update_state(past.config, {"messages": [HumanMessage(content="fork")]})
        graph.invoke(None, forked)
        first = graph.get_state(config).values["messages"][0]
        graph.update_state(config, {"messages": [HumanMessage(content="edited", id=first.id)]})
        graph.invoke(say(rng), config)

    graph, reference = chat_graph(saver), chat_graph(InMemorySaver())
    fork_and_edit(graph)
    fork_and_edit(reference)
    reread = VerifiedSaver(tmp_path / "store") if backend == "files" else saver
    assert history(chat_graph(reread), config) == history(reference, config)
    assert contents(graph.get_state(config).values)[0] == ("HumanMessage", "edited")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("maintenance", ["prune", "delete_for_runs"])
def test_maintenance_keeps_extended_values_whole(tmp_path, backend, maintenance):
    saver = open_saver(backend, tmp_path)
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "chat"}}
    rng = random.Random(11)
    runs = []
    for _ in range(8):
        runs.append(str(uuid.uuid4()))
        graph.invoke(say(rng), {"configurable": {"thread_id": "chat", "run_id": runs[-1]}})
    before = graph.get_state(config).values
    kept_history = [s.values for s in graph.get_state_history(config)][:3]  # the last run
    if maintenance == "prune":
        saver.prune(["chat"])
    else:
        saver.delete_for_runs(runs[:-1])
    assert saver.verify().ok
    reread = VerifiedSaver(tmp_path / "store") if backend == "files" else saver
    assert chat_graph(reread).get_state(config).values == before
    if maintenance == "delete_for_runs":
        assert [s.values for s in chat_graph(reread).get_state_history(config)] == kept_history
    graph.invoke(say(rng), config)
    assert len(graph.get_state(config).values["messages"]) == len(before["messages"]) + 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_forks_that_make_the_same_version_number_keep_their_own_lists(tmp_path, backend):
    """A version number alone does not name a value: two forks (on two machines, or a
    caller with its own version scheme) may each make the same one."""
    from langgraph.checkpoint.base import empty_checkpoint

    saver = open_saver(backend, tmp_path)
    base: dict = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    def put(parent: dict, log: list[str], version: int) -> dict:
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid.uuid4())
        checkpoint["channel_values"] = {"log": log}
        checkpoint["channel_versions"] = {"log": version}
        return saver.put(parent, checkpoint, {"step": version}, {"log": version})

    root_log = ["a"]
    root = put(base, root_log, 1)
    fork_a = put(root, [*root_log, "x"], 2)
    fork_b = put(root, [*root_log, "y"], 2)  # the same version number, another value
    grown_b = put(fork_b, [*root_log, "y", "y2"], 3)
    grown_a = put(fork_a, [*root_log, "x", "x2"], 3)
    for reader in (saver, VerifiedSaver(storage=saver.storage)):
        for config, log in [
            (fork_a, ["a", "x"]),
            (grown_b, ["a", "y", "y2"]),
            (fork_b, ["a", "y"]),
            (grown_a, ["a", "x", "x2"]),
        ]:
            assert reader.get_tuple(config).checkpoint["channel_values"]["log"] == log
