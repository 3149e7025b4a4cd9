"""``VerifiedToolNode``: finished tool calls are never repeated, at-most-once tools never
run twice, and tool records follow their thread.

Every graph test runs on files and in memory, through the sync and the async API.
Side effects are counted in a ``Counter`` (in-process) or a log file (crash tests
with real processes and real ``SIGKILL``), and every count is asserted exactly.
Which record may answer which call (resume, retry, fork, rewind, replay) is tested in
``test_tool_lineage.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, create_react_agent
from langgraph.types import Command, interrupt

from langgraph_checkpoint_verified import (
    ToolOutcomeUnknownError,
    VerifiedSaver,
    VerifiedToolNode,
    arun_with_recovery,
    current_idempotency_key,
    idempotency_key,
    run_with_recovery,
)
from langgraph_checkpoint_verified.records.keys import decode_segment
from langgraph_checkpoint_verified.tools import fingerprint, record_namespace

HERE = Path(__file__).parent
CHILD = HERE / "tool_crash_child.py"


@pytest.fixture(params=["files", "memory"])
def saver(request, tmp_path):
    if request.param == "files":
        return VerifiedSaver(tmp_path / "store")
    return VerifiedSaver.in_memory()


@pytest.fixture(params=["sync", "async"])
def mode(request):
    return request.param


def invoke(graph, graph_input, config, mode):
    if mode == "sync":
        return graph.invoke(graph_input, config)
    return asyncio.run(graph.ainvoke(graph_input, config))


def recover(graph, graph_input, config, mode, **kwargs):
    if mode == "sync":
        return run_with_recovery(graph, graph_input, config, **kwargs)
    return asyncio.run(arun_with_recovery(graph, graph_input, config, **kwargs))


def calls(*specs: tuple[str, dict]) -> list[dict]:
    return [
        {"name": name, "args": args, "id": f"call_{i}", "type": "tool_call"}
        for i, (name, args) in enumerate(specs, start=1)
    ]


class Effects:
    """Three tools with counted side effects; ``fail`` makes named tools raise once."""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.count: Counter[str] = Counter()
        self.keys: list[str] = []
        self.to_fail = set(fail)

        @tool
        def send_email(to: str) -> str:
            """Send an email."""
            return self._effect("send_email", f"sent to {to}")

        @tool
        def charge(amount: int) -> str:
            """Charge the card."""
            return self._effect("charge", f"charged {amount}")

        @tool
        def lookup(query: str) -> str:
            """Look something up."""
            return self._effect("lookup", f"found {query}")

        self.tools = [send_email, charge, lookup]

    def _effect(self, name: str, result: str) -> str:
        self.count[name] += 1
        try:
            self.keys.append(current_idempotency_key())
        except LookupError:  # a plain ToolNode gives no key
            self.keys.append("")
        if name in self.to_fail:
            self.to_fail.discard(name)
            raise RuntimeError(f"{name} failed once")
        return result


THREE_CALLS = calls(
    ("send_email", {"to": "ann@example.com"}),
    ("charge", {"amount": 42}),
    ("lookup", {"query": "order 7"}),
)


def tools_graph(node, saver, tool_calls=THREE_CALLS, *, pause=False):
    """START -> agent (one AI message with ``tool_calls``) -> tools -> END.

    With ``pause``, the graph stops before the tools node (``interrupt_before``).
    """

    def agent(state: MessagesState) -> dict:
        return {"messages": [AIMessage("", tool_calls=tool_calls)]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=saver, interrupt_before=["tools"] if pause else None)


def config(thread_id="t1"):
    return {"configurable": {"thread_id": thread_id}}


def tool_messages(output) -> dict[str, str]:
    return {m.tool_call_id: m.content for m in output["messages"] if isinstance(m, ToolMessage)}


def tools_checkpoint(graph, cfg) -> str:
    """The id of the checkpoint the thread's tools task ran (or will run) from."""
    (before,) = [s for s in graph.get_state_history(cfg) if s.next == ("tools",)]
    return before.config["configurable"]["checkpoint_id"]


def records_of(graph, cfg, node="tools") -> str:
    """The namespace the records of the thread's tools task are kept under."""
    return record_namespace(node, tools_checkpoint(graph, cfg))


