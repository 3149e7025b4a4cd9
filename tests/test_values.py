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
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.engine import reads
from langgraph_checkpoint_verified.records.format import RecordKind
from langgraph_checkpoint_verified.records.kinds import (
    VALUE_EXTEND,
    VALUE_FULL,
    VALUE_WINDOW,
    decode_checkpoint,
)
from langgraph_checkpoint_verified.records.values import WINDOW_CHAIN, PartsCache

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


def side_by_side(build: Any, saver: VerifiedSaver, *, seed: int, turns: int) -> tuple:
    """The same chat run by a graph on ``saver`` and one on InMemorySaver: both graphs and
    the config, once every checkpoint of the one reads back as the other's."""
    ours, reference = build(saver), build(InMemorySaver())
    config = {"configurable": {"thread_id": "chat"}}
    for graph in (ours, reference):
        rng = random.Random(seed)
        for _ in range(turns):
            graph.invoke(say(rng), config)
    assert history(ours, config) == history(reference, config)
    return ours, reference, config


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_chat_reads_back_what_in_memory_saver_returns(tmp_path, backend):
    saver = open_saver(backend, tmp_path, list_chain_limit=7)
    ours, reference, config = side_by_side(chat_graph, saver, seed=1, turns=25)
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
def test_a_listing_walks_each_value_chain_once(tmp_path, backend, monkeypatch):
    """``list`` (``get_state_history``) of a chat, newest first, by a saver that has read
    nothing: the newest checkpoint's messages are a chain through every older record,
    and each older checkpoint's chain is the start of it. The chain is walked once for
    the whole listing, not once per checkpoint (which grows with the square of the
    chat's length), and every checkpoint still reads back as InMemorySaver's."""
    saver = open_saver(backend, tmp_path)
    _, reference, config = side_by_side(chat_graph, saver, seed=4, turns=30)
    if backend == "files":
        saver = VerifiedSaver(tmp_path / "store")
    else:
        saver.engine.reader.parts.forget_thread("chat")  # as if never read
    steps = 0
    walk = reads.value_parts

    def counted(record: Any, channel: str, stored: Any, holder_values: Any, *rest: Any) -> Any:
        def step(base_id: str) -> Any:
            nonlocal steps
            steps += 1
            return holder_values(base_id)

        return walk(record, channel, stored, step, *rest)

    monkeypatch.setattr(reads, "value_parts", counted)
    listed = list(saver.list(config))
    assert len(listed) == 90  # three checkpoints a turn
    assert messages_encodings(saver).count(VALUE_EXTEND) >= 55  # one chain, no whole copy since
    assert steps <= len(listed), steps  # each older record stepped through once
    assert history(chat_graph(saver), config) == history(reference, config)


def test_a_long_walk_keeps_its_bases_without_pushing_out_the_newest_values():
    """The bases one walk keeps are bounded on their own: however long the chain, the
    newest values of the threads a process runs stay cached (else each of their next
    reads would walk its chain again)."""
    cache = PartsCache(size=3, bases=50)
    running = [(f"t{n}", "", "messages") for n in range(3)]
    for where in running:
        cache.put(where, "newest", 7, [(("msgpack", b"x"), None, 0)])
    long = ("long", "", "messages")
    cache.keep_bases(long, [(f"c{i}", i, [(("msgpack", b"y"), None, 0)]) for i in range(200)])
    assert all(cache.get(where, "newest", 7) is not None for where in running)
    assert cache.get(long, "c199", 199) is not None  # the newest bases, for a listing
    assert cache.get(long, "c149", 149) is None  # older ones went first, within their bound
    cache.forget_thread("long")
    assert cache.get(long, "c199", 199) is None


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


# -- windows: lists that lose their first items as they gain new ones ------------------

WINDOW = 6


class TrimmedChat(TypedDict):
    messages: Annotated[list, add_messages]


def trimmed_chat_graph(checkpointer: Any) -> Any:
    """A chat that keeps its last ``WINDOW`` messages, the way LangGraph's docs trim one:
    ``RemoveMessage`` of the oldest, from a node of its own."""

    def reply(state: TrimmedChat) -> dict:
        return {"messages": [AIMessage(content=f"reply to {len(state['messages'])} messages")]}

    def trim(state: TrimmedChat) -> dict:
        oldest = state["messages"][:-WINDOW]
        return {"messages": [RemoveMessage(id=m.id) for m in oldest]}

    builder = StateGraph(TrimmedChat)
    builder.add_node("reply", reply)
    builder.add_node("trim", trim)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "trim")
    return builder.compile(checkpointer=checkpointer)


def last_four(old: list, new: list) -> list:
    return [*old, *new][-4:]


class Recent(TypedDict):
    recent: Annotated[list, last_four]


def recent_graph(checkpointer: Any) -> Any:
    builder = StateGraph(Recent)
    builder.add_node("note", lambda state: {"recent": [f"note {len(state['recent'])}"]})
    builder.add_edge(START, "note")
    return builder.compile(checkpointer=checkpointer)


