"""The ``langgraph-verified`` command line: a thin layer over the public API.

Subcommands look into a store (``inspect``), check it (``verify``), move damage
aside (``repair``), compare two checkpoints (``diff``), export a thread as JSON
lines (``export``) and copy a ``SqliteSaver`` database into a store
(``migrate``). Every command is also callable in-process as
``main([...])``, which returns the exit code:

* ``0``: done, nothing wrong;
* ``1``: the store (or the migrated copy) has damage;
* ``2``: the command could not run (no such store, unknown thread, bad id,
  bad arguments, an object store that does not answer). One line on stderr says why.

A STORE is a directory or ``s3://bucket/prefix``: records in an S3-compatible
bucket, reached as boto3 and the aws CLI reach it, through ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` (and
``AWS_ALLOW_HTTP=true`` for a plain-http endpoint).

Commands that only read (``inspect``, ``verify``, ``diff``, ``export``) open the
store with ``quarantine=False``: looking at a store never moves anything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, SerializerProtocol

from langgraph_checkpoint_verified._cli_store import (
    CREDENTIALS_ADVICE,
    STORE_HELP,
    CommandError,
    create_or_open,
    first_line,
    is_object_store,
    open_existing,
    storage_failure,
)
from langgraph_checkpoint_verified._storage import QUARANTINE_PREFIX
from langgraph_checkpoint_verified.errors import (
    StoreUnavailableError,
    StoreWriteError,
    VerifiedSaverError,
)
from langgraph_checkpoint_verified.migrate import _copy_threads, _group_checkpoints, _TaskWrites
from langgraph_checkpoint_verified.recovery import Damage, VerifyReport
from langgraph_checkpoint_verified.saver import VerifiedSaver

PROG = "langgraph-verified"
EXIT_OK = 0
EXIT_DAMAGED = 1
EXIT_ERROR = 2

PROGRESS_MIN_RECORDS = 2000
"""Stores with at least this many records show verification progress on stderr."""

_KEYED_REASON = "record was written with a key and no key was given"
_MISSING_REASON = "missing:"  # verify's reason for a record that is gone, not damaged in place
_VALUE_WIDTH = 100


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code (``0`` ok, ``1`` damage, ``2`` error).

    Args:
        argv: The arguments after the program name; ``None`` reads ``sys.argv``.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as store:
        ...     code = main(["verify", store])  # doctest: +ELLIPSIS
        checked 0 records (0 checkpoints) in ...
        ok: every record verifies
        >>> code
        0
        >>> main(["inspect", "/no/such/store"])
        2
    """
    from langgraph_checkpoint_verified._cli_app import run

    return run(argv)