def recorded_namespaces(saver, thread_id="t1") -> set[str]:
    """Every namespace that holds a tool record of the thread, read from the store's keys."""
    thread = f"threads/{thread_id}/tools/"
    return {
        decode_segment(key[len(thread) :].split("/")[0])
        for key in saver.storage.walk("threads")
        if key.startswith(thread)
    }


# -- the scenario ------------------------------------------------------


def test_third_call_fails_once_first_two_run_exactly_once(saver, mode):
    effects = Effects(fail=("lookup",))
    graph = tools_graph(VerifiedToolNode(effects.tools), saver)

    result = recover(graph, {"messages": [HumanMessage("go")]}, config(), mode)

    assert effects.count == Counter(send_email=1, charge=1, lookup=2)
    assert result["attempts"] == 2
    # -1 input, 0 start, 1 agent: the tools task ran (and failed) in step 2
    assert result["recovered_from_step"] == 1
    assert result["restarted_from_scratch"] is False
    assert [type(e) for e in result["errors"]] == [RuntimeError]
    assert tool_messages(result["output"]) == {
        "call_1": "sent to ann@example.com",
        "call_2": "charged 42",
        "call_3": "found order 7",
    }


def test_plain_tool_node_repeats_finished_calls(saver, mode):
    """The baseline the node exists for: LangGraph's ToolNode runs the first two again."""
    from langgraph.prebuilt import ToolNode

    effects = Effects(fail=("lookup",))
    graph = tools_graph(ToolNode(effects.tools), saver)
    recover(graph, {"messages": [HumanMessage("go")]}, config(), mode)
    assert effects.count == Counter(send_email=2, charge=2, lookup=2)


def test_idempotency_key_is_stable_across_resumes_and_documented(saver, mode):
    effects = Effects(fail=("lookup",))
    graph = tools_graph(VerifiedToolNode(effects.tools), saver)
    recover(graph, {"messages": [HumanMessage("go")]}, config("keys"), mode)

    lineage = tools_checkpoint(graph, config("keys"))
    lookup_key = idempotency_key("keys", "tools", "call_3", lineage)
    assert effects.keys.count(lookup_key) == 2  # the failed run and the retry: one key
    assert sorted(set(effects.keys)) == sorted(
        idempotency_key("keys", "tools", f"call_{i}", lineage) for i in (1, 2, 3)
    )
    assert idempotency_key("other", "tools", "call_3", lineage) != lookup_key


def test_resume_answers_from_the_records_without_invoking(saver, mode):
    effects = Effects(fail=("lookup",))
    graph = tools_graph(VerifiedToolNode(effects.tools), saver)
    with pytest.raises(RuntimeError, match="lookup failed once"):
        invoke(graph, {"messages": [HumanMessage("go")]}, config(), mode)
    records = records_of(graph, config())
    recorded = {
        f"call_{i}": saver.get_tool_record("t1", records, f"call_{i}", "result") for i in (1, 2)
    }
    output = invoke(graph, None, config(), mode)
    assert effects.count == Counter(send_email=1, charge=1, lookup=2)
    assert saver.get_tool_record("t1", records, "call_3", "result") is not None
    for call_id, (_, message) in recorded.items():
        assert tool_messages(output)[call_id] == message.content
    assert recorded["call_1"][0] == fingerprint("send_email", {"to": "ann@example.com"})


def test_a_new_turn_repeating_the_same_calls_runs_them_like_tool_node(saver, mode):
    """A second turn whose AI message repeats the first one's call ids and arguments is a
    new call: the records of the first turn do not answer it."""
    effects = Effects()
    graph = tools_graph(VerifiedToolNode(effects.tools), saver)
    first = invoke(graph, {"messages": [HumanMessage("go")]}, config(), mode)
    second = invoke(graph, {"messages": [HumanMessage("again")]}, config(), mode)
    assert effects.count == Counter(send_email=2, charge=2, lookup=2)
    assert list(tool_messages(second).values()) == list(tool_messages(first).values())
    assert len(recorded_namespaces(saver)) == 2  # one per run of the tools task


