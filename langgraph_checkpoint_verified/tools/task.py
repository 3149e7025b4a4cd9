"""Where a tools task keeps its records, read from the config LangGraph gives it.

A task's calls are recorded in the graph's ``VerifiedSaver``, on its thread, bound
to the checkpoint the task runs from (``checkpoint_map``): ``task_of_config``
finds those, or says why the calls cannot be recorded. ``unsaved_names`` and
``without_names`` leave out of a call's fingerprint the state no checkpoint holds.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_READ
from langgraph.channels.untracked_value import UntrackedValue
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.constants import CONFIG_KEY_CHECKPOINTER

from langgraph_checkpoint_verified.saver import VerifiedSaver
from langgraph_checkpoint_verified.tools.calls import NAMESPACE_SEPARATOR


@dataclass(frozen=True)
class ToolsTask:
    """Where a tools task runs, read from its config."""

    saver: VerifiedSaver
    checkpointer: BaseCheckpointSaver | None  # the graph's, which holds its checkpoints
    thread_id: str
    checkpoint_ns: str  # the task's, as LangGraph names it
    graph_ns: str  # the namespace of the graph running the task
    checkpoint_id: str  # the checkpoint the task runs from


@dataclass(frozen=True)
class Unrecorded:
    """Why the calls of a tools task cannot be recorded, and the error that says so."""

    reason: str
    error: Exception


def task_of_config(
    saver: VerifiedSaver | None, config: RunnableConfig | None
) -> ToolsTask | Unrecorded:
    """Where a tools task given ``config`` keeps its records, or why it cannot keep any.

    Reads the config only, so it is cheap enough for the event loop.

    Example:
        >>> task_of_config(None, {"configurable": {"thread_id": "t"}}).reason
        'the graph has no checkpointer, not a VerifiedSaver'
    """
    configurable = (config or {}).get("configurable") or {}
    checkpointer = configurable.get(CONFIG_KEY_CHECKPOINTER)
    saver = saver if saver is not None else checkpointer
    if not isinstance(saver, VerifiedSaver):
        found = "no checkpointer" if saver is None else with_article(type(saver).__name__)
        return Unrecorded(
            f"the graph has {found}, not a VerifiedSaver",
            TypeError(
                f"VerifiedToolNode records tool calls in a VerifiedSaver, but the graph has "
                f"{found}. Compile the graph with checkpointer=VerifiedSaver('checkpoints/') "
                f"(or VerifiedSaver.in_memory()), or pass VerifiedToolNode(..., saver=...)."
            ),
        )
    if configurable.get("thread_id") is None:
        return Unrecorded(
            "the config has no thread_id",
            ValueError(
                "VerifiedToolNode needs a thread: invoke the graph with "
                'config={"configurable": {"thread_id": "..."}}.'
            ),
        )
    checkpoint_ns = configurable.get("checkpoint_ns") or ""
    # The task's namespace is "<graph's namespace>|<node>:<task id>" (or
    # "<node>:<task id>" in the root graph); LangGraph maps each graph's
    # namespace to the checkpoint its tasks run from.
    graph_ns = checkpoint_ns.rpartition(NAMESPACE_SEPARATOR)[0]
    checkpoint_id = (configurable.get("checkpoint_map") or {}).get(graph_ns)
    if checkpoint_id is None:
        return Unrecorded(
            f"its config names no checkpoint (no 'checkpoint_map' entry for namespace "
            f"{graph_ns!r}): it was invoked on its own, not as a node of a graph",
            ValueError(
                f"VerifiedToolNode binds each call's record to the checkpoint its task runs "
                f"from, but its config names none (no 'checkpoint_map' entry for namespace "
                f"{graph_ns!r}); run the node as a node of a graph, or pass it the config "
                f"its node was given."
            ),
        )
    return ToolsTask(
        saver=saver,
        checkpointer=checkpointer if isinstance(checkpointer, BaseCheckpointSaver) else None,
        thread_id=str(configurable["thread_id"]),
        checkpoint_ns=checkpoint_ns,
        graph_ns=graph_ns,
        checkpoint_id=str(checkpoint_id),
    )


def unsaved_names(config: RunnableConfig | None) -> frozenset[str]:
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


def without_names(state: Any, names: frozenset[str]) -> Any:
    """The whole state without the fields in ``names``.

    Example:
        >>> without_names({"messages": [], "remaining_steps": 3}, frozenset({"remaining_steps"}))
        {'messages': []}
    """
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


def with_article(name: str) -> str:
    """``"an InMemorySaver"``, ``"a SqliteSaver"``: for messages.

    Example:
        >>> with_article("InMemorySaver"), with_article("SqliteSaver")
        ('an InMemorySaver', 'a SqliteSaver')
    """
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
