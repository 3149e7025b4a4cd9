"""``threads``, ``history``, ``show``, ``stats`` and ``prune``: a store as people read it.

Typer commands, registered by ``app``: each public function named after a command
is that command, its parameters the command's arguments and options. They open the
store with ``quarantine=False`` (``prune`` without ``--dry-run`` excepted) and run
under ``store.run_guarded``: whatever stops them is one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from langgraph_checkpoint_verified.cli import output
from langgraph_checkpoint_verified.cli.output import (
    EXIT_OK,
    escape,
    is_internal,
    out,
    print_json,
    progress,
    table,
)
from langgraph_checkpoint_verified.cli.params import AsJson, KeyFile, Store
from langgraph_checkpoint_verified.cli.store import (
    CommandError,
    need_thread,
    open_store,
    quarantined_count,
    resolve_id,
    run_guarded,
)
from langgraph_checkpoint_verified.records import keys as record_keys

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.engine import Damage
    from langgraph_checkpoint_verified.saver import VerifiedSaver
    from langgraph_checkpoint_verified.storage import Storage

MEMORIES, CACHE = record_keys.MEMORIES_PREFIX, record_keys.CACHE_PREFIX
"""Where ``VerifiedStore`` keeps its memories (batches of items) and ``VerifiedCache`` its
entries."""
INTERRUPT = "__interrupt__"
"""The channel of the pending writes that hold a thread's interrupts."""


def record_bytes(saver: VerifiedSaver, prefix: str) -> int:
    """How many bytes the records under ``prefix`` take.

    Args:
        saver: The opened store.
        prefix: A key prefix, e.g. a thread's.

    Returns:
        The records' lengths, from the log's key directory (files) or a LIST's
        sizes (S3): no record is read.
    """
    return saver.storage.usage(prefix)


def _interrupts(found: Any) -> list[dict[str, Any]]:
    return [
        {
            "task_id": task_id,
            "id": getattr(item, "id", None),
            "value": output.jsonable(getattr(item, "value", item)),
        }
        for task_id, channel, value in found.pending_writes or ()
        if channel == INTERRUPT
        for item in (value if isinstance(value, (list, tuple)) else [value])
    ]


# -- threads ---------------------------------------------------------------------


def thread_summaries(saver: VerifiedSaver) -> list[dict[str, Any]]:
    """Every thread of a store, as ``threads`` shows it.

    A summary reads each checkpoint's own record, not the records its values are
    kept in: ``checkpoints`` counts the records that verify on their own (frame,
    digests, identity), ``damaged`` those that do not. The ``last_*`` fields and
    ``interrupts`` are those of the checkpoint the thread resumes from, the newest
    root checkpoint that verifies in full (every record its values are kept in
    too). No channel value is deserialized, so the time a summary takes grows with
    the number of checkpoints, not with the size of the state they hold.

    Args:
        saver: The opened store.

    Returns:
        One dict per thread, by thread id: ``checkpoints``, ``damaged``,
        ``namespaces``, ``last_step``, ``last_checkpoint_id``, ``last_write``,
        ``bytes`` and the ``interrupts`` its newest root checkpoint waits at.
    """
    engine = saver.engine
    thread_ids = sorted(engine.thread_ids())
    summaries = []
    with progress("reading threads") as bar:
        task = bar.add_task("reading threads", total=len(thread_ids))
        for thread_id in thread_ids:
            checkpoints = damaged = 0
            namespaces = []
            for checkpoint_ns in engine.namespaces(thread_id):
                verified, bad = engine.count_own_records(thread_id, checkpoint_ns)
                checkpoints, damaged = checkpoints + verified, damaged + bad
                if verified:
                    namespaces.append(checkpoint_ns)
            newest = _resumed_from(saver, thread_id, namespaces)
            summaries.append(
                {
                    "thread_id": thread_id,
                    "checkpoints": checkpoints,
                    "damaged": damaged,
                    "namespaces": namespaces,
                    "last_step": newest.metadata.get("step") if newest else None,
                    "last_checkpoint_id": output.checkpoint_id(newest) if newest else None,
                    "last_write": newest.checkpoint.get("ts") if newest else None,
                    "bytes": record_bytes(saver, record_keys.thread_prefix(thread_id)),
                    "interrupts": _interrupts(newest) if newest else [],
                }
            )
            bar.advance(task)
    return summaries


