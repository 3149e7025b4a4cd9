"""Which recorded tool result may stand in for a call.

A record answers a call only when it is the same call: the same tool, arguments and
injected state, issued in the same run of the tools task. A resume or a retry of that
task reuses it (also after ``run_with_recovery`` applied a corrective update at the
head of the thread); a fork, a rewind or a time-travel replay is a new call and runs
the tool again, exactly as LangGraph's ``ToolNode`` does.

Every test runs real graphs on files and in memory, sync and async. Where the rule says
"like ``ToolNode``", the test runs the same scenario with ``ToolNode`` and asserts that
both nodes ran every tool the same number of times and answered the same.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Annotated, Any

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.channels.untracked_value import UntrackedValue
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode, ToolRuntime, create_react_agent
from langgraph.prebuilt.chat_agent_executor import AgentState

from langgraph_checkpoint_verified import (
    StateUpdate,
    VerifiedSaver,
    VerifiedToolNode,
    arun_with_recovery,
    current_idempotency_key,
    run_with_recovery,
)

CONFIG = {"configurable": {"thread_id": "t1"}}


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


def update(graph, config, values, mode, as_node=None):
    if mode == "sync":
        return graph.update_state(config, values, as_node=as_node)
    return asyncio.run(graph.aupdate_state(config, values, as_node=as_node))


class Killed(BaseException):
    """Stands for the process dying inside a tool: no ``except Exception`` sees it."""


class Account(MessagesState):
    balance: int


class Bank:
    """Four tools with counted side effects. ``fail`` makes the named tools raise once;
    ``kill`` makes them end like a killed process once, after their side effect."""

    def __init__(self, fail: tuple[str, ...] = (), kill: tuple[str, ...] = ()) -> None:
        self.count: Counter[str] = Counter()
        self.keys: list[str] = []
        self.to_fail = set(fail)
        self.to_kill = set(kill)
        self.before_kill = lambda: None

        @tool
        def show_balance(balance: Annotated[int, InjectedState("balance")]) -> str:
            """Show the account balance."""
            return self._effect("show_balance", f"balance={balance}")

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

        self.tools = [show_balance, send_email, charge, lookup]

    def _effect(self, name: str, result: str) -> str:
        self.count[name] += 1
        try:
            self.keys.append(current_idempotency_key())
        except LookupError:  # ToolNode gives no key
            self.keys.append("")
        if name in self.to_kill:
            self.to_kill.discard(name)
            self.before_kill()
            raise Killed(name)
        if name in self.to_fail:
            self.to_fail.discard(name)
            raise RuntimeError(f"{name} failed once")
        return result


def calls(*specs: tuple[str, dict]) -> list[dict]:
    return [
        {"name": name, "args": args, "id": f"call_{i}", "type": "tool_call"}
        for i, (name, args) in enumerate(specs, start=1)
    ]


THREE_CALLS = calls(
    ("show_balance", {}),
    ("send_email", {"to": "ann@example.com"}),
    ("lookup", {"query": "order 7"}),
)


def bank_graph(node, saver, tool_calls=THREE_CALLS, message_id=None):
    """START -> agent (one AI message with ``tool_calls``) -> tools -> END."""

    def agent(state: Account) -> dict:
        return {"messages": [AIMessage("", tool_calls=tool_calls, id=message_id)]}

    builder = StateGraph(Account)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=saver)


def make_node(kind: str, tools: list, **kwargs: Any):
    if kind == "verified":
        return VerifiedToolNode(tools, **kwargs)
    return ToolNode(tools)


START_INPUT = {"messages": [HumanMessage("go")], "balance": 10}


def answers(output) -> dict[str, str]:
    """The last answer to each tool call in the output's messages."""
    return {m.tool_call_id: m.content for m in output["messages"] if isinstance(m, ToolMessage)}


def checkpoint_before(graph, node: str, config=CONFIG):
    """The oldest checkpoint of the thread whose next task is ``node``."""
    return [s for s in graph.get_state_history(config) if s.next == (node,)][-1]


# -- resume and retry reuse the record -----------------------------------------


def test_resume_after_a_failure_in_the_third_call_runs_the_first_two_once(saver, mode):
    bank = Bank(fail=("lookup",))
    graph = bank_graph(VerifiedToolNode(bank.tools), saver)
    with pytest.raises(RuntimeError, match="lookup failed once"):
        invoke(graph, START_INPUT, CONFIG, mode)
    output = invoke(graph, None, CONFIG, mode)  # resume from the checkpoint the task ran from
    # show_balance reads injected state: the state loaded on resume fingerprints as the first did
    assert bank.count == Counter(show_balance=1, send_email=1, lookup=2)
    assert answers(output) == {
        "call_1": "balance=10",
        "call_2": "sent to ann@example.com",
        "call_3": "found order 7",
    }


