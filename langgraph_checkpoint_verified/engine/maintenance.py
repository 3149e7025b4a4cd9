"""Thread maintenance: deleting threads and runs, pruning, copying threads.

Each operation holds a thread's lock exclusively and computes its changes
first: the checkpoints that stay are rewritten so that none depends on a
record that goes (``removal_changes``). The changes are then made by one
compaction of the thread's records (``Storage.compact``): durable, and on files
and in memory atomic, so a crash leaves the thread as it was or as asked.
``VerifiedSaver`` exposes them; ``verify``'s repair and ``retention``'s sweep
reuse ``removal_changes`` and ``trim_changes``.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Sequence
from typing import Any

from langgraph_checkpoint_verified.engine import delta_history
from langgraph_checkpoint_verified.engine.core import Engine
from langgraph_checkpoint_verified.engine.reads import Unusable
from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import RecordKind
from langgraph_checkpoint_verified.records.kinds import (
    CheckpointRecord,
    StoredValue,
    canonical_key,
    encode_checkpoint,
)
from langgraph_checkpoint_verified.records.values import ValueUnavailable, materialize, value_parts


def delete_thread(engine: Engine, thread_id: str) -> None:
    """The work of ``VerifiedSaver.delete_thread`` (documented there)."""
    thread_id = keys.as_thread_id(thread_id)
    prefix = keys.thread_prefix(thread_id)
    if not engine.storage.list(prefix) and engine.storage.stamp(prefix) is None:
        return  # no such thread: do not create one just to lock it
    # exclusive: a put in progress finishes first; one waiting then finds the
    # thread gone (the lock follows the directory) and starts it afresh
    with engine.storage.lock(prefix, exclusive=True):
        engine.storage.delete_tree(prefix)
    engine.forget_thread(thread_id)


def delete_for_runs(engine: Engine, run_ids: Sequence[str]) -> None:
    """The work of ``VerifiedSaver.delete_for_runs`` (documented there)."""
    doomed_runs = set(run_ids)
    if not doomed_runs:
        return
    for thread_id in engine.reader.thread_ids():
        with engine.storage.lock(keys.thread_prefix(thread_id), exclusive=True):
            changes: dict[str, bytes | None] = {}
            for checkpoint_ns in engine.reader.namespaces(thread_id):
                records = records_of(engine, thread_id, checkpoint_ns)
                doomed = {
                    cid
                    for cid, record in records.items()
                    if engine.serde.loads_typed(record.metadata).get("run_id") in doomed_runs
                }
                if doomed:
                    changes.update(
                        removal_changes(engine, thread_id, checkpoint_ns, records, doomed)
                    )
            # one durable, atomic rewrite of the thread, without what was removed
            engine.storage.compact(keys.thread_prefix(thread_id), changes=changes)
            engine.forget_thread(thread_id)


PRUNE_STRATEGIES = ("keep_latest", "delete", "delete_all")
"""``"delete_all"`` is ``"delete"``: the word the LangGraph server's own prune call uses."""