def legacy_main(argv: Sequence[str]) -> int:
    """The argparse commands (``inspect``, ``verify``, ``repair``, ``diff``, ``migrate``)."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse has printed the usage and why
        return exit_.code if isinstance(exit_.code, int) else EXIT_ERROR
    return _run_guarded(lambda: args.run(args), store=args.store)


def _run_guarded(body: Callable[[], int], *, store: str | None = None) -> int:
    """Run a command: one line on stderr and exit 2 when it cannot run, never a traceback.

    ``store`` is the STORE argument, named by the error when an object store fails.
    """
    library_logger = logging.getLogger("langgraph_checkpoint_verified")
    previous_level = library_logger.level
    # Damage is reported by the commands themselves, once and in order; the
    # library's per-record warnings would repeat it on stderr.
    library_logger.setLevel(logging.ERROR)
    try:
        return int(body())
    except BrokenPipeError:
        # the reader went away (`export ... | head`): not an error, and Python
        # must not complain again when it flushes stdout at exit
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (StoreUnavailableError, StoreWriteError) as exc:
        print(f"{PROG}: error: {storage_failure(exc, store)}", file=sys.stderr)
        return EXIT_ERROR
    except (CommandError, VerifiedSaverError, OSError, ValueError) as exc:
        # ValueError: e.g. a key file of the wrong length, refused by the saver
        print(f"{PROG}: error: {first_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    finally:
        library_logger.setLevel(previous_level)


# -- arguments ---------------------------------------------------------------


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, verify, repair, diff, export and migrate LangGraph checkpoint "
        "stores written by VerifiedSaver.",
        epilog="Exit codes: 0 ok, 1 damage found, 2 the command could not run.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, run: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_, description=help_)
        sub.set_defaults(run=run)
        return sub

    def store_arg(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("store", metavar="STORE", help=STORE_HELP)
        sub.add_argument(
            "--key-file",
            metavar="FILE",
            help="file holding the secret key the store was written with (raw bytes)",
        )

    sub = command("inspect", "show threads, namespaces and checkpoints of a store", _inspect)
    store_arg(sub)
    sub.add_argument("--thread", metavar="T", help="show this thread's checkpoint history")
    sub.add_argument("--json", action="store_true", help="print JSON instead of a table")

    sub = command("verify", "check every record; exit 1 if anything is damaged", _verify)
    store_arg(sub)
    sub.add_argument("--thread", metavar="T", help="check only this thread")
    sub.add_argument("--json", action="store_true", help="print the report as JSON")

    sub = command("repair", "move damaged records to the store's quarantine/", _repair)
    store_arg(sub)
    sub.add_argument("--thread", metavar="T", help="repair only this thread")

    sub = command("diff", "show which channels differ between two checkpoints", _diff)
    store_arg(sub)
    sub.add_argument("--thread", metavar="T", required=True, help="the thread")
    sub.add_argument("--ns", metavar="NS", default="", help="checkpoint namespace (default: root)")
    sub.add_argument("--json", action="store_true", help="print the diff as JSON")
    sub.add_argument("a", metavar="A", help="older checkpoint id (or a unique prefix)")
    sub.add_argument("b", metavar="B", help="newer checkpoint id (or a unique prefix)")

    sub = command("export", "write a thread's verified checkpoints as JSON lines", _export)
    store_arg(sub)
    sub.add_argument("--thread", metavar="T", required=True, help="the thread")
    sub.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")

    sub = command("migrate", "copy every thread of a SqliteSaver database into a store", _migrate)
    sub.add_argument("source", metavar="SOURCE.sqlite", help="the SqliteSaver database file")
    sub.add_argument("store", metavar="STORE", help=f"{STORE_HELP} (created if missing)")
    sub.add_argument(
        "--key-file", metavar="FILE", help="write the store with this secret key (raw bytes)"
    )
    return parser


def _thread_or_fail(saver: VerifiedSaver, thread_id: str | None, store: str) -> str | None:
    # Names only (no record is read): a thread whose every record is damaged
    # still exists, and verify/repair must be able to name it.
    if thread_id is not None and thread_id not in saver._reader.thread_ids():
        raise CommandError(
            f"no thread {thread_id!r} in {store}; `{PROG} threads {store}` lists them"
        )
    return thread_id


def _thread_config(thread_id: str, checkpoint_ns: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_ns is not None:
        configurable["checkpoint_ns"] = checkpoint_ns
    return {"configurable": configurable}


def _checkpoint_id(found: CheckpointTuple) -> str:
    return str(found.config["configurable"]["checkpoint_id"])


def _namespace(found: CheckpointTuple) -> str:
    return str(found.config["configurable"].get("checkpoint_ns", ""))


def _parent_id(found: CheckpointTuple) -> str | None:
    if not found.parent_config:
        return None
    return found.parent_config["configurable"].get("checkpoint_id")


def _ns_label(checkpoint_ns: str) -> str:
    return checkpoint_ns if checkpoint_ns else "(root)"


def _quarantined_count(saver: VerifiedSaver) -> int:
    return sum(1 for key in saver.storage.walk(QUARANTINE_PREFIX) if key.endswith(".record"))


# -- inspect -------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    seen_damage: list[Damage] = []
    saver = open_existing(args, quarantine=False)
    saver.reporter.on_corruption = seen_damage.append
    if args.thread is not None:
        _thread_or_fail(saver, args.thread, args.store)
        summary = _thread_history(saver, args.thread)
        if args.json:
            _print_json(summary)
        else:
            _print_history(summary)
    else:
        summary = _store_summary(saver)
        if args.json:
            _print_json(summary)
        else:
            _print_summary(summary)
    if seen_damage:
        unique = len({d.key for d in seen_damage})
        print(
            f"warning: {unique} damaged record(s) found; checkpoints that need them are not "
            f"shown. `{PROG} verify {args.store}` lists them",
            file=sys.stderr,
        )
    return EXIT_OK


def _store_summary(saver: VerifiedSaver) -> dict[str, Any]:
    namespaces: dict[str, dict[str, dict[str, Any]]] = {
        thread_id: {} for thread_id in saver._reader.thread_ids()
    }
    # newest first within each thread; verified, but no state deserialized: only counted
    for found in saver._list(None, filter=None, before=None, limit=None, values=False):
        thread_id = str(found.config["configurable"]["thread_id"])
        entry = namespaces.setdefault(thread_id, {}).setdefault(
            _namespace(found),
            {
                "checkpoint_ns": _namespace(found),
                "checkpoints": 0,
                "newest_checkpoint_id": _checkpoint_id(found),
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
        "quarantined_records": _quarantined_count(saver),
    }


def _print_summary(summary: dict[str, Any]) -> None:
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
                    _ns_label(ns["checkpoint_ns"]),
                    str(ns["checkpoints"]),
                    ns["newest_checkpoint_id"],
                    _text(ns["newest_step"]),
                ]
            )
    if rows:
        print()
        _print_table(["THREAD", "NAMESPACE", "CHECKPOINTS", "NEWEST CHECKPOINT", "STEP"], rows)


def _thread_history(saver: VerifiedSaver, thread_id: str) -> dict[str, Any]:
    found = list(saver.list(_thread_config(thread_id)))
    versions = {(_namespace(f), _checkpoint_id(f)): f.checkpoint["channel_versions"] for f in found}
    by_ns: dict[str, list[dict[str, Any]]] = {}
    for item in found:
        parent = _parent_id(item)
        own = item.checkpoint["channel_versions"]
        parent_versions = versions.get((_namespace(item), parent)) if parent else {}
        updated = (
            None  # the parent does not verify: what changed is unknown
            if parent_versions is None
            else sorted(ch for ch, v in own.items() if parent_versions.get(ch) != v)
        )
        by_ns.setdefault(_namespace(item), []).append(
            {
                "checkpoint_id": _checkpoint_id(item),
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


def _print_history(history: dict[str, Any]) -> None:
    if not history["namespaces"]:
        print(f"thread {history['thread_id']!r}: no checkpoint verifies")
    for index, ns in enumerate(history["namespaces"]):
        if index:
            print()
        print(
            f"thread {history['thread_id']!r}  namespace {_ns_label(ns['checkpoint_ns'])}  "
            f"{len(ns['checkpoints'])} checkpoints, newest first (* = written at this step)"
        )
        rows = []
        for item in ns["checkpoints"]:
            updated = set(item["updated_channels"] or ())
            rows.append(
                [
                    item["checkpoint_id"],
                    _text(item["step"]),
                    _text(item["source"]),
                    item["parent_checkpoint_id"] or "-",
                    ", ".join(f"{ch}*" if ch in updated else ch for ch in item["channels"]) or "-",
                ]
            )
        _print_table(["CHECKPOINT", "STEP", "SOURCE", "PARENT", "CHANNELS"], rows)


# -- verify and repair -----------------------------------------------------------


def _verify(args: argparse.Namespace) -> int:
    saver = open_existing(args, quarantine=False)
    thread_id = _thread_or_fail(saver, args.thread, args.store)
    with _progress() as progress:
        report = saver.verify(thread_id, progress=progress)
    if args.json:
        _print_json({"store": saver.storage.location(""), **report.to_dict()})
    else:
        _print_report(saver, report)
        if report.needs_repair:
            where = f" --thread {thread_id}" if thread_id is not None else ""
            print(f"run `{PROG} repair {args.store}{where}` to move the damage to quarantine/")
            if not is_object_store(args.store) and not os.access(args.store, os.W_OK):
                print(
                    f"note: {args.store} is read-only for this process: repair needs to write to it"
                )
    return EXIT_OK if report.ok else EXIT_DAMAGED


def _repair(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_verified import _keys

    saver = open_existing(args, quarantine=True)
    thread_id = _thread_or_fail(saver, args.thread, args.store)
    with _progress() as progress:
        survey = saver.verify(thread_id, progress=progress)
    if any(d.reason == _KEYED_REASON for d in survey.damaged):
        # Without the key every record looks damaged: quarantining would empty the store.
        raise CommandError(
            f"{args.store} was written with a secret key; pass --key-file FILE (nothing was moved)"
        )
    if survey.ok:
        _print_report(saver, survey)
        print("nothing to repair")
        return EXIT_OK
    # where each checkpoint is now: once moved, its key names nothing any more
    was_at = {
        key: saver.storage.location(key)
        for u in survey.unusable_checkpoints
        for key in [_keys.checkpoint_key(u.thread_id, u.checkpoint_ns, u.checkpoint_id)]
    }
    with _progress() as progress:
        report = saver.verify(thread_id, repair=True, progress=progress)
    moved = {d.quarantined_to: d for d in report.damaged if d.quarantined_to}
    checkpoints_moved = {
        u.quarantined_to: u
        for u in report.unusable_checkpoints
        if u.quarantined_to and u.quarantined_to not in moved
    }
    if report.read_only and not moved and not checkpoints_moved and not report.rewritten:
        if is_object_store(args.store):
            raise CommandError(
                f"cannot repair {args.store}: the bucket refuses this process's writes, so "
                f"nothing was moved; {CREDENTIALS_ADVICE}, then run repair again"
            )
        refusal = saver.reporter.read_only_error
        why = f" ({refusal.strerror})" if refusal is not None and refusal.strerror else ""
        raise CommandError(
            f"cannot repair {args.store}: it is read-only for this process{why}, so nothing "
            f"was moved; make it writable (or run as its owner), then run repair again"
        )
    location = saver.storage.location
    for key in report.rewritten:
        print(f"rewrote {location(key)}")
        print("      (it now holds the channel values it kept in checkpoints moved aside)")
    for where, damage in moved.items():
        print(f"moved {damage.location}")
        print(f"   to {where}")
        print(f"      ({damage.kind or 'record'}: {damage.reason})")
    for where, unusable in checkpoints_moved.items():
        key = _keys.checkpoint_key(
            unusable.thread_id, unusable.checkpoint_ns, unusable.checkpoint_id
        )
        print(f"moved {was_at.get(key) or location(key)}")
        print(f"   to {where}")
        print(f"      (checkpoint that can never load: {unusable.reason})")
    count = len(moved) + len(checkpoints_moved)
    print(f"quarantined {count} record(s) under {location(QUARANTINE_PREFIX)}")
    after = saver.verify(thread_id)
    if after.ok:
        print("the store verifies now")
        return EXIT_OK
    print("what is left:")
    _print_report(saver, after)
    if report.read_only:
        fix = CREDENTIALS_ADVICE if is_object_store(args.store) else "make them writable"
        print(
            f"note: parts of {args.store} are read-only for this process: {fix}, then run "
            f"repair again"
        )
    return EXIT_DAMAGED


def _print_report(saver: VerifiedSaver, report: VerifyReport) -> None:
    print(
        f"checked {report.records_checked} records ({report.checkpoints_checked} checkpoints) "
        f"in {saver.storage.location('')}"
    )
    if report.ok:
        print("ok: every record verifies")
        return
    if report.damaged:
        print(f"damaged records: {len(report.damaged)}")
    for damage in report.damaged:
        print(f"  {damage.kind or 'record'}  {damage.location}")
        print(f"      {damage.reason}")
    if report.unusable_checkpoints:
        print(f"unusable checkpoints: {len(report.unusable_checkpoints)}")
    for unusable in report.unusable_checkpoints:
        print(
            f"  thread {unusable.thread_id!r}  namespace {_ns_label(unusable.checkpoint_ns)}  "
            f"{unusable.checkpoint_id}"
        )
        print(f"      {unusable.reason}")
        print(f"      {unusable.advice}")


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback behind a bar on stderr, for big stores only.

    The bar is the one the other commands draw (``_cli_app.progress``): on a terminal
    only, nothing on a pipe, and gone when done.
    """
    from langgraph_checkpoint_verified._cli_app import progress as progress_bar

    with progress_bar("verifying") as bar:
        task = None

        def progress(done: int, total: int) -> None:
            nonlocal task
            if total < PROGRESS_MIN_RECORDS:
                return
            if task is None:
                task = bar.add_task("verifying records", total=total)
            bar.update(task, completed=done, total=total)

        yield progress