def test_fingerprint_mismatch_runs_again_and_says_why(saver, mode, caplog):
    effects = Effects()
    graph = tools_graph(VerifiedToolNode(effects.tools), saver, pause=True)
    invoke(graph, {"messages": []}, config(), mode)
    # a record of call_1 with other arguments, in the records of this very task
    saver.put_tool_record(
        "t1",
        records_of(graph, config()),
        "call_1",
        "result",
        fingerprint=fingerprint("send_email", {"to": "bob@example.com"}),
        value=ToolMessage("sent to bob@example.com", tool_call_id="call_1"),
    )
    with caplog.at_level(logging.WARNING, logger="langgraph_checkpoint_verified"):
        output = invoke(graph, None, config(), mode)
    assert effects.count == Counter(send_email=1, charge=1, lookup=1)
    assert tool_messages(output)["call_1"] == "sent to ann@example.com"
    assert "other arguments" in caplog.text and "call_1" in caplog.text


# -- drop-in behaviour ---------------------------------------------------------


def fetch_down_once() -> Any:
    """A tool whose first call raises ``ConnectionError`` (unhandled: it fails the task,
    so the node runs again on resume), and which works from then on."""
    flaky_left = ["once"]

    @tool
    def fetch(url: str) -> str:
        """Fetch a page; the network is down the first time."""
        if flaky_left:
            flaky_left.pop()
            raise ConnectionError("network down")
        return f"fetched {url}"

    return fetch


FOUR_CALLS = [*THREE_CALLS, {"name": "fetch", "args": {"url": "x"}, "id": "call_4"}]
"""``THREE_CALLS``, then ``fetch_down_once``'s."""


def test_handled_errors_are_returned_and_not_recorded(saver, mode):
    effects = Effects(fail=("charge",))
    # RuntimeError (charge) becomes an error ToolMessage; ConnectionError fails the task
    node = VerifiedToolNode([*effects.tools, fetch_down_once()], handle_tool_errors=(RuntimeError,))
    graph = tools_graph(node, saver, FOUR_CALLS)
    with pytest.raises(ConnectionError):
        invoke(graph, {"messages": []}, config(), mode)
    records = records_of(graph, config())
    assert saver.get_tool_record("t1", records, "call_2", "result") is None
    assert saver.get_tool_record("t1", records, "call_1", "result") is not None

    output = invoke(graph, None, config(), mode)  # resume: the handled error runs again
    assert effects.count == Counter(send_email=1, charge=2, lookup=1)
    assert tool_messages(output)["call_2"] == "charged 42"
    assert tool_messages(output)["call_4"] == "fetched x"


