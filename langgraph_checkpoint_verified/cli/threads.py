"""``threads``: every thread of a store, its checkpoints, last step and what it waits at.

A typer command, registered by ``app``: the public function ``threads`` is the
command, its parameters the command's arguments and options. It opens the store
with ``quarantine=False`` and runs under ``store.run_guarded``: whatever stops it is
one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_verified.cli import output
from langgraph_checkpoint_verified.cli.output import EXIT_OK, out, print_json, progress, table
from langgraph_checkpoint_verified.cli.params import AsJson, KeyFile, Store
from langgraph_checkpoint_verified.cli.store import open_store, run_guarded
from langgraph_checkpoint_verified.records import keys as record_keys

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.engine import Damage
    from langgraph_checkpoint_verified.saver import VerifiedSaver


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
                    "interrupts": output.interrupts_of(newest) if newest else [],
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
