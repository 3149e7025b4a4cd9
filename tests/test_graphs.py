"""Real graphs on ``VerifiedSaver``, compared with LangGraph's ``InMemorySaver``.

One fixture runs every test on files, in memory and on S3 (a real S3 server on
127.0.0.1, see ``conftest.py``), through the sync and the async API of both the
graph and the saver.
"""

from __future__ import annotations

import asyncio
import operator
import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from s3server import s3_store
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import FileStorage, MemoryStorage, ObjectStorage, VerifiedSaver


class Runner:
    """Drives a graph through either the sync or the async API."""

    def __init__(self, saver: VerifiedSaver, mode: str) -> None:
        self.saver = saver
        self.mode = mode

    def invoke(self, graph, graph_input, config, **kwargs):
        if self.mode == "sync":
            return graph.invoke(graph_input, config, **kwargs)
        return asyncio.run(graph.ainvoke(graph_input, config, **kwargs))

    def state(self, graph, config, **kwargs):
        if self.mode == "sync":
            return graph.get_state(config, **kwargs)
        return asyncio.run(graph.aget_state(config, **kwargs))

    def history(self, graph, config):
        if self.mode == "sync":
            return list(graph.get_state_history(config))

        async def collect():
            return [s async for s in graph.aget_state_history(config)]

        return asyncio.run(collect())

    def update(self, graph, config, values, as_node=None):
        if self.mode == "sync":
            return graph.update_state(config, values, as_node=as_node)
        return asyncio.run(graph.aupdate_state(config, values, as_node=as_node))


@pytest.fixture(
    params=[(backend, mode) for backend in ("files", "memory", "s3") for mode in ("sync", "async")],
    ids=lambda p: "-".join(p),
)
def run(request, tmp_path):
    backend, mode = request.param
    if backend == "files":
        saver = VerifiedSaver(tmp_path / "store", fsync=False)
    elif backend == "s3":
        endpoint, bucket = request.getfixturevalue("s3_bucket")
        saver = VerifiedSaver(storage=ObjectStorage(store=s3_store(endpoint, bucket)))
    else:
        saver = VerifiedSaver.in_memory()
    yield Runner(saver, mode)
    # whatever a test did, the store it leaves behind verifies and nothing was damaged
    assert saver.verify().ok
    assert saver.stats.damaged_records == 0


def thread(name: str) -> dict:
    return {"configurable": {"thread_id": name}}


def without_ids(messages) -> list[tuple[str, Any]]:
    return [(m.type, m.content) for m in messages]


# -- multi-step graph with add_messages ---------------------------------------------------


class ChatState(TypedDict):
    messages: Annotated[list, add_messages]
    turns: int


def chat_graph(checkpointer):
    def greet(state: ChatState):
        return {"messages": [AIMessage(f"hello #{state['turns']}")], "turns": state["turns"] + 1}

    def echo(state: ChatState):
        return {"messages": [AIMessage(f"you said {state['messages'][0].content}")]}

    def sign(state: ChatState):
        return {"messages": [AIMessage(f"bye after {len(state['messages'])}")]}

    builder = StateGraph(ChatState)
    builder.add_node("greet", greet)
    builder.add_node("echo", echo)
    builder.add_node("sign", sign)
    builder.add_edge(START, "greet")
    builder.add_edge("greet", "echo")
    builder.add_edge("echo", "sign")
    builder.add_edge("sign", END)
    return builder.compile(checkpointer=checkpointer)


