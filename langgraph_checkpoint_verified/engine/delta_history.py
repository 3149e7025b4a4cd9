"""``DeltaChannel`` histories: a channel's value rebuilt from its ancestors' writes.

LangGraph's ``DeltaChannel`` stores a snapshot only now and then; in between,
its value is the last snapshot plus the pending writes of every checkpoint
since. ``delta_history`` walks the parent chain by exact ids and raises
``CheckpointDamagedError`` rather than return a history shortened by damage;
``delta_ancestors`` tells ``prune`` which ancestors that walk needs.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

from langgraph.checkpoint.base import (
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    writes_sort_key,
)

from langgraph_checkpoint_verified.engine.configs import config_parts
from langgraph_checkpoint_verified.engine.core import Engine
from langgraph_checkpoint_verified.engine.reads import Unusable
from langgraph_checkpoint_verified.errors import CheckpointDamagedError, RecordDamagedError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.kinds import CheckpointRecord
from langgraph_checkpoint_verified.records.values import is_empty


def delta_channel_history(
    engine: Engine,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str | None,
    channels: Sequence[str],
) -> dict[str, DeltaChannelHistory]:
    """The work of ``VerifiedSaver.get_delta_channel_history`` (documented there)."""
    if not channels:
        return {}
    if checkpoint_id is None:
        latest = engine.latest_valid_checkpoint(thread_id, checkpoint_ns)
        if latest is None:
            return {channel: {"writes": []} for channel in channels}
        checkpoint_id = latest.config["configurable"]["checkpoint_id"]
    history, _ = delta_history(engine, thread_id, checkpoint_ns, checkpoint_id, channels)
    return history


def delta_history(
    engine: Engine,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    channels: Sequence[str],
) -> tuple[dict[str, DeltaChannelHistory], set[str]]:
    """The history of ``channels`` at a checkpoint, and the ancestors it was read from."""
    quarantined = engine.reporter.quarantined_under(f"{keys.thread_prefix(thread_id)}/")

    def cannot_use(damaged_id: str, reason: str) -> CheckpointDamagedError:
        return CheckpointDamagedError(
            thread_id,
            checkpoint_ns,
            damaged_id,
            f"{reason}; the delta channel history of checkpoint {checkpoint_id} "
            f"({', '.join(sorted(channels))}) runs through it",
            advice=(
                "A delta channel rebuilt without it would hold a wrong value, so none "
                "was returned. Resume from a checkpoint older than the damage (its "
                "checkpoint_id from get_state_history) or restore the record from a "
                "backup; run `langgraph-verified verify` on the store for a full report."
            ),
        )

    def exact(wanted_id: str) -> CheckpointRecord | None:
        key = keys.checkpoint_key(thread_id, checkpoint_ns, wanted_id)
        try:
            record = engine.reader.read_checkpoint(key, thread_id, checkpoint_ns, wanted_id)
        except Unusable as unusable:
            raise cannot_use(wanted_id, unusable.reason) from None
        if record is None and key in quarantined:
            moved = quarantined[key]
            raise cannot_use(wanted_id, f"quarantined ({moved.get('reason')})")
        return record

    target = exact(checkpoint_id)
    remaining = set(channels)
    seeds: dict[str, Any] = {}
    newest_first: builtins.list[builtins.list[PendingWrite]] = []
    visited: set[str] = set()
    holders: dict[str, Any] = {}
    current = target.parent_checkpoint_id if target is not None else None
    while current is not None and remaining and current not in visited:
        record = exact(current)
        if record is None:
            break  # deleted, not damaged: the walk ends here, as in BaseCheckpointSaver
        visited.add(current)
        found_here: dict[str, Any] = {}
        for channel in remaining:
            if channel not in record.refs:
                continue
            try:
                parts = engine.reader.resolve(record, channel, holders)
                if not is_empty(parts):
                    found_here[channel] = engine.load_value(parts)
            except Unusable as unusable:
                raise cannot_use(current, unusable.reason) from None
            except RecordDamagedError as exc:
                raise cannot_use(current, exc.reason) from None
        # a seed is the value before its own checkpoint's writes: those count too
        newest_first.append(
            complete_writes(
                engine, thread_id, checkpoint_ns, current, remaining, quarantined, cannot_use
            )
        )
        seeds.update(found_here)
        remaining.difference_update(found_here)
        current = record.parent_checkpoint_id
    history: dict[str, DeltaChannelHistory] = {}
    for channel in channels:
        entry: DeltaChannelHistory = {
            "writes": [
                write
                for writes in reversed(newest_first)
                for write in writes
                if write[1] == channel
            ]
        }
        if channel in seeds:
            entry["seed"] = seeds[channel]
        history[channel] = entry
    return history, visited


def complete_writes(
    engine: Engine,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    channels: set[str],
    quarantined: dict[str, dict[str, Any]],
    cannot_use: Callable[[str, str], CheckpointDamagedError],
) -> builtins.list[PendingWrite]:
    """Every pending write of ``channels`` at a checkpoint, in ``writes_sort_key`` order.

    Raises what ``cannot_use`` makes if a regular-writes record there is
    damaged, unreadable, or was quarantined (special writes, such as
    errors and interrupts, never hold channel values).
    """
    prefix = keys.writes_prefix(thread_id, checkpoint_ns, checkpoint_id)
    regular = f".{keys.NORMAL_WRITES_SLOT}{keys.WRITES_SUFFIX}"
    dropped: builtins.list[tuple[str, str]] = []
    found: builtins.list[tuple[tuple[str, str, int], PendingWrite]] = []
    names = engine.storage.list(prefix)
    for name in names:
        key = f"{prefix}/{name}"
        record = engine.reader.read_writes(
            key, thread_id, checkpoint_ns, checkpoint_id, dropped=dropped
        )
        if record is None:
            continue
        for idx, channel, typed in record.writes:
            if channel in channels:
                found.append(
                    (
                        writes_sort_key(record.task_path, record.task_id, idx),
                        (record.task_id, channel, engine.serde.loads_typed(typed)),
                    )
                )
    present = {f"{prefix}/{name}" for name in names}
    # a record quarantined and written again since (its task ran again) is complete
    dropped.extend(
        (key, f"quarantined ({moved.get('reason')})")
        for key, moved in quarantined.items()
        if key.startswith(f"{prefix}/") and key not in present
    )
    for key, reason in dropped:
        if key.endswith(regular):
            raise cannot_use(
                checkpoint_id,
                f"its pending-writes record {engine.storage.location(key)} is left out: {reason}",
            )
    found.sort(key=lambda item: item[0])
    return [write for _, write in found]


def delta_ancestors(engine: Engine, kept: CheckpointTuple | None) -> set[str]:
    """The ancestors the kept checkpoint's delta channels are rebuilt from (see ``prune``)."""
    if kept is None:
        return set()
    counters = kept.metadata.get("counters_since_delta_snapshot") or {}
    # as LangGraph does, walk only for channels with no value stored at the checkpoint
    channels = [ch for ch in counters if ch not in kept.checkpoint["channel_values"]]
    thread_id, checkpoint_ns, checkpoint_id = config_parts(kept.config)
    if not channels or checkpoint_id is None:
        return set()
    _, visited = delta_history(engine, thread_id, checkpoint_ns, checkpoint_id, channels)
    return visited