def value_encodings(saver: VerifiedSaver, channel: str) -> list[tuple[int, int]]:
    """(encoding, start) of every stored value of ``channel``, oldest checkpoint first."""
    found = []
    for key in sorted(saver.storage.walk("threads")):
        if key.endswith(".ckpt"):
            record = decode_checkpoint(saver.codec, saver.storage.read(key))
            if channel in record.values:
                found.append((record.values[channel].encoding, record.values[channel].start))
    return found


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_trimmed_chat_is_stored_as_windows_and_reads_back_what_in_memory_saver_returns(
    tmp_path, backend
):
    saver = open_saver(backend, tmp_path)
    ours, reference, config = side_by_side(trimmed_chat_graph, saver, seed=21, turns=20)
    assert len(ours.get_state(config).values["messages"]) == WINDOW

    encodings = value_encodings(saver, "messages")
    # 20 turns of 3 checkpoints each: the question, the reply, the trim (from the 4th
    # turn on, each drops the oldest question and reply)
    assert len(encodings) == 60
    trims = encodings[11::3]
    assert set(trims) <= {(VALUE_WINDOW, 2), (VALUE_FULL, 0)}, encodings
    assert trims.count((VALUE_WINDOW, 2)) > len(trims) // 2, encodings
    # a chain with windows is stored whole again after WINDOW_CHAIN extensions, and
    # before what its windows left out outnumbers what they keep: reading one never
    # decodes more than twice the window's messages
    dropped = chain = 0
    for encoding, start in encodings:
        if encoding == VALUE_FULL:
            dropped = chain = 0
            continue
        dropped, chain = dropped + start, chain + 1
        assert dropped <= WINDOW, encodings
        assert chain <= WINDOW_CHAIN or not dropped, encodings
    if backend == "files":
        reopened = trimmed_chat_graph(VerifiedSaver(tmp_path / "store"))
        assert history(reopened, config) == history(reference, config)


def test_a_new_process_goes_on_with_the_window_it_read(tmp_path):
    config = {"configurable": {"thread_id": "notes"}}
    first = VerifiedSaver(tmp_path / "store", fsync=False)
    reference = recent_graph(InMemorySaver())
    for _ in range(3):
        recent_graph(first).invoke({"recent": []}, config)
        reference.invoke({"recent": []}, config)
    # a second saver knows the list only from reading it back: it still stores windows
    second = VerifiedSaver(tmp_path / "store", fsync=False)
    for _ in range(4):
        recent_graph(second).invoke({"recent": []}, config)
        reference.invoke({"recent": []}, config)
    encodings = value_encodings(second, "recent")
    assert VALUE_WINDOW in [encoding for encoding, _ in encodings[4:]], encodings
    for reader in (second, VerifiedSaver(tmp_path / "store")):
        got = [s.values for s in recent_graph(reader).get_state_history(config)]
        assert got == [s.values for s in reference.get_state_history(config)]


def test_a_window_that_moved_past_every_item_is_stored_whole():
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from langgraph_checkpoint_verified.records.values import ListMemory

    memory, serde = ListMemory(), JsonPlusSerializer()
    where = ("t", "", "recent")
    old = ["a", "b"]
    memory.encode(where, 1, "c1", old, None, serde)
    moved = memory.encode(where, 2, "c2", ["x", "y"], (1, "c1"), serde)
    assert moved.encoding == VALUE_FULL
    # items changed inside the window: stored whole too
    memory.encode(where, 3, "c3", ["p", "q", "r"], None, serde)
    changed = memory.encode(where, 4, "c4", ["q", "new", "s"], (3, "c3"), serde)
    assert changed.encoding == VALUE_FULL


@pytest.mark.parametrize("found", ["start past the base", "no start"])
def test_a_window_that_does_not_fit_its_base_is_damage(found):
    from langgraph_checkpoint_verified.errors import RecordDamagedError
    from langgraph_checkpoint_verified.records.format import Codec, pack
    from langgraph_checkpoint_verified.records.kinds import checkpoint_identity

    base = ["c0", 1, 2] + ([3] if found == "start past the base" else [])
    content = {
        "v": 1,
        "checkpoint": ["msgpack", b"\x80"],
        "metadata": ["msgpack", b"\x80"],
        "values": {"recent": [2, VALUE_WINDOW, "msgpack", b"\x90", *base]},
        "refs": {"recent": [2, "c1"]},
    }
    codec = Codec()
    data = codec.encode(
        RecordKind.CHECKPOINT, checkpoint_identity("t", "", "c1", "c0"), pack(content)
    )
    with pytest.raises(RecordDamagedError):
        decode_checkpoint(codec, data)


