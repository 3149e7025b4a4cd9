"""Thread maintenance: deleting runs, pruning, copying threads.

Each operation holds a thread's lock exclusively, rewrites the checkpoints that
stay so that none depends on a record that goes (``remove_checkpoints``), and
ends with one compaction of the thread's records (``Storage.compact``), which is
what makes its deletions durable. ``VerifiedSaver`` exposes them; ``recovery``'s
repair reuses ``remove_checkpoints``.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from langgraph_checkpoint_verified import _delta_history, _keys
from langgraph_checkpoint_verified._config import Unusable
from langgraph_checkpoint_verified._format import RecordKind
from langgraph_checkpoint_verified._records import (
    CheckpointRecord,
    StoredValue,
    canonical_key,
    encode_checkpoint,
)
from langgraph_checkpoint_verified._values import ValueUnavailable, materialize, value_parts
from langgraph_checkpoint_verified.errors import RecordDamagedError

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.saver import VerifiedSaver


def delete_for_runs(saver: VerifiedSaver, run_ids: Sequence[str]) -> None:
    """``VerifiedSaver.delete_for_runs``."""
    doomed_runs = set(run_ids)
    if not doomed_runs:
        return
    for thread_id in saver._reader.thread_ids():
        with saver.storage.lock(_keys.thread_prefix(thread_id), exclusive=True):
            for checkpoint_ns in saver._reader.namespaces(thread_id):
                records = records_of(saver, thread_id, checkpoint_ns)
                doomed = {
                    cid
                    for cid, record in records.items()
                    if saver.serde.loads_typed(record.metadata).get("run_id") in doomed_runs
                }
                if doomed:
                    remove_checkpoints(saver, thread_id, checkpoint_ns, records, doomed)
            # one durable rewrite of the thread, without what was removed
            saver.storage.compact(_keys.thread_prefix(thread_id))


def prune(
    saver: VerifiedSaver, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
) -> None:
    """``VerifiedSaver.prune``."""
    if strategy not in ("keep_latest", "delete"):
        raise ValueError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
    for thread_id in thread_ids:
        thread_id = _keys.as_thread_id(thread_id)
        if not saver.storage.list(_keys.thread_prefix(thread_id)):
            continue  # no such thread: do not create one just to lock it
        with saver.storage.lock(_keys.thread_prefix(thread_id), exclusive=True):
            if strategy == "delete":
                saver.storage.delete_tree(_keys.namespaces_prefix(thread_id))
                saver._forget_thread(thread_id)
            else:
                for checkpoint_ns in saver._reader.namespaces(thread_id):
                    latest = saver._latest(thread_id, checkpoint_ns, {}, strict=False)
                    records = records_of(saver, thread_id, checkpoint_ns)
                    keep = latest.config["configurable"]["checkpoint_id"] if latest else None
                    kept = {keep} | _delta_history.delta_ancestors(saver, latest)
                    doomed = set(records) - kept
                    remove_checkpoints(saver, thread_id, checkpoint_ns, records, doomed)
            # one durable rewrite of the thread, without what was removed
            saver.storage.compact(_keys.thread_prefix(thread_id))


def copy_thread(saver: VerifiedSaver, source_thread_id: str, target_thread_id: str) -> None:
    """``VerifiedSaver.copy_thread``."""
    source = _keys.as_thread_id(source_thread_id)
    target = _keys.as_thread_id(target_thread_id)
    if source == target:
        return
    source_prefix = _keys.thread_prefix(source)
    checkpoints: builtins.list[tuple[str, bytes]] = []
    others: builtins.list[tuple[str, bytes]] = []
    for key in list(saver.storage.walk(source_prefix)):
        data = saver.storage.read(key)
        if data is None:
            continue
        try:
            header = saver.codec.read_header(data)
            if canonical_key(header.kind, header.identity) != key:
                raise RecordDamagedError(
                    f"record belongs at {canonical_key(header.kind, header.identity)}"
                )
            identity = {**header.identity, "thread_id": target}
            copied = saver.codec.reframe(data, header.kind, identity)
        except RecordDamagedError as exc:
            saver.reporter.damaged(key, exc, data)
            continue
        target_key = canonical_key(header.kind, identity)
        if header.kind is RecordKind.CHECKPOINT:
            checkpoints.append((target_key, copied))  # last, so they never point at nothing
        else:
            others.append((target_key, copied))
    saver.storage.write_many(others + sorted(checkpoints))


def records_of(
    saver: VerifiedSaver, thread_id: str, checkpoint_ns: str
) -> dict[str, CheckpointRecord]:
    """Every checkpoint record of a namespace that verifies (damage is reported)."""
    records = {}
    for checkpoint_id in saver._reader.checkpoint_ids(thread_id, checkpoint_ns):
        key = _keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
        try:
            record = saver._reader.read_checkpoint(key, thread_id, checkpoint_ns, checkpoint_id)
        except Unusable:
            continue
        if record is not None:
            # a copy: records read are shared with the saver's cache, these get rewritten
            records[checkpoint_id] = dataclasses.replace(
                record, values=dict(record.values), refs=dict(record.refs)
            )
    return records


def remove_checkpoints(
    saver: VerifiedSaver,
    thread_id: str,
    checkpoint_ns: str,
    records: dict[str, CheckpointRecord],
    doomed: set[str],
) -> None:
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
            record.values[channel] = materialized(saver, records, record, channel)
        if not moved and not extended:
            continue
        if all(holder == checkpoint_id for _, holder in record.refs.values()):
            record.since_full = 0
        key = _keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
        data = encode_checkpoint(saver.codec, record)
        saver.storage.write(key, data)
        saver._records.remember(record, data, saver.storage.written_stamp(key))
    # ...then remove them.
    for checkpoint_id in doomed:
        saver.storage.delete(_keys.checkpoint_key(thread_id, checkpoint_ns, checkpoint_id))
        saver.storage.delete_tree(_keys.writes_prefix(thread_id, checkpoint_ns, checkpoint_id))
    saver._forget_thread(thread_id)


def materialized(
    saver: VerifiedSaver,
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
            saver.serde, value_parts(record, channel, stored, holder_values), stored.version
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
