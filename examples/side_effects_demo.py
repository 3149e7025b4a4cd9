"""Side effects once: a three-phase agent recovers from a hallucinated-state error.

Phase 1 gathers the customer's orders and plans two tool calls. Phase 2 runs them
in one ``VerifiedToolNode`` task: ``notify_customer`` sends an email (a real side
effect, appended to a log file) and ``update_ledger`` fails on its first attempt,
because the plan cited an order that is not in the state. ``run_with_recovery``
rolls the thread back to the end of phase 1, adds a corrective hint through
``on_failure`` and retries; phase 3 writes the report. The email went out once.

Run it with ``python examples/side_effects_demo.py`` (a temporary directory is used).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState

from langgraph_checkpoint_verified import (
    StateUpdate,
    VerifiedSaver,
    VerifiedToolNode,
    run_with_recovery,
)

THREAD = "side-effects-demo"


class HallucinatedStateError(RuntimeError):
    """A tool was asked about something the state does not hold."""


class AgentState(MessagesState):
    orders: list[str]
    corrections: dict[str, str]


def run_side_effects_demo(workdir: str) -> None:
    """Run the scenario on a file store in ``workdir`` and print what happens."""
    workdir_path = Path(workdir)
    workdir_path.mkdir(parents=True, exist_ok=True)
    email_log = workdir_path / "emails_sent.log"
    email_log.write_text("")
    saver = VerifiedSaver(workdir_path / "checkpoints")
    saver.delete_thread(THREAD)  # the demo starts over each time it is run

    @tool
    def notify_customer(order: str) -> str:
        """Email the customer about an order."""
        with email_log.open("a", encoding="utf-8") as log:
            log.write(f"email about {order}\n")
        return f"customer emailed about {order}"

    @tool
    def update_ledger(order: str, state: Annotated[dict, InjectedState]) -> str:
        """Mark an order as settled in the ledger."""
        order = state.get("corrections", {}).get(order, order)
        if order not in state["orders"]:
            raise HallucinatedStateError(
                f"order {order} is not in the state (known orders: {', '.join(state['orders'])})"
            )
        return f"ledger: {order} settled"

    def gather(state: AgentState) -> dict:
        orders = ["ORD-1001"]
        print(f"   phase 1: gathered the customer's orders: {orders}")
        return {"orders": orders, "corrections": {}}

    def plan(state: AgentState) -> dict:
        tool_calls = [
            {"name": "notify_customer", "args": {"order": "ORD-1001"}, "id": "call_notify"},
            # the planner cites an order it never saw: a hallucinated piece of state
            {"name": "update_ledger", "args": {"order": "ORD-7781"}, "id": "call_ledger"},
        ]
        print("   phase 1: planned notify_customer(ORD-1001) and update_ledger(ORD-7781)")
        return {"messages": [AIMessage("Settling the order.", tool_calls=tool_calls)]}

    def report(state: AgentState) -> dict:
        print("   phase 3: report written")
        return {"messages": [AIMessage("Order settled and customer informed.")]}

    builder = StateGraph(AgentState)
    builder.add_node("gather", gather)
    builder.add_node("plan", plan)
    builder.add_node("act", VerifiedToolNode([notify_customer, update_ledger]))
    builder.add_node("report", report)
    builder.add_edge(START, "gather")
    builder.add_edge("gather", "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", "report")
    builder.add_edge("report", END)
    graph = builder.compile(checkpointer=saver)

    def on_failure(error: BaseException, state) -> StateUpdate:
        print(f"   phase 2 failed: {error}")
        print(
            f"   recovery: rolled back to the end of phase 1 (checkpoint step "
            f"{state.metadata['step']}); adding a corrective hint"
        )
        hint = "ORD-7781 does not exist; the customer's only order is ORD-1001."
        return StateUpdate(
            {"messages": [HumanMessage(hint)], "corrections": {"ORD-7781": "ORD-1001"}},
            as_node="plan",
        )

    config = {"configurable": {"thread_id": THREAD}}
    result = run_with_recovery(
        graph,
        {"messages": [HumanMessage("Settle the customer's order.")]},
        config,
        on_failure=on_failure,
        durability="sync",
    )
    tool_results = [m.content for m in result["output"]["messages"] if m.type == "tool"]
    emails = email_log.read_text().splitlines()
    print(f"   phase 2 results: {'; '.join(tool_results)}")
    print(
        f"   finished after {result['attempts']} attempts, resumed from step "
        f"{result['recovered_from_step']}"
    )
    print(
        f"   the customer was emailed {len(emails)} time(s); without recorded tool calls "
        f"the retry would have sent the email again"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as workdir:
        run_side_effects_demo(workdir)
