"""``verify`` and ``repair``: check every record of a store, and move damage aside.

Every record: the threads' checkpoints, pending writes and tool records, the
memory batches of ``VerifiedStore`` (``memories/``) and the node cache entries of
``VerifiedCache`` (``cache/``); with ``--thread``, that thread's records only.
Argparse commands (see ``legacy``): ``run_verify`` and ``run_repair`` take the
parsed arguments. ``verify`` opens the store with ``quarantine=False`` and moves
nothing; ``repair`` moves damaged records and checkpoints that can never load to
the store's ``quarantine/``. ``print_report`` and ``verify_progress`` are shared with
``migrate``, which verifies the copy it made.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from langgraph_checkpoint_verified.cli.output import (
    EXIT_DAMAGED,
    EXIT_OK,
    PROG,
    ns_label,
    print_json,
)
from langgraph_checkpoint_verified.cli.output import (
    progress as progress_bar,
)
from langgraph_checkpoint_verified.cli.store import (
    CREDENTIALS_ADVICE,
    CommandError,
    is_object_store,
    open_existing,
    thread_or_fail,
)
from langgraph_checkpoint_verified.records import keys

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.engine import VerifyReport
    from langgraph_checkpoint_verified.saver import VerifiedSaver

PROGRESS_MIN_RECORDS = 2000
"""Stores with at least this many records show verification progress on stderr."""

KEYED_REASON = "record was written with a key and no key was given"
"""verify's reason for a record of a keyed store opened without its key."""


def run_verify(args: argparse.Namespace) -> int:
    """Check every record (of one thread with ``--thread``) and print what is damaged.

    Args:
        args: ``store``, ``key_file``, ``thread`` (or ``None``) and ``json``.

    Returns:
        ``0`` when every record verifies, ``1`` when something is damaged.
    """
    saver = open_existing(args, quarantine=False)
    thread_id = thread_or_fail(saver, args.thread, args.store)
    with verify_progress() as progress:
        report = saver.verify(thread_id, progress=progress)
    if args.json:
        print_json({"store": saver.storage.location(""), **report.to_dict()})
    else:
        print_report(saver, report)
        if report.needs_repair:
            where = f" --thread {thread_id}" if thread_id is not None else ""
            print(f"run `{PROG} repair {args.store}{where}` {_what_repair_does(report)}")
            if not is_object_store(args.store) and not os.access(args.store, os.W_OK):
                print(
                    f"note: {args.store} is read-only for this process: repair needs to write to it"
                )
    return EXIT_OK if report.ok else EXIT_DAMAGED


def _what_repair_does(report: VerifyReport) -> str:
    if report.damaged or report.unusable_checkpoints:
        return "to move the damage to quarantine/"
    done = []
    if any(not h.written_back for h in report.healed):
        done.append("write the rebuilt blocks back")
    if report.unprotected_bytes:
        done.append("add the missing parity")
    return "to " + " and ".join(done)