def _resumed_from(saver: VerifiedSaver, thread_id: str, namespaces: list[str]) -> Any:
    """The newest root checkpoint that verifies in full, with its pending writes but no
    channel value (else the newest of the other namespaces'); ``None`` if none does."""
    engine = saver.engine
    found = engine.latest_valid_checkpoint(thread_id, "", values=False)
    if found is None:
        others = (
            engine.latest_valid_checkpoint(thread_id, checkpoint_ns, values=False)
            for checkpoint_ns in namespaces
            if checkpoint_ns
        )
        found = max((f for f in others if f is not None), key=output.checkpoint_id, default=None)
    if found is None:
        return None
    writes = engine.reader.pending_writes(
        engine.serde, thread_id, output.namespace(found), output.checkpoint_id(found)
    )
    return found._replace(pending_writes=writes)


def threads(store: Store, as_json: AsJson = False, key_file: KeyFile = None) -> int:
    """Every thread: checkpoints, namespaces, last step and write, bytes, interrupts.

    Each checkpoint's own record is verified, not the records its values are kept
    in: `verify` checks those.
    """

    def body() -> int:
        saver = open_store(store, key_file)
        seen_damage: list[Damage] = []
        saver.reporter.on_corruption = seen_damage.append
        summaries = thread_summaries(saver)
        if as_json:
            print_json({"store": saver.storage.location(""), "threads": summaries})
            _warn_damage(store, seen_damage)
            return EXIT_OK
        grid = table(
            "THREAD", "CHECKPOINTS", "NAMESPACES", "LAST STEP", "LAST WRITE", "BYTES", "WAITING"
        )
        for s in summaries:
            waiting = (
                "; ".join(output.clip(repr(i["value"])) for i in s["interrupts"])
                if s["interrupts"]
                else "-"
            )
            grid.add_row(
                s["thread_id"],
                f"{s['checkpoints']} [red]({s['damaged']} damaged)[/]"
                if s["damaged"]
                else str(s["checkpoints"]),
                ", ".join(output.ns_label(ns) for ns in s["namespaces"]) or "-",
                output.text(s["last_step"]),
                output.text(s["last_write"]),
                str(s["bytes"]),
                f"[yellow]{waiting}[/]" if s["interrupts"] else waiting,
            )
        out().print(grid)
        _warn_damage(store, seen_damage)
        return EXIT_OK

    return run_guarded(body, store=store)


def _warn_damage(store: str, damaged: list[Damage]) -> None:
    if damaged:
        print(
            f"warning: {len({d.key for d in damaged})} damaged record(s) found; "
            f"`{output.PROG} verify {store}` lists them and the checkpoints they make unusable",
            file=sys.stderr,
        )


# -- history ---------------------------------------------------------------------


