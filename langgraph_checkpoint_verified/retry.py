"""``run_with_recovery``: run a compiled graph and resume it after failures.

On an exception from the graph, the thread is resumed from its newest valid
checkpoint (``invoke(None, config)``), so finished tasks are not repeated (and,
with ``VerifiedToolNode``, neither are finished tool calls). When no usable
checkpoint is left, the run restarts with the original input.

The recovery rules are written once, in ``_recovery``, as a generator that
yields what it needs done (read the state, run the graph, apply an update,
wait, ask the hook); ``run_with_recovery`` and ``arun_with_recovery`` only
carry those steps out, synchronously or on the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command, StateSnapshot

from langgraph_checkpoint_verified.errors import ToolOutcomeUnknownError, VerifiedSaverError
from langgraph_checkpoint_verified.saver import VerifiedSaver
from langgraph_checkpoint_verified.steps import arun_steps, run_steps

__all__ = [
    "STOP_RETRYING",
    "RecoveryFailedError",
    "RecoveryResult",
    "StateUpdate",
    "arun_with_recovery",
    "run_with_recovery",
]

logger = logging.getLogger("langgraph_checkpoint_verified")

# Retrying these gives the same answer every time.
_NEVER_RETRIED: tuple[type[BaseException], ...] = (GraphBubbleUp, ToolOutcomeUnknownError)


class RecoveryResult(TypedDict):
    """What ``run_with_recovery`` returns.

    Attributes:
        output: What the successful ``invoke`` returned (with ``__interrupt__``
            when the run stopped at an ``interrupt()``).
        attempts: How many times the graph was invoked.
        recovered_from_step: ``step`` of the checkpoint the successful attempt
            resumed from (a state update from ``on_failure`` is applied on top
            of it); ``None`` if it did not resume.
        restarted_from_scratch: The successful attempt ran from the original
            input because no usable checkpoint of the run was left.
        skipped_checkpoints: Ids of newer checkpoints passed over because they
            did not verify (``VerifiedSaver`` only).
        errors: The exceptions of the failed attempts, oldest first.
    """

    output: Any
    attempts: int
    recovered_from_step: int | None
    restarted_from_scratch: bool
    skipped_checkpoints: list[str]
    errors: list[BaseException]


@dataclass(frozen=True)
class StateUpdate:
    """A state update for ``on_failure`` to return, applied as ``update_state(values, as_node)``.

    A plain dict returned by the hook is the same as ``StateUpdate(values)``.

    Attributes:
        values: The update, as for ``graph.update_state``.
        as_node: The node the update is applied as (it decides what runs next).
    """

    values: Any
    as_node: str | None = None


class _StopRetrying:
    def __repr__(self) -> str:
        return "STOP_RETRYING"


STOP_RETRYING: Any = _StopRetrying()
"""Returned by ``on_failure`` to stop: ``RecoveryFailedError`` is raised at once."""


class RecoveryFailedError(VerifiedSaverError):
    """The graph kept failing (or ``on_failure`` stopped the retries).

    The last attempt's exception is chained as ``__cause__``; the thread keeps
    its checkpoints, so calling ``run_with_recovery`` again continues the run.

    Attributes:
        thread_id: The thread that was run.
        attempts: How many times the graph was invoked.
        errors: The exception of every attempt, oldest first.
        stopped: ``True`` if ``on_failure`` returned ``STOP_RETRYING``.
    """

    def __init__(
        self, thread_id: str, attempts: int, errors: list[BaseException], *, stopped: bool
    ) -> None:
        self.thread_id = thread_id
        self.attempts = attempts
        self.errors = errors
        self.stopped = stopped
        why = "on_failure stopped the retries" if stopped else "no attempts are left"
        super().__init__(
            f"thread {thread_id!r} failed {attempts} time(s) and {why}; last error: "
            f"{errors[-1]!r}. Its checkpoints are kept: fix the cause and call "
            f"run_with_recovery again to continue the run from where it stopped."
        )


OnFailure = Callable[[BaseException, StateSnapshot], Any]
Backoff = float | Callable[[int], float]


# Steps the recovery rules ask their driver to carry out.
@dataclass(frozen=True)
class _GetState:
    config: RunnableConfig


@dataclass(frozen=True)
class _Invoke:
    input: Any
    config: RunnableConfig


@dataclass(frozen=True)
class _Update:
    config: RunnableConfig
    update: StateUpdate


@dataclass(frozen=True)
class _Wait:
    seconds: float


@dataclass(frozen=True)
class _AskHook:
    error: BaseException
    state: StateSnapshot


@dataclass(frozen=True)
class _ListCheckpointIds:
    saver: VerifiedSaver
    thread_id: str
    checkpoint_ns: str


_Step = _GetState | _Invoke | _Update | _Wait | _AskHook | _ListCheckpointIds


def run_with_recovery(
    graph: Any,
    input: Any,
    config: RunnableConfig,
    *,
    max_attempts: int = 3,
    retry_on: tuple[type[BaseException], ...] = (Exception,),
    backoff: Backoff = 0.0,
    on_failure: OnFailure | None = None,
    **invoke_kwargs: Any,
) -> RecoveryResult:
    """Run a compiled graph; on failure resume it from its newest valid checkpoint.

    * An exception from the graph (of a type in ``retry_on``) is followed by
      ``invoke(None, config)``: the thread resumes from its newest checkpoint
      that verifies, so finished tasks and recorded tool calls are not repeated.
    * If no usable checkpoint of the run is left, the run restarts with
      ``input``.
    * If the thread holds an unfinished run (its process died, say), the call
      continues that run and ``input`` is not used. A thread waiting at an
      ``interrupt()`` is not unfinished: answer it with ``Command(resume=...)``.
    * ``interrupt()`` is not a failure: the result's output holds it.
    * ``ToolOutcomeUnknownError`` and interrupts are never retried.

    Args:
        graph: A graph compiled with a checkpointer (``VerifiedSaver`` reports
            the damaged checkpoints it passed over).
        input: The run's input (as for ``graph.invoke``).
        config: The config, with ``configurable.thread_id``.
        max_attempts: How many times the graph may be invoked in all.
        retry_on: Exception types that lead to another attempt; others propagate.
        backoff: Seconds to wait before each new attempt, or a function of the
            number of failed attempts so far (``lambda n: 2 ** n``).
        on_failure: Called as ``on_failure(error, state)`` after each failure
            that will be retried, with the ``StateSnapshot`` the next attempt
            resumes from. It may return ``None`` (retry as is), a dict or a
            ``StateUpdate`` (applied with ``update_state`` before the next
            attempt; ignored when the run restarts from its input), or
            ``STOP_RETRYING``.
        **invoke_kwargs: Passed to every ``graph.invoke`` (``durability="sync"``
            saves each checkpoint before the next step starts, the safest
            choice for recovery).

    Returns:
        A ``RecoveryResult`` dict: ``output``, ``attempts``,
        ``recovered_from_step``, ``restarted_from_scratch``,
        ``skipped_checkpoints`` and ``errors``.

    Raises:
        RecoveryFailedError: Every attempt failed, or ``on_failure`` returned
            ``STOP_RETRYING``.
        TypeError: The graph has no checkpointer to resume from.

    Example:
        >>> from langgraph.graph import START, StateGraph
        >>> from typing_extensions import TypedDict
        >>> class State(TypedDict):
        ...     count: int
        >>> failures = [RuntimeError("flaky service")]
        >>> def flaky(state):
        ...     if failures:
        ...         raise failures.pop()
        ...     return {"count": state["count"] * 10}
        >>> builder = StateGraph(State)
        >>> _ = builder.add_node("inc", lambda s: {"count": s["count"] + 1})
        >>> _ = builder.add_node("flaky", flaky)
        >>> _ = builder.add_edge(START, "inc")
        >>> _ = builder.add_edge("inc", "flaky")
        >>> graph = builder.compile(checkpointer=VerifiedSaver.in_memory())
        >>> result = run_with_recovery(graph, {"count": 1}, {"configurable": {"thread_id": "t"}})
        >>> result["output"], result["attempts"], result["recovered_from_step"]
        ({'count': 20}, 2, 1)
    """

    def carry_out(step: _Step) -> Any:
        if isinstance(step, _Invoke):
            return graph.invoke(step.input, step.config, **invoke_kwargs)
        if isinstance(step, _GetState):
            return graph.get_state(step.config)
        if isinstance(step, _Update):
            return graph.update_state(step.config, step.update.values, as_node=step.update.as_node)
        if isinstance(step, _AskHook):
            assert on_failure is not None
            return on_failure(step.error, step.state)
        if isinstance(step, _Wait):
            return time.sleep(step.seconds)
        return step.saver.engine.checkpoint_ids(step.thread_id, step.checkpoint_ns)

    recovery = _recovery(graph, input, config, max_attempts, retry_on, backoff, on_failure)
    return run_steps(recovery, carry_out)


async def arun_with_recovery(
    graph: Any,
    input: Any,
    config: RunnableConfig,
    *,
    max_attempts: int = 3,
    retry_on: tuple[type[BaseException], ...] = (Exception,),
    backoff: Backoff = 0.0,
    on_failure: Callable[[BaseException, StateSnapshot], Any | Awaitable[Any]] | None = None,
    **invoke_kwargs: Any,
) -> RecoveryResult:
    """Async twin of ``run_with_recovery`` (``ainvoke``; ``on_failure`` may be async).

    Example:
        >>> import asyncio
        >>> from langgraph.graph import START, StateGraph
        >>> from typing_extensions import TypedDict
        >>> class State(TypedDict):
        ...     count: int
        >>> builder = StateGraph(State)
        >>> _ = builder.add_node("inc", lambda s: {"count": s["count"] + 1})
        >>> _ = builder.add_edge(START, "inc")
        >>> graph = builder.compile(checkpointer=VerifiedSaver.in_memory())
        >>> config = {"configurable": {"thread_id": "t"}}
        >>> result = asyncio.run(arun_with_recovery(graph, {"count": 1}, config))
        >>> result["output"], result["attempts"], result["recovered_from_step"]
        ({'count': 2}, 1, None)
    """

    async def carry_out(step: _Step) -> Any:
        if isinstance(step, _Invoke):
            return await graph.ainvoke(step.input, step.config, **invoke_kwargs)
        if isinstance(step, _GetState):
            return await graph.aget_state(step.config)
        if isinstance(step, _Update):
            return await graph.aupdate_state(
                step.config, step.update.values, as_node=step.update.as_node
            )
        if isinstance(step, _AskHook):
            assert on_failure is not None
            answer = on_failure(step.error, step.state)
            return await answer if inspect.isawaitable(answer) else answer
        if isinstance(step, _Wait):
            return await asyncio.sleep(step.seconds)
        return await step.saver.engine.run_async(
            step.saver.engine.checkpoint_ids, step.thread_id, step.checkpoint_ns
        )

    recovery = _recovery(graph, input, config, max_attempts, retry_on, backoff, on_failure)
    return await arun_steps(recovery, carry_out)


def _recovery(
    graph: Any,
    input: Any,
    config: RunnableConfig,
    max_attempts: int,
    retry_on: tuple[type[BaseException], ...],
    backoff: Backoff,
    on_failure: Callable[..., Any] | None,
) -> Generator[_Step, Any, RecoveryResult]:
    """The recovery rules, once, for both drivers."""
    checkpointer = getattr(graph, "checkpointer", None)
    if not isinstance(checkpointer, BaseCheckpointSaver):
        raise TypeError(
            "run_with_recovery resumes a graph from its checkpoints, but this graph has no "
            "checkpointer: compile it with checkpointer=VerifiedSaver('checkpoints/')"
        )
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    configurable = (config or {}).get("configurable") or {}
    if configurable.get("thread_id") is None:
        raise ValueError(
            'run_with_recovery needs config={"configurable": {"thread_id": "..."}}: '
            "recovery resumes that thread"
        )
    thread_id = str(configurable["thread_id"])
    checkpoint_ns = configurable.get("checkpoint_ns") or ""
    # after the first attempt, always the thread's newest checkpoint
    newest: RunnableConfig = {
        **config,
        "configurable": {k: v for k, v in configurable.items() if k != "checkpoint_id"},
    }

    head: StateSnapshot = yield _GetState(config)
    start_id = _checkpoint_id(head)
    continuing = _unfinished(head) and not isinstance(input, Command)
    next_input = None if continuing else input
    recovered_from_step = _step(head) if continuing else None
    restarted = False
    errors: list[BaseException] = []
    skipped: list[str] = []
    attempt = 0
    while True:
        attempt += 1
        try:
            output = yield _Invoke(next_input, config if attempt == 1 else newest)
        except BaseException as exc:
            if isinstance(exc, _NEVER_RETRIED) or not isinstance(exc, retry_on):
                raise
            failure = exc
        else:
            return RecoveryResult(
                output=output,
                attempts=attempt,
                recovered_from_step=recovered_from_step,
                restarted_from_scratch=restarted,
                skipped_checkpoints=skipped,
                errors=errors,
            )
        errors.append(failure)
        logger.warning("attempt %d of thread %r failed: %r", attempt, thread_id, failure)
        if attempt >= max_attempts:
            raise RecoveryFailedError(thread_id, attempt, errors, stopped=False) from failure

        stored_ids: list[str] = []
        if isinstance(checkpointer, VerifiedSaver):
            stored_ids = yield _ListCheckpointIds(checkpointer, thread_id, checkpoint_ns)
        state: StateSnapshot = yield _GetState(newest)
        resumed_id = _checkpoint_id(state)
        for checkpoint_id in stored_ids:
            passed_over = resumed_id is None or checkpoint_id > resumed_id
            if passed_over and checkpoint_id not in skipped:
                skipped.append(checkpoint_id)
        resumable = (
            resumed_id is not None
            and bool(state.tasks)  # tasks whose writes are saved count: next omits them
            and (continuing or start_id is None or resumed_id > start_id)
        )

        if on_failure is not None:
            decision = yield _AskHook(failure, state)
            if decision is STOP_RETRYING:
                raise RecoveryFailedError(thread_id, attempt, errors, stopped=True) from failure
            if decision is not None:
                update = decision if isinstance(decision, StateUpdate) else StateUpdate(decision)
                if not isinstance(decision, (StateUpdate, Mapping)):
                    raise TypeError(
                        "on_failure must return None, a dict, a StateUpdate or STOP_RETRYING, "
                        f"got {type(decision).__name__}"
                    )
                if resumable:
                    yield _Update(newest, update)
                else:
                    logger.warning(
                        "thread %r restarts from its input; the update from on_failure is "
                        "not applied",
                        thread_id,
                    )

        if resumable:
            next_input, recovered_from_step, restarted = None, _step(state), False
        else:
            next_input, recovered_from_step, restarted = input, None, True
        delay = backoff(attempt) if callable(backoff) else backoff
        if delay > 0:
            yield _Wait(delay)


def _checkpoint_id(snapshot: StateSnapshot | None) -> str | None:
    if snapshot is None or snapshot.created_at is None:
        return None  # an empty thread: LangGraph answers with a snapshot of nothing
    return (snapshot.config.get("configurable") or {}).get("checkpoint_id")


def _step(snapshot: StateSnapshot) -> int | None:
    return (snapshot.metadata or {}).get("step")


def _unfinished(snapshot: StateSnapshot) -> bool:
    """The thread stopped with tasks still to run, and is not waiting at an interrupt."""
    if _checkpoint_id(snapshot) is None or not snapshot.tasks:
        return False
    return not any(task.interrupts for task in snapshot.tasks)
