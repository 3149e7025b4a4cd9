"""What the engine reads from a LangGraph config (thread, namespace, checkpoint id), and
the config it gives back for a checkpoint."""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from langgraph_checkpoint_verified.records import keys


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
    thread_id = keys.as_thread_id(configurable["thread_id"])
    checkpoint_ns = keys.require_text(configurable.get("checkpoint_ns") or "", "checkpoint_ns")
    checkpoint_id = configurable.get("checkpoint_id") or None
    if checkpoint_id is not None:
        keys.require_text(checkpoint_id, "checkpoint_id")
    return thread_id, checkpoint_ns, checkpoint_id


def config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }
