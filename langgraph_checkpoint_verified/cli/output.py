"""What every command prints with: names, exit codes, and shared formatting helpers.

The bottom of ``cli``: it imports nothing from the other ``cli`` modules. It owns
the program name and exit codes, how a checkpoint is named on screen (its id,
namespace and parent), how values are shortened and turned into JSON, and the rich
consoles and progress bar the commands draw with.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    # annotations only: LangChain, LangGraph and rich are imported by the commands
    # that run, never by `--help` or `--version`
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import CheckpointTuple
    from rich.console import Console
    from rich.table import Table

PROG = "langgraph-verified"
"""The program's name, as usage and error lines print it."""
EXIT_OK = 0
"""The command ran and found nothing wrong."""
EXIT_DAMAGED = 1
"""The store (or the migrated copy) has damage."""
EXIT_ERROR = 2
"""The command could not run."""

VALUE_WIDTH = 100
"""Values longer than this are clipped on screen."""
INTERNAL_PREFIXES = ("__", "branch:to:")
"""Channels LangGraph keeps for itself; shown only when asked for."""
INTERRUPT = "__interrupt__"
"""The channel of the pending writes that hold a thread's interrupts."""


# -- naming checkpoints ----------------------------------------------------------------


def thread_config(thread_id: str, checkpoint_ns: str | None = None) -> RunnableConfig:
    """The config that lists a thread's checkpoints (in one namespace, if given).

    Args:
        thread_id: The thread.
        checkpoint_ns: The namespace; ``None`` means every namespace.

    Returns:
        A ``RunnableConfig`` for ``saver.list``.
    """
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_ns is not None:
        configurable["checkpoint_ns"] = checkpoint_ns
    return {"configurable": configurable}


def checkpoint_id(found: CheckpointTuple) -> str:
    """The id of a listed checkpoint.

    Args:
        found: A checkpoint as ``saver.list`` returns it.

    Returns:
        Its ``checkpoint_id``.
    """
    return str(found.config["configurable"]["checkpoint_id"])


def namespace(found: CheckpointTuple) -> str:
    """The namespace of a listed checkpoint (``""`` for the root graph).

    Args:
        found: A checkpoint as ``saver.list`` returns it.

    Returns:
        Its ``checkpoint_ns``.
    """
    return str(found.config["configurable"].get("checkpoint_ns", ""))


def parent_id(found: CheckpointTuple) -> str | None:
    """The id of a listed checkpoint's parent.

    Args:
        found: A checkpoint as ``saver.list`` returns it.

    Returns:
        The parent's ``checkpoint_id``, or ``None`` for a thread's first checkpoint.
    """
    if not found.parent_config:
        return None
    return found.parent_config["configurable"].get("checkpoint_id")


def ns_label(checkpoint_ns: str) -> str:
    """A namespace as a person reads it: the root graph's is ``(root)``.

    Args:
        checkpoint_ns: The namespace.

    Returns:
        The label to print.
    """
    return checkpoint_ns if checkpoint_ns else "(root)"


# -- values ----------------------------------------------------------------------------


def text(value: Any) -> str:
    """A table cell: ``-`` for ``None``, else ``str(value)``.

    Args:
        value: What to show.

    Returns:
        The cell's text.
    """
    return "-" if value is None else str(value)


def clip(text: str) -> str:
    """``text`` cut to ``VALUE_WIDTH`` characters, ending in ``...`` when cut.

    Args:
        text: What to show.

    Returns:
        At most ``VALUE_WIDTH`` characters.
    """
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 3] + "..."


def is_message_list(value: Any) -> bool:
    """Whether a channel's value is a list of LangChain messages.

    Args:
        value: A channel's value.

    Returns:
        ``True`` for a list whose every item is a ``BaseMessage``.
    """
    from langchain_core.messages import BaseMessage

    return isinstance(value, list) and all(isinstance(m, BaseMessage) for m in value)


def short(value: Any) -> str:
    """A value in one short line: a message list as its length, anything else clipped.

    Args:
        value: A channel's value.

    Returns:
        The line to print.
    """
    if is_message_list(value):
        return f"[{len(value)} messages]"
    return clip(repr(value))


def jsonable(value: Any) -> Any:
    """LangChain's JSON form (messages as ``{"lc": 1, "type": "constructor", ...}``).

    Args:
        value: Any value a checkpoint holds.

    Returns:
        Its JSON form; what has no JSON form becomes its ``repr``.
    """
    from langchain_core.load import dumpd

    try:
        dumped = dumpd(value)
    except Exception:
        return repr(value)
    return _not_implemented_as_repr(dumped)


