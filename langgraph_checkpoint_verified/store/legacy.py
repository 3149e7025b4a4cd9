"""Stores written one item per record (``store/<labels>/<key>.item``), taken into the logs.

Before ``memories/``, each item was a record of its own (kind ``STORE_ITEM``)
and a TTL refreshed by a read a second one (``STORE_TOUCH``) naming the
version it extended. ``move_into_logs`` reads them, verified as before (frame,
digests, and that the record is the item its key names), writes each first
label's items as one batch with their times, expiry (touches folded in) and
vectors, named to sort before every other batch, and then deletes the old
records it read. A crash in between leaves both: the next opening finds the
batch already written and deletes the rest. A damaged old record is reported
and quarantined, as a read would have, and never deleted.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import RecordKind, unpack
from langgraph_checkpoint_verified.store.batches import (
    Batch,
    ItemVersion,
    encode_batch,
    vector_bytes,
)
from langgraph_checkpoint_verified.store.filters import is_number
from langgraph_checkpoint_verified.store.logs import batch_identity

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.store.logs import MemoryLogs

_CONTENT_VERSION = 1


OLDER_BATCH = "0000000000000000000-older"
"""The name of the batch that holds a store's items of the older layout: before every
name a writer gives, so that whatever was written to the logs since wins."""


def move_into_logs(logs: MemoryLogs, *, move: bool = True) -> int:
    """Take every item under ``store/`` into the memories' logs; returns how many.

    With ``move``, each first label's items are written as one batch named
    ``OLDER_BATCH`` (or, if that is taken, the next free ``OLDER_BATCH-NNNN``:
    a crash before the old records were deleted, or records an older version
    wrote since), then the records that were read are deleted. A damaged or
    unreadable one is reported (and quarantined, with the reporter's quarantine)
    and never deleted. Without ``move`` nothing is
    written: the items are read in place, for this process only.
    """
    storage = logs.storage
    record_keys = sorted(storage.walk(keys.STORE_PREFIX))
    if not record_keys:
        return 0
    present = set(record_keys)
    by_label: dict[str, list[ItemVersion]] = {}
    taken: list[str] = []
    for key in record_keys:
        if not key.endswith(keys.STORE_ITEM_SUFFIX):
            continue
        item = _read_item(logs, key)
        if item is None:
            continue
        taken.append(key)
        touch_key = key[: -len(keys.STORE_ITEM_SUFFIX)] + keys.STORE_TOUCH_SUFFIX
        if touch_key in present:
            taken.append(touch_key)
            if item.ttl is not None:
                item.expires_at = _touched(logs, touch_key, item)
        by_label.setdefault(item.namespace[0], []).append(item)
    if not move:
        logs.older = by_label
        return sum(len(items) for items in by_label.values())
    for label, items in sorted(by_label.items()):
        content = encode_batch(Batch(puts=items))
        # a batch of that name may be there already: this store was moved before (by a
        # process that crashed before deleting, or an older version has written since):
        # the next free name, which sorts after it and before every writer's name
        for number in itertools.count():
            name = OLDER_BATCH if number == 0 else f"{OLDER_BATCH}-{number:04d}"
            data = logs.codec.encode(RecordKind.STORE_BATCH, batch_identity(label, name), content)
            if storage.write(keys.batch_key(label, name), data, replace=False):
                break
    for key in taken:
        storage.delete(key)
    for key in record_keys:
        if key.endswith(keys.STORE_TOUCH_SUFFIX) and key not in taken:
            item_key = key[: -len(keys.STORE_TOUCH_SUFFIX)] + keys.STORE_ITEM_SUFFIX
            if item_key not in present:
                storage.delete(key)  # its item is gone: nothing to extend
    return sum(len(items) for items in by_label.values())


def _read_item(logs: MemoryLogs, key: str) -> ItemVersion | None:
    try:
        data = logs.storage.read(key)
    except OSError as exc:
        logs.reporter.unreadable(key, exc)
        return None
    if data is None:
        return None
    try:
        header, content = logs.codec.decode_with_header(data, RecordKind.STORE_ITEM, None)
        item = _item(header.identity, content)
        if keys.store_item_key(item.namespace, item.key) != key:
            raise RecordDamagedError(
                f"the record names item {item.key!r} of {item.namespace!r}, which lives elsewhere"
            )
    except RecordDamagedError as exc:
        logs.reporter.damaged(key, exc, data)
        return None
    return item


def _touched(logs: MemoryLogs, key: str, item: ItemVersion) -> float | None:
    data = logs.storage.read(key)
    if data is None:
        return item.expires_at
    try:
        header, content = logs.codec.decode_with_header(data, RecordKind.STORE_TOUCH, None)
        body = unpack(content)
        if not isinstance(body, dict) or not is_number(body.get("expires_at")):
            raise RecordDamagedError("store touch has an unexpected shape")
    except RecordDamagedError as exc:
        logs.reporter.damaged(key, exc, data)  # costs the item its extension, not its value
        return item.expires_at
    if header.identity.get("store_version") != item.version:
        return item.expires_at
    touched = float(body["expires_at"])
    return touched if item.expires_at is None else max(item.expires_at, touched)


def _item(identity: Mapping[str, str], content: bytes) -> ItemVersion:
    body = unpack(content)
    if not isinstance(body, dict) or body.get("v") != _CONTENT_VERSION:
        raise RecordDamagedError("store item has an unexpected shape or version")
    try:
        namespace = json.loads(identity["store_namespace"])
        key, version = identity["store_key"], identity["store_version"]
    except (KeyError, ValueError):
        raise RecordDamagedError("store item identity is incomplete") from None
    if (
        not isinstance(namespace, list)
        or not namespace
        or not all(isinstance(p, str) for p in namespace)
    ):
        raise RecordDamagedError("store item namespace is not a list of strings")
    created, updated = body.get("created_at"), body.get("updated_at")
    ttl, expires_at, value = body.get("ttl"), body.get("expires_at"), body.get("value")
    vectors: Any = body.get("vectors")
    if not isinstance(created, int) or not isinstance(updated, int):
        raise RecordDamagedError("store item times are not integers")
    if (ttl is not None and not is_number(ttl)) or (
        expires_at is not None and not is_number(expires_at)
    ):
        raise RecordDamagedError("store item expiry is not a number")
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], bytes)
    ):
        raise RecordDamagedError("store item value is not a (type, bytes) pair")
    if not isinstance(vectors, dict) or not all(
        isinstance(name, str) and isinstance(v, list) and all(is_number(x) for x in v)
        for name, v in vectors.items()
    ):
        raise RecordDamagedError("store item vectors are not lists of numbers")
    return ItemVersion(
        namespace=tuple(namespace),
        key=key,
        version=version,
        created_at=created,
        updated_at=updated,
        ttl=ttl,
        expires_at=expires_at,
        value=(value[0], value[1]),
        vectors={name: vector_bytes(v) for name, v in vectors.items()},
    )