def run_repair(args: argparse.Namespace) -> int:
    """Move damaged records, and checkpoints that can never load, to ``quarantine/``.

    Args:
        args: ``store``, ``key_file`` and ``thread`` (or ``None``).

    Returns:
        ``0`` when the store verifies afterwards, ``1`` when damage is left.

    Raises:
        CommandError: The store is keyed and no key was given, or nothing could be
            moved because the store is read-only for this process.
    """
    saver = open_existing(args, quarantine=True)
    thread_id = thread_or_fail(saver, args.thread, args.store)
    with verify_progress() as progress:
        survey = saver.verify(thread_id, progress=progress)
    if any(d.reason == KEYED_REASON for d in survey.damaged):
        # Without the key every record looks damaged: quarantining would empty the store.
        raise CommandError(
            f"{args.store} was written with a secret key; pass --key-file FILE (nothing was moved)"
        )
    if not survey.needs_repair:
        print_report(saver, survey)
        print("nothing to repair")
        return EXIT_OK
    # where each checkpoint is now: once moved, its key names nothing any more
    was_at = {
        key: saver.storage.location(key)
        for u in survey.unusable_checkpoints
        for key in [keys.checkpoint_key(u.thread_id, u.checkpoint_ns, u.checkpoint_id)]
    }
    with verify_progress() as progress:
        report = saver.verify(thread_id, repair=True, progress=progress)
    moved = {d.quarantined_to: d for d in report.damaged if d.quarantined_to}
    checkpoints_moved = {
        u.quarantined_to: u
        for u in report.unusable_checkpoints
        if u.quarantined_to and u.quarantined_to not in moved
    }
    written_back = [h for h in report.healed if h.written_back]
    changed = moved or checkpoints_moved or report.rewritten or written_back
    if report.read_only and not changed and not report.protected_bytes:
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
        key = keys.checkpoint_key(
            unusable.thread_id, unusable.checkpoint_ns, unusable.checkpoint_id
        )
        print(f"moved {was_at.get(key) or location(key)}")
        print(f"   to {where}")
        print(f"      (checkpoint that can never load: {unusable.reason})")
    for healed in written_back:
        print(f"wrote back {healed.location} (rebuilt from the log's parity)")
    if report.protected_bytes:
        print(f"added parity for {report.protected_bytes} bytes of logs")
    from langgraph_checkpoint_verified.storage.base import QUARANTINE_PREFIX

    count = len(moved) + len(checkpoints_moved)
    if count or not (written_back or report.protected_bytes):
        print(f"quarantined {count} record(s) under {location(QUARANTINE_PREFIX)}")
    after = saver.verify(thread_id)
    if after.ok:
        print("the store verifies now")
        return EXIT_OK
    print("what is left:")
    print_report(saver, after)
    if report.read_only:
        fix = CREDENTIALS_ADVICE if is_object_store(args.store) else "make them writable"
        print(
            f"note: parts of {args.store} are read-only for this process: {fix}, then run "
            f"repair again"
        )
    return EXIT_DAMAGED


def print_report(saver: VerifiedSaver, report: VerifyReport) -> None:
    """Print what a verification checked and every damaged record and unusable checkpoint.

    Args:
        saver: The store verified, named by its location.
        report: What ``saver.verify`` returned.
    """
    counted = [f"{report.checkpoints_checked} checkpoints"]
    if report.store_records_checked:
        counted.append(f"{report.store_records_checked} memory records")
    if report.cache_entries_checked:
        counted.append(f"{report.cache_entries_checked} cache entries")
    print(
        f"checked {report.records_checked} records ({', '.join(counted)}) "
        f"in {saver.storage.location('')}"
    )
    if report.ok:
        print("ok: every record verifies")
        _print_unprotected(report)
        return
    if report.healed:
        print(f"damaged blocks rebuilt from parity: {len(report.healed)} (no record lost)")
    for healed in report.healed:
        state = "written back" if healed.written_back else "repair writes it back"
        print(f"  block  {healed.location}  ({state})")
    if report.damaged:
        print(f"damaged records: {len(report.damaged)}")
    for damage in report.damaged:
        print(f"  {damage.kind or 'record'}  {damage.location}")
        print(f"      {damage.reason}")
    if report.unusable_checkpoints:
        print(f"unusable checkpoints: {len(report.unusable_checkpoints)}")
    for unusable in report.unusable_checkpoints:
        print(
            f"  thread {unusable.thread_id!r}  namespace {ns_label(unusable.checkpoint_ns)}  "
            f"{unusable.checkpoint_id}"
        )
        print(f"      {unusable.reason}")
        print(f"      {unusable.advice}")
    _print_unprotected(report)


def _print_unprotected(report: VerifyReport) -> None:
    if report.unprotected_bytes:
        print(
            f"{report.unprotected_bytes} bytes of logs have no parity (appended without a "
            f"sync since their log's last one, written before logs had parity, or its "
            f"record was lost): repair adds it"
        )


@contextlib.contextmanager
def verify_progress() -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback behind a bar on stderr, for big stores only.

    The bar is the one the other commands draw (``output.progress``): on a terminal
    only, nothing on a pipe, and gone when done. Stores with fewer than
    ``PROGRESS_MIN_RECORDS`` records draw none.

    Yields:
        The callback to pass to ``saver.verify(progress=...)``.
    """
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