def test_multi_step_messages_match_in_memory_saver(run):
    graph = chat_graph(run.saver)
    reference = chat_graph(InMemorySaver())
    for turn in range(2):
        ours = run.invoke(
            graph, {"messages": [HumanMessage(f"hi {turn}")], "turns": turn}, thread("c")
        )
        theirs = reference.invoke(
            {"messages": [HumanMessage(f"hi {turn}")], "turns": turn}, thread("c")
        )
        assert without_ids(ours["messages"]) == without_ids(theirs["messages"])
    assert len(ours["messages"]) == 8
    history = run.history(graph, thread("c"))
    reference_history = list(reference.get_state_history(thread("c")))
    assert [(s.metadata["step"], s.metadata["source"], s.next) for s in history] == [
        (s.metadata["step"], s.metadata["source"], s.next) for s in reference_history
    ]
    assert [without_ids(s.values.get("messages", [])) for s in history] == [
        without_ids(s.values.get("messages", [])) for s in reference_history
    ]
    # a fresh saver on the same records sees the same thread
    if not isinstance(run.saver.storage, MemoryStorage):
        reopened = VerifiedSaver(storage=reopen(run.saver.storage))
        assert without_ids(
            chat_graph(reopened).get_state(thread("c")).values["messages"]
        ) == without_ids(ours["messages"])


# -- interrupt() and Command(resume=...) ---------------------------------------------------


class ApprovalState(TypedDict):
    request: str
    decision: str
    log: Annotated[list, operator.add]


def approval_graph(checkpointer, calls: Counter):
    def prepare(state: ApprovalState):
        calls["prepare"] += 1
        return {"log": [f"prepared {state['request']}"]}

    def ask(state: ApprovalState):
        calls["ask"] += 1
        answer = interrupt({"question": f"approve {state['request']}?"})
        return {"decision": answer, "log": [f"decided {answer}"]}

    builder = StateGraph(ApprovalState)
    builder.add_node("prepare", prepare)
    builder.add_node("ask", ask)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=checkpointer)


def test_interrupt_and_resume(run):
    calls: Counter = Counter()
    graph = approval_graph(run.saver, calls)
    first = run.invoke(graph, {"request": "refund", "log": []}, thread("i"))
    assert first["__interrupt__"][0].value == {"question": "approve refund?"}
    paused = run.state(graph, thread("i"))
    assert paused.next == ("ask",)
    assert paused.tasks[0].interrupts[0].value == {"question": "approve refund?"}

    final = run.invoke(graph, Command(resume="yes"), thread("i"))
    assert final == {
        "request": "refund",
        "decision": "yes",
        "log": ["prepared refund", "decided yes"],
    }
    # prepare ran once; ask ran once before the interrupt and once on resume
    assert calls == Counter(prepare=1, ask=2)

    reference_calls: Counter = Counter()
    reference = approval_graph(InMemorySaver(), reference_calls)
    reference.invoke({"request": "refund", "log": []}, thread("i"))
    assert reference.invoke(Command(resume="yes"), thread("i")) == final
    assert reference_calls == calls


# -- subgraphs ---------------------------------------------------


class SubState(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]


def nested_graph(checkpointer):
    def research(state: SubState):
        return {"notes": [f"researched {state['topic']}"]}

    def review(state: SubState):
        verdict = interrupt(f"review {state['topic']}")
        return {"notes": [f"reviewed: {verdict}"]}

    sub = StateGraph(SubState)
    sub.add_node("research", research)
    sub.add_node("review", review)
    sub.add_edge(START, "research")
    sub.add_edge("research", "review")
    subgraph = sub.compile()

    def intro(state: SubState):
        return {"notes": ["intro"]}

    def outro(state: SubState):
        return {"notes": [f"outro with {len(state['notes'])} notes"]}

    parent = StateGraph(SubState)
    parent.add_node("intro", intro)
    parent.add_node("sub", subgraph)
    parent.add_node("outro", outro)
    parent.add_edge(START, "intro")
    parent.add_edge("intro", "sub")
    parent.add_edge("sub", "outro")
    return parent.compile(checkpointer=checkpointer)


def test_subgraph_checkpoints_live_in_their_namespace(run):
    graph = nested_graph(run.saver)
    run.invoke(graph, {"topic": "owls", "notes": []}, thread("s"))

    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in run.saver.list(thread("s"))}
    assert "" in namespaces
    sub_namespaces = [ns for ns in namespaces if ns.startswith("sub:")]
    assert len(sub_namespaces) == 1
    paused = run.state(graph, thread("s"), subgraphs=True)
    assert paused.next == ("sub",)
    sub_state = paused.tasks[0].state
    assert sub_state.config["configurable"]["checkpoint_ns"] == sub_namespaces[0]
    assert sub_state.values["notes"] == ["intro", "researched owls"]
    assert sub_state.next == ("review",)

    final = run.invoke(graph, Command(resume="fine"), thread("s"))
    reference = nested_graph(InMemorySaver())
    reference.invoke({"topic": "owls", "notes": []}, thread("s"))
    assert reference.invoke(Command(resume="fine"), thread("s")) == final
    # the subgraph returns its whole state, so operator.add sees "intro" twice
    assert final["notes"] == [
        "intro",
        "intro",
        "researched owls",
        "reviewed: fine",
        "outro with 4 notes",
    ]


