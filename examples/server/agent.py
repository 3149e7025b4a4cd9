"""An expense agent that stops for a person's approval: the graph the server runs.

``check`` -> ``approve`` (``interrupt()``: waits for a person) -> ``pay`` -> end.

The graph is compiled without a checkpointer: the server gives it the one
``langgraph.json`` names, a ``VerifiedSaver``.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

APPROVAL_LIMIT = 100


class Expense(TypedDict, total=False):
    item: str
    amount: int
    needs_approval: bool
    approved: bool
    paid: bool


def check(expense: Expense) -> Expense:
    return {"needs_approval": expense["amount"] > APPROVAL_LIMIT}


def approve(expense: Expense) -> Expense:
    if not expense["needs_approval"]:
        return {"approved": True}
    # The run stops here; the checkpoint is on disk. Resume with Command(resume=True/False).
    answer = interrupt({"question": f"Pay {expense['amount']} for {expense['item']}?"})
    return {"approved": bool(answer)}


def pay(expense: Expense) -> Expense:
    return {"paid": expense["approved"]}


builder = StateGraph(Expense)
builder.add_node("check", check)
builder.add_node("approve", approve)
builder.add_node("pay", pay)
builder.add_edge(START, "check")
builder.add_edge("check", "approve")
builder.add_edge("approve", "pay")
builder.add_edge("pay", END)
graph = builder.compile()
