"""``show``: the state at a checkpoint as a person reads it.

Registered by ``app`` as the command of the same name; it opens the store with
``quarantine=False`` and runs under ``store.run_guarded``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from langgraph_checkpoint_verified.cli import output
from langgraph_checkpoint_verified.cli.output import (
    EXIT_OK,
    INTERRUPT,
    escape,
    is_internal,
    out,
    print_json,
)
from langgraph_checkpoint_verified.cli.params import AsJson, KeyFile, Store
from langgraph_checkpoint_verified.cli.store import (
    CommandError,
    need_thread,
    open_store,
    resolve_id,
    run_guarded,
)


def describe_state(found: Any, *, everything: bool) -> dict[str, Any]:
    """The state at a checkpoint, as ``show --json`` prints it.

    Args:
        found: A checkpoint as ``saver.list`` returns it.
        everything: Also LangGraph's internal channels and the interrupts' writes.

    Returns:
        Its id, namespace, step, source, channels, next nodes, pending writes and
        interrupts.
    """
    values = found.checkpoint["channel_values"]
    return {
        "checkpoint_id": output.checkpoint_id(found),
        "checkpoint_ns": output.namespace(found),
        "step": found.metadata.get("step"),
        "source": found.metadata.get("source"),
        "channels": {
            channel: output.jsonable(value)
            for channel, value in sorted(values.items())
            if everything or not is_internal(channel)
        },
        "next": sorted(c.removeprefix("branch:to:") for c in values if c.startswith("branch:to:")),
        "pending_writes": [
            {"task_id": task_id, "channel": channel, "value": output.jsonable(value)}
            for task_id, channel, value in found.pending_writes or ()
            if everything or channel != INTERRUPT
        ],
        "interrupts": output.interrupts_of(found),
    }


def _message_lines(messages: list[Any]) -> list[str]:
    lines = []
    results = {
        getattr(m, "tool_call_id", None): m for m in messages if getattr(m, "type", "") == "tool"
    }
    for message in messages:
        if message.type == "tool":
            continue  # shown under the call that asked for it
        content = message.content if isinstance(message.content, str) else repr(message.content)
        lines.append(f"  [bold]{message.type}[/]: {escape(output.clip(content))}")
        for call in getattr(message, "tool_calls", None) or ():
            lines.append(f"    calls {call['name']}({escape(output.clip(repr(call['args'])))})")
            result = results.get(call.get("id"))
            lines.append(
                "      -> "
                + (escape(output.clip(str(result.content))) if result else "(no result recorded)")
            )
    return lines


def show(
    store: Store,
    thread: Annotated[str, typer.Argument(metavar="THREAD")],
    checkpoint: Annotated[
        str | None, typer.Option("--checkpoint", metavar="ID", help="id or unique prefix")
    ] = None,
    ns: Annotated[str, typer.Option("--ns", metavar="NS")] = "",
    everything: Annotated[bool, typer.Option("--all", help="also internal channels")] = False,
    as_json: AsJson = False,
    key_file: KeyFile = None,
) -> int:
    """The state at a checkpoint (the newest by default) as a person reads it."""

    def body() -> int:
        saver = open_store(store, key_file)
        need_thread(saver, thread, store)
        found_all = {
            output.checkpoint_id(f): f for f in saver.list(output.thread_config(thread, ns))
        }
        if not found_all:
            raise CommandError(f"thread {thread!r} has no verified checkpoint in {store}")
        wanted = (
            resolve_id(found_all, checkpoint, thread, ns)
            if checkpoint is not None
            else max(found_all)
        )
        found = found_all[wanted]
        state = describe_state(found, everything=everything)
        if as_json:
            print_json({"thread_id": thread, **state})
            return EXIT_OK
        console = out()
        console.print(
            f"thread [bold]{escape(thread)}[/]  namespace {output.ns_label(ns)}  "
            f"checkpoint {state['checkpoint_id']}  step {output.text(state['step'])}  "
            f"({output.text(state['source'])})"
        )
        for channel, value in sorted(found.checkpoint["channel_values"].items()):
            if not everything and is_internal(channel):
                continue
            if output.is_message_list(value):
                console.print(f"[cyan]{escape(channel)}[/] ({len(value)} messages)")
                for line in _message_lines(value):
                    console.print(line)
            else:
                console.print(f"[cyan]{escape(channel)}[/]: {escape(output.clip(repr(value)))}")
        console.print(f"next: {', '.join(state['next']) or '-'}")
        for write in state["pending_writes"]:
            console.print(
                f"pending write {escape(write['channel'])} from task {write['task_id']}: "
                f"{escape(output.clip(repr(write['value'])))}"
            )
        for interrupt in state["interrupts"]:
            console.print(
                "[yellow]waiting at an interrupt[/]: "
                + escape(output.clip(repr(interrupt["value"])))
            )
        return EXIT_OK

    return run_guarded(body, store=store)