def _not_implemented_as_repr(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get("lc") == 1 and value.get("type") == "not_implemented":
            return value.get("repr")
        return {key: _not_implemented_as_repr(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_not_implemented_as_repr(item) for item in value]
    return value


def interrupts_of(found: CheckpointTuple) -> list[dict[str, Any]]:
    """The interrupts a checkpoint waits at, from its pending writes, as JSON-able dicts."""
    return [
        {
            "task_id": task_id,
            "id": getattr(item, "id", None),
            "value": jsonable(getattr(item, "value", item)),
        }
        for task_id, channel, value in found.pending_writes or ()
        if channel == INTERRUPT
        for item in (value if isinstance(value, (list, tuple)) else [value])
    ]


def is_internal(channel: str) -> bool:
    """Whether a channel is one LangGraph keeps for itself (``__...``, ``branch:to:...``).

    Args:
        channel: The channel's name.

    Returns:
        ``True`` for an internal channel.
    """
    return channel.startswith(INTERNAL_PREFIXES)


# -- plain output ----------------------------------------------------------------------


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout; what JSON cannot hold as its ``repr``.

    Args:
        value: What to print.
    """
    print(json.dumps(value, indent=2, ensure_ascii=False, default=repr))


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Print a plain table on stdout: columns padded, two spaces apart.

    Args:
        headers: The column titles.
        rows: The cells, one list per row.
    """
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        print("  ".join(cells).rstrip())


# -- rich output -----------------------------------------------------------------------


def out() -> Console:
    """A console on stdout: colour only on a terminal and without ``NO_COLOR``.

    Returns:
        A new ``Console``; 200 columns wide when stdout is not a terminal.
    """
    from rich.console import Console

    wide = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
    return Console(
        file=sys.stdout, highlight=False, soft_wrap=True, width=wide, color_system=_colours()
    )


def err() -> Console:
    """A console on stderr: colour only on a terminal and without ``NO_COLOR``.

    Returns:
        A new ``Console``.
    """
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, color_system=_colours())


def _colours() -> Literal["auto"] | None:
    # rich drops colours for NO_COLOR but keeps bold and underline: none of either
    return None if os.environ.get("NO_COLOR") else "auto"


def escape(text: str) -> str:
    """``text`` with rich markup escaped, so it prints as it is.

    Args:
        text: What to print.

    Returns:
        The escaped text.
    """
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class Bar(Protocol):
    """What the commands use of a progress bar: rich's ``Progress``, or ``Unshown``."""

    def add_task(self, description: str, *, total: float | None = ..., **fields: Any) -> Any: ...

    def advance(self, task_id: Any, advance: float = 1) -> None: ...

    def update(self, task_id: Any, **fields: Any) -> None: ...


class Unshown:
    """A progress bar that is never drawn: what ``progress`` yields when stderr is not
    a terminal, so that a command piped into another one does not import rich's."""

    def add_task(self, description: str, *, total: float | None = None, **fields: Any) -> int:
        return 0

    def advance(self, task_id: Any, advance: float = 1) -> None:
        pass

    def update(self, task_id: Any, **fields: Any) -> None:
        pass


@contextlib.contextmanager
def progress(description: str) -> Iterator[Bar]:
    """A progress bar on stderr; drawn on a terminal only, and gone when done.

    Args:
        description: Unused; each task names itself (kept for the callers' reading).

    Yields:
        The ``Progress``; an ``Unshown`` when stderr is not a terminal.
    """
    if not sys.stderr.isatty():
        yield Unshown()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err(),
        transient=True,
    ) as bar:
        yield bar


@contextlib.contextmanager
def working(description: str) -> Iterator[None]:
    """A spinner and ``description`` on stderr while work of unknown length runs.

    For work that reports no progress a bar could show (``progress`` is for work
    that does): drawn on a terminal only, and gone when done.

    Args:
        description: What is being done, e.g. ``sweeping 12 thread(s)``.

    Yields:
        Nothing; the spinner turns until the block ends.
    """
    if not sys.stderr.isatty():
        yield
        return
    with err().status(escape(description)):
        yield


def table(*headers: str, title: str | None = None) -> Table:
    """A rich table with bold headers whose cells fold rather than overflow.

    Args:
        *headers: The column titles.
        title: A title above the table, if any.

    Returns:
        The empty ``Table``.
    """
    from rich.table import Table

    grid = Table(title=title, title_justify="left", header_style="bold")
    for header in headers:
        grid.add_column(header, overflow="fold")
    return grid