def test_invalid_arguments_and_unknown_tools_behave_as_in_tool_node(saver, mode):
    effects = Effects()
    bad = calls(("charge", {"amount": "not a number"}), ("nope", {}))
    graph = tools_graph(VerifiedToolNode(effects.tools), saver, bad)
    output = invoke(graph, {"messages": []}, config(), mode)
    errors = [m for m in output["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in errors] == ["error", "error"]
    assert "nope is not a valid tool" in errors[1].content
    assert effects.count == Counter()


class CommandState(MessagesState):
    seen: list[str]


def test_command_results_and_injected_state_are_recorded_and_replayed(saver, mode):
    count: Counter[str] = Counter()
    fail = ["once"]

    @tool
    def remember(word: str) -> Command:
        """Remember a word."""
        count["remember"] += 1
        return Command(
            update={
                "seen": [word],
                "messages": [ToolMessage(f"remembered {word}", tool_call_id="call_1")],
            }
        )

    @tool
    def size(state: Annotated[dict, InjectedState]) -> str:
        """How many messages there are."""
        count["size"] += 1
        if fail:
            fail.pop()
            raise RuntimeError("size failed once")
        return f"{len(state['messages'])} messages"

    def agent(state: CommandState) -> dict:
        tool_calls = calls(("remember", {"word": "w"}), ("size", {}))
        return {"messages": [AIMessage("", tool_calls=tool_calls)]}

    builder = StateGraph(CommandState)
    builder.add_node("agent", agent)
    builder.add_node("tools", VerifiedToolNode([remember, size]))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    graph = builder.compile(checkpointer=saver)

    result = recover(graph, {"messages": [HumanMessage("hi")], "seen": []}, config(), mode)
    assert count == Counter(remember=1, size=2)
    assert result["output"]["seen"] == ["w"]
    assert tool_messages(result["output"]) == {"call_1": "remembered w", "call_2": "2 messages"}
    fp, recorded = saver.get_tool_record("t1", records_of(graph, config()), "call_1", "result")
    assert isinstance(recorded, Command) and fp == fingerprint("remember", {"word": "w"})


def test_other_checkpointers_are_refused_with_what_to_do_when_records_are_required(mode):
    """``require_records=True`` keeps the refusal for people who want a misconfiguration to
    fail loudly; without it the node runs as ``ToolNode`` (``test_tool_drop_in.py``)."""
    effects = Effects()
    graph = tools_graph(VerifiedToolNode(effects.tools, require_records=True), InMemorySaver())
    with pytest.raises(TypeError, match=r"checkpointer=VerifiedSaver\("):
        invoke(graph, {"messages": []}, config(), mode)
    assert effects.count == Counter()


def test_an_explicit_saver_serves_a_graph_without_one(tmp_path, mode):
    records = VerifiedSaver(tmp_path / "records")
    effects = Effects()
    graph = tools_graph(VerifiedToolNode(effects.tools, saver=records), InMemorySaver())
    invoke(graph, {"messages": []}, config(), mode)
    # the lineage is read from the graph's own checkpointer, which holds the checkpoints
    assert records.get_tool_record("t1", records_of(graph, config()), "call_3", "result")


def test_a_config_that_names_no_checkpoint_is_refused_when_records_are_required(saver, mode):
    """Called from a node with a config of its own making, the node has no checkpoint to
    bind records to: with ``require_records=True`` it says so instead of running the tools
    unrecorded (without it, it runs them as ``ToolNode``: ``test_tool_drop_in.py``)."""
    effects = Effects()
    tools = VerifiedToolNode(effects.tools, require_records=True)

    def node(state: MessagesState, config) -> dict:
        configurable = {k: v for k, v in config["configurable"].items() if k != "checkpoint_map"}
        return tools.invoke(state, {**config, "configurable": configurable})

    graph = tools_graph(node, saver)
    with pytest.raises(ValueError, match="names none .* pass it the config its node was given"):
        invoke(graph, {"messages": []}, config(), mode)
    assert effects.count == Counter()


def test_constructor_checks_its_arguments():
    with pytest.raises(ValueError, match="does not have: \\['refund'\\]"):
        VerifiedToolNode(Effects().tools, at_most_once=["refund"])
    with pytest.raises(ValueError, match="on_unknown_outcome"):
        VerifiedToolNode(Effects().tools, on_unknown_outcome="ignore")
    assert VerifiedToolNode(Effects().tools, at_most_once="charge").at_most_once == {"charge"}


def test_namespace_inside_a_subgraph_is_stable_across_resumes(saver, mode):
    effects = Effects(fail=("lookup",))
    inner = tools_graph(VerifiedToolNode(effects.tools), None)
    outer = StateGraph(MessagesState)
    outer.add_node("inner", inner)
    outer.add_edge(START, "inner")
    graph = outer.compile(checkpointer=saver)

    result = recover(graph, {"messages": []}, config(), mode)
    assert effects.count == Counter(send_email=1, charge=1, lookup=2)
    assert result["attempts"] == 2
    (namespace,) = recorded_namespaces(saver)
    assert namespace.startswith("inner|tools@")
    assert saver.get_tool_record("t1", namespace, "call_1", "result") is not None


# -- at-most-once --------------------------------------------------------------


def paused_before_tools(effects, saver, mode, **node_kwargs):
    """A graph with an at-most-once ``charge``, stopped before its tools task runs."""
    node = VerifiedToolNode(effects.tools, at_most_once=["charge"], **node_kwargs)
    graph = tools_graph(node, saver, pause=True)
    invoke(graph, {"messages": []}, config(), mode)
    return graph


def leave_intent(saver, graph, tool_call_id="call_2", args=None):
    """What a process that died inside ``charge`` leaves behind: intent, no result."""
    saver.put_tool_record(
        "t1",
        records_of(graph, config()),
        tool_call_id,
        "intent",
        fingerprint=fingerprint("charge", args if args is not None else {"amount": 42}),
    )


def test_unknown_outcome_is_an_error_message_and_the_tool_is_not_invoked(saver, mode):
    effects = Effects()
    graph = paused_before_tools(effects, saver, mode)
    leave_intent(saver, graph)
    output = invoke(graph, None, config(), mode)
    assert effects.count == Counter(send_email=1, lookup=1)
    message = next(m for m in output["messages"] if getattr(m, "tool_call_id", "") == "call_2")
    assert message.status == "error"
    assert "may or may not have taken effect" in message.content
    key = idempotency_key("t1", "tools", "call_2", tools_checkpoint(graph, config()))
    assert key in message.content


def test_a_damaged_intent_still_counts_as_started(saver, mode):
    """An at-most-once intent that no longer verifies may still mean the tool ran."""
    effects = Effects()
    graph = paused_before_tools(effects, saver, mode)
    leave_intent(saver, graph)
    key = next(k for k in saver.storage.walk("threads") if k.endswith("call_2.intent"))
    saver.storage.write(key, saver.storage.read(key)[:-3] + b"???")
    output = invoke(graph, None, config(), mode)
    assert effects.count["charge"] == 0
    message = next(m for m in output["messages"] if getattr(m, "tool_call_id", "") == "call_2")
    assert message.status == "error" and "may or may not have taken effect" in message.content
    assert saver.stats.quarantined_records == 1
    # the call stays marked as started: a further rerun of it would not charge either
    intent = saver.get_tool_record("t1", records_of(graph, config()), "call_2", "intent")
    assert intent is not None and intent[0] == fingerprint("charge", {"amount": 42})


def test_an_unreadable_intent_still_counts_as_started(saver, mode, monkeypatch):
    """EIO on an at-most-once intent must not be taken for "never written"."""
    effects = Effects()
    graph = paused_before_tools(effects, saver, mode)
    leave_intent(saver, graph)
    real_read = saver.storage.read

    def failing_read(key):
        if key.endswith(".intent"):
            raise OSError(5, "Input/output error")
        return real_read(key)

    monkeypatch.setattr(saver.storage, "read", failing_read)
    output = invoke(graph, None, config(), mode)
    assert effects.count["charge"] == 0
    assert tool_messages(output)["call_2"].startswith("Error:")
    assert saver.stats.unreadable_records >= 1


def test_unknown_outcome_can_raise(saver, mode):
    effects = Effects()
    graph = paused_before_tools(effects, saver, mode, on_unknown_outcome="raise")
    leave_intent(saver, graph)
    with pytest.raises(ToolOutcomeUnknownError) as raised:
        recover(graph, {"messages": []}, config(), mode)
    assert raised.value.tool_call_id == "call_2"
    assert effects.count["charge"] == 0


def test_unknown_outcome_can_interrupt_and_the_answer_is_recorded(saver, mode):
    effects = Effects()
    graph = paused_before_tools(effects, saver, mode, on_unknown_outcome="interrupt")
    leave_intent(saver, graph)
    paused = invoke(graph, None, config(), mode)
    (question,) = paused["__interrupt__"]
    lineage = tools_checkpoint(graph, config())
    assert question.value["reason"] == "tool_outcome_unknown"
    assert question.value["idempotency_key"] == idempotency_key("t1", "tools", "call_2", lineage)
    assert question.value["checkpoint_id"] == lineage

    output = invoke(graph, Command(resume="charge confirmed by support"), config(), mode)
    assert tool_messages(output)["call_2"] == "charge confirmed by support"
    assert effects.count["charge"] == 0
    _, recorded = saver.get_tool_record("t1", records_of(graph, config()), "call_2", "result")
    assert recorded.content == "charge confirmed by support"


def test_intent_of_other_arguments_does_not_block_a_new_call(saver, mode, caplog):
    effects = Effects()
    graph = paused_before_tools(effects, saver, mode)
    leave_intent(saver, graph, args={"amount": 1})
    with caplog.at_level(logging.WARNING, logger="langgraph_checkpoint_verified"):
        output = invoke(graph, None, config(), mode)
    assert effects.count["charge"] == 1
    assert tool_messages(output)["call_2"] == "charged 42"
    assert "started before with another tool name, other arguments" in caplog.text


def test_at_most_once_tool_that_raises_runs_again(saver, mode):
    effects = Effects(fail=("charge",))
    graph = tools_graph(VerifiedToolNode(effects.tools, at_most_once=["charge"]), saver)
    result = recover(graph, {"messages": []}, config(), mode)
    assert effects.count == Counter(send_email=1, charge=2, lookup=1)
    assert tool_messages(result["output"])["call_2"] == "charged 42"


def test_at_most_once_tool_whose_error_is_handled_runs_again(saver, mode):
    """An error the node handles (an error ``ToolMessage``) is a known outcome, as a raise
    is: the call's intent goes with it, and the next run of the node runs the tool."""
    effects = Effects(fail=("charge",))
    node = VerifiedToolNode(
        [*effects.tools, fetch_down_once()],
        handle_tool_errors=(RuntimeError,),
        at_most_once=["charge"],
    )
    graph = tools_graph(node, saver, FOUR_CALLS)
    with pytest.raises(ConnectionError):  # fails the task: the node runs again on resume
        invoke(graph, {"messages": []}, config(), mode)
    output = invoke(graph, None, config(), mode)
    assert effects.count == Counter(send_email=1, charge=2, lookup=1)
    assert tool_messages(output)["call_2"] == "charged 42"


def test_at_most_once_tool_that_interrupts_runs_again_on_resume(saver, mode):
    count: Counter[str] = Counter()

    @tool
    def wire(amount: int) -> str:
        """Wire money after approval."""
        count["before"] += 1
        approved = interrupt(f"approve {amount}?")
        count["after"] += 1
        return f"wired {amount}: {approved}"

    node = VerifiedToolNode([wire], at_most_once=["wire"])
    graph = tools_graph(node, saver, calls(("wire", {"amount": 5})))
    assert "__interrupt__" in invoke(graph, {"messages": []}, config(), mode)
    output = invoke(graph, Command(resume="yes"), config(), mode)
    assert tool_messages(output) == {"call_1": "wired 5: yes"}
    assert count == Counter(before=2, after=1)  # LangGraph reruns a tool up to its interrupt


# -- create_react_agent --------------------------------------------------------


class ScriptedChatModel(BaseChatModel):
    """Answers with the next scripted message; no network."""

    script: list[AIMessage]
    position: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs):
        reply = self.script[self.position]
        self.position += 1
        return ChatResult(generations=[ChatGeneration(message=reply)])


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_create_react_agent_runs_each_call_once(saver, mode, version):
    effects = Effects(fail=("lookup",))
    model = ScriptedChatModel(script=[AIMessage("", tool_calls=THREE_CALLS), AIMessage("all done")])
    node = VerifiedToolNode(effects.tools, at_most_once=["charge"])
    graph = create_react_agent(model, tools=node, checkpointer=saver, version=version)

    result = recover(graph, {"messages": [HumanMessage("do it")]}, config(), mode)

    assert effects.count == Counter(send_email=1, charge=1, lookup=2)
    assert model.position == 2  # the model was not asked again on resume
    assert result["attempts"] == 2
    assert result["output"]["messages"][-1].content == "all done"
    assert tool_messages(result["output"]) == {
        "call_1": "sent to ann@example.com",
        "call_2": "charged 42",
        "call_3": "found order 7",
    }


# -- records follow their thread -----------------------------------------------


def test_copy_prune_and_delete_of_a_thread_with_tool_records(saver, mode):
    effects = Effects(fail=("lookup",))
    graph = tools_graph(VerifiedToolNode(effects.tools), saver)
    with pytest.raises(RuntimeError):
        invoke(graph, {"messages": []}, config("a"), mode)  # call_1 and call_2 recorded
    records = records_of(graph, config("a"))

    saver.copy_thread("a", "b")
    for i in (1, 2):
        assert saver.get_tool_record("b", records, f"call_{i}", "result") == (
            saver.get_tool_record("a", records, f"call_{i}", "result")
        )
    # the copy resumes the same task (the checkpoints keep their ids): answered from the
    # copied records
    output = invoke(graph, None, config("b"), mode)
    assert effects.count == Counter(send_email=1, charge=1, lookup=2)
    assert tool_messages(output)["call_1"] == "sent to ann@example.com"

    saver.prune(["a"], strategy="keep_latest")
    assert len(list(saver.list(config("a")))) == 1
    output = invoke(graph, None, config("a"), mode)
    assert effects.count == Counter(send_email=1, charge=1, lookup=3)
    assert tool_messages(output)["call_3"] == "found order 7"

    saver.delete_thread("a")
    assert saver.get_tool_record("a", records, "call_1", "result") is None
    assert recorded_namespaces(saver, "a") == set()
    assert saver.get_tool_record("b", records, "call_1", "result") is not None


def test_delete_for_runs_keeps_tool_records(saver, mode):
    effects = Effects()
    graph = tools_graph(VerifiedToolNode(effects.tools), saver)
    run_id = "0191c3b2-0000-7000-8000-000000000001"
    run_config = {"configurable": {"thread_id": "t1"}, "run_id": run_id}
    invoke(graph, {"messages": []}, run_config, mode)
    records = records_of(graph, config())
    saver.delete_for_runs([run_config["run_id"]])
    assert saver.get_tool_record("t1", records, "call_1", "result") is not None


def test_damaged_tool_record_is_quarantined_reported_and_the_call_runs_again(saver, mode):
    damage = []
    saver.reporter.on_corruption = damage.append
    effects = Effects(fail=("lookup",))
    graph = tools_graph(VerifiedToolNode(effects.tools), saver)
    with pytest.raises(RuntimeError):
        invoke(graph, {"messages": []}, config(), mode)

    key = next(k for k in saver.storage.walk("threads") if k.endswith("call_2.result"))
    data = bytearray(saver.storage.read(key))
    data[len(data) // 2] ^= 0xFF
    saver.storage.write(key, bytes(data))

    output = invoke(graph, None, config(), mode)
    assert effects.count == Counter(send_email=1, charge=2, lookup=2)
    assert tool_messages(output)["call_2"] == "charged 42"
    assert [d.key for d in damage] == [key]
    assert damage[0].quarantined_to is not None
    assert saver.stats.quarantined_records == 1
    # the rerun wrote a fresh record that verifies
    fresh = saver.get_tool_record("t1", records_of(graph, config()), "call_2", "result")
    assert fresh[1].content == "charged 42"


# -- real processes, real SIGKILL ----------------------------------------------


def run_child(
    store: Path, log: Path, scenario: str, phase: str, graph: str = "node"
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(CHILD), str(store), str(log), scenario, phase, graph],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )


def log_counts(log: Path) -> Counter[str]:
    return Counter(log.read_text().split())


def test_sigkill_inside_the_third_call_then_resume_in_a_new_process(tmp_path):
    store, log = tmp_path / "store", tmp_path / "effects.log"
    killed = run_child(store, log, "kill_in_third", "first")
    assert killed.returncode == -9, killed.stderr
    assert log_counts(log) == Counter(send_email=1, charge=1, lookup=1)

    resumed = run_child(store, log, "kill_in_third", "resume")
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert log_counts(log) == Counter(send_email=1, charge=1, lookup=2)
    assert report["attempts"] == 1
    assert report["recovered_from_step"] == 1  # the unfinished run was continued
    assert report["tool_messages"] == {
        "call_1": "sent to ann@example.com",
        "call_2": "charged 42",
        "call_3": "found order 7",
    }


def test_at_most_once_tool_killed_after_its_side_effect_never_runs_again(tmp_path):
    store, log = tmp_path / "store", tmp_path / "effects.log"
    killed = run_child(store, log, "kill_in_charge", "first")
    assert killed.returncode == -9, killed.stderr
    assert log_counts(log) == Counter(send_email=1, charge=1, lookup=1)

    resumed = run_child(store, log, "kill_in_charge", "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert log_counts(log) == Counter(send_email=1, charge=1, lookup=1)
    report = json.loads(resumed.stdout)
    assert report["finished"] is True
    assert report["tool_messages"]["call_1"] == "sent to ann@example.com"
    assert report["tool_messages"]["call_3"] == "found order 7"
    assert "may or may not have taken effect" in report["tool_messages"]["call_2"]


def test_at_most_once_call_killed_in_its_own_v2_task_never_runs_again(tmp_path):
    """``create_react_agent(version="v2")`` runs each call as a task of its own, and
    LangGraph keeps the writes of the tasks that finished; the task killed inside
    ``charge`` has none. Its intent record is what keeps ``charge`` from running again."""
    store, log = tmp_path / "store", tmp_path / "effects.log"
    killed = run_child(store, log, "kill_in_charge", "first", graph="agent_v2")
    assert killed.returncode == -9, killed.stderr
    assert log_counts(log) == Counter(send_email=1, charge=1, lookup=1)

    resumed = run_child(store, log, "kill_in_charge", "resume", graph="agent_v2")
    assert resumed.returncode == 0, resumed.stderr
    assert log_counts(log) == Counter(send_email=1, charge=1, lookup=1)
    report = json.loads(resumed.stdout)
    assert report["finished"] is True
    assert report["tool_messages"]["call_1"] == "sent to ann@example.com"
    assert report["tool_messages"]["call_3"] == "found order 7"
    assert "may or may not have taken effect" in report["tool_messages"]["call_2"]