def results_recorded(saver, monkeypatch, expected: int) -> threading.Event:
    """An event set once ``expected`` tool results have been recorded in ``saver``."""
    put_tool_record = saver.put_tool_record
    results: list[str] = []
    done = threading.Event()

    def counting_put(thread_id, checkpoint_ns, tool_call_id, kind, **kwargs):
        put_tool_record(thread_id, checkpoint_ns, tool_call_id, kind, **kwargs)
        if kind == "result":
            results.append(tool_call_id)
            if len(results) >= expected:
                done.set()

    monkeypatch.setattr(saver, "put_tool_record", counting_put)
    return done


def test_a_crash_inside_the_third_call_then_a_resume_runs_the_first_two_once(
    saver, mode, monkeypatch
):
    """The third call dies like a killed process (no ``except`` of the node sees it),
    once the other two have finished and been recorded."""
    bank = Bank(kill=("lookup",))
    others_recorded = results_recorded(saver, monkeypatch, 2)

    def kill_once_the_others_are_recorded() -> None:
        # the timeout only turns a regression into a failure instead of a hang
        assert others_recorded.wait(timeout=120), "the other two calls were never recorded"

    bank.before_kill = kill_once_the_others_are_recorded
    graph = bank_graph(VerifiedToolNode(bank.tools), saver)
    with pytest.raises(Killed):
        invoke(graph, START_INPUT, CONFIG, mode)
    output = invoke(graph, None, CONFIG, mode)
    assert bank.count == Counter(show_balance=1, send_email=1, lookup=2)
    assert answers(output)["call_3"] == "found order 7"


def test_retry_reuses_every_record(saver, mode):
    bank = Bank(fail=("lookup",))
    graph = bank_graph(VerifiedToolNode(bank.tools), saver)
    result = recover(graph, START_INPUT, CONFIG, mode)
    assert result["attempts"] == 2
    assert bank.count == Counter(show_balance=1, send_email=1, lookup=2)
    assert answers(result["output"])["call_1"] == "balance=10"


def test_a_corrective_update_at_the_head_reruns_only_the_calls_whose_inputs_it_changed(saver, mode):
    """``on_failure`` updates the thread's newest checkpoint: the same run, continued.

    The email (which reads no state) is not sent again; the balance, which the update
    changed, is read again, as ``ToolNode`` would read it.
    """
    bank = Bank(fail=("lookup",))
    graph = bank_graph(VerifiedToolNode(bank.tools), saver)

    def on_failure(error, state):
        return StateUpdate({"balance": 99}, as_node="agent")

    result = recover(graph, START_INPUT, CONFIG, mode, on_failure=on_failure)
    assert result["attempts"] == 2
    assert bank.count == Counter(show_balance=2, send_email=1, lookup=2)
    assert answers(result["output"]) == {
        "call_1": "balance=99",
        "call_2": "sent to ann@example.com",
        "call_3": "found order 7",
    }


def test_a_corrective_update_that_changes_nothing_a_tool_reads_reuses_every_record(saver, mode):
    bank = Bank(fail=("lookup",))
    graph = bank_graph(VerifiedToolNode(bank.tools), saver)

    def on_failure(error, state):
        return StateUpdate({"messages": [HumanMessage("try again")]}, as_node="agent")

    result = recover(graph, START_INPUT, CONFIG, mode, on_failure=on_failure)
    assert bank.count == Counter(show_balance=1, send_email=1, lookup=2)
    assert answers(result["output"])["call_2"] == "sent to ann@example.com"


def test_an_update_at_the_head_continues_its_run_even_after_prune(saver, mode):
    """``prune`` keeps only the update; its parent (where the records belong) is gone,
    and nothing was made between the two, so the update still continues that run."""
    bank = Bank(fail=("lookup",))
    graph = bank_graph(VerifiedToolNode(bank.tools), saver)
    with pytest.raises(RuntimeError, match="lookup failed once"):
        invoke(graph, START_INPUT, CONFIG, mode)
    update(graph, CONFIG, {"messages": [HumanMessage("try again")]}, mode, as_node="agent")
    saver.prune(["t1"], strategy="keep_latest")
    assert len(list(saver.list(CONFIG))) == 1
    output = invoke(graph, None, CONFIG, mode)
    assert bank.count == Counter(show_balance=1, send_email=1, lookup=2)
    assert answers(output)["call_3"] == "found order 7"


