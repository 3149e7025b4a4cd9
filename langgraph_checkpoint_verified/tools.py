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
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime
import decimal
import enum
import functools
import hashlib
import json
import logging
import pathlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from langchain_core.messages import ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph._internal._constants import CONFIG_KEY_READ
from langgraph.channels.untracked_value import UntrackedValue
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolRuntime
from langgraph.types import interrupt

from langgraph_checkpoint_verified._steps import arun_steps, run_steps
from langgraph_checkpoint_verified.errors import ToolOutcomeUnknownError
from langgraph_checkpoint_verified.saver import VerifiedSaver

__all__ = ["VerifiedToolNode", "current_idempotency_key", "idempotency_key"]

logger = logging.getLogger("langgraph_checkpoint_verified")

UnknownOutcomePolicy = Literal["error", "raise", "interrupt"]
_POLICIES = ("error", "raise", "interrupt")

_NS_SEP = "|"  # LangGraph joins nested namespaces with "|"...
_NS_END = (
    ":"  # ...and ends each part with ":<task_id>", which differs from checkpoint to checkpoint
)
_LINEAGE_MARK = "@"  # between a node's stable namespace and its lineage checkpoint in record names

_current_key: contextvars.ContextVar[str] = contextvars.ContextVar(
    "langgraph_checkpoint_verified_idempotency_key"
)


def stable_namespace(checkpoint_ns: str) -> str:
    """A node's namespace without LangGraph's task ids.

    Example:
        >>> stable_namespace("agent:1f0e|tools:9c2a")
        'agent|tools'
        >>> stable_namespace("")
        ''
    """
    return _NS_SEP.join(part.split(_NS_END, 1)[0] for part in checkpoint_ns.split(_NS_SEP))


def record_namespace(checkpoint_ns: str, checkpoint_id: str) -> str:
    """The namespace a tools task's records are kept under in the ``VerifiedSaver``.

    It is the node's stable namespace and the task's lineage checkpoint (see
    ``lineage_checkpoint``): pass it to ``VerifiedSaver.get_tool_record`` to
    read the record of a call.

    Example:
        >>> record_namespace("agent:1f0e|tools:9c2a", "1f0f3b2c-0000-6000-8000-000000000001")
        'agent|tools@1f0f3b2c-0000-6000-8000-000000000001'
    """
    return f"{stable_namespace(checkpoint_ns)}{_LINEAGE_MARK}{checkpoint_id}"


def idempotency_key(
    thread_id: str, checkpoint_ns: str, tool_call_id: str, checkpoint_id: str
) -> str:
    """The idempotency key of one tool call: the same in every resume and every process.

    It is the SHA-256 (hex) of the thread id, the stable namespace of the node,
    the lineage checkpoint of its task (see ``lineage_checkpoint``) and the tool
    call id: a resume or retry of the call has the same key, a fork, rewind or
    replay (a new call) has a new one. Tools read it with
    ``current_idempotency_key()``; this function lets other code compute it (to
    look a call up in an external system, for example).

    Example:
        >>> key = idempotency_key("thread-1", "tools:1f0e", "call_1", "1f0f3b2c")
        >>> key == idempotency_key("thread-1", "tools:77aa", "call_1", "1f0f3b2c"), len(key)
        (True, 64)
        >>> key == idempotency_key("thread-1", "tools:1f0e", "call_1", "1f0f9d41")
        False
    """
    material = "\0".join(
        (str(thread_id), stable_namespace(checkpoint_ns), checkpoint_id, tool_call_id)
    )
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


_T = TypeVar("_T")
_RAISE: Any = object()


