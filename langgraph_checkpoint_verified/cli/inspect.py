"""``inspect``: a store's threads, namespaces and checkpoints, or one thread's history.

An argparse command (see ``legacy``): ``run_inspect`` takes the parsed arguments.
It opens the store with ``quarantine=False``: looking at a store never moves anything.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_verified.cli.output import (
    EXIT_OK,
    PROG,
    checkpoint_id,
    namespace,
    ns_label,
    parent_id,
    print_json,
    print_table,
    text,
    thread_config,
)
from langgraph_checkpoint_verified.cli.store import (
    open_existing,
    quarantined_count,
    thread_or_fail,
)

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.engine import Damage
    from langgraph_checkpoint_verified.saver import VerifiedSaver


def run_inspect(args: argparse.Namespace) -> int:
    """Print a store's summary, or a thread's history with ``--thread``.

    Args:
        args: ``store``, ``key_file``, ``thread`` (or ``None``) and ``json``.

    Returns:
        ``0``; damage found on the way is one warning line on stderr.
    """
    seen_damage: list[Damage] = []
    saver = open_existing(args, quarantine=False)
    saver.reporter.on_corruption = seen_damage.append
    if args.thread is not None:
        thread_or_fail(saver, args.thread, args.store)
        summary = thread_history(saver, args.thread)
        if args.json:
            print_json(summary)
        else:
            print_history(summary)
    else:
        summary = store_summary(saver)
        if args.json:
            print_json(summary)
        else:
            print_summary(summary)
    if seen_damage:
        unique = len({d.key for d in seen_damage})
        print(
            f"warning: {unique} damaged record(s) found; checkpoints that need them are not "
            f"shown. `{PROG} verify {args.store}` lists them",
            file=sys.stderr,
        )
    return EXIT_OK


def store_summary(saver: VerifiedSaver) -> dict[str, Any]:
    """Every thread's namespaces, with how many checkpoints verify and the newest.

    Args:
        saver: The opened store.

    Returns:
        ``store``, ``threads``, ``checkpoints`` and ``quarantined_records``.
    """
    namespaces: dict[str, dict[str, dict[str, Any]]] = {
        thread_id: {} for thread_id in saver.engine.thread_ids()
    }
    # newest first within each thread; verified, but no state deserialized: only counted
    for found in saver.engine.list_checkpoints(None, values=False):
        thread_id = str(found.config["configurable"]["thread_id"])
        entry = namespaces.setdefault(thread_id, {}).setdefault(
            namespace(found),
            {
                "checkpoint_ns": namespace(found),
                "checkpoints": 0,
                "newest_checkpoint_id": checkpoint_id(found),
                "newest_step": found.metadata.get("step"),
            },
        )
        entry["checkpoints"] += 1
    threads: list[dict[str, Any]] = [
        {
            "thread_id": thread_id,
            "namespaces": [by_ns[ns] for ns in sorted(by_ns)],
        }
        for thread_id, by_ns in sorted(namespaces.items())
    ]
    return {
        "store": saver.storage.location(""),
        "threads": threads,
        "checkpoints": sum(ns["checkpoints"] for t in threads for ns in t["namespaces"]),
        "quarantined_records": quarantined_count(saver),
    }


def print_summary(summary: dict[str, Any]) -> None:
    """Print ``store_summary``'s result as a table.

    Args:
        summary: What ``store_summary`` returned.
    """
    print(f"store {summary['store']}")
    print(
        f"threads: {len(summary['threads'])}  checkpoints: {summary['checkpoints']}  "
        f"quarantined records: {summary['quarantined_records']}"
    )
    rows = []
    for thread in summary["threads"]:
        if not thread["namespaces"]:
            rows.append([thread["thread_id"], "-", "0", "(none verifies)", "-"])
        for ns in thread["namespaces"]:
            rows.append(
                [
                    thread["thread_id"],
                    ns_label(ns["checkpoint_ns"]),
                    str(ns["checkpoints"]),
                    ns["newest_checkpoint_id"],
                    text(ns["newest_step"]),
                ]
            )
    if rows:
        print()
        print_table(["THREAD", "NAMESPACE", "CHECKPOINTS", "NEWEST CHECKPOINT", "STEP"], rows)


def thread_history(saver: VerifiedSaver, thread_id: str) -> dict[str, Any]:
    """A thread's verified checkpoints by namespace, newest first, with what each updated.

    Args:
        saver: The opened store.
        thread_id: The thread, which the store has.

    Returns:
        ``thread_id`` and ``namespaces``, each with its ``checkpoints``.
    """
    found = list(saver.list(thread_config(thread_id)))
    versions = {(namespace(f), checkpoint_id(f)): f.checkpoint["channel_versions"] for f in found}
    by_ns: dict[str, list[dict[str, Any]]] = {}
    for item in found:
        parent = parent_id(item)
        own = item.checkpoint["channel_versions"]
        parent_versions = versions.get((namespace(item), parent)) if parent else {}
        updated = (
            None  # the parent does not verify: what changed is unknown
            if parent_versions is None
            else sorted(ch for ch, v in own.items() if parent_versions.get(ch) != v)
        )
        by_ns.setdefault(namespace(item), []).append(
            {
                "checkpoint_id": checkpoint_id(item),
                "step": item.metadata.get("step"),
                "source": item.metadata.get("source"),
                "parent_checkpoint_id": parent,
                "channels": sorted(item.checkpoint["channel_values"]),
                "updated_channels": updated,
                "pending_writes": len(item.pending_writes or ()),
            }
        )
    return {
        "thread_id": thread_id,
        "namespaces": [{"checkpoint_ns": ns, "checkpoints": by_ns[ns]} for ns in sorted(by_ns)],
    }


def print_history(history: dict[str, Any]) -> None:
    """Print ``thread_history``'s result, one table per namespace.

    Args:
        history: What ``thread_history`` returned.
    """
    if not history["namespaces"]:
        print(f"thread {history['thread_id']!r}: no checkpoint verifies")
    for index, ns in enumerate(history["namespaces"]):
        if index:
            print()
        print(
            f"thread {history['thread_id']!r}  namespace {ns_label(ns['checkpoint_ns'])}  "
            f"{len(ns['checkpoints'])} checkpoints, newest first (* = written at this step)"
        )
        rows = []
        for item in ns["checkpoints"]:
            updated = set(item["updated_channels"] or ())
            rows.append(
                [
                    item["checkpoint_id"],
                    text(item["step"]),
                    text(item["source"]),
                    item["parent_checkpoint_id"] or "-",
                    ", ".join(f"{ch}*" if ch in updated else ch for ch in item["channels"]) or "-",
                ]
            )
        print_table(["CHECKPOINT", "STEP", "SOURCE", "PARENT", "CHANNELS"], rows)