# -- history, update_state, forking -------------------------------------------------------------


class CountState(TypedDict):
    value: int
    trail: Annotated[list, operator.add]


def counting_graph(checkpointer):
    builder = StateGraph(CountState)
    builder.add_node("double", lambda s: {"value": s["value"] * 2, "trail": ["double"]})
    builder.add_node("add_one", lambda s: {"value": s["value"] + 1, "trail": ["add_one"]})
    builder.add_node("square", lambda s: {"value": s["value"] ** 2, "trail": ["square"]})
    builder.add_edge(START, "double")
    builder.add_edge("double", "add_one")
    builder.add_edge("add_one", "square")
    return builder.compile(checkpointer=checkpointer)


def test_history_update_state_and_fork_from_an_old_checkpoint(run):
    graph = counting_graph(run.saver)
    assert run.invoke(graph, {"value": 3, "trail": []}, thread("f"))["value"] == 49
    history = run.history(graph, thread("f"))
    assert [s.next for s in history] == [(), ("square",), ("add_one",), ("double",), ("__start__",)]
    assert [s.values.get("value") for s in history] == [49, 7, 6, 3, None]

    # fork: go back to just before add_one and change the value
    before_add_one = history[2]
    forked = run.update(graph, before_add_one.config, {"value": 10, "trail": ["edit"]}, "double")
    assert (
        forked["configurable"]["checkpoint_id"]
        != before_add_one.config["configurable"]["checkpoint_id"]
    )
    fork_state = run.state(graph, forked)
    assert fork_state.values == {"value": 10, "trail": ["double", "edit"]}
    assert fork_state.next == ("add_one",)
    assert (
        fork_state.parent_config["configurable"]["checkpoint_id"]
        == (before_add_one.config["configurable"]["checkpoint_id"])
    )
    result = run.invoke(graph, None, forked)
    assert result == {"value": 121, "trail": ["double", "edit", "add_one", "square"]}

    # the original branch is untouched, and the thread's head is the fork's end
    assert run.state(graph, history[0].config).values["value"] == 49
    assert run.state(graph, thread("f")).values["value"] == 121

    reference = counting_graph(InMemorySaver())
    reference.invoke({"value": 3, "trail": []}, thread("f"))
    reference_history = list(reference.get_state_history(thread("f")))
    reference_fork = reference.update_state(
        reference_history[2].config, {"value": 10, "trail": ["edit"]}, as_node="double"
    )
    assert reference.invoke(None, reference_fork) == result
    assert [s.values for s in run.history(graph, thread("f"))] == [
        s.values for s in reference.get_state_history(thread("f"))
    ]


# -- Send fan-out with a failing branch ---------------------------------------------------


class FanState(TypedDict):
    items: list[str]
    results: Annotated[list, operator.add]


class WorkItem(TypedDict):
    item: str


def fan_out_graph(checkpointer, calls: Counter, fail: dict):
    def dispatch(state: FanState):
        return [Send("work", {"item": item}) for item in state["items"]]

    def work(arg: WorkItem):
        calls[arg["item"]] += 1
        if arg["item"] == "bad" and fail["on"]:
            # fail only once the other branches' writes are saved, so the test
            # is about reusing them, not about which thread finished first
            fail["saved"].wait_for(2)
            raise RuntimeError("branch failed")
        return {"results": [arg["item"].upper()]}

    builder = StateGraph(FanState)
    builder.add_node("work", work)
    builder.add_conditional_edges(START, dispatch, ["work"])
    builder.add_edge("work", END)
    return builder.compile(checkpointer=checkpointer)