@pytest.mark.parametrize("newer", ["value encoding", "content version"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_record_from_a_newer_version_is_an_error_not_damage(tmp_path, capsys, backend, newer):
    """A record that verifies but holds what only a newer version knows is left alone:
    skipping it would resume the thread from an older checkpoint than its newest."""
    from langgraph_checkpoint_verified import NewerFormatError
    from langgraph_checkpoint_verified.records import keys
    from langgraph_checkpoint_verified.records.format import pack, unpack

    saver = open_saver(backend, tmp_path)
    graph = recent_graph(saver)
    config = {"configurable": {"thread_id": "notes"}}
    for _ in range(3):
        graph.invoke({"recent": []}, config)
    newest = saver.get_tuple(config).checkpoint["id"]
    key = keys.checkpoint_key("notes", "", newest)
    header, content = saver.codec.decode_with_header(saver.storage.read(key), RecordKind.CHECKPOINT)
    body = unpack(content)
    if newer == "value encoding":
        body["values"]["recent"][1] = 7
    else:
        body["v"] = 2
    newer_record = saver.codec.encode(RecordKind.CHECKPOINT, header.identity, pack(body))
    saver.storage.write(key, newer_record)

    for reader in {saver, open_saver(backend, tmp_path) if backend == "files" else saver}:
        with pytest.raises(NewerFormatError, match="newer version"):
            reader.get_tuple(config)
        with pytest.raises(NewerFormatError):
            graph.invoke({"recent": []}, config)
        assert reader.stats.damaged_records == reader.stats.quarantined_records == 0
    if backend == "files":
        # the command line says so and stops (exit 2: could not run), moving nothing
        from langgraph_checkpoint_verified.cli import main

        assert main(["verify", str(tmp_path / "store")]) == 2
        assert "newer version" in capsys.readouterr().err
    assert saver.storage.read(key) == newer_record
    assert not [k for k in saver.storage.walk("") if k.startswith("quarantine")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_between_two_puts_does_not_stop_a_chain(tmp_path, backend):
    """A server answers ``get_state`` while a run goes on: the reader gets copies of
    the lists, and the run's next put still extends the list it stored last."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    saver = open_saver(backend, tmp_path)
    config: dict = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    log: list = []
    for version in range(1, 6):
        log = [*log[-3:], HumanMessage(content=f"message {version}")]
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=version))
        checkpoint["channel_values"] = {"log": log}
        checkpoint["channel_versions"] = {"log": version}
        config = saver.put(config, checkpoint, {"step": version}, {"log": version})
        assert saver.get_tuple(config).checkpoint["channel_values"]["log"] == log
    assert [encoding for encoding, _ in value_encodings(saver, "log")] == [
        VALUE_FULL,
        *[VALUE_EXTEND] * 3,
        VALUE_WINDOW,
    ]


@pytest.mark.parametrize("shape", ["growing", "window"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("maintenance", ["prune", "delete_for_runs"])
def test_maintenance_keeps_chained_values_whole(tmp_path, shape, backend, maintenance):
    saver = open_saver(backend, tmp_path)
    build = chat_graph if shape == "growing" else trimmed_chat_graph
    graph = build(saver)
    config = {"configurable": {"thread_id": "chat"}}
    rng = random.Random(11)
    runs = []
    for _ in range(8):
        runs.append(str(uuid.uuid4()))
        graph.invoke(say(rng), {"configurable": {"thread_id": "chat", "run_id": runs[-1]}})
    chained = VALUE_EXTEND if shape == "growing" else VALUE_WINDOW
    assert chained in [encoding for encoding, _ in value_encodings(saver, "messages")]
    before = graph.get_state(config).values
    every = [s.values for s in graph.get_state_history(config)]
    kept_history = every[: len(every) // len(runs)]  # the last run's
    if maintenance == "prune":
        saver.prune(["chat"])
    else:
        saver.delete_for_runs(runs[:-1])
    assert saver.verify().ok
    reread = VerifiedSaver(tmp_path / "store") if backend == "files" else saver
    assert build(reread).get_state(config).values == before
    if maintenance == "delete_for_runs":
        assert [s.values for s in build(reread).get_state_history(config)] == kept_history
    graph.invoke(say(rng), config)
    after = contents(graph.get_state(config).values)
    if shape == "growing":
        assert len(after) == len(before["messages"]) + 2
    else:
        assert len(after) == WINDOW and after[:-2] == contents(before)[2:]


def test_an_object_store_stores_windows_whole():
    """On an object store each version of a chain is one more request, one after the
    other, for a machine reading the thread first: a window is stored whole there."""
    from obstore.store import MemoryStore

    from langgraph_checkpoint_verified import ObjectStorage

    saver = VerifiedSaver(storage=ObjectStorage(store=MemoryStore()))
    ours, reference, config = side_by_side(trimmed_chat_graph, saver, seed=21, turns=8)
    encodings = [encoding for encoding, _ in value_encodings(saver, "messages")]
    assert VALUE_WINDOW not in encodings and VALUE_EXTEND in encodings