# -- a fork, a rewind or a replay is a new call, as in ToolNode -----------------


@pytest.mark.parametrize("kind", ["verified", "plain"])
def test_a_fork_that_changes_the_injected_state_runs_the_tools_again(saver, mode, kind):
    bank = Bank()
    graph = bank_graph(make_node(kind, bank.tools), saver)
    invoke(graph, START_INPUT, CONFIG, mode)
    before = checkpoint_before(graph, "tools")
    update(graph, before.config, {"balance": 99}, mode)
    output = invoke(graph, None, CONFIG, mode)
    assert answers(output)["call_1"] == "balance=99"
    assert bank.count == Counter(show_balance=2, send_email=2, lookup=2)


@pytest.mark.parametrize("kind", ["verified", "plain"])
def test_a_fork_that_changes_nothing_the_tools_read_still_runs_them_again(saver, mode, kind):
    bank = Bank()
    graph = bank_graph(make_node(kind, bank.tools), saver)
    invoke(graph, START_INPUT, CONFIG, mode)
    before = checkpoint_before(graph, "tools")
    update(graph, before.config, {"messages": [HumanMessage("a note")]}, mode, as_node="agent")
    output = invoke(graph, None, CONFIG, mode)
    assert answers(output)["call_2"] == "sent to ann@example.com"
    assert bank.count == Counter(show_balance=2, send_email=2, lookup=2)


@pytest.mark.parametrize("message_id", [None, "ai-1"], ids=["new-message-ids", "same-message-id"])
@pytest.mark.parametrize("kind", ["verified", "plain"])
def test_rewinding_and_reissuing_the_same_call_runs_it_each_time(saver, mode, kind, message_id):
    """Time travel to before the AI message, six times: the agent issues the same call
    (same id, same arguments, even the same message id) and the tool runs each time."""
    bank = Bank()
    one_call = calls(("send_email", {"to": "ann@example.com"}))
    graph = bank_graph(make_node(kind, bank.tools), saver, one_call, message_id)
    invoke(graph, START_INPUT, CONFIG, mode)
    before_agent = checkpoint_before(graph, "agent")
    for _ in range(6):
        output = invoke(graph, None, before_agent.config, mode)
        assert answers(output) == {"call_1": "sent to ann@example.com"}
    assert bank.count == Counter(send_email=7)
    if kind == "verified":
        assert len(set(bank.keys)) == 7  # a new call has a new idempotency key


@pytest.mark.parametrize("kind", ["verified", "plain"])
def test_replaying_an_unchanged_checkpoint_runs_the_tools_again(saver, mode, kind):
    """Time travel to the checkpoint the tools task ran from: LangGraph starts a new
    branch there and runs its tasks again, and so do the tools."""
    bank = Bank()
    graph = bank_graph(make_node(kind, bank.tools), saver)
    invoke(graph, START_INPUT, CONFIG, mode)
    before = checkpoint_before(graph, "tools")
    output = invoke(graph, None, before.config, mode)
    assert answers(output)["call_2"] == "sent to ann@example.com"
    assert bank.count == Counter(show_balance=2, send_email=2, lookup=2)


# -- at-most-once follows the same rule ----------------------------------------


def test_an_unknown_outcome_belongs_to_its_call_and_a_rewind_is_a_new_call(saver, mode):
    bank = Bank(kill=("charge",))
    one_call = calls(("charge", {"amount": 42}))
    node = VerifiedToolNode(bank.tools, at_most_once=["charge"])
    graph = bank_graph(node, saver, one_call)
    with pytest.raises(Killed):
        invoke(graph, START_INPUT, CONFIG, mode)
    assert bank.count == Counter(charge=1)

    # resuming the same task: the charge may have gone through, so it is not repeated
    for _ in range(2):
        output = invoke(graph, None, CONFIG, mode)
        assert "may or may not have taken effect" in answers(output)["call_1"]
    assert bank.count == Counter(charge=1)

    # a rewind to before the AI message issues the call anew: it runs, like in ToolNode
    before_agent = checkpoint_before(graph, "agent")
    output = invoke(graph, None, before_agent.config, mode)
    assert answers(output) == {"call_1": "charged 42"}
    assert bank.count == Counter(charge=2)
    assert bank.keys[0] != bank.keys[1]


# -- a tool that takes the whole state ------------------------------------------


