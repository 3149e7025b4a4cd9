"""What the saver reads from a LangGraph config, and what it gives back; why a read fails.

Shared by the saver and the modules that do its maintenance and history work.
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from langgraph_checkpoint_verified import _keys

PARENT_UNKNOWN = "\0unknown"
"""``Unusable.parent`` when nothing trustworthy says who the parent was."""


class Unusable(Exception):
    """Internal: a checkpoint cannot be returned (its record or a dependency is bad).

    ``parent`` is its parent's id as a verified header says it (``None``: it has
    none), or ``PARENT_UNKNOWN``.
    """

    def __init__(self, reason: str, *, parent: str | None = PARENT_UNKNOWN) -> None:
        super().__init__(reason)
        self.reason = reason
        self.parent = parent


def config_parts(config: RunnableConfig) -> tuple[str, str, str | None]:
    if not isinstance(config, dict) or not isinstance(config.get("configurable"), dict):
        raise TypeError(
            'config must be a dict like {"configurable": {"thread_id": "..."}}, got '
            f"{config!r:.200}"
        )
    configurable = config["configurable"]
    if "thread_id" not in configurable:
        raise ValueError(
            'config["configurable"]["thread_id"] is required: it names the thread to save to'
        )
    thread_id = _keys.as_thread_id(configurable["thread_id"])
    checkpoint_ns = _keys.require_text(configurable.get("checkpoint_ns") or "", "checkpoint_ns")
    checkpoint_id = configurable.get("checkpoint_id") or None
    if checkpoint_id is not None:
        _keys.require_text(checkpoint_id, "checkpoint_id")
    return thread_id, checkpoint_ns, checkpoint_id


def config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }
