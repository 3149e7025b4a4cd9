"""Many async runs of one pending tool call at once: one runs the tool, the others wait
for its record without holding a worker thread each, and all give the same answer.

Before, each waiting run blocked a thread of the event loop's default executor, the pool
the saver's own reads and writes also run on; with seven or more waiting runs the running
call could not record its result and every run hung.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_checkpoint_verified import VerifiedSaver, VerifiedToolNode

RUNS = 40
# Only a guard, so that a regression fails instead of hanging the suite; nothing waits on it.
GUARD_SECONDS = 120


@pytest.fixture(params=["files", "memory"])
def saver(request, tmp_path):
    if request.param == "files":
        return VerifiedSaver(tmp_path / "store")
    return VerifiedSaver.in_memory()


class CountingToolNode(VerifiedToolNode):
    """Counts the runs that have entered the node, so the tool can wait for all of them."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.entered = 0
        self.all_entered = asyncio.Event()

    async def _afunc(self, *args, **kwargs):
        self.entered += 1
        if self.entered == RUNS:
            self.all_entered.set()
        return await super()._afunc(*args, **kwargs)


async def test_forty_overlapping_runs_of_one_pending_call_run_the_tool_once(saver):
    count: Counter[str] = Counter()

    @tool
    async def transfer(amount: int) -> str:
        """Transfer money."""
        count["transfer"] += 1
        # every other run is now inside the node, so each of them finds this call running
        await node.all_entered.wait()
        return f"transferred {amount}"

    node = CountingToolNode([transfer], at_most_once=["transfer"])

    def agent(state: MessagesState) -> dict:
        call = {"name": "transfer", "args": {"amount": 5}, "id": "call_1", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    graph = builder.compile(checkpointer=saver, interrupt_before=["tools"])
    config = {"configurable": {"thread_id": "t1"}}
    await graph.ainvoke({"messages": []}, config)
    assert (await graph.aget_state(config)).next == ("tools",)

    outputs = await asyncio.wait_for(
        asyncio.gather(*(graph.ainvoke(None, config) for _ in range(RUNS))), GUARD_SECONDS
    )

    assert count == Counter(transfer=1)
    assert node.entered == RUNS
    answers = [
        [(m.tool_call_id, m.content) for m in output["messages"] if isinstance(m, ToolMessage)]
        for output in outputs
    ]
    assert answers == [[("call_1", "transferred 5")]] * RUNS
