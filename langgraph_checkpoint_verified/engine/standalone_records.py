"""Checking the records no other record refers to: memory store batches, cache entries.

The batches of ``VerifiedStore``'s memory logs (``memories/``), the items of its
older layout (``store/``) and the node cache entries of ``VerifiedCache``
(``cache/``) stand alone: checking one is its frame, digests and identity (that
it is where its identity says), and repairing one is moving it aside, as a read
that finds it damaged does.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from langgraph_checkpoint_verified.engine.damage import Damage, DamageReporter, kind_name
from langgraph_checkpoint_verified.engine.verify_report import VerifyReport
from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records import keys as record_keys
from langgraph_checkpoint_verified.records.format import Codec, RecordKind
from langgraph_checkpoint_verified.storage.base import Storage

STANDALONE_PREFIXES = (
    record_keys.MEMORIES_PREFIX,
    record_keys.STORE_PREFIX,
    record_keys.CACHE_PREFIX,
)
"""Where the records live that no other record refers to: the memory store's batches
(and items of its older layout), node cache entries."""


def check_standalone(
    codec: Codec,
    reporter: DamageReporter,
    keys: list[str],
    report: VerifyReport,
    *,
    repair: bool,
    tick: Callable[[], None],
) -> None:
    """Check memory items, touches and cache entries; with ``repair``, move the damaged aside.

    Nothing is locked: these records are written whole, by an atomic replace or
    one ``PUT``, and never depend on each other. What is moved is what was read
    (``DamageReporter`` puts back a record replaced meanwhile), so a put racing
    the repair is never lost; a record so replaced is reported as it was found.
    """
    storage = reporter.storage
    for key in keys:
        data = storage.read(key)
        if data is not None:
            report.records_checked += 1
            if key.endswith((record_keys.BATCH_SUFFIX, record_keys.STORE_ITEM_SUFFIX)):
                report.store_records_checked += 1
            elif key.endswith(record_keys.CACHE_ENTRY_SUFFIX):
                report.cache_entries_checked += 1
            try:
                _check_standalone_record(codec, key, data)
            except RecordDamagedError as exc:
                if repair and reporter.quarantine_enabled and not report.read_only:
                    damage, refusal = reporter.report_damaged(key, exc, data)
                    report.read_only = refusal is not None
                else:
                    damage = _found_damaged(codec, storage, key, exc, data)
                report.damaged.append(damage)
        tick()


def _found_damaged(
    codec: Codec, storage: Storage, key: str, error: RecordDamagedError, data: bytes
) -> Damage:
    """The ``Damage`` of a record left in place (what its header still says, if it verifies)."""
    try:
        identity: dict[str, str] | None = codec.read_header(data).identity
    except RecordDamagedError:
        identity = None
    return Damage(key, storage.location(key), error.reason, kind_name(key), identity)


def _check_standalone_record(codec: Codec, key: str, data: bytes) -> None:
    """Verify a memory item, touch or cache entry: frame, digests, and that it is where its
    identity says. Raises ``RecordDamagedError``."""
    header = codec.read_header(data)
    expected_key = _standalone_key(header.kind, header.identity)
    if expected_key != key:
        raise RecordDamagedError(f"record belongs at {expected_key} (moved, swapped or copied in)")
    codec.decode(data, header.kind, None)


def _standalone_key(kind: RecordKind, identity: dict[str, str]) -> str:
    """Where a memory item, touch or cache entry with this identity must live."""
    try:
        if kind is RecordKind.STORE_BATCH:
            return record_keys.batch_key(identity["store_label"], identity["store_batch"])
        if kind in (RecordKind.STORE_ITEM, RecordKind.STORE_TOUCH):
            namespace = _labels(identity["store_namespace"])
            if "store_version" not in identity:  # a read needs it
                raise KeyError("store_version")
            where = (
                record_keys.store_item_key
                if kind is RecordKind.STORE_ITEM
                else record_keys.store_touch_key
            )
            return where(namespace, identity["store_key"])
        if kind is RecordKind.CACHE_ENTRY:
            namespace = _labels(identity["cache_namespace"])
            return record_keys.cache_entry_key(namespace, identity["cache_key"])
    except KeyError as exc:
        raise RecordDamagedError(f"identity lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise RecordDamagedError(f"identity names no place a record can live: {exc}") from None
    raise RecordDamagedError(
        f"a {kind.name} record does not belong under {record_keys.MEMORIES_PREFIX}/, "
        f"{record_keys.STORE_PREFIX}/ or {record_keys.CACHE_PREFIX}/"
    )


def _labels(namespace: str) -> tuple[str, ...]:
    """A namespace as an identity spells it (a JSON array of strings)."""
    labels = json.loads(namespace)
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"namespace {namespace!r:.100} is not a list of strings")
    return tuple(labels)
