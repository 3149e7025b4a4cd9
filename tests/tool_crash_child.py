"""A child process for the crash tests of ``VerifiedToolNode`` (see ``test_tools.py``).

Usage: ``tool_crash_child.py STORE LOG SCENARIO PHASE [GRAPH]``

GRAPH ``node`` (the default) is START -> agent (one AI message with three tool
calls) -> tools -> END. GRAPH ``agent_v2`` is ``create_react_agent(version="v2")``,
which runs each of the three calls as a task of its own, with a model that asks
for them once and then answers.
Each tool appends its name to LOG (flushed and fsynced) as its side effect.

SCENARIO ``kill_in_third``: in PHASE ``first``, ``lookup`` (the third call) waits
until the first two calls are recorded, performs its side effect, and kills its
own process with SIGKILL. SCENARIO ``kill_in_charge``: ``charge`` is at-most-once;
in PHASE ``first`` it waits until the other two calls are recorded, performs its
side effect, and kills the process before returning.

PHASE ``resume`` runs ``run_with_recovery`` on the same thread and prints a JSON
report on stdout.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import create_react_agent

from langgraph_checkpoint_verified import VerifiedSaver, VerifiedToolNode, run_with_recovery
from langgraph_checkpoint_verified.tools import record_namespace

STORE, LOG, SCENARIO, PHASE = sys.argv[1:5]
GRAPH = sys.argv[5] if len(sys.argv) > 5 else "node"
THREAD = "crash"
CONFIG = {"configurable": {"thread_id": THREAD}}
random.seed(0)


class RecordingSaver(VerifiedSaver):
    """Wakes whoever waits on ``stored`` each time a tool-call record has been written."""

    stored = threading.Condition()

    def put_tool_record(self, *args, **kwargs) -> None:
        super().put_tool_record(*args, **kwargs)
        with self.stored:
            self.stored.notify_all()


saver = RecordingSaver(STORE)


def side_effect(name: str) -> None:
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(name + "\n")
        log.flush()
        os.fsync(log.fileno())


def recorded(tool_call_id: str) -> bool:
    # the tools task runs from the thread's newest checkpoint (durability="sync")
    checkpoint_id = graph.get_state(CONFIG).config["configurable"]["checkpoint_id"]
    records = record_namespace("tools", checkpoint_id)
    return saver.get_tool_record(THREAD, records, tool_call_id, "result") is not None


def wait_for_records(*tool_call_ids: str) -> None:
    """Until the other calls' results are recorded: each record written wakes this up.

    The other calls run on the node's worker threads in this process, so their
    records are the event itself; no clock decides how long that may take.
    """

    def all_recorded() -> bool:
        return all(recorded(i) for i in tool_call_ids)

    with saver.stored:
        saver.stored.wait_for(all_recorded)


def die_here() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@tool
def send_email(to: str) -> str:
    """Send an email."""
    side_effect("send_email")
    return f"sent to {to}"


@tool
def charge(amount: int) -> str:
    """Charge the card."""
    if SCENARIO == "kill_in_charge" and PHASE == "first":
        wait_for_records("call_1", "call_3")
        side_effect("charge")
        die_here()
    side_effect("charge")
    return f"charged {amount}"


@tool
def lookup(query: str) -> str:
    """Look something up."""
    if SCENARIO == "kill_in_third" and PHASE == "first":
        wait_for_records("call_1", "call_2")
        side_effect("lookup")
        die_here()
    side_effect("lookup")
    return f"found {query}"


TOOL_CALLS = [
    {"name": "send_email", "args": {"to": "ann@example.com"}, "id": "call_1"},
    {"name": "charge", "args": {"amount": 42}, "id": "call_2"},
    {"name": "lookup", "args": {"query": "order 7"}, "id": "call_3"},
]


def agent(state: MessagesState) -> dict:
    return {"messages": [AIMessage("", tool_calls=TOOL_CALLS)]}


class AgentModel(GenericFakeChatModel):
    """Asks for the three calls, then (once their results are in) answers. It decides
    from the messages, not from a script position, so a new process resumes it right."""

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        reply = (
            AIMessage("done")
            if isinstance(messages[-1], ToolMessage)
            else AIMessage("", tool_calls=TOOL_CALLS)
        )
        self.messages = iter([reply])
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


at_most_once = ["charge"] if SCENARIO == "kill_in_charge" else []
tools_node = VerifiedToolNode([send_email, charge, lookup], at_most_once=at_most_once)
if GRAPH == "agent_v2":
    model = AgentModel(messages=iter(()))
    graph = create_react_agent(model, tools=tools_node, checkpointer=saver, version="v2")
else:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools_node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    graph = builder.compile(checkpointer=saver)
start = {"messages": [HumanMessage("go")]}

if PHASE == "first":
    graph.invoke(start, CONFIG, durability="sync")
    sys.exit("the run was expected to be killed")

result = run_with_recovery(graph, start, CONFIG, durability="sync")
messages = result["output"]["messages"]
report = {
    "attempts": result["attempts"],
    "recovered_from_step": result["recovered_from_step"],
    "finished": not graph.get_state(CONFIG).next,
    "tool_messages": {m.tool_call_id: m.content for m in messages if isinstance(m, ToolMessage)},
}
print(json.dumps(report))