# -- diff ------------------------------------------------------------------------


def _diff(args: argparse.Namespace) -> int:
    saver = open_existing(args, quarantine=False)
    _thread_or_fail(saver, args.thread, args.store)
    found = {
        _checkpoint_id(item): item for item in saver.list(_thread_config(args.thread, args.ns))
    }
    older = found[_resolve_id(found, args.a, args.thread, args.ns)]
    newer = found[_resolve_id(found, args.b, args.thread, args.ns)]
    changes = _channel_diff(older.checkpoint["channel_values"], newer.checkpoint["channel_values"])
    if args.json:
        _print_json(
            {
                "thread_id": args.thread,
                "checkpoint_ns": args.ns,
                "a": {"checkpoint_id": _checkpoint_id(older), "step": older.metadata.get("step")},
                "b": {"checkpoint_id": _checkpoint_id(newer), "step": newer.metadata.get("step")},
                "changes": [_jsonable(change) for change in changes],
            }
        )
        return EXIT_OK
    from langgraph_checkpoint_verified._cli_app import out

    console = out()
    colour = {"+": "green", "-": "red", "~": "yellow"}

    def say(line: str, sign: str = "") -> None:
        # markup off: values are printed as they are, whatever brackets they hold
        console.print(line, style=colour.get(sign), markup=False)

    say(f"thread {args.thread!r}  namespace {_ns_label(args.ns)}")
    say(f"A {_checkpoint_id(older)}  step {_text(older.metadata.get('step'))}")
    say(f"B {_checkpoint_id(newer)}  step {_text(newer.metadata.get('step'))}")
    if not changes:
        say("no channel differs")
    for change in changes:
        channel = change["channel"]
        if change["change"] == "added":
            say(f"+ {channel}: {_short(change['b'])}", "+")
        elif change["change"] == "removed":
            say(f"- {channel}: {_short(change['a'])}", "-")
        elif "messages" in change:
            counts = ", ".join(
                f"{len(change['messages'][kind])} {kind}"
                for kind in ("added", "removed", "changed")
                if change["messages"][kind]
            )
            say(f"~ {channel}: {counts}", "~")
            for sign, kind in (("+", "added"), ("-", "removed"), ("~", "changed")):
                for message in change["messages"][kind]:
                    say(f"    {sign} {_describe_message(message)}", sign)
        else:
            say(f"~ {channel}: {_short(change['a'])} -> {_short(change['b'])}", "~")
    return EXIT_OK


