"""``diff``: which channels differ between two checkpoints of a thread.

An argparse command (see ``legacy``): ``run_diff`` takes the parsed arguments.
Message lists are compared message by message (by id, else by position); any other
channel as a whole.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from langgraph_checkpoint_verified.cli.output import (
    EXIT_OK,
    checkpoint_id,
    clip,
    is_message_list,
    jsonable,
    ns_label,
    out,
    print_json,
    short,
    text,
    thread_config,
)
from langgraph_checkpoint_verified.cli.store import open_existing, resolve_id, thread_or_fail


def run_diff(args: argparse.Namespace) -> int:
    """Print the channels that differ between checkpoints ``a`` and ``b`` of a thread.

    Args:
        args: ``store``, ``key_file``, ``thread``, ``ns``, ``json``, ``a`` and ``b``
            (checkpoint ids or unique prefixes).

    Returns:
        ``0``.
    """
    saver = open_existing(args, quarantine=False)
    thread_or_fail(saver, args.thread, args.store)
    found = {checkpoint_id(item): item for item in saver.list(thread_config(args.thread, args.ns))}
    older = found[resolve_id(found, args.a, args.thread, args.ns)]
    newer = found[resolve_id(found, args.b, args.thread, args.ns)]
    changes = channel_diff(older.checkpoint["channel_values"], newer.checkpoint["channel_values"])
    if args.json:
        print_json(
            {
                "thread_id": args.thread,
                "checkpoint_ns": args.ns,
                "a": {"checkpoint_id": checkpoint_id(older), "step": older.metadata.get("step")},
                "b": {"checkpoint_id": checkpoint_id(newer), "step": newer.metadata.get("step")},
                "changes": [jsonable(change) for change in changes],
            }
        )
        return EXIT_OK
    console = out()
    colour = {"+": "green", "-": "red", "~": "yellow"}

    def say(line: str, sign: str = "") -> None:
        # markup off: values are printed as they are, whatever brackets they hold
        console.print(line, style=colour.get(sign), markup=False)

    say(f"thread {args.thread!r}  namespace {ns_label(args.ns)}")
    say(f"A {checkpoint_id(older)}  step {text(older.metadata.get('step'))}")
    say(f"B {checkpoint_id(newer)}  step {text(newer.metadata.get('step'))}")
    if not changes:
        say("no channel differs")
    for change in changes:
        channel = change["channel"]
        if change["change"] == "added":
            say(f"+ {channel}: {short(change['b'])}", "+")
        elif change["change"] == "removed":
            say(f"- {channel}: {short(change['a'])}", "-")
        elif "messages" in change:
            counts = ", ".join(
                f"{len(change['messages'][kind])} {kind}"
                for kind in ("added", "removed", "changed")
                if change["messages"][kind]
            )
            say(f"~ {channel}: {counts}", "~")
            for sign, kind in (("+", "added"), ("-", "removed"), ("~", "changed")):
                for message in change["messages"][kind]:
                    say(f"    {sign} {describe_message(message)}", sign)
        else:
            say(f"~ {channel}: {short(change['a'])} -> {short(change['b'])}", "~")
    return EXIT_OK


def channel_diff(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Channel-level changes from ``before`` to ``after``, sorted by channel name.

    Args:
        before: The older checkpoint's channel values.
        after: The newer checkpoint's channel values.

    Returns:
        One dict per channel that differs: ``channel``, ``change`` (``added``,
        ``removed`` or ``changed``) and the values (``a``, ``b``), or for two message
        lists ``messages``: those ``added``, ``removed`` and ``changed``.
    """
    changes: list[dict[str, Any]] = []
    for channel in sorted(set(before) | set(after)):
        if channel not in before:
            changes.append({"channel": channel, "change": "added", "b": after[channel]})
        elif channel not in after:
            changes.append({"channel": channel, "change": "removed", "a": before[channel]})
        elif not _same(before[channel], after[channel]):
            change: dict[str, Any] = {"channel": channel, "change": "changed"}
            if is_message_list(before[channel]) and is_message_list(after[channel]):
                change["messages"] = _message_diff(before[channel], after[channel])
            else:
                change.update(a=before[channel], b=after[channel])
            changes.append(change)
    return changes


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. arrays whose == is elementwise
        return json.dumps(jsonable(a), sort_keys=True) == json.dumps(jsonable(b), sort_keys=True)


def _message_diff(before: list[Any], after: list[Any]) -> dict[str, list[Any]]:
    def identity(index: int, message: Any) -> str:
        # add_messages gives every message an id; without one, position is all we have
        return f"id:{message.id}" if message.id else f"index:{index}"

    old = {identity(i, m): m for i, m in enumerate(before)}
    new = {identity(i, m): m for i, m in enumerate(after)}
    return {
        "added": [m for key, m in new.items() if key not in old],
        "removed": [m for key, m in old.items() if key not in new],
        "changed": [m for key, m in new.items() if key in old and not _same(old[key], m)],
    }


def describe_message(message: Any) -> str:
    """A message in one clipped line: its type, content and the tools it calls.

    Args:
        message: A LangChain message.

    Returns:
        The line to print.
    """
    line = f"{message.type}: {message.content!r}"
    calls = getattr(message, "tool_calls", None)
    if calls:
        line += " calls " + ", ".join(call["name"] for call in calls)
    return clip(line)