class SavedWrites:
    """Counts ``put_writes`` calls that carry results, and lets a thread wait for them."""

    def __init__(self, saver) -> None:
        self.count = 0
        self.condition = threading.Condition()
        original = saver.put_writes

        def counting_put_writes(config, writes, task_id, task_path=""):
            original(config, writes, task_id, task_path)
            # a branch's result, not the graph input (which writes an empty "results")
            if any(channel == "results" and value for channel, value in writes):
                with self.condition:
                    self.count += 1
                    self.condition.notify_all()

        saver.put_writes = counting_put_writes

    def wait_for(self, n: int) -> None:
        with self.condition:
            assert self.condition.wait_for(lambda: self.count >= n, timeout=60)


def test_send_fan_out_reuses_writes_of_finished_branches(run):
    calls: Counter = Counter()
    fail = {"on": True, "saved": SavedWrites(run.saver)}
    graph = fan_out_graph(run.saver, calls, fail)
    with pytest.raises(RuntimeError, match="branch failed"):
        run.invoke(graph, {"items": ["a", "b", "bad"], "results": []}, thread("fan"))
    assert calls == Counter(a=1, b=1, bad=1)
    pending = run.saver.get_tuple(thread("fan")).pending_writes
    assert sorted(v for _, ch, v in pending if ch == "results") == [["A"], ["B"]]
    (error,) = [v for _, ch, v in pending if ch == "__error__"]
    assert "branch failed" in str(error)

    fail["on"] = False
    final = run.invoke(graph, None, thread("fan"))
    # only the failed branch ran again
    assert calls == Counter(a=1, b=1, bad=2)
    assert sorted(final["results"]) == ["A", "B", "BAD"]

    reference_calls: Counter = Counter()
    reference = fan_out_graph(InMemorySaver(), reference_calls, {"on": False})
    expected = reference.invoke({"items": ["a", "b", "bad"], "results": []}, thread("fan"))
    assert sorted(final["results"]) == sorted(expected["results"])


# -- functional API -------------------------------------------------------------------------------


def functional_workflow(checkpointer, calls: Counter):
    @task
    def draft(topic: str) -> str:
        calls["draft"] += 1
        return f"draft about {topic}"

    @task
    def polish(text: str) -> str:
        calls["polish"] += 1
        return text.upper()

    @entrypoint(checkpointer=checkpointer)
    def workflow(topic: str) -> dict:
        text = draft(topic).result()
        approved = interrupt({"draft": text})
        final = polish(text).result() if approved else text
        return {"text": final, "approved": approved}

    return workflow


def test_functional_api_tasks_are_not_rerun_on_resume(run):
    calls: Counter = Counter()
    workflow = functional_workflow(run.saver, calls)
    first = run.invoke(workflow, "bees", thread("fn"))
    assert first["__interrupt__"][0].value == {"draft": "draft about bees"}
    final = run.invoke(workflow, Command(resume=True), thread("fn"))
    assert final == {"text": "DRAFT ABOUT BEES", "approved": True}
    # draft's result came back from its saved write
    assert calls == Counter(draft=1, polish=1)
    assert run.state(workflow, thread("fn")).values == final

    reference = functional_workflow(InMemorySaver(), Counter())
    reference.invoke("bees", thread("fn"))
    assert reference.invoke(Command(resume=True), thread("fn")) == final


# -- durability ---------------------------------------------------


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_durability_modes_save_what_in_memory_saver_saves(run, durability):
    graph = counting_graph(run.saver)
    result = run.invoke(graph, {"value": 2, "trail": []}, thread("d"), durability=durability)
    assert result["value"] == 25

    reference = counting_graph(InMemorySaver())
    reference.invoke({"value": 2, "trail": []}, thread("d"), durability=durability)
    ours = [(s.metadata["step"], s.values, s.next) for s in run.history(graph, thread("d"))]
    theirs = [
        (s.metadata["step"], s.values, s.next) for s in reference.get_state_history(thread("d"))
    ]
    assert ours == theirs
    if durability == "exit":
        assert len(ours) == 1
    else:
        assert len(ours) == 5
    assert run.state(graph, thread("d")).values == {
        "value": 25,
        "trail": ["double", "add_one", "square"],
    }


