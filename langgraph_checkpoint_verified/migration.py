"""Copy the threads of any LangGraph checkpointer into a ``VerifiedSaver``.

``migrate`` reads a source through the ``BaseCheckpointSaver`` contract alone
(``list``), so it works for ``InMemorySaver``, ``SqliteSaver``, Postgres or any
other saver. The command line's ``migrate`` reads a ``SqliteSaver`` database's
``writes`` table itself to keep each write's ``task_path`` (which ``list`` does
not return) and shares the rest of the copy with it: ``copy_threads`` here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver, CheckpointTuple

from langgraph_checkpoint_verified.engine import VerifyReport
from langgraph_checkpoint_verified.saver import VerifiedSaver

__all__ = ["MigrationReport", "migrate"]


@dataclass(frozen=True)
class MigrationReport:
    """What ``migrate`` copied, and what verifying the target found afterwards.

    Attributes:
        threads: How many threads were copied.
        checkpoints: How many checkpoints, over every thread and namespace.
        pending_writes: How many pending writes, over every checkpoint.
        verify_report: ``target.verify()`` after the copy.
    """

    threads: int
    checkpoints: int
    pending_writes: int
    verify_report: VerifyReport

    @property
    def ok(self) -> bool:
        """Whether every record of the target verifies after the copy."""
        return self.verify_report.ok


@dataclass
class TaskWrites:
    """One task's pending writes at one checkpoint."""

    task_path: str
    rows: list[tuple[int, str, Any]] = field(default_factory=list)  # (idx, channel, value)


_Groups = dict[tuple[str, str], list[CheckpointTuple]]
"""Checkpoints by (thread_id, checkpoint_ns)."""
_PendingWrites = Mapping[tuple[str, str, str], Mapping[str, TaskWrites]]
"""Pending writes by (thread_id, checkpoint_ns, checkpoint_id), then by task id."""


def migrate(
    source: BaseCheckpointSaver,
    target: VerifiedSaver,
    *,
    thread_ids: Sequence[str] | None = None,
) -> MigrationReport:
    """Copy every thread (or the given ones) of any checkpointer into ``target``.

    Each thread and namespace is copied oldest checkpoint first, each checkpoint
    with its metadata, its parent and its pending writes, so that a graph compiled
    with ``target`` carries on where it stopped on ``source`` (an ``interrupt()``
    can be resumed). The source is only read. Pending writes are stored with an
    empty ``task_path``, since ``BaseCheckpointSaver.list`` does not return it; for
    a ``SqliteSaver`` database, ``langgraph-verified migrate`` reads it from the
    database too. Then ``target`` is verified.

    Args:
        source: Any ``BaseCheckpointSaver``: ``InMemorySaver``, ``SqliteSaver``...
            Stop writing to it while it is copied.
        target: The saver to copy into. It must not hold any of the threads yet.
        thread_ids: Copy only these threads; ``None`` copies every thread.

    Returns:
        How many threads, checkpoints and pending writes were copied, and the
        target's ``VerifyReport``.

    Raises:
        ValueError: ``target`` already holds one of the threads (nothing was copied).

    Example:
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> from langgraph.graph import START, MessagesState, StateGraph
        >>> builder = StateGraph(MessagesState)
        >>> _ = builder.add_node("reply", lambda state: {"messages": [("ai", "ok")]})
        >>> _ = builder.add_edge(START, "reply")
        >>> source = InMemorySaver()
        >>> config = {"configurable": {"thread_id": "t"}}
        >>> _ = builder.compile(checkpointer=source).invoke({"messages": [("user", "hi")]}, config)
        >>> target = VerifiedSaver.in_memory()
        >>> report = migrate(source, target)
        >>> report.threads, report.checkpoints, report.ok
        (1, 3, True)
        >>> len(builder.compile(checkpointer=target).get_state(config).values["messages"])
        2
    """
    if thread_ids is None:
        items: Iterable[CheckpointTuple] = source.list(None)
    else:
        items = (
            item
            for thread_id in dict.fromkeys(thread_ids)
            for item in source.list({"configurable": {"thread_id": thread_id}})
        )
    groups = group_checkpoints(items)
    threads, checkpoints, writes = copy_threads(groups, _writes_of(groups), target)
    return MigrationReport(threads, checkpoints, writes, target.verify())


