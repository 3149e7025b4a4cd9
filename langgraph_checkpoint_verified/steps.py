"""Driving a policy written once as a generator, synchronously or on the event loop.

``VerifiedToolNode`` and ``run_with_recovery`` write their rules as generators
that yield the steps they need carried out (read a record, run the tool, invoke
the graph...) and receive each step's result, or its exception, back. These two
drivers are the only place that sends results in and throws exceptions in.

Example:
    >>> def policy():
    ...     doubled = yield 21
    ...     try:
    ...         yield "fail"
    ...     except ValueError as error:
    ...         return doubled, str(error)
    >>> def carry_out(step):
    ...     if step == "fail":
    ...         raise ValueError("as asked")
    ...     return step * 2
    >>> run_steps(policy(), carry_out)
    (42, 'as asked')
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

Step = TypeVar("Step")
Result = TypeVar("Result")


def run_steps(policy: Generator[Step, Any, Result], carry_out: Callable[[Step], Any]) -> Result:
    """Carry out every step ``policy`` yields; return what it returns."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = policy.throw(error) if error is not None else policy.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            reply = carry_out(step)
        except BaseException as exc:  # the policy decides what an exception means
            error = exc


async def arun_steps(
    policy: Generator[Step, Any, Result], carry_out: Callable[[Step], Awaitable[Any]]
) -> Result:
    """Async twin of ``run_steps``: each step is awaited."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = policy.throw(error) if error is not None else policy.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            reply = await carry_out(step)
        except BaseException as exc:
            error = exc
