"""``VerifiedToolNode``: tool calls whose side effects happen once.

LangGraph saves a task's writes only when the whole task finishes, and
``ToolNode`` runs every tool call of one AI message inside one task. If one
call fails or the process dies, a resume runs the finished calls again.
``VerifiedToolNode`` records each finished call in the thread's
``VerifiedSaver`` the moment it finishes, and a rerun of the same call returns
the recorded result instead of invoking the tool.

A record stands in for a call only when it is the same call:

* the same **run of the tools task**: records are kept per *lineage
  checkpoint*, the checkpoint the task runs from, except that a checkpoint
  ``update_state`` wrote on the newest checkpoint of its namespace continues
  the run it was written on (see ``lineage_checkpoint``). A resume or retry runs the task
  from the same checkpoint and finds the records; a fork, a rewind or a
  time-travel replay runs it from a new checkpoint, so every call runs again,
  as in ``ToolNode``;
* the same ``tool_call_id`` in the node's namespace (with LangGraph's per-task
  ids removed);
* the same **fingerprint**: tool name, arguments, and the state the tool is
  given (``InjectedState`` fields, or the whole state for ``InjectedState()``
  and ``ToolRuntime``). The store, the runtime context, the config and what
  checkpoints never save (managed values, untracked channels) are not
  compared.

The policy for one call is written once, in ``_recorded_call``, as a generator
that yields what it needs done (read, write or delete a record, run the tool);
a sync and an async driver carry those steps out.

Rules, in the order they apply:

* A recorded result with the same fingerprint is returned; the tool is not
  invoked. With another fingerprint the tool runs again (and the reason is
  logged as a warning).
* Errors are not recorded: a call that raised, or ended in an error
  ``ToolMessage`` (``handle_tool_errors``), runs again on a rerun.
* An at-most-once tool gets a durable intent record before it starts. Intent
  without result on a rerun of the same call means the process stopped while
  the tool ran: the outcome is unknown, so the tool is not invoked (see
  ``on_unknown_outcome``). An error or an ``interrupt()`` raised by the tool is
  a known outcome, so its intent is withdrawn and the call runs again, as any
  other call would.

Where a call cannot be recorded (no checkpointer, a checkpointer that is not a
``VerifiedSaver``, or a config that names no checkpoint because the node was
invoked on its own), the node runs its calls exactly as ``ToolNode`` does and
logs one warning per node saying why. ``require_records=True`` makes that an
error instead; at-most-once tools refuse to run unrecorded unless
``allow_unrecorded_at_most_once=True``, since a record is what they are for.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Collection, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolRuntime
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from langgraph_checkpoint_verified.errors import ToolOutcomeUnknownError
from langgraph_checkpoint_verified.saver import VerifiedSaver
from langgraph_checkpoint_verified.steps import arun_steps, run_steps
from langgraph_checkpoint_verified.tools import in_flight
from langgraph_checkpoint_verified.tools.calls import (
    fingerprint,
    idempotency_key,
    idempotency_key_set,
    lineage_checkpoint,
    record_namespace,
)
from langgraph_checkpoint_verified.tools.task import (
    ToolsTask,
    Unrecorded,
    task_of_config,
    unsaved_names,
    without_names,
)

logger = logging.getLogger("langgraph_checkpoint_verified")

UnknownOutcomePolicy = Literal["error", "raise", "interrupt"]
_POLICIES = ("error", "raise", "interrupt")


@dataclass(frozen=True)
class _Call:
    """Everything that identifies one tool call across resumes."""

    saver: VerifiedSaver
    thread_id: str
    checkpoint_ns: str  # the record namespace: stable namespace and lineage checkpoint
    checkpoint_id: str  # the lineage checkpoint
    tool_call_id: str
    name: str
    fingerprint: str
    idempotency_key: str
    at_most_once: bool


# Steps the policy asks its driver to carry out.
@dataclass(frozen=True)
class _Read:
    kind: str


@dataclass(frozen=True)
class _Write:
    kind: str
    value: Any = None


@dataclass(frozen=True)
class _Delete:
    kind: str


class _RunTool:
    pass


_Step = _Read | _Write | _Delete | _RunTool
_DAMAGED = object()  # what a read returns for a record that exists but does not verify
_RUN_TOOL = _RunTool()


class VerifiedToolNode(ToolNode):
    """A ``ToolNode`` that records each finished tool call, so a resume never repeats it.

    A drop-in for ``langgraph.prebuilt.ToolNode``: the same arguments and
    behaviour (parallel calls, ``handle_tool_errors``, tools returning
    ``Command``, injected state and runtime, ``wrap_tool_call``), sync and
    async. Records go to the graph's own checkpointer when it is a
    ``VerifiedSaver`` (or to ``saver=``).

    Where a call cannot be recorded (the graph has no checkpointer or one
    that is not a ``VerifiedSaver``, or the node is invoked on its own, with
    a config that names no checkpoint), the node is a plain ``ToolNode``: it
    runs every call, and a resume runs finished calls again. It logs one
    warning per node (logger ``langgraph_checkpoint_verified``) saying why.

    A record answers only the same call: the same run of the tools task (a
    resume or retry of it, not a fork, rewind or time-travel replay; see
    ``lineage_checkpoint``), the same ``tool_call_id``, and the same
    fingerprint of tool name, arguments and injected state. Calls that raise
    or end in an error ``ToolMessage`` are not recorded and run again on a
    resume.

    Every call has an idempotency key, the same across resumes and processes,
    which the tool reads with ``current_idempotency_key()``.

    In async graphs a call that has started is shielded from the cancellation
    LangGraph sends when a sibling task fails: it finishes and is recorded. A
    rerun of a call still running in this process waits for it and then
    answers from its record.

    Args:
        tools: The tools, as for ``ToolNode``.
        at_most_once: Names of tools that must never run twice for one call.
            An intent record is written durably before such a tool starts; if
            a rerun finds the intent but no result, the tool is not invoked.
        on_unknown_outcome: What a rerun does for an at-most-once call whose
            outcome is unknown. ``"error"`` (the default) returns an error
            ``ToolMessage`` explaining it, so the model (or a person) decides.
            ``"raise"`` raises ``ToolOutcomeUnknownError``. ``"interrupt"``
            calls ``interrupt()`` with a description of the call; the value it
            is resumed with (a string or a ``ToolMessage``) becomes the
            call's recorded result.
        saver: Where to keep the records. Defaults to the checkpointer the
            graph was compiled with.
        require_records: Refuse to run calls that cannot be recorded (raise
            instead of running them as ``ToolNode`` would), so that a graph
            compiled with the wrong checkpointer fails loudly.
        allow_unrecorded_at_most_once: Let at-most-once tools run where their
            calls cannot be recorded (with no guarantee, as in ``ToolNode``).
            By default they refuse, since the record is their whole point.
        **kwargs: Every other ``ToolNode`` argument (``name``, ``tags``,
            ``handle_tool_errors``, ``messages_key``, ``wrap_tool_call``,
            ``awrap_tool_call``).

    Raises:
        ValueError: ``at_most_once`` names a tool that is not in ``tools``, or
            ``on_unknown_outcome`` is not one of the three policies.
        TypeError: (When the node runs, with ``require_records=True`` or for
            a call of an at-most-once tool) the graph's checkpointer is not a
            ``VerifiedSaver`` and no ``saver=`` was given.
        ValueError: (When the node runs, with ``require_records=True`` or for
            a call of an at-most-once tool) the config has no ``thread_id``,
            or names no checkpoint for the task (the node was invoked on its
            own, or given a config of its caller's making); or a call of an
            at-most-once tool has no id.

    Example:
        >>> from langchain_core.messages import AIMessage
        >>> from langchain_core.tools import tool
        >>> from langgraph.graph import START, MessagesState, StateGraph
        >>> sent, lookups = [], []
        >>> @tool
        ... def send_email(to: str) -> str:
        ...     \"\"\"Send an email.\"\"\"
        ...     sent.append(to)
        ...     return f"sent to {to}"
        >>> @tool
        ... def lookup(order: str) -> str:
        ...     \"\"\"Look an order up; the service is down the first time.\"\"\"
        ...     lookups.append(order)
        ...     if len(lookups) == 1:
        ...         raise ConnectionError("order service unavailable")
        ...     return f"{order}: shipped"
        >>> builder = StateGraph(MessagesState)
        >>> tools = VerifiedToolNode([send_email, lookup], at_most_once=["send_email"])
        >>> _ = builder.add_node("tools", tools)
        >>> _ = builder.add_edge(START, "tools")
        >>> graph = builder.compile(checkpointer=VerifiedSaver.in_memory())
        >>> calls = [
        ...     {"name": "send_email", "args": {"to": "ann@example.com"}, "id": "call_1"},
        ...     {"name": "lookup", "args": {"order": "ORD-7"}, "id": "call_2"},
        ... ]
        >>> config = {"configurable": {"thread_id": "t"}}
        >>> try:
        ...     graph.invoke({"messages": [AIMessage("", tool_calls=calls)]}, config)
        ... except ConnectionError as error:
        ...     print(error)
        order service unavailable
        >>> # resume: the finished call is answered from its record, the failed one runs
        >>> [m.content for m in graph.invoke(None, config)["messages"][1:]]
        ['sent to ann@example.com', 'ORD-7: shipped']
        >>> sent, lookups
        (['ann@example.com'], ['ORD-7', 'ORD-7'])
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable],
        *,
        at_most_once: Collection[str] = (),
        on_unknown_outcome: UnknownOutcomePolicy = "error",
        saver: VerifiedSaver | None = None,
        require_records: bool = False,
        allow_unrecorded_at_most_once: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(tools, **kwargs)
        if isinstance(at_most_once, str):
            at_most_once = [at_most_once]  # one name, not its characters
        unknown = sorted(set(at_most_once) - set(self.tools_by_name))
        if unknown:
            raise ValueError(
                f"at_most_once names tools this node does not have: {unknown}; its tools are "
                f"{sorted(self.tools_by_name)}"
            )
        if on_unknown_outcome not in _POLICIES:
            raise ValueError(
                f"on_unknown_outcome must be one of {_POLICIES}, got {on_unknown_outcome!r}"
            )
        if saver is not None and not isinstance(saver, VerifiedSaver):
            raise TypeError(f"saver must be a VerifiedSaver, got {type(saver).__name__}")
        self.at_most_once: frozenset[str] = frozenset(at_most_once)
        self.on_unknown_outcome: UnknownOutcomePolicy = on_unknown_outcome
        self.saver = saver
        self.require_records = require_records
        self.allow_unrecorded_at_most_once = allow_unrecorded_at_most_once
        self._warned_unrecorded = False
        self._warned_lock = threading.Lock()

    # -- calls that cannot be recorded ----------------------------------------

    def _func(
        self,
        input: Any,
        config: RunnableConfig,
        runtime: Runtime,
    ) -> Any:
        self._check_unrecorded(input, config)
        return super()._func(input, config, runtime)

    async def _afunc(
        self,
        input: Any,
        config: RunnableConfig,
        runtime: Runtime,
    ) -> Any:
        self._check_unrecorded(input, config)
        return await super()._afunc(input, config, runtime)

    def _check_unrecorded(self, input: Any, config: RunnableConfig) -> None:
        """Before any call of this task runs: refuse, or warn once, if none can be recorded.

        Every call of a task shares the task's config, so they are all recorded
        or none is; deciding here means a refusal leaves no call half the batch run.
        """
        where = task_of_config(self.saver, config)
        if not isinstance(where, Unrecorded):
            return
        if self.require_records:
            raise where.error
        if self.at_most_once and not self.allow_unrecorded_at_most_once:
            tool_calls, _ = self._parse_input(input)
            guarded = sorted({c["name"] for c in tool_calls} & self.at_most_once)
            if guarded:
                raise type(where.error)(
                    f"at-most-once tool {guarded[0]!r} is not run where its call cannot be "
                    f"recorded: {where.error} To run it unrecorded anyway, as ToolNode "
                    f"would, pass VerifiedToolNode(..., allow_unrecorded_at_most_once=True)."
                )
        with self._warned_lock:
            if self._warned_unrecorded:
                return
            self._warned_unrecorded = True
        logger.warning(
            "VerifiedToolNode %r does not record its tool calls because %s; they run as in "
            "ToolNode, and a resumed graph runs finished calls again. To record them, compile "
            "the graph with a VerifiedSaver and run the node as a node of it; to make this an "
            "error, pass require_records=True.",
            self.name,
            where.reason,
        )

    # -- the two drivers -----------------------------------------------------

    def _run_one(
        self,
        call: ToolCall,
        input_type: Literal["list", "dict", "tool_calls"],
        tool_runtime: ToolRuntime,
    ) -> Any:
        task = self._task_of(call, tool_runtime)
        if task is None:
            return super()._run_one(call, input_type, tool_runtime)
        identity = self._identify(task, call, tool_runtime)
        key = _running_key(identity)
        while (running := in_flight.claim(key)) is not None:
            running.ended.wait()
        try:
            return self._drive(identity, call, input_type, tool_runtime)
        finally:
            in_flight.release(key)

    def _drive(
        self,
        identity: _Call,
        call: ToolCall,
        input_type: Literal["list", "dict", "tool_calls"],
        tool_runtime: ToolRuntime,
    ) -> Any:
        def carry_out(step: _Step) -> Any:
            if isinstance(step, _RunTool):
                with idempotency_key_set(identity.idempotency_key):
                    return super(VerifiedToolNode, self)._run_one(call, input_type, tool_runtime)
            return _store_step(identity, step)

        return run_steps(self._recorded_call(identity), carry_out)

    async def _arun_one(
        self,
        call: ToolCall,
        input_type: Literal["list", "dict", "tool_calls"],
        tool_runtime: ToolRuntime,
    ) -> Any:
        task = self._task_of(call, tool_runtime)
        if task is None:
            return await super()._arun_one(call, input_type, tool_runtime)
        # When one task of a step fails, LangGraph cancels the others. A call that
        # has started is shielded: it finishes and its outcome is recorded, so a
        # retry answers from the record instead of running it again (or, for an
        # at-most-once tool, finding its outcome unknown).
        recorded = asyncio.ensure_future(self._adrive(task, call, input_type, tool_runtime))
        try:
            return await asyncio.shield(recorded)
        except Exception as exc:
            # ToolNode gathers the calls of one message: the first exception would
            # end the task while its siblings still run. It is held until every call
            # has finished and been recorded, as the sync node's thread pool does.
            return _Failed(exc)

    def _combine_tool_outputs(self, outputs: Any, input_type: Any) -> Any:
        for output in outputs:
            if isinstance(output, _Failed):
                raise output.error
        return super()._combine_tool_outputs(outputs, input_type)

    async def _adrive(
        self,
        task: ToolsTask,
        call: ToolCall,
        input_type: Literal["list", "dict", "tool_calls"],
        tool_runtime: ToolRuntime,
    ) -> Any:
        # fingerprinting the state and looking up the lineage: one crossing to a thread
        identity = await task.saver.engine.run_async(self._identify, task, call, tool_runtime)
        key = _running_key(identity)
        await in_flight.aclaim(key)

        async def carry_out(step: _Step) -> Any:
            if isinstance(step, _RunTool):
                with idempotency_key_set(identity.idempotency_key):
                    return await super(VerifiedToolNode, self)._arun_one(
                        call, input_type, tool_runtime
                    )
            return await identity.saver.engine.run_async(_store_step, identity, step)

        try:
            return await arun_steps(self._recorded_call(identity), carry_out)
        finally:
            in_flight.release(key)

    # -- the policy, written once --------------------------------------------

    def _recorded_call(self, call: _Call) -> Generator[_Step, Any, Any]:
        recorded = yield _Read("result")
        if recorded is _DAMAGED:
            recorded = None  # as if never recorded: an at-most-once tool still has its intent
        if recorded is not None:
            recorded_fingerprint, value = recorded
            if recorded_fingerprint == call.fingerprint:
                logger.debug("tool call %r answered from its record", call.tool_call_id)
                return value
            logger.warning(
                "tool call %r of thread %r was recorded with another tool name, other "
                "arguments or other injected state than %s now has; running the tool again",
                call.tool_call_id,
                call.thread_id,
                call.name,
            )
        if call.at_most_once:
            intent = yield _Read("intent")
            if intent is _DAMAGED:
                # it may still mean the tool started; it was set aside, so mark the
                # call as started again, or the next rerun would find no intent at all
                yield _Write("intent")
            if intent is _DAMAGED or (intent is not None and intent[0] == call.fingerprint):
                answer, settled = self._outcome_unknown(call)
                if settled:
                    yield _Write("result", answer)
                return answer
            if intent is not None:
                logger.warning(
                    "at-most-once tool call %r of thread %r started before with another tool "
                    "name, other arguments or other injected state than %s now has; this is "
                    "a new call, so the tool runs",
                    call.tool_call_id,
                    call.thread_id,
                    call.name,
                )
            yield _Write("intent")
        try:
            result = yield _RUN_TOOL
        except Exception:
            # The tool itself reported how it ended (an error, or an interrupt
            # that LangGraph answers by running it again), so the outcome is known.
            if call.at_most_once:
                yield _Delete("intent")
            raise
        if _is_error(result):
            if call.at_most_once:
                yield _Delete("intent")
            return result
        yield _Write("result", result)
        return result

    def _outcome_unknown(self, call: _Call) -> tuple[ToolMessage, bool]:
        """The answer for an at-most-once call that started but never finished, and
        whether it settles the call (is recorded as its result)."""
        problem = ToolOutcomeUnknownError(call.name, call.tool_call_id, call.idempotency_key)
        logger.warning("%s", problem)
        if self.on_unknown_outcome == "raise":
            raise problem
        if self.on_unknown_outcome == "error":
            # Not settled: the intent stays, so every rerun gives the same answer.
            message = ToolMessage(
                content=f"Error: {problem}",
                name=call.name,
                tool_call_id=call.tool_call_id,
                status="error",
            )
            return message, False
        answer = interrupt(
            {
                "reason": "tool_outcome_unknown",
                "tool": call.name,
                "tool_call_id": call.tool_call_id,
                "idempotency_key": call.idempotency_key,
                "checkpoint_id": call.checkpoint_id,
                "message": str(problem),
            }
        )
        if isinstance(answer, ToolMessage):
            return answer.model_copy(update={"tool_call_id": call.tool_call_id}), True
        content = answer if isinstance(answer, str) else json.dumps(answer, default=repr)
        return ToolMessage(content=content, name=call.name, tool_call_id=call.tool_call_id), True

    # -- identity ------------------------------------------------------------

    def _task_of(self, call: ToolCall, tool_runtime: ToolRuntime) -> ToolsTask | None:
        """Where the call's task runs, or ``None`` for a call that cannot be recorded.

        Reads the config only, so it is cheap enough for the event loop.
        """
        where = task_of_config(self.saver, tool_runtime.config)
        if isinstance(where, Unrecorded):
            return None  # _check_unrecorded has refused or warned for the whole task
        name = call["name"]
        if not call.get("id"):
            if name in self.at_most_once:
                raise ValueError(
                    f"tool call of at-most-once tool {name!r} has no id, so it cannot be "
                    f"recorded; the chat model must give every tool call an id"
                )
            logger.warning("tool call of %r has no id: it is run without a record", name)
            return None
        return where

    def _identify(self, task: ToolsTask, call: ToolCall, tool_runtime: ToolRuntime) -> _Call:
        """The call's identity. Reads a checkpoint and hashes the injected state: the
        async node runs it on a worker thread."""
        lineage = lineage_checkpoint(
            task.checkpointer, task.thread_id, task.graph_ns, task.checkpoint_id
        )
        tool_call_id = str(call["id"])
        name = call["name"]
        return _Call(
            saver=task.saver,
            thread_id=task.thread_id,
            checkpoint_ns=record_namespace(task.checkpoint_ns, lineage),
            checkpoint_id=lineage,
            tool_call_id=tool_call_id,
            name=name,
            fingerprint=fingerprint(
                name, call.get("args"), self._injected_state(call, tool_runtime)
            ),
            idempotency_key=idempotency_key(
                task.thread_id, task.checkpoint_ns, tool_call_id, lineage
            ),
            at_most_once=name in self.at_most_once,
        )

    def _injected_state(self, call: ToolCall, tool_runtime: ToolRuntime) -> dict[str, Any]:
        """The state the tool receives, by parameter, as ``ToolNode`` will inject it.

        ``InjectedState("field")`` receives that field, ``InjectedState()`` the
        whole state, and a ``ToolRuntime`` the whole state among other things:
        of the runtime only its state counts. The store and the runtime context
        are not state: reading them is like reading any outside system. Nor are
        managed values (``remaining_steps``, ``is_last_step``), which count the
        steps of the current run, or ``UntrackedValue`` channels, which are
        never saved: a resume sees other values in both.
        """
        injected = self._injected_args.get(call["name"])
        if injected is None or not (injected.state or injected.runtime):
            return {}
        state = tool_runtime.state
        if isinstance(state, list):
            state = {self._messages_key: state}  # as ToolNode does for a list of messages
        unsaved = unsaved_names(tool_runtime.config)
        values: dict[str, Any] = {}
        for parameter, field in injected.state.items():
            if not field:
                values[parameter] = without_names(state, unsaved)
            elif field in unsaved:
                continue
            elif isinstance(state, Mapping):
                if field in state:
                    values[parameter] = state[field]
            elif hasattr(state, field):
                values[parameter] = getattr(state, field)
        if injected.runtime:
            values[injected.runtime] = without_names(state, unsaved)
        return values


@dataclass(frozen=True)
class _Failed:
    """Internal: a call of an async node that raised, held until its siblings finish."""

    error: Exception


def _running_key(call: _Call) -> in_flight.CallKey:
    return (id(call.saver), call.thread_id, call.checkpoint_ns, call.tool_call_id)


def _store_step(call: _Call, step: _Step) -> Any:
    """Carry out one store step of the policy (synchronously)."""
    saver = call.saver
    if isinstance(step, _Read):
        return saver.get_tool_record(
            call.thread_id, call.checkpoint_ns, call.tool_call_id, step.kind, damaged=_DAMAGED
        )
    if isinstance(step, _Write):
        saver.put_tool_record(
            call.thread_id,
            call.checkpoint_ns,
            call.tool_call_id,
            step.kind,
            fingerprint=call.fingerprint,
            value=step.value,
        )
        return None
    if isinstance(step, _Delete):
        saver.delete_tool_record(call.thread_id, call.checkpoint_ns, call.tool_call_id, step.kind)
        return None
    raise TypeError(f"not a store step: {step!r}")


def _is_error(result: Any) -> bool:
    return isinstance(result, ToolMessage) and result.status == "error"