def group_checkpoints(items: Iterable[CheckpointTuple]) -> _Groups:
    """Checkpoints by (thread_id, checkpoint_ns)."""
    groups: _Groups = {}
    for item in items:
        configurable = item.config["configurable"]
        key = (str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", "")))
        groups.setdefault(key, []).append(item)
    return groups


def _writes_of(groups: _Groups) -> dict[tuple[str, str, str], dict[str, TaskWrites]]:
    """Each checkpoint's pending writes as the source returned them, without ``task_path``."""
    found: dict[tuple[str, str, str], dict[str, TaskWrites]] = {}
    for (thread_id, checkpoint_ns), items in groups.items():
        for item in items:
            tasks = found.setdefault((thread_id, checkpoint_ns, _checkpoint_id(item)), {})
            for idx, (task_id, channel, value) in enumerate(item.pending_writes or ()):
                task = tasks.setdefault(task_id, TaskWrites(task_path=""))
                task.rows.append((idx, channel, value))
    return found


def copy_threads(
    groups: _Groups, pending: _PendingWrites, target: VerifiedSaver
) -> tuple[int, int, int]:
    """Put every checkpoint (parents first) and its writes; returns the counts copied.

    Raises:
        ValueError: ``target`` already holds one of the threads; nothing was copied.
    """
    threads = sorted({thread_id for thread_id, _ in groups})
    clashing = sorted(set(threads) & set(target.engine.thread_ids()))
    if clashing:
        raise ValueError(
            f"{target.storage.location('')} already has thread(s) "
            f"{', '.join(map(repr, clashing))}; migrate into a new store, or delete those "
            "threads from it first"
        )
    checkpoints = writes = 0
    for (thread_id, checkpoint_ns), items in sorted(groups.items()):
        # checkpoint ids are time-ordered (uuid6): sorted, each parent comes before its children
        for item in sorted(items, key=_checkpoint_id):
            config: RunnableConfig = {
                "configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
            }
            parent_id = _parent_id(item)
            if parent_id:
                config["configurable"]["checkpoint_id"] = parent_id
            stored = target.put(
                config, item.checkpoint, item.metadata, dict(item.checkpoint["channel_versions"])
            )
            checkpoints += 1
            tasks = pending.get((thread_id, checkpoint_ns, _checkpoint_id(item)), {})
            for task_id, task in sorted(tasks.items()):
                writes += _copy_task_writes(target, stored, task_id, task)
    return len(threads), checkpoints, writes


def _copy_task_writes(
    target: VerifiedSaver, config: RunnableConfig, task_id: str, task: TaskWrites
) -> int:
    """Store one task's writes with its ``task_path``; returns how many were copied.

    ``put_writes`` numbers regular writes by their position in one call and special
    ones (errors, interrupts, resume values) by their kind, so the regular writes go
    in one call in the source's ``idx`` order (keeping their indices), each special
    write in a call of its own.
    """
    ordered = sorted(task.rows, key=lambda row: row[0])
    regular = [(channel, value) for _, channel, value in ordered if channel not in WRITES_IDX_MAP]
    if regular:
        target.put_writes(config, regular, task_id, task.task_path)
    for _, channel, value in ordered:
        if channel in WRITES_IDX_MAP:
            target.put_writes(config, [(channel, value)], task_id, task.task_path)
    return len(ordered)


def _checkpoint_id(item: CheckpointTuple) -> str:
    return str(item.config["configurable"]["checkpoint_id"])


def _parent_id(item: CheckpointTuple) -> str | None:
    if item.parent_config is None:
        return None
    parent_id = item.parent_config["configurable"].get("checkpoint_id")
    return str(parent_id) if parent_id else None