def thread_history(
    saver: VerifiedSaver, thread_id: str, ns: str | None, limit: int | None
) -> list[dict[str, Any]]:
    """A thread's checkpoints, newest first, as ``history`` shows them.

    Damaged and unusable checkpoints are listed too, with their ``status`` and
    ``problem``.

    Args:
        saver: The opened store.
        thread_id: The thread, which the store has.
        ns: Only this namespace; ``None`` for every one.
        limit: At most this many rows; ``None`` for all.

    Returns:
        One dict per checkpoint.
    """
    found = list(saver.list(output.thread_config(thread_id, ns)))
    versions = {
        (output.namespace(f), output.checkpoint_id(f)): f.checkpoint["channel_versions"]
        for f in found
    }
    report = saver.verify(thread_id)
    rows: list[dict[str, Any]] = []
    for item in found:
        checkpoint_ns, checkpoint_id = output.namespace(item), output.checkpoint_id(item)
        parent = output.parent_id(item)
        parent_versions = versions.get((checkpoint_ns, parent)) if parent else {}
        own = item.checkpoint["channel_versions"]
        rows.append(
            {
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint_id,
                "step": item.metadata.get("step"),
                "source": item.metadata.get("source"),
                "parent_checkpoint_id": parent,
                "changed_channels": None
                if parent_versions is None
                else sorted(ch for ch, v in own.items() if parent_versions.get(ch) != v),
                "bytes": _checkpoint_bytes(saver, thread_id, checkpoint_ns, checkpoint_id),
                "status": "ok",
                "problem": None,
            }
        )
    listed = {(r["checkpoint_ns"], r["checkpoint_id"]) for r in rows}
    for unusable in report.unusable_checkpoints:
        where = (unusable.checkpoint_ns, unusable.checkpoint_id)
        if ns is not None and unusable.checkpoint_ns != ns:
            continue
        problem = unusable.reason or f"because of {unusable.because_of}"
        if where in listed:
            for row in rows:
                if (row["checkpoint_ns"], row["checkpoint_id"]) == where:
                    row.update(status="unusable", problem=problem)
            continue
        listed.add(where)
        rows.append(
            {
                "checkpoint_ns": unusable.checkpoint_ns,
                "checkpoint_id": unusable.checkpoint_id,
                "step": None,
                "source": None,
                "parent_checkpoint_id": None,
                "changed_channels": None,
                "bytes": _checkpoint_bytes(saver, thread_id, *where),
                "status": "unusable",
                "problem": problem,
            }
        )
    for damage in report.damaged:
        damaged_id = record_keys.checkpoint_id_of(damage.key.rsplit("/", 1)[-1])
        identity = damage.identity or {}
        checkpoint_ns = identity.get("checkpoint_ns", "")
        if damaged_id is None or (checkpoint_ns, damaged_id) in listed:
            continue
        if ns is not None and checkpoint_ns != ns:
            continue
        listed.add((checkpoint_ns, damaged_id))
        rows.append(
            {
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": damaged_id,
                "step": None,
                "source": None,
                "parent_checkpoint_id": None,
                "changed_channels": None,
                "bytes": None,
                "status": "damaged",
                "problem": damage.reason,
            }
        )
    rows.sort(key=lambda r: (r["checkpoint_ns"], r["checkpoint_id"]), reverse=True)
    return rows[:limit] if limit is not None else rows


def _checkpoint_bytes(
    saver: VerifiedSaver, thread_id: str, checkpoint_ns: str, checkpoint_id: str
) -> int | None:
    try:
        data = saver.storage.read(
            record_keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
        )
    except OSError:
        return None
    return len(data) if data is not None else None


