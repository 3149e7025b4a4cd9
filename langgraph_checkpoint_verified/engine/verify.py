"""Checking a whole store (or one thread) and repairing what no read can use.

``verify_store`` first checks the logs block by block against their parity
(``FileStorage.scrub``), then, thread by thread, scans every record and judges
what each damaged record makes unusable (``usability``: a checkpoint whose
values or parent chain run through it), and returns a ``VerifyReport``
(``verify_report``); with ``repair`` it also repairs each thread with something
to move (``repair``), and compacts away damaged bytes that name no record.

A whole store holds more than threads: the batches of ``VerifiedStore``'s memory
logs (``memories/``) and the node cache entries of ``VerifiedCache`` (``cache/``).
Those records stand alone (``standalone_records``); ``verify_records`` checks
them for the faces that have no engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from langgraph_checkpoint_verified.engine.core import Engine
from langgraph_checkpoint_verified.engine.damage import (
    CANNOT_WRITE_ERRNOS,
    Damage,
    DamageReporter,
    kind_name,
)
from langgraph_checkpoint_verified.engine.repair import repair_thread
from langgraph_checkpoint_verified.engine.standalone_records import (
    STANDALONE_PREFIXES,
    check_standalone,
)
from langgraph_checkpoint_verified.engine.usability import judge, scan_records
from langgraph_checkpoint_verified.engine.verify_report import HealedBlock, VerifyReport
from langgraph_checkpoint_verified.errors import StoreWriteError
from langgraph_checkpoint_verified.records import keys as record_keys
from langgraph_checkpoint_verified.records.format import Codec
from langgraph_checkpoint_verified.storage.base import QUARANTINE_PREFIX, Storage
from langgraph_checkpoint_verified.storage.log.file_storage import FileStorage

WHOLE_STORE = "threads"
"""The prefix ``VerifiedSaver.verify()`` passes for a whole store: then the records
of the memory store and the node cache are checked too."""


def verify_store(
    engine: Engine,
    prefix: str,
    *,
    repair: bool,
    progress: Callable[[int, int], Any] | None,
) -> VerifyReport:
    """Check every record under ``prefix`` of ``engine``'s store; see ``VerifiedSaver.verify``.

    Every record is read once, without locks. With ``repair``, each thread with
    something to move is then locked exclusively (as ``prune`` does: no put runs
    meanwhile), read again and repaired: damaged records are quarantined;
    pending writes no read can use any more are moved aside; checkpoints that
    still load are rewritten not to need the ones that never can, which are
    then moved aside with their pending writes.
    """
    storage: Storage = engine.storage
    reporter: DamageReporter = engine.reporter
    report = VerifyReport(repaired=repair)
    keys = list(storage.walk(prefix))
    standalone = (
        [key for where in STANDALONE_PREFIXES for key in storage.walk(where)]
        if prefix == WHOLE_STORE
        else []
    )
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(keys) + len(standalone))

    if isinstance(storage, FileStorage):
        # first, so that what parity heals is written back before records are judged
        for logs in (prefix, record_keys.MEMORIES_PREFIX) if standalone else (prefix,):
            _scrub_logs(storage, logs, report, repair=repair and reporter.quarantine_enabled)
    quarantined = reporter.quarantined_under(f"{prefix}/")
    for thread, thread_keys in _by_thread(keys):
        scan = scan_records(engine, thread_keys, tick)
        report.records_checked += scan.records_checked
        report.checkpoints_checked += len(scan.checkpoints)
        findings = judge(engine, scan, quarantined)
        # once refused (a read-only store), the rest is reported as it is
        repairing = repair and reporter.quarantine_enabled and not report.read_only
        if repairing and findings.needs_repair:
            findings = repair_thread(engine, prefix, thread, thread_keys, report)
        report.damaged.extend(findings.damaged)
        report.unusable_checkpoints.extend(findings.unusable)
    check_standalone(engine.codec, reporter, standalone, report, repair=repair, tick=tick)
    if isinstance(storage, FileStorage):
        _check_damaged_bytes(engine, storage, prefix, report, repair=repair)
        if repair and not report.read_only:
            storage.protect_unsynced()  # what it moved aside, synced and protected
    return report


def verify_records(
    storage: Storage,
    codec: Codec,
    reporter: DamageReporter,
    prefixes: tuple[str, ...] = STANDALONE_PREFIXES,
    *,
    repair: bool = False,
    progress: Callable[[int, int], Any] | None = None,
) -> VerifyReport:
    """Check the memory items and cache entries under ``prefixes``; see ``VerifiedStore.verify``.

    For a face that has no engine: ``VerifiedStore`` and ``VerifiedCache`` keep
    their ``storage``, ``codec`` and ``reporter``, which is all it needs. The
    records are standalone (no record refers to another), so there are no
    unusable checkpoints to judge: each damaged record is reported and, with
    ``repair``, moved aside exactly as a read that finds it does.

    Args:
        storage: Where the records are.
        codec: Their frame (keyed or not).
        reporter: Moves damage aside, unless it was made with ``quarantine=False``.
        prefixes: ``memories`` and ``store`` (the memory store's records), ``cache``
            (cache entries), or all.
        repair: Quarantine each damaged record.
        progress: Called as ``progress(done, total)`` while records are checked.

    Returns:
        A ``VerifyReport`` naming each damaged record.

    Example:
        >>> from langgraph_checkpoint_verified.engine.damage import DamageReporter
        >>> from langgraph_checkpoint_verified.storage import MemoryStorage
        >>> storage, codec = MemoryStorage(), Codec()
        >>> storage.write("memories/users/1764000000000000000-00aa11.batch", b"junk")
        True
        >>> report = verify_records(storage, codec, DamageReporter(storage, codec))
        >>> report.ok, [(d.kind, d.key) for d in report.damaged]
        (False, [('store_batch', 'memories/users/1764000000000000000-00aa11.batch')])
    """
    report = VerifyReport(repaired=repair)
    if isinstance(storage, FileStorage) and record_keys.MEMORIES_PREFIX in prefixes:
        _scrub_logs(
            storage,
            record_keys.MEMORIES_PREFIX,
            report,
            repair=repair and reporter.quarantine_enabled,
        )
    keys = [key for where in prefixes for key in storage.walk(where)]
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(keys))

    check_standalone(codec, reporter, keys, report, repair=repair, tick=tick)
    if repair and isinstance(storage, FileStorage) and not report.read_only:
        storage.protect_unsynced()
    return report


def _scrub_logs(storage: FileStorage, prefix: str, report: VerifyReport, *, repair: bool) -> None:
    """Check every block of the logs under ``prefix`` against their parity; with
    ``repair``, write healed blocks back and add the parity that is missing."""
    try:
        found = storage.scrub(prefix, repair=repair)
    except StoreWriteError as exc:
        if exc.errno not in CANNOT_WRITE_ERRNOS:
            raise
        report.read_only = True  # what is healed is still served healed
        found = storage.scrub(prefix, repair=False)
    for log_path, scrubbed in found:
        report.healed.extend(
            HealedBlock(f"{log_path}@{offset}", written_back=scrubbed.rewritten)
            for offset in scrubbed.healed
        )
        report.unprotected_bytes += sum(end - start for start, end in scrubbed.unprotected)
        report.protected_bytes += sum(end - start for start, end in scrubbed.protected)
    report.unprotected_bytes -= report.protected_bytes


def _check_damaged_bytes(
    engine: Engine, storage: FileStorage, prefix: str, report: VerifyReport, *, repair: bool
) -> None:
    """Report damage between log entries that names no record; with ``repair``, compact it away.

    Readers skip it already (and copied it to the quarantine when they found it);
    compaction is what removes it from the log.
    """
    reporter: DamageReporter = engine.reporter
    threads: set[str] = set()
    for found in storage.damaged_bytes(prefix):
        copy = f"{QUARANTINE_PREFIX}/span-{found.span_id}.record"
        if repair and reporter.quarantine_enabled and storage.read(copy) is None:
            reporter.damaged_span(
                found.location, found.reason, found.data, found.claimed_key, found.span_id
            )
        report.damaged.append(
            Damage(
                key=found.claimed_key or found.location,
                location=found.location,
                reason=f"damaged log entry: {found.reason}",
                kind=kind_name(found.claimed_key or ""),
                quarantined_to=storage.location(copy) if storage.read(copy) is not None else None,
            )
        )
        threads.add(found.location.rsplit("/log@", 1)[0])
    if not (repair and reporter.quarantine_enabled and threads) or report.read_only:
        return
    root = storage.location("")
    for directory in sorted(threads):
        thread_prefix = os.path.relpath(directory, root)
        try:
            with storage.lock(thread_prefix, exclusive=True):
                storage.compact(thread_prefix)
        except OSError as exc:
            if exc.errno not in CANNOT_WRITE_ERRNOS:
                raise
            report.read_only = True
            return


def _by_thread(keys: list[str]) -> list[tuple[str | None, list[str]]]:
    """``keys`` grouped by the thread directory they are in (``None``: in none)."""
    groups: dict[str | None, list[str]] = {}
    for key in keys:
        parts = key.split("/", 2)
        thread = f"{parts[0]}/{parts[1]}" if len(parts) == 3 and parts[0] == "threads" else None
        groups.setdefault(thread, []).append(key)
    return list(groups.items())
