"""Tool-call records: what ``VerifiedToolNode`` keeps of each call, in the thread's records.

An ``"intent"`` record says a call is about to run (at-most-once tools); a
``"result"`` record holds what it returned. Both are verified records like any
other, keyed by thread, namespace and tool call id (see ``records.keys``), with the
call's fingerprint in their identity.
"""

from __future__ import annotations

from typing import Any

from langgraph_checkpoint_verified.engine.core import Engine
from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import RecordKind
from langgraph_checkpoint_verified.records.kinds import canonical_key, pack_typed, unpack_typed


def put_tool_record(
    engine: Engine,
    thread_id: str,
    checkpoint_ns: str,
    tool_call_id: str,
    kind: str,
    *,
    fingerprint: str,
    value: Any = None,
) -> None:
    """The work of ``VerifiedSaver.put_tool_record`` (documented there)."""
    thread_id = keys.as_thread_id(thread_id)
    keys.require_text(checkpoint_ns, "checkpoint_ns")
    keys.require_text(tool_call_id, "tool_call_id")
    keys.require_text(fingerprint, "fingerprint")
    record_kind = _tool_kind(kind)
    identity = {
        "thread_id": thread_id,
        "checkpoint_ns": checkpoint_ns,
        "tool_call_id": tool_call_id,
        "fingerprint": fingerprint,
    }
    type_, blob = engine.serde.dumps_typed(value)
    engine.storage.write(
        canonical_key(record_kind, identity),
        engine.codec.encode(record_kind, identity, pack_typed((type_, blob))),
    )


def get_tool_record(
    engine: Engine,
    thread_id: str,
    checkpoint_ns: str,
    tool_call_id: str,
    kind: str,
    *,
    damaged: Any = None,
) -> Any:
    """The work of ``VerifiedSaver.get_tool_record`` (documented there)."""
    thread_id = keys.as_thread_id(thread_id)
    record_kind = _tool_kind(kind)
    key = keys.tool_record_key(thread_id, checkpoint_ns, tool_call_id, kind)
    try:
        data = engine.storage.read(key)
    except OSError as exc:
        engine.reporter.unreadable(key, exc)
        return damaged  # unreadable is not "never written": it may exist
    if data is None:
        return None
    try:
        header, content = engine.codec.decode_with_header(data, record_kind)
        identity = header.identity
        if canonical_key(record_kind, identity) != key:
            raise RecordDamagedError(f"record belongs at {canonical_key(record_kind, identity)}")
        typed = unpack_typed(content)
    except RecordDamagedError as exc:
        engine.reporter.damaged(key, exc, data)
        return damaged
    return identity["fingerprint"], engine.serde.loads_typed(typed)


def delete_tool_record(
    engine: Engine, thread_id: str, checkpoint_ns: str, tool_call_id: str, kind: str
) -> None:
    """The work of ``VerifiedSaver.delete_tool_record`` (documented there)."""
    _tool_kind(kind)
    engine.storage.delete(
        keys.tool_record_key(keys.as_thread_id(thread_id), checkpoint_ns, tool_call_id, kind)
    )


def _tool_kind(kind: str) -> RecordKind:
    if kind == "intent":
        return RecordKind.TOOL_INTENT
    if kind == "result":
        return RecordKind.TOOL_RESULT
    raise ValueError(f"tool record kind must be 'intent' or 'result', got {kind!r}")