def test_a_tool_taking_the_runtime_is_reused_on_resume_and_rerun_when_the_state_changes(
    saver, mode
):
    count: Counter[str] = Counter()
    fail = ["once"]

    @tool
    def summarize(runtime: ToolRuntime) -> str:
        """Summarize the conversation."""
        count["summarize"] += 1
        return f"{len(runtime.state['messages'])} messages, balance {runtime.state['balance']}"

    @tool
    def flaky() -> str:
        """Fails once."""
        count["flaky"] += 1
        if fail:
            fail.pop()
            raise RuntimeError("flaky failed once")
        return "ok"

    graph = bank_graph(
        VerifiedToolNode([summarize, flaky]), saver, calls(("summarize", {}), ("flaky", {}))
    )
    result = recover(graph, START_INPUT, CONFIG, mode)
    assert count == Counter(summarize=1, flaky=2)
    assert answers(result["output"])["call_1"] == "2 messages, balance 10"

    # a hint at the head adds a message: the whole state changed, so summarize runs again
    graph_input = {**START_INPUT, "messages": [HumanMessage("again")]}
    count.clear()
    fail.append("once")

    def on_failure(error, state):
        return {"messages": [HumanMessage("hint")]}

    other_thread = {"configurable": {"thread_id": "t2"}}
    result = recover(graph, graph_input, other_thread, mode, on_failure=on_failure)
    assert count == Counter(summarize=2, flaky=2)
    assert answers(result["output"])["call_1"] == "3 messages, balance 10"


class Scratch(Account):
    scratch: Annotated[str, UntrackedValue]


def test_untracked_values_in_the_state_do_not_count(saver, mode):
    """An ``UntrackedValue`` channel is never saved: the first run sees the value, a resume
    does not. It is not part of the call."""
    count: Counter[str] = Counter()
    seen: list[Any] = []
    fail = ["once"]

    @tool
    def summarize(runtime: ToolRuntime) -> str:
        """Summarize the conversation."""
        count["summarize"] += 1
        seen.append(runtime.state.get("scratch"))
        return f"{len(runtime.state['messages'])} messages"

    @tool
    def flaky() -> str:
        """Fails once."""
        count["flaky"] += 1
        if fail:
            fail.pop()
            raise RuntimeError("flaky failed once")
        return "ok"

    def agent(state: Scratch) -> dict:
        tool_calls = calls(("summarize", {}), ("flaky", {}))
        return {"messages": [AIMessage("", tool_calls=tool_calls)], "scratch": "draft"}

    builder = StateGraph(Scratch)
    builder.add_node("agent", agent)
    builder.add_node("tools", VerifiedToolNode([summarize, flaky]))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    graph = builder.compile(checkpointer=saver)

    with pytest.raises(RuntimeError, match="flaky failed once"):
        invoke(graph, START_INPUT, CONFIG, mode)
    assert seen == ["draft"]
    output = invoke(graph, None, CONFIG, mode)
    assert count == Counter(summarize=1, flaky=2)
    assert answers(output) == {"call_1": "2 messages", "call_2": "ok"}


# -- one task per call (create_react_agent v2 sends each call on its own) ---------


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


class ReactAccount(AgentState):
    balance: int


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_create_react_agent_reuses_state_reading_calls_on_retry(saver, mode, version):
    """The whole state a tool is given holds managed values such as ``remaining_steps``,
    which depend on the run, not on the thread: they are not state, and a retry (a new
    run) still finds the records."""
    bank = Bank(fail=("lookup",))
    seen: list[dict] = []

    @tool
    def summarize(runtime: ToolRuntime) -> str:
        """Summarize the conversation."""
        seen.append(dict(runtime.state))
        bank.count["summarize"] += 1
        return f"{len(runtime.state['messages'])} messages"

    four_calls = [*THREE_CALLS, {"name": "summarize", "args": {}, "id": "call_4"}]
    script = [AIMessage("", tool_calls=four_calls), AIMessage("all done")]
    model = ScriptedChatModel(script=script)
    graph = create_react_agent(
        model,
        tools=VerifiedToolNode([*bank.tools, summarize]),
        state_schema=ReactAccount,
        checkpointer=saver,
        version=version,
    )
    result = recover(graph, START_INPUT, CONFIG, mode)
    assert bank.count == Counter(show_balance=1, send_email=1, lookup=2, summarize=1)
    assert result["output"]["messages"][-1].content == "all done"
    assert answers(result["output"])["call_1"] == "balance=10"
    assert answers(result["output"])["call_4"] == "2 messages"
    if version == "v1":
        assert "remaining_steps" in seen[0]  # given to the tool, yet not compared