def _resolve_id(found: dict[str, CheckpointTuple], wanted: str, thread_id: str, ns: str) -> str:
    if wanted in found:
        return wanted
    matches = [checkpoint_id for checkpoint_id in found if checkpoint_id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise CommandError(
            f"{wanted!r} is the start of {len(matches)} checkpoint ids; give more of it"
        )
    raise CommandError(
        f"no verified checkpoint {wanted!r} in thread {thread_id!r} namespace {_ns_label(ns)}; "
        f"`{PROG} history STORE {thread_id}` lists them"
    )


def _channel_diff(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Channel-level changes from ``before`` to ``after``, sorted by channel name."""
    changes: list[dict[str, Any]] = []
    for channel in sorted(set(before) | set(after)):
        if channel not in before:
            changes.append({"channel": channel, "change": "added", "b": after[channel]})
        elif channel not in after:
            changes.append({"channel": channel, "change": "removed", "a": before[channel]})
        elif not _same(before[channel], after[channel]):
            change: dict[str, Any] = {"channel": channel, "change": "changed"}
            if _is_message_list(before[channel]) and _is_message_list(after[channel]):
                change["messages"] = _message_diff(before[channel], after[channel])
            else:
                change.update(a=before[channel], b=after[channel])
            changes.append(change)
    return changes


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. arrays whose == is elementwise
        return json.dumps(_jsonable(a), sort_keys=True) == json.dumps(_jsonable(b), sort_keys=True)


def _is_message_list(value: Any) -> bool:
    from langchain_core.messages import BaseMessage

    return isinstance(value, list) and all(isinstance(m, BaseMessage) for m in value)


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


def _describe_message(message: Any) -> str:
    text = f"{message.type}: {message.content!r}"
    calls = getattr(message, "tool_calls", None)
    if calls:
        text += " calls " + ", ".join(call["name"] for call in calls)
    return _clip(text)


# -- export ----------------------------------------------------------------------


def _export(args: argparse.Namespace) -> int:
    saver = open_existing(args, quarantine=False)
    _thread_or_fail(saver, args.thread, args.store)
    # oldest first, so the lines replay the thread in the order it ran
    found = sorted(saver.list(_thread_config(args.thread)), key=_checkpoint_id)
    lines = (json.dumps(_export_line(item), ensure_ascii=False) + "\n" for item in found)
    if args.output is None:
        sys.stdout.writelines(lines)
        return EXIT_OK
    with open(args.output, "w", encoding="utf-8") as out:
        out.writelines(lines)
    print(
        f"exported {len(found)} checkpoints of thread {args.thread!r} to {args.output}",
        file=sys.stderr,
    )
    return EXIT_OK


def _export_line(item: CheckpointTuple) -> dict[str, Any]:
    return {
        "thread_id": item.config["configurable"]["thread_id"],
        "checkpoint_ns": _namespace(item),
        "checkpoint_id": _checkpoint_id(item),
        "parent_checkpoint_id": _parent_id(item),
        "metadata": _jsonable(item.metadata),
        "channel_values": {
            channel: _jsonable(value)
            for channel, value in sorted(item.checkpoint["channel_values"].items())
        },
        "pending_writes": [
            [task_id, channel, _jsonable(value)]
            for task_id, channel, value in item.pending_writes or ()
        ],
    }


def _jsonable(value: Any) -> Any:
    """LangChain's JSON form (messages as ``{"lc": 1, "type": "constructor", ...}``);
    what has no JSON form becomes its ``repr``."""
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


# -- migrate ---------------------------------------------------------------------


def _migrate(args: argparse.Namespace) -> int:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        raise CommandError(
            "migrate reads SqliteSaver databases with langgraph-checkpoint-sqlite, which is "
            "not installed: pip install langgraph-checkpoint-sqlite"
        ) from None
    source = Path(args.source)
    if not source.is_file():
        raise CommandError(f"no SQLite database at {source}")
    if not is_object_store(args.store):
        target = Path(args.store)
        if target.exists() and not target.is_dir():
            raise CommandError(f"{target} is not a store: a store is a directory")
    # read-only: migrating must never change the database it copies from
    conn = sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True)
    try:
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if not {"checkpoints", "writes"} <= tables:
            raise CommandError(
                f"{source} is not a SqliteSaver database (no checkpoints/writes tables)"
            )
        sqlite_saver = SqliteSaver(conn)
        groups = _group_checkpoints(sqlite_saver.list(None))
        pending = _sqlite_pending_writes(conn, sqlite_saver.serde)
    except sqlite3.DatabaseError as exc:
        raise CommandError(f"cannot read {source}: {exc}") from None
    finally:
        conn.close()

    saver = create_or_open(args.store, args.key_file)
    try:
        threads, checkpoints, writes = _copy_threads(groups, pending, saver)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    print(
        f"migrated {threads} thread(s), {checkpoints} checkpoint(s) and {writes} pending "
        f"write(s) from {source} to {saver.storage.location('')}"
    )
    with _progress() as progress:
        report = saver.verify(progress=progress)
    _print_report(saver, report)
    return EXIT_OK if report.ok else EXIT_DAMAGED


def _sqlite_pending_writes(
    conn: sqlite3.Connection, serde: SerializerProtocol
) -> dict[tuple[str, str, str], dict[str, _TaskWrites]]:
    """Every row of a SqliteSaver ``writes`` table, by checkpoint, then by task id.

    Read from the table rather than taken from ``SqliteSaver.list``, which returns
    pending writes without their ``task_path``: LangGraph orders a step's writes by
    ``task_path`` first (``writes_sort_key``), so a copy without it would replay the
    writes of parallel branches to an order-sensitive channel (a ``DeltaChannel``) in
    task-id order, a different value from the one the run produced.
    """
    columns = {row[1] for row in conn.execute("PRAGMA table_info(writes)")}
    # a database written before SqliteSaver stored task_path reads as '', as SqliteSaver
    # itself reads it
    task_path = "task_path" if "task_path" in columns else "''"
    rows = conn.execute(
        "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, "
        f"{task_path}, idx, channel, type, value FROM writes"
    )
    found: dict[tuple[str, str, str], dict[str, _TaskWrites]] = {}
    for thread_id, checkpoint_ns, checkpoint_id, task_id, path, idx, channel, type_, value in rows:
        tasks = found.setdefault((str(thread_id), checkpoint_ns, checkpoint_id), {})
        task = tasks.setdefault(task_id, _TaskWrites(task_path=path))
        task.rows.append((idx, channel, serde.loads_typed((type_, value))))
    return found


# -- output helpers ----------------------------------------------------------------


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=repr))


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        print("  ".join(cells).rstrip())


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def _short(value: Any) -> str:
    if _is_message_list(value):
        return f"[{len(value)} messages]"
    return _clip(repr(value))


def _clip(text: str) -> str:
    return text if len(text) <= _VALUE_WIDTH else text[: _VALUE_WIDTH - 3] + "..."
