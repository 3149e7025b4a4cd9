"""``VerifiedToolNode`` as a drop-in for ``ToolNode`` wherever a call cannot be recorded,
and what it adds to ``create_react_agent(version="v2")``.

Where nothing can be recorded (no checkpointer, a checkpointer that is not a
``VerifiedSaver``, the node invoked on its own) the node must run exactly as
``ToolNode`` runs, say once why, refuse only when asked to (``require_records``), and
never run an at-most-once tool unrecorded unless told to. langgraph-prebuilt's own
suite checks the rest of the drop-in promise (``test_prebuilt_suite.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode, create_react_agent
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from langgraph_checkpoint_verified import VerifiedSaver, VerifiedToolNode

pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")

UNRECORDED = "does not record its tool calls"


@pytest.fixture(params=["sync", "async"])
def mode(request):
    return request.param


def invoke(runnable, runnable_input, config, mode):
    if mode == "sync":
        return runnable.invoke(runnable_input, config)
    return asyncio.run(runnable.ainvoke(runnable_input, config))


def config(thread_id="t1"):
    return {"configurable": {"thread_id": thread_id}}


def own_config(**configurable):
    """The config of a tool node invoked on its own. ``ToolNode`` reads its runtime from
    the config, which a graph fills in; langgraph-prebuilt's own tests give it one too."""
    return {"configurable": {"__pregel_runtime": Runtime(), **configurable}}


class Tools:
    """Tools with counted side effects: an email, a charge, a lookup that fails once, a
    tool with a handled error, one that reads injected state and one returning a Command."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.lookup_fails = 1

        @tool
        def send_email(to: str) -> str:
            """Send an email."""
            self.count["send_email"] += 1
            return f"sent to {to}"

        @tool
        def charge(amount: int) -> str:
            """Charge the card."""
            self.count["charge"] += 1
            return f"charged {amount}"

        @tool
        def lookup(query: str) -> str:
            """Look something up; the service is down the first time."""
            self.count["lookup"] += 1
            if self.lookup_fails:
                self.lookup_fails -= 1
                raise ConnectionError("lookup service unavailable")
            return f"found {query}"

        @tool
        def count_messages(messages: Annotated[list, InjectedState("messages")]) -> str:
            """Count the conversation's messages."""
            self.count["count_messages"] += 1
            return f"{len(messages)} messages"

        @tool
        def rename(name: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
            """Rename the conversation."""
            self.count["rename"] += 1
            reply = ToolMessage(f"renamed to {name}", tool_call_id=tool_call_id)
            return Command(update={"messages": [reply]})

        self.send_email, self.charge, self.lookup = send_email, charge, lookup
        self.count_messages, self.rename = count_messages, rename
        self.all = [send_email, charge, lookup, count_messages, rename]


def calls(*specs: tuple[str, dict]) -> list[dict]:
    return [
        {"name": name, "args": args, "id": f"call_{i}", "type": "tool_call"}
        for i, (name, args) in enumerate(specs, start=1)
    ]


THREE_CALLS = calls(
    ("send_email", {"to": "ann@example.com"}),
    ("charge", {"amount": 42}),
    ("lookup", {"query": "order 7"}),
)


def tools_graph(node, checkpointer, tool_calls=THREE_CALLS):
    """START -> agent (one AI message with ``tool_calls``) -> tools -> END."""

    def agent(state: MessagesState) -> dict:
        return {"messages": [AIMessage("", tool_calls=tool_calls)]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=checkpointer)


def seen(messages) -> list[tuple[str, Any, Any, Any]]:
    """What a message list says, without the ids ``add_messages`` gives at random."""
    return [
        (m.type, m.content, getattr(m, "tool_call_id", None), getattr(m, "status", None))
        for m in messages
    ]


def unrecorded_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if UNRECORDED in r.getMessage()]