# -- encryption ---------------------------------------------------

SECRET = "the launch code is 4417-RED-SWORDFISH"
KEY = b"0123456789abcdef0123456789abcdef"


def stored_bytes(saver) -> list[bytes]:
    storage = saver.storage
    if isinstance(storage, FileStorage):
        found = []
        for dirpath, _, filenames in os.walk(storage.root):
            for name in filenames:
                with open(os.path.join(dirpath, name), "rb") as f:
                    found.append(f.read())
        return found
    if isinstance(storage, ObjectStorage):
        return [storage.read(key) for key in storage.walk("")]
    return list(storage.records.values())


def reopen(storage):
    """The same store, as another process (or machine) opens it."""
    if isinstance(storage, FileStorage):
        return FileStorage(storage.root, fsync=False)
    return ObjectStorage(store=storage.store)


def test_encrypted_serializer_keeps_plaintext_out_of_the_store(run):
    encrypted = VerifiedSaver(
        storage=run.saver.storage, serde=EncryptedSerializer.from_pycryptodome_aes(key=KEY)
    )
    run.saver = encrypted
    graph = chat_graph(encrypted)
    result = run.invoke(graph, {"messages": [HumanMessage(SECRET)], "turns": 0}, thread("enc"))
    assert result["messages"][2].content == f"you said {SECRET}"
    records = stored_bytes(encrypted)
    # every record (the checkpoints and writes of the run) and every byte on disk
    assert len([k for k in encrypted.storage.walk("threads")]) >= 4
    for needle in (SECRET, "SWORDFISH", "launch code"):
        for data in records:
            assert needle.encode() not in data
            assert needle.encode("utf-16-le") not in data

    # another saver with the same key on the same records reads it back
    again = VerifiedSaver(
        storage=run.saver.storage, serde=EncryptedSerializer.from_pycryptodome_aes(key=KEY)
    )
    messages = again.get_tuple(thread("enc")).checkpoint["channel_values"]["messages"]
    assert without_ids(messages) == without_ids(result["messages"])


# -- a new process continues the thread ---------------------------------------------------

CONTINUE_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from langchain_core.messages import HumanMessage
    from langgraph_checkpoint_verified import VerifiedSaver
    sys.path.insert(0, sys.argv[3])
    from test_graphs import chat_graph

    store, mode = sys.argv[1], sys.argv[2]
    graph = chat_graph(VerifiedSaver(store))
    config = {"configurable": {"thread_id": "proc"}}
    before = graph.get_state(config)
    graph_input = {"messages": [HumanMessage("from the child")], "turns": before.values["turns"]}
    if mode == "sync":
        result = graph.invoke(graph_input, config)
    else:
        result = asyncio.run(graph.ainvoke(graph_input, config))
    print(json.dumps({
        "seen_before": len(before.values["messages"]),
        "messages": [m.content for m in result["messages"]],
        "history": len(list(graph.get_state_history(config))),
    }))
    """
)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_new_process_continues_the_thread(tmp_path, mode):
    import json

    store = tmp_path / "store"
    graph = chat_graph(VerifiedSaver(store))
    first = graph.invoke(
        {"messages": [HumanMessage("from the parent")], "turns": 0}, thread("proc")
    )
    assert len(first["messages"]) == 4

    script = tmp_path / "continue_thread.py"
    script.write_text(CONTINUE_SCRIPT)
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, str(script), str(store), mode, tests_dir],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout.strip().splitlines()[-1])
    assert child["seen_before"] == 4
    assert child["messages"][:4] == [m.content for m in first["messages"]]
    assert len(child["messages"]) == 8
    assert child["history"] == 10

    # and this process sees what the child wrote
    reopened = VerifiedSaver(store)
    state = chat_graph(reopened).get_state(thread("proc"))
    assert [m.content for m in state.values["messages"]] == child["messages"]
    assert state.values["turns"] == 2
    assert reopened.verify().ok
