"""What names a tool call, so that a record stands in for it only when it is the same call.

A call's records live under the node's *stable namespace* (LangGraph's per-task
ids removed) and its *lineage checkpoint* (the checkpoint its tools task runs
from; see ``lineage_checkpoint``); its *fingerprint* is the tool's name, its
arguments and the state it is given. ``idempotency_key`` is the key a tool can
hand to an external API so that a retried request is recognised there too.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import decimal
import enum
import hashlib
import json
import logging
import pathlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, overload

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

logger = logging.getLogger("langgraph_checkpoint_verified")


NAMESPACE_SEPARATOR = "|"  # LangGraph joins nested namespaces with "|"...
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
    return NAMESPACE_SEPARATOR.join(
        part.split(_NS_END, 1)[0] for part in checkpoint_ns.split(NAMESPACE_SEPARATOR)
    )


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
def idempotency_key_set(key: str) -> Iterator[None]:
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