class AgentModel(GenericFakeChatModel):
    """A chat model that answers with the scripted messages in turn; tools are bound as is."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> AgentModel:
        return self


def agent_model(*replies: AIMessage) -> AgentModel:
    return AgentModel(messages=iter(replies))


# -- where nothing can be recorded, it is ToolNode --------------------------------------


MIXED_CALLS = calls(
    ("send_email", {"to": "ann@example.com"}),
    ("count_messages", {}),
    ("rename", {"name": "support"}),
    ("charge", {"amount": "not a number"}),  # invalid arguments: an error ToolMessage
    ("refund", {"amount": 1}),  # no such tool: an error ToolMessage
)


@pytest.mark.parametrize("checkpointer", ["none", "InMemorySaver"])
def test_where_calls_cannot_be_recorded_it_runs_them_as_tool_node(checkpointer, mode, caplog):
    outputs, counts = {}, {}
    for node_class in (ToolNode, VerifiedToolNode):
        tools = Tools()
        saver = InMemorySaver() if checkpointer == "InMemorySaver" else None
        graph = tools_graph(node_class(tools.all), saver, MIXED_CALLS)
        with caplog.at_level(logging.WARNING, logger="langgraph_checkpoint_verified"):
            output = invoke(graph, {"messages": [HumanMessage("go")]}, config(), mode)
        outputs[node_class], counts[node_class] = seen(output["messages"]), tools.count

    assert outputs[VerifiedToolNode] == outputs[ToolNode]
    assert counts[VerifiedToolNode] == counts[ToolNode]
    assert counts[ToolNode] == Counter(send_email=1, count_messages=1, rename=1)
    assert ("tool", "renamed to support", "call_3", "success") in outputs[ToolNode]  # Command
    assert ("tool", "2 messages", "call_2", "success") in outputs[ToolNode]  # injected state
    (warning,) = unrecorded_warnings(caplog)
    found = "no checkpointer" if checkpointer == "none" else "an InMemorySaver"
    assert f"the graph has {found}, not a VerifiedSaver" in warning
    assert "require_records=True" in warning


def test_with_another_saver_a_retry_runs_finished_calls_again_as_tool_node(mode):
    """Unrecorded, it promises nothing more than ``ToolNode``: a retry after the third
    call failed runs the first two again, under either node."""
    counts = {}
    for node_class in (ToolNode, VerifiedToolNode):
        tools = Tools()
        graph = tools_graph(node_class(tools.all), InMemorySaver())
        with pytest.raises(ConnectionError):
            invoke(graph, {"messages": []}, config(), mode)
        output = invoke(graph, None, config(), mode)
        assert {m.tool_call_id: m.content for m in output["messages"][1:]} == {
            "call_1": "sent to ann@example.com",
            "call_2": "charged 42",
            "call_3": "found order 7",
        }
        counts[node_class] = tools.count
    assert counts[VerifiedToolNode] == counts[ToolNode] == Counter(send_email=2, charge=2, lookup=2)


def test_invoked_on_its_own_it_runs_as_tool_node(mode, caplog):
    tools = Tools()
    node = VerifiedToolNode(tools.all)
    message = AIMessage("", tool_calls=calls(("send_email", {"to": "bo@example.com"})))
    with caplog.at_level(logging.WARNING, logger="langgraph_checkpoint_verified"):
        output = invoke(node, {"messages": [message]}, own_config(), mode)
        # a list of messages in, a list out, as in ToolNode
        listed = invoke(node, [message], own_config(thread_id="t1"), mode)
    assert [m.content for m in output["messages"]] == ["sent to bo@example.com"]
    assert [m.content for m in listed] == ["sent to bo@example.com"]
    assert tools.count == Counter(send_email=2)
    (warning,) = unrecorded_warnings(caplog)
    assert "no checkpointer" in warning


def test_an_agents_tool_node_invoked_on_its_own_runs_even_with_a_verified_saver(mode, caplog):
    """``agent.nodes["tools"].invoke(...)`` in a test: the config names no checkpoint to
    bind a record to, so the calls run unrecorded, once."""
    tools = Tools()
    agent = create_react_agent(
        agent_model(AIMessage("done")),
        tools=VerifiedToolNode(tools.all),
        checkpointer=VerifiedSaver.in_memory(),
    )
    message = AIMessage("", tool_calls=calls(("charge", {"amount": 7})))
    with caplog.at_level(logging.WARNING, logger="langgraph_checkpoint_verified"):
        output = invoke(agent.nodes["tools"], {"messages": [message]}, own_config(), mode)
    assert [m.content for m in output["messages"]] == ["charged 7"]
    assert tools.count == Counter(charge=1)
    (warning,) = unrecorded_warnings(caplog)
    assert "no checkpointer" in warning or "names no checkpoint" in warning


def test_one_warning_per_node_not_per_call(mode, caplog):
    first, second = VerifiedToolNode(Tools().all), VerifiedToolNode(Tools().all, name="other")
    message = AIMessage("", tool_calls=calls(*[("send_email", {"to": f"{i}@x"}) for i in range(4)]))
    with caplog.at_level(logging.WARNING, logger="langgraph_checkpoint_verified"):
        for _ in range(3):
            invoke(first, {"messages": [message]}, own_config(), mode)
        two_calls = THREE_CALLS[:2]
        invoke(tools_graph(second, InMemorySaver(), two_calls), {"messages": []}, config(), mode)
        invoke(tools_graph(second, None, two_calls), {"messages": []}, config(), mode)
    warnings = unrecorded_warnings(caplog)
    assert len(warnings) == 2
    assert "VerifiedToolNode 'tools'" in warnings[0]
    assert "VerifiedToolNode 'other'" in warnings[1]


def test_recorded_calls_give_no_such_warning(mode, caplog):
    graph = tools_graph(VerifiedToolNode(Tools().all), VerifiedSaver.in_memory(), THREE_CALLS[:2])
    with caplog.at_level(logging.WARNING, logger="langgraph_checkpoint_verified"):
        invoke(graph, {"messages": []}, config(), mode)
    assert unrecorded_warnings(caplog) == []


# -- refusing: require_records, at-most-once tools ----------------------------------------


@pytest.mark.parametrize(
    ("where", "error", "says"),
    [
        ("no checkpointer", TypeError, r"has no checkpointer\. Compile the graph with"),
        ("InMemorySaver", TypeError, r"has an InMemorySaver\. Compile the graph with"),
        ("on its own", ValueError, r"names none .* run the node as a node of a graph"),
    ],
)
def test_require_records_refuses_before_any_call_runs(where, error, says, mode):
    tools = Tools()
    node = VerifiedToolNode(tools.all, require_records=True)
    with pytest.raises(error, match=says):
        if where == "on its own":
            message = AIMessage("", tool_calls=THREE_CALLS)
            node_config = own_config(thread_id="t1")
            # a VerifiedSaver given, but no graph to name the checkpoint the call runs from
            node.saver = VerifiedSaver.in_memory()
            invoke(node, {"messages": [message]}, node_config, mode)
        else:
            saver = InMemorySaver() if where == "InMemorySaver" else None
            invoke(tools_graph(node, saver), {"messages": []}, config(), mode)
    assert tools.count == Counter()


@pytest.mark.parametrize("checkpointer", ["none", "InMemorySaver", "on its own"])
def test_an_at_most_once_tool_refuses_to_run_unrecorded(checkpointer, mode):
    """Its record is its whole point: unrecorded, the message that calls it fails before any
    of its calls runs, and says how to run it anyway."""
    tools = Tools()
    node = VerifiedToolNode(tools.all, at_most_once=["charge"])
    error = ValueError if checkpointer == "on its own" else TypeError
    with pytest.raises(
        error,
        match=r"at-most-once tool 'charge' is not run .*"
        r"allow_unrecorded_at_most_once=True",
    ):
        if checkpointer == "on its own":
            node.saver = VerifiedSaver.in_memory()
            message = AIMessage("", tool_calls=THREE_CALLS)
            invoke(node, {"messages": [message]}, own_config(thread_id="t1"), mode)
        else:
            saver = InMemorySaver() if checkpointer == "InMemorySaver" else None
            invoke(tools_graph(node, saver), {"messages": []}, config(), mode)
    assert tools.count == Counter()

    # a message that calls only other tools runs, as in ToolNode
    other = AIMessage("", tool_calls=calls(("send_email", {"to": "ann@example.com"})))
    output = invoke(node, {"messages": [other]}, own_config(), mode)
    assert [m.content for m in output["messages"]] == ["sent to ann@example.com"]


def test_an_at_most_once_tool_runs_unrecorded_when_allowed(mode):
    tools = Tools()
    tools.lookup_fails = 0
    node = VerifiedToolNode(tools.all, at_most_once=["charge"], allow_unrecorded_at_most_once=True)
    output = invoke(tools_graph(node, InMemorySaver()), {"messages": []}, config(), mode)
    assert [m.content for m in output["messages"][1:]] == [
        "sent to ann@example.com",
        "charged 42",
        "found order 7",
    ]
    assert tools.count == Counter(send_email=1, charge=1, lookup=1)


# -- create_react_agent v1 and v2: what LangGraph keeps, what the node adds --------------


def interrupting_agent(node_class, checkpointer, version, count):
    """An agent whose model asks for two calls in one message: ``get_weather``, which
    finishes, and ``human_assistance``, which interrupts the graph."""

    @tool
    def get_weather(location: str) -> str:
        """Get the weather."""
        count["get_weather"] += 1
        return "It's sunny!"

    @tool
    def human_assistance(query: str) -> str:
        """Ask a person."""
        answer = interrupt({"query": query})
        count["human_assistance"] += 1
        return answer

    tool_calls = calls(("get_weather", {"location": "sf"}), ("human_assistance", {"query": "?"}))
    model = agent_model(AIMessage("", tool_calls=tool_calls), AIMessage("done"))
    node = node_class([get_weather, human_assistance])
    return create_react_agent(model, tools=node, checkpointer=checkpointer, version=version)


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("node_class", [ToolNode, VerifiedToolNode])
def test_a_call_finished_before_an_interrupt_runs_once_on_resume(node_class, version, mode):
    """v2 runs each call as a task of its own, and LangGraph keeps a finished task's
    writes: ``get_weather`` is not run again on resume even under ``ToolNode``. v1 runs
    both calls in one task, which the interrupt ends unfinished: ``ToolNode`` runs
    ``get_weather`` again, ``VerifiedToolNode`` answers it from its record."""
    count: Counter[str] = Counter()
    saver = VerifiedSaver.in_memory() if node_class is VerifiedToolNode else InMemorySaver()
    agent = interrupting_agent(node_class, saver, version, count)
    first = invoke(agent, {"messages": [HumanMessage("weather, and ask")]}, config(), mode)
    assert "__interrupt__" in first
    output = invoke(agent, Command(resume="a person says hi"), config(), mode)

    assert output["messages"][-1].content == "done"
    ran_again = node_class is ToolNode and version == "v1"
    assert count == Counter(get_weather=2 if ran_again else 1, human_assistance=1)


@pytest.mark.parametrize("node_class", [ToolNode, VerifiedToolNode])
def test_v2_a_call_that_finished_in_a_cancelled_task_is_not_run_again(node_class):
    """When one call's task fails, LangGraph cancels its siblings, and a cancelled task
    leaves no writes. ``VerifiedToolNode`` lets a started call finish and records it, so
    the retry answers it from the record; under ``ToolNode`` it runs again."""
    count: Counter[str] = Counter()

    async def scenario() -> dict:
        started, release = asyncio.Event(), asyncio.Event()

        @tool
        async def send_email(to: str) -> str:
            """Send an email, slowly."""
            count["send_email"] += 1
            started.set()
            await release.wait()
            return f"sent to {to}"

        @tool
        async def lookup(query: str) -> str:
            """Look something up; fails the first time, while the email is being sent."""
            count["lookup"] += 1
            await started.wait()
            if count["lookup"] == 1:
                raise ConnectionError("lookup service unavailable")
            return f"found {query}"

        tool_calls = calls(("send_email", {"to": "ann@example.com"}), ("lookup", {"query": "q"}))
        model = agent_model(AIMessage("", tool_calls=tool_calls), AIMessage("done"))
        saver = VerifiedSaver.in_memory() if node_class is VerifiedToolNode else InMemorySaver()
        agent = create_react_agent(
            model, tools=node_class([send_email, lookup]), checkpointer=saver, version="v2"
        )
        with pytest.raises(ConnectionError):
            await agent.ainvoke({"messages": [HumanMessage("go")]}, config())
        release.set()  # the email, still being sent under VerifiedToolNode, may now finish
        return await agent.ainvoke(None, config())

    output = asyncio.run(scenario())
    assert [m.content for m in output["messages"] if isinstance(m, ToolMessage)] == [
        "sent to ann@example.com",
        "found q",
    ]
    sent = 1 if node_class is VerifiedToolNode else 2
    assert count == Counter(send_email=sent, lookup=2)
