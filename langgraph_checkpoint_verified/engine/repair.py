"""Repairing one thread: moving aside every record no read can use.

Under the thread's exclusive lock (as ``prune``: no put runs meanwhile), the
thread is read and judged again (``usability``); damaged records are
quarantined as a read would; then, judged once more with the damage aside,
pending writes no read can use are moved aside, and the checkpoints that still
load are rewritten not to need the ones that never can, which go after them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from langgraph_checkpoint_verified.engine import maintenance
from langgraph_checkpoint_verified.engine.core import Engine
from langgraph_checkpoint_verified.engine.damage import (
    CANNOT_WRITE_ERRNOS,
    Damage,
    DamageReporter,
)
from langgraph_checkpoint_verified.engine.usability import Findings, judge, scan_records
from langgraph_checkpoint_verified.engine.verify_report import (
    MISSING,
    ORPHANED,
    UnusableCheckpoint,
    VerifyReport,
)
from langgraph_checkpoint_verified.errors import StoreWriteError
from langgraph_checkpoint_verified.records import keys as record_keys
from langgraph_checkpoint_verified.storage.base import Storage


def repair_thread(
    engine: Engine, prefix: str, thread: str | None, keys: list[str], report: VerifyReport
) -> Findings:
    """Repair one thread (``keys`` if it is ``None``: records in no thread); what to
    report: what was found, each entry saying where it went."""
    if thread is None:
        return _repair_locked(engine, f"{prefix}/", lambda: keys, report)
    # exclusive, as prune: no put runs meanwhile, so what is judged stays true
    with engine.storage.lock(thread, exclusive=True):
        return _repair_locked(
            engine, f"{thread}/", lambda: list(engine.storage.walk(thread)), report
        )


def _repair_locked(
    engine: Engine, scope: str, current_keys: Callable[[], list[str]], report: VerifyReport
) -> Findings:
    storage: Storage = engine.storage
    reporter: DamageReporter = engine.reporter
    first = judge(engine, scan_records(engine, current_keys()), reporter.quarantined_under(scope))

    # 1. Damage in place is quarantined, as a read would: all of it in one move.
    scan = scan_records(engine, [d.key for d in first.damaged if not d.reason.startswith(MISSING)])
    found = [(key, error, data) for key, (error, data) in scan.damaged.items()]
    reported = reporter.report_all_damaged(found)
    moved = {key: damage for (key, _, _), (damage, _) in zip(found, reported, strict=True)}
    if any(refusal is not None for _, refusal in reported):
        report.read_only = True
        return _as_done(first, first, moved, {})

    # 2. Judged again with the damage aside: what no read can ever use is moved aside.
    scan = scan_records(engine, current_keys())
    now = judge(engine, scan, reporter.quarantined_under(scope))
    set_aside: dict[str, str] = {}

    def move(damage: Damage) -> bool:
        """Move one intact record aside; ``False`` if the store cannot be written."""
        data = storage.read(damage.key)
        if data is None:
            return True
        moved_damage, refusal = reporter.set_aside(damage, data)
        if moved_damage.quarantined_to is not None:
            set_aside[damage.key] = moved_damage.quarantined_to
        if refusal is not None:
            report.read_only = True
        return refusal is None

    try:
        for orphan in now.orphans:
            if orphan not in now.damaged:
                now.damaged.append(orphan)  # a missing checkpoint's: reported only as moved
            if not move(orphan):
                return _as_done(first, now, moved, set_aside)
        reasons = {(u.thread_id, u.checkpoint_ns, u.checkpoint_id): u.reason for u in now.unusable}
        for (thread_id, checkpoint_ns), doomed in sorted(now.doomed.items()):
            for checkpoint_id in sorted(doomed):
                owner = (thread_id, checkpoint_ns, checkpoint_id)
                for writes_key, identity in scan.writes.get(owner, ()):
                    orphan = Damage(
                        writes_key,
                        storage.location(writes_key),
                        f"{ORPHANED}pending writes of checkpoint {checkpoint_id}, which can "
                        f"never load ({reasons[owner]}); no read can use them",
                        "writes",
                        identity,
                    )
                    now.damaged.append(orphan)
                    if not move(orphan):
                        return _as_done(first, now, moved, set_aside)
                # Copied, not moved: the checkpoints that still load may keep values in
                # it, and are rewritten to hold them before the original goes.
                key = record_keys.checkpoint_key(*owner)
                record_bytes = storage.read(key)
                if record_bytes is not None:
                    set_aside[key] = reporter.keep_copy(
                        Damage(
                            key,
                            storage.location(key),
                            f"unusable: {reasons[owner]}",
                            "checkpoint",
                            scan.headers.get(key),
                        ),
                        record_bytes,
                    )
            records = {
                owner[2]: record
                for owner, record in scan.checkpoints.items()
                if owner[:2] == (thread_id, checkpoint_ns)
            }
            stamps = {
                cid: storage.stamp(record_keys.checkpoint_key(thread_id, checkpoint_ns, cid))
                for cid in records
                if cid not in doomed
            }
            maintenance.remove_checkpoints(engine, thread_id, checkpoint_ns, records, set(doomed))
            for cid, stamp in stamps.items():
                key = record_keys.checkpoint_key(thread_id, checkpoint_ns, cid)
                if storage.stamp(key) != stamp:
                    report.rewritten.append(key)
    except StoreWriteError as exc:
        if exc.errno not in CANNOT_WRITE_ERRNOS:
            raise
        report.read_only = True
    return _as_done(first, now, moved, set_aside)


def _as_done(
    first: Findings, now: Findings, moved: dict[str, Damage], set_aside: dict[str, str]
) -> Findings:
    """What repair found and did: the damage it quarantined (and the checkpoints whose
    own record that was), then what it judged with the damage aside, each entry
    saying where it went."""

    def own_damage(unusable: UnusableCheckpoint) -> bool:
        return unusable.because_of == _owner_key(unusable) and unusable.because_of in moved

    damaged = [*moved.values()]
    damaged.extend(
        replace(d, quarantined_to=set_aside.get(d.key)) for d in now.damaged if d.key not in moved
    )
    unusable = [
        replace(u, quarantined_to=moved[u.because_of].quarantined_to)
        for u in first.unusable
        if own_damage(u)
    ]
    unusable.extend(
        replace(u, quarantined_to=set_aside.get(_owner_key(u)))
        for u in now.unusable
        if not own_damage(u)
    )
    return Findings(damaged=damaged, unusable=unusable)


def _owner_key(unusable: UnusableCheckpoint) -> str:
    return record_keys.checkpoint_key(
        unusable.thread_id, unusable.checkpoint_ns, unusable.checkpoint_id
    )