def history(
    store: Store,
    thread: Annotated[str, typer.Argument(metavar="THREAD")],
    ns: Annotated[
        str | None, typer.Option("--ns", metavar="NS", help="only this namespace")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", metavar="N", min=1)] = None,
    as_json: AsJson = False,
    key_file: KeyFile = None,
) -> int:
    """A thread's checkpoints, newest first; damaged and unusable ones are marked."""

    def body() -> int:
        saver = open_store(store, key_file)
        need_thread(saver, thread, store)
        rows = thread_history(saver, thread, ns, limit)
        if as_json:
            print_json({"thread_id": thread, "checkpoints": rows})
            return EXIT_OK
        grid = table("CHECKPOINT", "NS", "STEP", "SOURCE", "CHANGED", "BYTES", "STATUS")
        for r in rows:
            changed = r["changed_channels"]
            status = "ok" if r["status"] == "ok" else f"[red]{r['status']}: {r['problem']}[/]"
            grid.add_row(
                r["checkpoint_id"],
                output.ns_label(r["checkpoint_ns"]),
                output.text(r["step"]),
                output.text(r["source"]),
                "?"
                if changed is None
                else ", ".join(c for c in changed if not is_internal(c)) or "-",
                output.text(r["bytes"]),
                status,
            )
        out().print(grid)
        return EXIT_OK

    return run_guarded(body, store=store)


# -- show ------------------------------------------------------------------------


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
        "interrupts": _interrupts(found),
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


# -- stats and prune ---------------------------------------------------------------


def stats(store: Store, as_json: AsJson = False, key_file: KeyFile = None) -> int:
    """Threads, checkpoints, bytes, compression ratio, memory items, cache entries, quarantine.

    ``records``, ``bytes`` and the compression ratio are those of the threads;
    ``store_batches`` counts the records of ``VerifiedStore`` (batches of item
    changes, until its logs are compacted) and ``cache_entries`` those of
    ``VerifiedCache`` (expired ones until they are swept); ``store_bytes`` (the
    memories' logs, parity included) and ``cache_bytes`` what they take.
    """

    def body() -> int:
        from langgraph_checkpoint_verified.records.format import Codec

        saver = open_store(store, key_file)
        storage = saver.storage
        stored = raw = records = 0
        keys = list(saver.storage.walk("threads"))
        with progress("measuring") as bar:
            task = bar.add_task("measuring", total=len(keys))
            for key in keys:
                data = saver.storage.read(key) or b""
                records += 1
                stored += len(data)
                raw += Codec.decompressed_size(data) or len(data)
                bar.advance(task)
        checkpoints = sum(1 for k in keys if k.endswith(".ckpt"))
        summary = {
            "store": saver.storage.location(""),
            "threads": len(saver.engine.thread_ids()),
            "checkpoints": checkpoints,
            "records": records,
            "bytes": stored,
            "uncompressed_bytes": raw,
            "compression_ratio": round(raw / stored, 3) if stored else None,
            "store_batches": _count(storage, MEMORIES, record_keys.BATCH_SUFFIX),
            "store_bytes": storage.usage(MEMORIES),
            "cache_entries": _count(storage, CACHE, record_keys.CACHE_ENTRY_SUFFIX),
            "cache_bytes": storage.usage(CACHE),
            "quarantined_records": quarantined_count(saver),
        }
        if as_json:
            print_json(summary)
            return EXIT_OK
        grid = table("", "")
        grid.show_header = False
        for name, value in summary.items():
            grid.add_row(name.replace("_", " "), output.text(value))
        out().print(grid)
        return EXIT_OK

    return run_guarded(body, store=store)


def _count(storage: Storage, prefix: str, suffix: str) -> int:
    """How many records under ``prefix`` end in ``suffix`` (names only, nothing read)."""
    return sum(1 for key in storage.walk(prefix) if key.endswith(suffix))


def checkpoint_count(saver: VerifiedSaver, thread_id: str) -> int:
    """How many checkpoints a thread has, in every namespace (names only, nothing read).

    Args:
        saver: The opened store.
        thread_id: The thread.

    Returns:
        The number of its checkpoint records, whether or not they verify.
    """
    engine = saver.engine
    return sum(len(engine.checkpoint_ids(thread_id, ns)) for ns in engine.namespaces(thread_id))


def prune_plan(saver: VerifiedSaver, thread_id: str, strategy: str) -> int:
    """How many checkpoints ``prune`` would drop from a thread, from the changes it would make.

    The plan is the one ``saver.prune`` carries out (``maintenance.trim_changes``
    for ``keep_latest``, ``delete_changes`` for ``delete``), so a dry run counts
    exactly what a prune drops: the ``DeltaChannel`` ancestors a kept checkpoint
    is rebuilt from stay, and so do checkpoints that do not verify.

    Args:
        saver: The opened store.
        thread_id: A thread the store has.
        strategy: ``keep_latest`` or ``delete``.

    Returns:
        The number of checkpoints the prune would remove.
    """
    from langgraph_checkpoint_verified.engine import maintenance

    if strategy == "keep_latest":
        _, dropped = maintenance.trim_changes(saver.engine, thread_id, keep_last=1)
        return dropped
    changes = maintenance.delete_changes(saver.engine, thread_id)
    return sum(1 for key in changes if record_keys.is_checkpoint_key(key))


def prune(
    store: Store,
    thread_ids: Annotated[list[str], typer.Argument(metavar="THREAD...")],
    strategy: Annotated[
        str, typer.Option("--strategy", help="keep_latest or delete")
    ] = "keep_latest",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="say exactly what would go; change nothing")
    ] = False,
    key_file: KeyFile = None,
) -> int:
    """Drop all but the newest checkpoint of threads (or the threads themselves)."""

    def body() -> int:
        if strategy not in ("keep_latest", "delete"):
            raise CommandError(f"unknown strategy {strategy!r}; use keep_latest or delete")
        saver = open_store(store, key_file, quarantine=not dry_run)
        for thread_id in thread_ids:
            need_thread(saver, thread_id, store)
        for thread_id in thread_ids:
            before = checkpoint_count(saver, thread_id)
            if dry_run:
                dropped = prune_plan(saver, thread_id, strategy)
            else:
                # pruned before it is said: a prune may be refused (a bucket refusing writes)
                saver.prune([thread_id], strategy=strategy)
                dropped = before - checkpoint_count(saver, thread_id)
            print(
                f"{'would drop' if dry_run else 'dropped'} {dropped} checkpoint(s) of thread "
                f"{thread_id!r}, kept {before - dropped}"
            )
        return EXIT_OK

    return run_guarded(body, store=store)