def prune(engine: Engine, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
    """The work of ``VerifiedSaver.prune`` (documented there)."""
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
    for thread_id in thread_ids:
        thread_id = keys.as_thread_id(thread_id)
        if not engine.storage.list(keys.thread_prefix(thread_id)):
            continue  # no such thread: do not create one just to lock it
        with engine.storage.lock(keys.thread_prefix(thread_id), exclusive=True):
            if strategy == "keep_latest":
                changes, _ = trim_changes(engine, thread_id, keep_last=1)
            else:
                changes = delete_changes(engine, thread_id)
            # one durable, atomic rewrite of the thread, without what was removed
            engine.storage.compact(keys.thread_prefix(thread_id), changes=changes)
            engine.forget_thread(thread_id)


def delete_changes(engine: Engine, thread_id: str) -> dict[str, bytes | None]:
    """Every checkpoint and pending write of a thread, to delete (its tool records stay)."""
    return {key: None for key in engine.storage.walk(keys.namespaces_prefix(thread_id))}


def trim_changes(
    engine: Engine, thread_id: str, *, keep_last: int
) -> tuple[dict[str, bytes | None], int]:
    """What keeping the newest ``keep_last`` checkpoints of each namespace changes.

    A checkpoint is kept if it is among the newest ``keep_last`` of its
    namespace that load completely, or if a kept checkpoint's ``DeltaChannel``
    history is read from it (``delta_history.delta_ancestors``); kept ones keep
    their pending writes, and are rewritten to hold the values they kept in
    records that go. Checkpoints that do not verify are left alone (``verify``
    and ``repair`` deal with them). Returns the changes and how many
    checkpoints they remove.
    """
    if not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last must be an int >= 1, got {keep_last!r}")
    changes: dict[str, bytes | None] = {}
    dropped = 0
    for checkpoint_ns in engine.reader.namespaces(thread_id):
        records = records_of(engine, thread_id, checkpoint_ns)
        kept: set[str] = set()
        loaded = 0
        holders: dict[str, Any] = {}
        for checkpoint_id in sorted(records, reverse=True):
            if loaded >= keep_last:
                break
            try:
                found = engine.load(thread_id, checkpoint_ns, checkpoint_id, holders)
            except Unusable:
                continue
            if found is None:
                continue
            loaded += 1
            kept |= {checkpoint_id} | delta_history.delta_ancestors(engine, found)
        doomed = set(records) - kept
        if doomed:
            changes.update(removal_changes(engine, thread_id, checkpoint_ns, records, doomed))
            dropped += len(doomed)
    return changes, dropped


def copy_thread(engine: Engine, source_thread_id: str, target_thread_id: str) -> None:
    """The work of ``VerifiedSaver.copy_thread`` (documented there)."""
    source = keys.as_thread_id(source_thread_id)
    target = keys.as_thread_id(target_thread_id)
    if source == target:
        return
    source_prefix = keys.thread_prefix(source)
    checkpoints: builtins.list[tuple[str, bytes]] = []
    others: builtins.list[tuple[str, bytes]] = []
    for key in list(engine.storage.walk(source_prefix)):
        data = engine.storage.read(key)
        if data is None:
            continue
        try:
            header = engine.codec.read_header(data)
            if canonical_key(header.kind, header.identity) != key:
                raise RecordDamagedError(
                    f"record belongs at {canonical_key(header.kind, header.identity)}"
                )
            identity = {**header.identity, "thread_id": target}
            copied = engine.codec.reframe(data, header.kind, identity)
        except RecordDamagedError as exc:
            engine.reporter.damaged(key, exc, data)
            continue
        target_key = canonical_key(header.kind, identity)
        if header.kind is RecordKind.CHECKPOINT:
            checkpoints.append((target_key, copied))  # last, so they never point at nothing
        else:
            others.append((target_key, copied))
    engine.storage.write_many(others + sorted(checkpoints))


def records_of(engine: Engine, thread_id: str, checkpoint_ns: str) -> dict[str, CheckpointRecord]:
    """Every checkpoint record of a namespace that verifies (damage is reported)."""
    records = {}
    for checkpoint_id in engine.reader.checkpoint_ids(thread_id, checkpoint_ns):
        key = keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
        try:
            record = engine.reader.read_checkpoint(key, thread_id, checkpoint_ns, checkpoint_id)
        except Unusable:
            continue
        if record is not None:
            # a copy: records read are shared with the engine's cache, these get rewritten
            records[checkpoint_id] = dataclasses.replace(
                record, values=dict(record.values), refs=dict(record.refs)
            )
    return records


def removal_changes(
    engine: Engine,
    thread_id: str,
    checkpoint_ns: str,
    records: dict[str, CheckpointRecord],
    doomed: set[str],
) -> dict[str, bytes | None]:
    """What removing the ``doomed`` checkpoints of a namespace changes (key -> bytes or None).

    Every survivor that depends on a doomed record is rewritten to hold what it
    took from it (new bytes); the doomed checkpoints and their pending writes
    are deleted (``None``). ``records`` (every verified record of the
    namespace, see ``records_of``) are updated as they are rewritten.
    """
    changes: dict[str, bytes | None] = {}
    # First make every survivor independent of the records about to go...
    for checkpoint_id, record in sorted(records.items()):  # oldest first: see below
        if checkpoint_id in doomed:
            continue
        moved = {ch for ch, (_, holder) in record.refs.items() if holder in doomed}
        for channel in moved:
            version, holder_id = record.refs[channel]
            holder = records.get(holder_id)
            stored = holder.values.get(channel) if holder else None
            if stored is None or stored.version != version:
                continue  # already unusable; nothing to carry over
            record.values[channel] = stored
            record.refs[channel] = (version, checkpoint_id)
        # A list stored as an extension whose chain runs through a doomed record
        # is stored whole. Older survivors are done first, so a chain that
        # reaches one has already been cut there.
        extended = {
            channel
            for channel, stored in record.values.items()
            if _chain_reaches(records, channel, stored, doomed)
        }
        for channel in extended:
            record.values[channel] = materialized(engine, records, record, channel)
        if not moved and not extended:
            continue
        if all(holder == checkpoint_id for _, holder in record.refs.values()):
            record.since_full = 0
        key = keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
        changes[key] = encode_checkpoint(engine.codec, record)
    # ...then remove them.
    for checkpoint_id in doomed:
        changes[keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)] = None
        writes = keys.writes_prefix(thread_id, checkpoint_ns, checkpoint_id)
        changes.update((key, None) for key in engine.storage.walk(writes))
    return changes


def remove_checkpoints(
    engine: Engine,
    thread_id: str,
    checkpoint_ns: str,
    records: dict[str, CheckpointRecord],
    doomed: set[str],
) -> None:
    """Remove the ``doomed`` checkpoints in place (``removal_changes``: rewrites first)."""
    changes = removal_changes(engine, thread_id, checkpoint_ns, records, doomed)
    for key, data in changes.items():
        if data is not None:
            engine.storage.write(key, data)
    for key, data in changes.items():
        if data is None:
            engine.storage.delete(key)
    engine.forget_thread(thread_id)


def materialized(
    engine: Engine,
    records: dict[str, CheckpointRecord],
    record: CheckpointRecord,
    channel: str,
) -> StoredValue:
    """``record``'s value of ``channel`` stored whole (as it is if its chain is broken)."""
    stored = record.values[channel]

    def holder_values(holder_id: str) -> dict[str, StoredValue]:
        holder = records.get(holder_id)
        if holder is None:
            raise ValueUnavailable(f"checkpoint {holder_id} is missing")
        return holder.values

    try:
        return materialize(
            engine.serde, value_parts(record, channel, stored, holder_values), stored.version
        )
    except (ValueUnavailable, RecordDamagedError):
        return stored  # already unusable: nothing to carry over


def _chain_reaches(
    records: dict[str, CheckpointRecord], channel: str, stored: StoredValue, doomed: set[str]
) -> bool:
    """Whether an extended value's chain of bases runs through one of ``doomed``."""
    seen: set[str] = set()
    while stored.base is not None:
        base_id = stored.base[0]
        if base_id in doomed:
            return True
        if base_id in seen or base_id not in records:
            return False
        seen.add(base_id)
        base = records[base_id].values.get(channel)
        if base is None:
            return False
        stored = base
    return False
