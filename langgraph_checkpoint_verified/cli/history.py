"""``history``: a thread's checkpoints, newest first, damaged and unusable ones marked.

Registered by ``app`` as the command of the same name; it opens the store with
``quarantine=False`` and runs under ``store.run_guarded``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from langgraph_checkpoint_verified.cli import output
from langgraph_checkpoint_verified.cli.output import EXIT_OK, is_internal, out, print_json, table
from langgraph_checkpoint_verified.cli.params import AsJson, KeyFile, Store
from langgraph_checkpoint_verified.cli.store import need_thread, open_store, run_guarded
from langgraph_checkpoint_verified.records import keys as record_keys

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.saver import VerifiedSaver


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
