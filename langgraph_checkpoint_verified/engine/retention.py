"""Retention: which threads a sweep expires or trims, and the sweep that does it safely.

A ``RetentionPolicy`` expires a thread that has been idle too long (no
checkpoint written for ``idle``) or that is too old (its first checkpoint older
than ``max_age``), and trims the others to their newest ``keep_last``
checkpoints per namespace. Times are the checkpoints' own ``ts``, which
LangGraph writes, so they mean the same on every backend and in every process.

``sweep`` plans each thread without a lock, then takes the thread's lock
exclusively, checks that no checkpoint was written since the plan (a thread
written meanwhile is skipped: it is in use), computes the changes again under
the lock and makes them in one step: a trimmed thread is one compaction
(``Storage.compact``), a deleted one one ``Storage.delete_tree`` (on files the
thread's directory is renamed away, then removed). On files and in memory both
are atomic, so a crash leaves each thread as it was or as the policy says. A
dry run computes exactly the same changes and makes none of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from langgraph_checkpoint_verified.engine import maintenance
from langgraph_checkpoint_verified.engine.core import Engine
from langgraph_checkpoint_verified.engine.reads import Unusable
from langgraph_checkpoint_verified.records import keys

Expiry = Literal["delete", "keep_latest"]


@dataclass(frozen=True)
class RetentionPolicy:
    """Which threads a sweep expires, what expiry does, and how much history others keep.

    Attributes:
        idle: Expire a thread when no checkpoint was written to it for this long.
        max_age: Expire a thread whose first checkpoint is older than this.
        keep_last: In a thread that does not expire, keep the newest this many
            checkpoints of each namespace (with their pending writes, and the
            older ones a kept checkpoint's ``DeltaChannel`` history is read from).
        on_expiry: ``"delete"`` removes an expired thread (its checkpoints,
            pending writes and tool-call records); ``"keep_latest"`` keeps its
            newest checkpoint per namespace, as ``prune`` does.
        exempt: Called as ``exempt(thread_id, metadata)`` with the metadata of
            the thread's newest checkpoint; ``True`` leaves the thread alone.
        pin_key: A thread whose newest checkpoint's metadata holds this key
            with a true value is left alone (a graph sets it with
            ``config={"metadata": {"pinned": True}}``). ``None``: no such key.

    Example:
        >>> from datetime import timedelta
        >>> RetentionPolicy(idle=timedelta(days=30), keep_last=20).on_expiry
        'delete'
    """

    idle: timedelta | None = None
    max_age: timedelta | None = None
    keep_last: int | None = None
    on_expiry: Expiry = "delete"
    exempt: Callable[[str, Mapping[str, Any]], bool] | None = None
    pin_key: str | None = "pinned"

    def __post_init__(self) -> None:
        for name in ("idle", "max_age"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, timedelta) or value <= timedelta(0)):
                raise ValueError(f"{name} must be a positive datetime.timedelta, got {value!r}")
        if self.keep_last is not None and (
            not isinstance(self.keep_last, int) or isinstance(self.keep_last, bool)
        ):
            raise ValueError(f"keep_last must be an int >= 1, got {self.keep_last!r}")
        if self.keep_last is not None and self.keep_last < 1:
            raise ValueError(f"keep_last must be an int >= 1, got {self.keep_last!r}")
        if self.on_expiry not in ("delete", "keep_latest"):
            raise ValueError(f"on_expiry must be 'delete' or 'keep_latest', got {self.on_expiry!r}")
        if self.exempt is not None and not callable(self.exempt):
            raise TypeError(f"exempt must be callable, got {type(self.exempt).__name__}")

    @property
    def expires(self) -> bool:
        """Whether the policy expires threads at all (``idle`` or ``max_age`` is set)."""
        return self.idle is not None or self.max_age is not None


@dataclass
class SweepReport:
    """What a sweep did, or, with ``dry_run``, exactly what it would do.

    Attributes:
        dry_run: Nothing was changed.
        threads_checked: Threads looked at.
        threads_deleted: Threads that expired and were removed.
        threads_trimmed: Threads that lost checkpoints but stay (``keep_last``,
            or expiry with ``on_expiry="keep_latest"``), with how many each lost.
        checkpoints_dropped: Checkpoints removed, deleted threads' included.
        bytes_freed: Bytes of the records removed, less what the checkpoints
            that stay grew by when rewritten to hold values they kept elsewhere.
        skipped: Threads left alone, and why (exempt, pinned, written during
            the sweep, nothing verifies, the sweep's ``limit`` reached).
    """

    dry_run: bool
    threads_checked: int = 0
    threads_deleted: list[str] = field(default_factory=list)
    threads_trimmed: dict[str, int] = field(default_factory=dict)
    checkpoints_dropped: int = 0
    bytes_freed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON-able data."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class _Verdict:
    action: Literal["delete", "trim", "none"]
    keep_last: int = 0
    why: str = ""


def sweep_threads(
    engine: Engine,
    policy: RetentionPolicy,
    *,
    dry_run: bool = False,
    limit: int | None = None,
    now: datetime | None = None,
) -> SweepReport:
    """The work of ``VerifiedSaver.sweep`` (documented there)."""
    if not isinstance(policy, RetentionPolicy):
        raise TypeError(f"policy must be a RetentionPolicy, got {type(policy).__name__}")
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be an int >= 0, got {limit!r}")
    now = _aware(now or datetime.now(timezone.utc))
    report = SweepReport(dry_run=dry_run)
    # the threads it deletes are durably gone when it returns: synced together
    with engine.storage.deleting_together():
        _sweep(engine, policy, report, dry_run=dry_run, limit=limit, now=now)
    return report


def _sweep(
    engine: Engine,
    policy: RetentionPolicy,
    report: SweepReport,
    *,
    dry_run: bool,
    limit: int | None,
    now: datetime,
) -> None:
    """Judge every thread, and change those the policy says to, into ``report``."""
    changed = 0
    for thread_id in sorted(engine.thread_ids()):
        report.threads_checked += 1
        newest = _newest_ids(engine, thread_id)
        verdict = _judge(engine, policy, thread_id, newest, now)
        if verdict.action == "none":
            if verdict.why:
                report.skipped[thread_id] = verdict.why
            continue
        if limit is not None and changed >= limit:
            report.skipped[thread_id] = f"not swept: the sweep's limit of {limit} threads"
            continue
        planned: tuple[dict[str, bytes | None], int, int] | None
        if dry_run:
            planned = _changes(engine, thread_id, verdict)
        else:
            planned = _apply(engine, thread_id, verdict, newest)
        if planned is None:
            report.skipped[thread_id] = "written during the sweep: in use, left alone"
            continue
        changes, dropped, freed = planned
        if not changes and verdict.action != "delete":
            continue
        changed += 1
        report.checkpoints_dropped += dropped
        report.bytes_freed += freed
        if verdict.action == "delete":
            report.threads_deleted.append(thread_id)
        else:
            report.threads_trimmed[thread_id] = dropped


def _judge(
    engine: Engine,
    policy: RetentionPolicy,
    thread_id: str,
    newest: dict[str, str | None],
    now: datetime,
) -> _Verdict:
    """What the policy says of one thread, from its newest and oldest checkpoints."""
    if not any(newest.values()):
        if not any(True for _ in engine.storage.walk(keys.thread_prefix(thread_id))):
            return _Verdict("delete")  # an empty thread (a delete cut short): remove it
        return _Verdict("none")  # only tool records: nothing a sweep measures
    heads = {ns: _newest_readable(engine, thread_id, ns) for ns in newest}
    head = heads.get("") or next((h for _, h in sorted(heads.items()) if h is not None), None)
    if head is None:
        return _Verdict("none", why="no checkpoint verifies: run verify")
    metadata, _ = head
    if policy.pin_key is not None and metadata.get(policy.pin_key):
        return _Verdict("none", why=f"pinned (metadata {policy.pin_key!r})")
    if policy.exempt is not None and policy.exempt(thread_id, metadata):
        return _Verdict("none", why="exempt (the policy's exempt callback)")
    expired = False
    if policy.idle is not None:
        written = [h[1] for h in heads.values() if h is not None and h[1] is not None]
        if not written:
            return _Verdict("none", why="its checkpoints carry no time ('ts')")
        expired = now - max(written) >= policy.idle
    if not expired and policy.max_age is not None:
        first = _oldest_ts(engine, thread_id)
        if first is None:
            return _Verdict("none", why="its checkpoints carry no time ('ts')")
        expired = now - first >= policy.max_age
    if expired:
        if policy.on_expiry == "delete":
            return _Verdict("delete")
        return _Verdict("trim", keep_last=1)
    if policy.keep_last is not None:
        return _Verdict("trim", keep_last=policy.keep_last)
    return _Verdict("none")


def _changes(
    engine: Engine, thread_id: str, verdict: _Verdict
) -> tuple[dict[str, bytes | None], int, int]:
    """The changes a verdict makes to a thread, the checkpoints they drop, the bytes they free."""
    storage = engine.storage
    prefix = keys.thread_prefix(thread_id)
    if verdict.action == "delete":
        changes: dict[str, bytes | None] = dict.fromkeys(storage.walk(prefix))
        dropped = sum(1 for key in changes if keys.is_checkpoint_key(key))
        return changes, dropped, storage.usage(prefix)
    changes, dropped = maintenance.trim_changes(engine, thread_id, keep_last=verdict.keep_last)
    freed = sum(
        storage.usage(key) - (len(data) if data is not None else 0) for key, data in changes.items()
    )
    return changes, dropped, freed


def _apply(
    engine: Engine, thread_id: str, verdict: _Verdict, planned_newest: dict[str, str | None]
) -> tuple[dict[str, bytes | None], int, int] | None:
    """Make a verdict's changes under the thread's lock; ``None`` if it was written since."""
    prefix = keys.thread_prefix(thread_id)
    with engine.storage.lock(prefix, exclusive=True):
        # a safe delete: the plan holds only if no checkpoint was written since
        if _newest_ids(engine, thread_id) != planned_newest:
            return None
        changes, dropped, freed = _changes(engine, thread_id, verdict)
        if verdict.action == "delete":
            # files: the directory renamed away first, then removed; memory: one lock
            engine.storage.delete_tree(prefix)
        elif changes:
            # atomic on files and in memory: a crash leaves the thread whole, or as trimmed
            engine.storage.compact(prefix, changes=changes)
    engine.forget_thread(thread_id)
    return changes, dropped, freed


def _newest_ids(engine: Engine, thread_id: str) -> dict[str, str | None]:
    """The newest checkpoint id of each namespace of a thread (names only, nothing read)."""
    return {
        ns: next(iter(engine.reader.newest_first(thread_id, ns)), None)
        for ns in engine.namespaces(thread_id)
    }


def _newest_readable(
    engine: Engine, thread_id: str, checkpoint_ns: str
) -> tuple[Mapping[str, Any], datetime | None] | None:
    """Metadata and time of the newest checkpoint of a namespace whose record verifies."""
    for checkpoint_id in engine.reader.newest_first(thread_id, checkpoint_ns):
        found = _header(engine, thread_id, checkpoint_ns, checkpoint_id)
        if found is not None:
            return found
    return None


def _oldest_ts(engine: Engine, thread_id: str) -> datetime | None:
    """When the thread's first checkpoint (that verifies) was written."""
    times = []
    for ns in engine.namespaces(thread_id):
        for checkpoint_id in reversed(engine.checkpoint_ids(thread_id, ns)):
            found = _header(engine, thread_id, ns, checkpoint_id)
            if found is not None:
                if found[1] is not None:
                    times.append(found[1])
                break
    return min(times, default=None)


def _header(
    engine: Engine, thread_id: str, checkpoint_ns: str, checkpoint_id: str
) -> tuple[Mapping[str, Any], datetime | None] | None:
    """A checkpoint's metadata and ``ts`` (no channel value is read); ``None`` if damaged."""
    key = keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
    try:
        record = engine.reader.read_checkpoint(key, thread_id, checkpoint_ns, checkpoint_id)
    except Unusable:
        return None
    if record is None:
        return None
    metadata = engine.serde.loads_typed(record.metadata)
    body = engine.serde.loads_typed(record.checkpoint)
    return metadata if isinstance(metadata, Mapping) else {}, _parse_ts(body.get("ts"))


def _parse_ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return _aware(datetime.fromisoformat(value))
    except ValueError:
        return None


def _aware(moment: datetime) -> datetime:
    """LangGraph's times are UTC; a naive time is taken as UTC too."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
