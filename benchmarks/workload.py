"""The workloads the benchmarks run: a chat graph, its messages, and raw checkpoints.

Message text is drawn word by word from the vocabulary of a few standard
library docstrings, with each word as frequent as it is there. Such text
compresses about as well as real English prose (zstd gets ~2-3x on both);
a short repeated sentence would compress far better and flatter any
compressing store.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

PROFILE_EVERY = 50
"""The rarely changing channel changes once every this many chat steps."""

MESSAGE_CHARS = (250, 750)
"""Length range of one chat message: a human and an AI message add ~1 KB per step."""

_CORPUS_MODULES = ("argparse", "asyncio", "collections", "json", "logging", "pathlib", "typing")


def _vocabulary() -> list[str]:
    import importlib
    import inspect

    words: list[str] = []
    for name in _CORPUS_MODULES:
        module = importlib.import_module(name)
        for obj in [module, *vars(module).values()]:
            doc = inspect.getdoc(obj) if callable(obj) or obj is module else None
            if doc:
                words.extend(re.findall(r"[A-Za-z][A-Za-z']+|[0-9]+|[.,;:()]", doc))
    if len(words) < 1000:  # docstrings stripped (python -OO): fall back to something varied
        rng = random.Random(0)
        words = ["".join(rng.choices("etaoinshrdlucmfw", k=rng.randint(2, 9))) for _ in range(5000)]
    return words


class TextSource:
    """Deterministic, realistic-ish message text of a chosen length range."""

    def __init__(self, seed: int = 1234) -> None:
        self.rng = random.Random(seed)
        self.words = _vocabulary()

    def text(self, low: int = MESSAGE_CHARS[0], high: int = MESSAGE_CHARS[1]) -> str:
        target = self.rng.randint(low, high)
        parts: list[str] = []
        size = 0
        while size < target:
            word = self.rng.choice(self.words)
            parts.append(word)
            size += len(word) + 1
        return " ".join(parts)[:target]


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    profile: dict[str, Any]


def build_chat_graph(texts: TextSource) -> StateGraph:
    """START -> reply -> END; ``reply`` answers with one AI message of 250-750 chars."""

    def reply(state: ChatState) -> dict[str, Any]:
        turn = len(state["messages"]) // 2
        update: dict[str, Any] = {"messages": [AIMessage(texts.text())]}
        if turn % PROFILE_EVERY == 0:
            update["profile"] = {"user": "bench", "turn": turn, "notes": texts.text(100, 200)}
        return update

    builder = StateGraph(ChatState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


def human_turns(texts: TextSource, steps: int) -> list[dict[str, Any]]:
    """The inputs of ``steps`` invocations, made before timing starts."""
    return [{"messages": [HumanMessage(texts.text())]} for _ in range(steps)]


PutArgs = tuple[dict[str, Any], Checkpoint, dict[str, Any], dict[str, Any]]
"""``(config, checkpoint, metadata, new_versions)``: the arguments of one ``put``."""


def raw_checkpoints(
    texts: TextSource, count: int, thread_id: str = "raw", window: int = 20
) -> Iterator[PutArgs]:
    """``(config, checkpoint, metadata, new_versions)`` as LangGraph passes them to ``put``.

    Mirrors a chat graph: the ``messages`` channel changes at every
    checkpoint, ``profile`` only every ``PROFILE_EVERY`` checkpoints, and
    ``new_versions`` holds only the channels that changed. To keep a
    10,000-checkpoint thread quick to build, ``messages`` keeps a sliding
    window of the last ``window`` messages instead of growing without bound.
    """
    checkpoint = empty_checkpoint()
    parent_id: str | None = None
    messages: list[Any] = []
    versions: dict[str, int] = {}
    for step in range(count):
        checkpoint = {**checkpoint, "id": str(uuid6(clock_seq=step))}
        message_type = HumanMessage if step % 2 == 0 else AIMessage
        messages = [*messages[-(window - 1) :], message_type(texts.text(), id=str(uuid.uuid4()))]
        values = dict(checkpoint["channel_values"])
        values["messages"] = messages
        changed = ["messages"]
        if step % PROFILE_EVERY == 0:
            values["profile"] = {"turn": step, "notes": texts.text(100, 200)}
            changed.append("profile")
        new_versions: dict[str, str] = {}
        for channel in changed:
            versions[channel] = versions.get(channel, 0) + 1
            new_versions[channel] = f"{versions[channel]:032}.{0.5:016}"
        checkpoint["channel_values"] = values
        checkpoint["channel_versions"] = {**checkpoint["channel_versions"], **new_versions}
        checkpoint["versions_seen"] = {"reply": dict(checkpoint["channel_versions"])}
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        if parent_id is not None:
            config["configurable"]["checkpoint_id"] = parent_id
        metadata = {"source": "loop", "step": step, "parents": {}}
        yield config, checkpoint, metadata, new_versions
        parent_id = checkpoint["id"]


def big_checkpoints(
    texts: TextSource, count: int, state_chars: int = 1_000_000, thread_id: str = "big"
) -> Iterator[PutArgs]:
    """``count`` puts of a chat state holding ``state_chars`` characters of messages.

    Each checkpoint drops the oldest message and appends a new one, so every
    put stores a changed ``messages`` channel of the same size (~1 MB by default).
    """
    messages: list[Any] = []
    size = 0
    while size < state_chars:
        message_type = HumanMessage if len(messages) % 2 == 0 else AIMessage
        messages.append(message_type(texts.text(), id=str(uuid.uuid4())))
        size += len(messages[-1].content)
    parent_id: str | None = None
    checkpoint = empty_checkpoint()
    for step in range(count):
        message_type = HumanMessage if (len(messages) + step) % 2 == 0 else AIMessage
        messages = [*messages[1:], message_type(texts.text(), id=str(uuid.uuid4()))]
        version = f"{step + 1:032}.{0.5:016}"
        checkpoint = {
            **checkpoint,
            "id": str(uuid6(clock_seq=step)),
            "channel_values": {"messages": messages},
            "channel_versions": {"messages": version},
            "versions_seen": {"reply": {"messages": version}},
        }
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        if parent_id is not None:
            config["configurable"]["checkpoint_id"] = parent_id
        yield (
            config,
            checkpoint,
            {"source": "loop", "step": step, "parents": {}},
            {"messages": version},
        )
        parent_id = checkpoint["id"]