@overload
def current_idempotency_key() -> str: ...
@overload
def current_idempotency_key(default: _T) -> str | _T: ...
def current_idempotency_key(default: Any = _RAISE) -> Any:
    """The idempotency key of the tool call being run by ``VerifiedToolNode``.

    Pass it to external APIs that de-duplicate requests (payment providers,
    mail services): a call repeated after a crash then has the same key.

    Args:
        default: Returned outside a ``VerifiedToolNode`` call instead of raising,
            so one tool can run under a plain ``ToolNode`` too
            (``current_idempotency_key(None)``).

    Raises:
        LookupError: Outside a tool call run by a ``VerifiedToolNode``, when no
            ``default`` is given.

    Example:
        >>> from langchain_core.tools import tool
        >>> @tool
        ... def charge(amount: int) -> str:
        ...     \"\"\"Charge the card.\"\"\"
        ...     key = current_idempotency_key(None) or "no key: not run by VerifiedToolNode"
        ...     return f"charged {amount} ({key[:8]})"
        >>> current_idempotency_key(None) is None
        True
        >>> current_idempotency_key()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        LookupError: current_idempotency_key() works only inside a tool run by VerifiedToolNode; ...
    """
    try:
        return _current_key.get()
    except LookupError:
        if default is not _RAISE:
            return default
        raise LookupError(
            "current_idempotency_key() works only inside a tool run by VerifiedToolNode; "
            "pass a default, e.g. current_idempotency_key(None), to ask without raising"
        ) from None


@contextmanager
def _idempotency_key_set(key: str) -> Iterator[None]:
    token = _current_key.set(key)
    try:
        yield
    finally:
        _current_key.reset(token)


def fingerprint(tool_name: str, args: Any, injected: Mapping[str, Any] | None = None) -> str:
    """SHA-256 of a tool name, its arguments and the state injected into it.

    Canonical JSON, keys sorted. ``injected`` maps each injected parameter to
    the state value it receives; a tool given no state has the fingerprint of
    its name and arguments alone.

    Example:
        >>> fingerprint("show", {}) == fingerprint("show", {}, {})
        True
        >>> fingerprint("show", {}, {"balance": 10}) == fingerprint("show", {}, {"balance": 99})
        False
    """
    material: dict[str, Any] = {"name": tool_name, "args": args}
    if injected:
        material["injected"] = _canonical(injected)
    canonical = json.dumps(
        material,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=repr,
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


_SHOWN_AS_TEXT = (
    datetime.date,
    datetime.time,
    datetime.timedelta,
    uuid.UUID,
    decimal.Decimal,
    pathlib.PurePath,
)


def _canonical(value: Any) -> Any:
    """``value`` as plain JSON data that is equal for equal state.

    The state a tool is given comes from live channel values on the first run
    and from a deserialized checkpoint on a resume; both must fingerprint the
    same, so nothing here may depend on object identity (``repr`` of a plain
    object shows its address). A value of a type not handled below counts by
    its type alone.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {
            (key if isinstance(key, str) else repr(key)): _canonical(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [_canonical(item) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, enum.Enum):
        return _canonical(value.value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, _SHOWN_AS_TEXT):
        return str(value)
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if callable(getattr(value, "model_dump", None)):  # pydantic models, messages among them
        return {"__type__": kind, "fields": _canonical(value.model_dump())}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
        return {"__type__": kind, "fields": _canonical(fields)}
    return {"__type__": kind}


# The lineage of a checkpoint never changes once it exists (checkpoints are immutable and
# their ids unique), so it is looked up once per process.
_lineages: OrderedDict[tuple[int, str, str, str], str] = OrderedDict()
_lineages_lock = threading.Lock()
_LINEAGES_KEPT = 1024
# The calls of one task ask for the same lineage at once: one of them looks it up.
_lineage_lookups: dict[tuple[int, str, str, str], threading.Event] = {}


def lineage_checkpoint(
    checkpointer: BaseCheckpointSaver | None,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
) -> str:
    """The checkpoint whose tool-call records a task running from ``checkpoint_id`` uses.

    Usually ``checkpoint_id`` itself: LangGraph runs a task again from the same
    checkpoint on a resume (``invoke(None, config)``, ``Command(resume=...)``)
    and on a retry, and from a new one after a fork, a rewind or a time-travel
    replay (which starts its branch with a checkpoint of its own).

    One kind of checkpoint is looked through: one that ``update_state`` wrote
    on the newest checkpoint of its namespace (``run_with_recovery``'s
    ``on_failure`` hint, an edit while the graph waits at an interrupt). It
    continues the run it was written on, so its lineage is its parent's. An
    update written on a checkpoint the thread had already moved past starts a
    branch: it is its own lineage.

    A checkpoint the graph's checkpointer does not hold (yet: LangGraph saves
    in the background with ``durability="async"``) was made by the running
    graph itself, so it is no update and is its own lineage.

    Args:
        checkpointer: The graph's checkpointer (``None``: no lookup, the
            checkpoint is its own lineage).
        thread_id: The thread.
        checkpoint_ns: The namespace of the graph running the task (``""`` for
            the root graph).
        checkpoint_id: The checkpoint the task runs from.

    Example:
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> from langgraph.graph import START, StateGraph
        >>> from typing_extensions import TypedDict
        >>> class State(TypedDict):
        ...     n: int
        >>> builder = StateGraph(State)
        >>> _ = builder.add_node("step", lambda state: {"n": state["n"] + 1})
        >>> _ = builder.add_edge(START, "step")
        >>> saver = InMemorySaver()
        >>> graph = builder.compile(checkpointer=saver, interrupt_before=["step"])
        >>> config = {"configurable": {"thread_id": "t"}}
        >>> _ = graph.invoke({"n": 1}, config)
        >>> head = graph.get_state(config).config["configurable"]["checkpoint_id"]
        >>> edit = graph.update_state(config, {"n": 5})["configurable"]["checkpoint_id"]
        >>> lineage_checkpoint(saver, "t", "", edit) == head  # an edit at the head
        True
    """
    if checkpointer is None:
        return checkpoint_id
    cache_key = (id(checkpointer), str(thread_id), checkpoint_ns, checkpoint_id)
    while True:
        with _lineages_lock:
            known = _lineages.get(cache_key)
            if known is not None:
                _lineages.move_to_end(cache_key)
                return known
            looking = _lineage_lookups.get(cache_key)
            if looking is None:
                _lineage_lookups[cache_key] = threading.Event()
                break
        looking.wait()  # then read the cache (or look it up, if that lookup failed)
    try:
        lineage = checkpoint_id
        while (
            continued := _continued_by(checkpointer, thread_id, checkpoint_ns, lineage)
        ) is not None:
            lineage = continued
        with _lineages_lock:
            _lineages[cache_key] = lineage
            while len(_lineages) > _LINEAGES_KEPT:
                _lineages.popitem(last=False)
        return lineage
    finally:
        with _lineages_lock:
            _lineage_lookups.pop(cache_key).set()


def _continued_by(
    checkpointer: BaseCheckpointSaver, thread_id: str, checkpoint_ns: str, checkpoint_id: str
) -> str | None:
    """The checkpoint ``checkpoint_id`` continues, if it is an update written at the head."""
    namespace: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    }
    exact: RunnableConfig = {
        "configurable": {**namespace["configurable"], "checkpoint_id": checkpoint_id}
    }
    # The filter lets a saver skip decoding the state of every checkpoint that is no
    # update, which is nearly every one.
    found = next(iter(checkpointer.list(exact, filter={"source": "update"}, limit=1)), None)
    if found is None or found.config["configurable"].get("checkpoint_id") != checkpoint_id:
        return None  # no update, not saved yet (so made by the running graph), or unreadable
    if not found.parent_config:
        return None
    parent = found.parent_config["configurable"].get("checkpoint_id")
    if parent is None:
        return None
    # Checkpoint ids sort in the order they were made: was any checkpoint made
    # between the parent and the update? Then the update started a branch.
    newest_before = next(iter(checkpointer.list(namespace, before=found.config, limit=1)), None)
    if newest_before is not None and newest_before.config["configurable"]["checkpoint_id"] > parent:
        return None
    return str(parent)


@dataclass(frozen=True)
class _Task:
    """Where a tools task runs, read from its config."""

    saver: VerifiedSaver
    checkpointer: BaseCheckpointSaver | None  # the graph's, which holds its checkpoints
    thread_id: str
    checkpoint_ns: str  # the task's, as LangGraph names it
    graph_ns: str  # the namespace of the graph running the task
    checkpoint_id: str  # the checkpoint the task runs from


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
    async. Records go to the graph's own checkpointer, which must be a
    ``VerifiedSaver`` (or pass ``saver=``).

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
        **kwargs: Every other ``ToolNode`` argument (``name``, ``tags``,
            ``handle_tool_errors``, ``messages_key``, ``wrap_tool_call``,
            ``awrap_tool_call``).

    Raises:
        ValueError: ``at_most_once`` names a tool that is not in ``tools``, or
            ``on_unknown_outcome`` is not one of the three policies.
        TypeError: (When the node runs) the graph's checkpointer is not a
            ``VerifiedSaver`` and no ``saver=`` was given.
        ValueError: (When the node runs) the config has no ``thread_id``, or
            names no checkpoint for the task (the node was given a config of
            its caller's making), or a call of an at-most-once tool has no id.

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
        while (running := _claim(identity)) is not None:
            running.ended.wait()
        try:
            return self._drive(identity, call, input_type, tool_runtime)
        finally:
            _release(identity)

    def _drive(
        self,
        identity: _Call,
        call: ToolCall,
        input_type: Literal["list", "dict", "tool_calls"],
        tool_runtime: ToolRuntime,
    ) -> Any:
        def carry_out(step: _Step) -> Any:
            if isinstance(step, _RunTool):
                with _idempotency_key_set(identity.idempotency_key):
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
        task: _Task,
        call: ToolCall,
        input_type: Literal["list", "dict", "tool_calls"],
        tool_runtime: ToolRuntime,
    ) -> Any:
        # fingerprinting the state and looking up the lineage: one crossing to a thread
        identity = await task.saver._run(self._identify, task, call, tool_runtime)
        await _aclaim(identity)

        async def carry_out(step: _Step) -> Any:
            if isinstance(step, _RunTool):
                with _idempotency_key_set(identity.idempotency_key):
                    return await super(VerifiedToolNode, self)._arun_one(
                        call, input_type, tool_runtime
                    )
            return await identity.saver._run(_store_step, identity, step)

        try:
            return await arun_steps(self._recorded_call(identity), carry_out)
        finally:
            _release(identity)

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

    def _task_of(self, call: ToolCall, tool_runtime: ToolRuntime) -> _Task | None:
        """Where the call's task runs, or ``None`` for a call that cannot be recorded.

        Reads the config only, so it is cheap enough for the event loop.
        """
        configurable = (tool_runtime.config or {}).get("configurable") or {}
        checkpointer = configurable.get(CONFIG_KEY_CHECKPOINTER)
        saver = self.saver if self.saver is not None else checkpointer
        if not isinstance(saver, VerifiedSaver):
            found = "no checkpointer" if saver is None else _with_article(type(saver).__name__)
            raise TypeError(
                f"VerifiedToolNode records tool calls in a VerifiedSaver, but the graph has "
                f"{found}. Compile the graph with checkpointer=VerifiedSaver('checkpoints/') "
                f"(or VerifiedSaver.in_memory()), or pass VerifiedToolNode(..., saver=...)."
            )
        if configurable.get("thread_id") is None:
            raise ValueError(
                "VerifiedToolNode needs a thread: invoke the graph with "
                'config={"configurable": {"thread_id": "..."}}'
            )
        name = call["name"]
        if not call.get("id"):
            if name in self.at_most_once:
                raise ValueError(
                    f"tool call of at-most-once tool {name!r} has no id, so it cannot be "
                    f"recorded; the chat model must give every tool call an id"
                )
            logger.warning("tool call of %r has no id: it is run without a record", name)
            return None
        checkpoint_ns = configurable.get("checkpoint_ns") or ""
        # The task's namespace is "<graph's namespace>|<node>:<task id>" (or
        # "<node>:<task id>" in the root graph); LangGraph maps each graph's
        # namespace to the checkpoint its tasks run from.
        graph_ns = checkpoint_ns.rpartition(_NS_SEP)[0]
        checkpoint_id = (configurable.get("checkpoint_map") or {}).get(graph_ns)
        if checkpoint_id is None:
            raise ValueError(
                f"VerifiedToolNode binds each call's record to the checkpoint its task runs "
                f"from, but the config of the call of {name!r} names none (no "
                f"'checkpoint_map' entry for namespace {graph_ns!r}); run the node as a node "
                f"of a graph, or pass it the config its node was given"
            )
        return _Task(
            saver=saver,
            checkpointer=checkpointer if isinstance(checkpointer, BaseCheckpointSaver) else None,
            thread_id=str(configurable["thread_id"]),
            checkpoint_ns=checkpoint_ns,
            graph_ns=graph_ns,
            checkpoint_id=str(checkpoint_id),
        )

    def _identify(self, task: _Task, call: ToolCall, tool_runtime: ToolRuntime) -> _Call:
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
        unsaved = _unsaved_names(tool_runtime.config)
        values: dict[str, Any] = {}
        for parameter, field in injected.state.items():
            if not field:
                values[parameter] = _without(state, unsaved)
            elif field in unsaved:
                continue
            elif isinstance(state, Mapping):
                if field in state:
                    values[parameter] = state[field]
            elif hasattr(state, field):
                values[parameter] = getattr(state, field)
        if injected.runtime:
            values[injected.runtime] = _without(state, unsaved)
        return values


def _unsaved_names(config: RunnableConfig | None) -> frozenset[str]:
    """The state keys no checkpoint holds: managed values and untracked channels.

    LangGraph gives every task a reader of its state, ``partial(local_read,
    scratchpad, channels, managed, task)``; ``ToolNode`` reads the channels
    from it the same way.
    """
    read = ((config or {}).get("configurable") or {}).get(CONFIG_KEY_READ)
    if not isinstance(read, functools.partial) or len(read.args) < 3:
        return frozenset()
    channels, managed = read.args[1], read.args[2]
    names = set(managed) if isinstance(managed, Mapping) else set()
    if isinstance(channels, Mapping):
        names.update(k for k, channel in channels.items() if isinstance(channel, UntrackedValue))
    return frozenset(names)


def _without(state: Any, names: frozenset[str]) -> Any:
    """The whole state without the fields in ``names``."""
    if not names:
        return state
    if isinstance(state, Mapping):
        return {key: value for key, value in state.items() if key not in names}
    if callable(getattr(state, "model_dump", None)):
        return {key: value for key, value in state.model_dump().items() if key not in names}
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        fields = dataclasses.fields(state)
        return {f.name: getattr(state, f.name) for f in fields if f.name not in names}
    return state


@dataclass(frozen=True)
class _Failed:
    """Internal: a call of an async node that raised, held until its siblings finish."""

    error: Exception


# Calls running in this process, so that a retry of one (LangGraph may retry a
# step while a cancelled task of the failed attempt is still finishing) or another
# run of the same pending call waits for it and then answers from its record.
class _Running:
    """One call running in this process, and how its waiters learn that it ended.

    A sync waiter blocks on ``ended`` in its own thread. An async waiter awaits a
    future of its own event loop, set from whichever thread ends the call: it
    holds no thread while it waits, so any number of runs can wait at once.
    """

    def __init__(self) -> None:
        self.ended = threading.Event()
        self.async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []


_running: dict[tuple[int, str, str, str], _Running] = {}
_running_lock = threading.Lock()


def _running_key(call: _Call) -> tuple[int, str, str, str]:
    return (id(call.saver), call.thread_id, call.checkpoint_ns, call.tool_call_id)


def _claim(call: _Call) -> _Running | None:
    """Mark ``call`` as running here; or, if it already is, the entry to wait on."""
    key = _running_key(call)
    with _running_lock:
        running = _running.get(key)
        if running is None:
            _running[key] = _Running()
        return running


async def _aclaim(call: _Call) -> None:
    """Mark ``call`` as running here, first waiting (on the event loop) while it runs."""
    key = _running_key(call)
    loop = asyncio.get_running_loop()
    while True:
        with _running_lock:
            running = _running.get(key)
            if running is None:
                _running[key] = _Running()
                return
            ended: asyncio.Future[None] = loop.create_future()
            running.async_waiters.append((loop, ended))
        await ended


def _release(call: _Call) -> None:
    with _running_lock:
        running = _running.pop(_running_key(call))
    running.ended.set()
    for loop, ended in running.async_waiters:
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there
            loop.call_soon_threadsafe(_set_ended, ended)


def _set_ended(ended: asyncio.Future[None]) -> None:
    if not ended.done():  # a cancelled waiter's future is done already
        ended.set_result(None)


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


def _with_article(name: str) -> str:
    """``"an InMemorySaver"``, ``"a SqliteSaver"``: for messages."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
