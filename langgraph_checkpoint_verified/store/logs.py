"""The memories' logs: one log of batches per first namespace label, and what it holds now.

``memories/<label>/`` holds the batch records (``store.batches``) of every
namespace whose first label is ``<label>``; on a file store it is one
append-only log with its parity (``storage.log``), so a ``put`` is one append
and one sync and a damaged block heals. ``LabelItems`` is what a process knows
of one label: the newest version of each live item, built by applying the
batches that verify, in the order of their names, and brought up to date by
reading only the batches written since (one look at the greatest name tells
whether there are any). A batch that does not verify is reported and
quarantined like any damaged record, and every item it changed reads as it was
before it: its newest earlier version that verifies, or missing.

Writers take the label's lock, catch up, and name their batch after every name
they saw (``new_batch_name``), so names are in the order batches were written
on one machine, and a reader that has applied the greatest name has applied
every batch. Compaction (``MemoryLogs.compact``) writes the live items again as
packs of batches, atomically where the storage can (one log rewrite on files).
"""

from __future__ import annotations

import bisect
import heapq
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.format import Codec, RecordKind
from langgraph_checkpoint_verified.store.batches import (
    PACK_ITEMS,
    Batch,
    ItemVersion,
    decode_batch,
    encode_batch,
    pack_items,
)

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.engine.damage import DamageReporter
    from langgraph_checkpoint_verified.storage import Storage

ItemKey = tuple[tuple[str, ...], str]
"""An item's place: (namespace, key)."""

OLDER_IN_PLACE = ""
"""The name under which items of the older layout read in place are applied: first."""
KEPT_LABELS = 256
"""Most first labels whose items a process keeps in memory (the least recently used
go first): a store whose first label is, say, a user id does not hold every user's
memories for the life of the process."""
COMPACT_AFTER = 1024
"""A label's log is compacted once it holds at least this many dead versions,
deletions and TTL refreshes, and at least as many as it has live items."""


def _in_namespace(
    namespace: tuple[str, ...], ordered: list[tuple[int, str]]
) -> Iterator[tuple[int, tuple[str, ...], str]]:
    """A namespace's ``(-updated_at, key)`` entries as ``(-updated_at, namespace, key)``."""
    return ((newest, namespace, key) for newest, key in ordered)


def _discard(ordered: list[Any], entry: Any) -> None:
    at = bisect.bisect_left(ordered, entry)
    if at < len(ordered) and ordered[at] == entry:
        del ordered[at]


def new_batch_name(after: str | None) -> str:
    """A batch name greater than the name ``after`` (of a batch, or its record): nanoseconds
    since the epoch, then randomness.

    Example:
        >>> name = new_batch_name("1764000000000000000-00aa11")
        >>> name > "1764000000000000000-00aa11", len(name)
        (True, 26)
    """
    now = time.time_ns()
    if after is not None:
        now = max(now, int(after[:19]) + 1)
    return f"{now:019d}-{os.urandom(3).hex()}"


def batch_identity(label: str, name: str) -> dict[str, str]:
    return {"store_label": label, "store_batch": name}


@dataclass
class LabelItems:
    """The live items of one first label as its verified batches leave them."""

    label: str
    prefix: str
    items: dict[ItemKey, ItemVersion] = field(default_factory=dict)
    order: list[tuple[int, tuple[str, ...], str]] = field(default_factory=list)
    """Every item as ``(-updated_at, namespace, key)``, sorted: newest first."""
    by_namespace: dict[tuple[str, ...], list[tuple[int, str]]] = field(default_factory=dict)
    """Each namespace's items as ``(-updated_at, key)``, sorted: a search of a narrower
    prefix than the label walks only the namespaces under it."""
    applied: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    """Batches found damaged (reported): not read again."""
    greatest: str | None = None
    """The greatest record name under the label's prefix when it was last caught up with."""
    dead: int = 0
    changes: int = 0
    """Counts every change applied: a view built from the items is stale when it was
    built at another count."""
    vector_table: tuple[int, Any] | None = None
    """``(changes, VectorTable)``: the store's vectors of these items, as last built."""

    def reset(self) -> None:
        self.items.clear()
        self.order.clear()
        self.by_namespace.clear()
        self.applied.clear()
        self.skipped.clear()
        self.greatest = None
        self.dead = 0
        self.changes += 1

    def apply(self, name: str, batch: Batch) -> None:
        for touch in batch.touches:
            found = self.items.get((touch.namespace, touch.key))
            if found is not None and found.version == touch.version and found.ttl is not None:
                found.expires_at = max(found.expires_at or 0.0, touch.expires_at)
            self.dead += 1
        for namespace, key in batch.deletes:
            if self._remove((namespace, key)):
                self.dead += 1
            self.dead += 1
        for item in batch.puts:
            if self._remove((item.namespace, item.key)):
                self.dead += 1
            self.items[(item.namespace, item.key)] = item
            bisect.insort(self.order, (-item.updated_at, item.namespace, item.key))
            bisect.insort(
                self.by_namespace.setdefault(item.namespace, []), (-item.updated_at, item.key)
            )
        self.applied.add(name)
        self.changes += 1

    def _remove(self, place: ItemKey) -> bool:
        old = self.items.pop(place, None)
        if old is None:
            return False
        _discard(self.order, (-old.updated_at, old.namespace, old.key))
        own = self.by_namespace[old.namespace]
        _discard(own, (-old.updated_at, old.key))
        if not own:
            del self.by_namespace[old.namespace]
        return True

    def newest_first(self, namespace_prefix: tuple[str, ...]) -> Iterator[ItemVersion]:
        """The items under ``namespace_prefix``, newest first, then by namespace and key."""
        size = len(namespace_prefix)
        if size <= 1:  # the whole label
            for _, namespace, key in self.order:
                yield self.items[(namespace, key)]
            return
        each = [
            _in_namespace(namespace, ordered)
            for namespace, ordered in self.by_namespace.items()
            if namespace[:size] == namespace_prefix
        ]
        for _, namespace, key in heapq.merge(*each):
            yield self.items[(namespace, key)]

    @property
    def needs_compaction(self) -> bool:
        """Dead versions as many as live items (and ``COMPACT_AFTER``), or that many more
        batches than packs would hold the items: a store whose every put is a new item
        compacts too, so that listing its batches stays short (a bucket's LIST)."""
        batches = len(self.applied)
        return self.dead >= max(COMPACT_AFTER, len(self.items)) or (
            batches >= COMPACT_AFTER + 2 * (len(self.items) // PACK_ITEMS + 1)
        )


class MemoryLogs:
    """Every label's ``LabelItems``, kept up to date with the storage.

    Callers hold ``lock`` around a whole operation (reads of one ``batch`` see
    one state); writing and compacting also take the label's storage lock, so
    that processes sharing the store write in turn. On a store whose requests are
    awaited (S3), the async calls run as cores on one thread: ``lock`` is then held
    by a core, not by that thread (``ReentrantCoreLock``).
    """

    def __init__(self, storage: Storage, codec: Codec, reporter: DamageReporter) -> None:
        self.storage = storage
        self.codec = codec
        self.reporter = reporter
        self.lock: AbstractContextManager[Any] = threading.RLock()
        if getattr(storage, "awaits_io", False):
            from langgraph_checkpoint_verified.storage.async_bridge import ReentrantCoreLock

            self.lock = ReentrantCoreLock()
        self._labels: OrderedDict[str, LabelItems] = OrderedDict()
        self.older: dict[str, list[ItemVersion]] = {}
        """Items of the older layout read in place (``store.legacy``), by first label:
        applied before every batch, as the batch they would be moved into would be."""

    def labels(self) -> list[str]:
        """Every first label with a log.

        A label too long for a path segment is stored under a hashed name, which
        does not decode: it is read from the identity of a batch in that log
        (whose header verifies, and which must name this log).
        """
        found = []
        for segment in self.storage.list(keys.MEMORIES_PREFIX):
            prefix = f"{keys.MEMORIES_PREFIX}/{segment}"
            label = keys.decode_segment(segment)
            if label is None:
                label = self._label_named_in(prefix)
            if label is not None and keys.memories_prefix(label) == prefix:
                found.append(label)
        return sorted({*found, *self.older})

    def _label_named_in(self, prefix: str) -> str | None:
        for name in sorted(self.storage.list(prefix)):
            data = self.storage.read(f"{prefix}/{name}")
            if data is None:
                continue
            try:
                label = self.codec.read_header(data).identity.get("store_label")
            except RecordDamagedError:
                continue  # a read of this batch reports it
            if label is not None:
                return label
        return None

    def current(self, label: str) -> LabelItems:
        """The items of ``label``, caught up with what every process has written."""
        state = self._labels.get(label)
        if state is None:
            state = self._labels[label] = LabelItems(label, keys.memories_prefix(label))
            while len(self._labels) > KEPT_LABELS:
                self._labels.popitem(last=False)  # read again from its log if asked for
        self._labels.move_to_end(label)
        self._catch_up(state)
        return state

    def _catch_up(self, state: LabelItems) -> None:
        greatest = self.storage.greatest_name(state.prefix)
        if greatest == state.greatest and greatest is not None:
            return
        names = sorted(
            n[: -len(keys.BATCH_SUFFIX)]
            for n in self.storage.list(state.prefix)
            if n.endswith(keys.BATCH_SUFFIX)
        )
        present = set(names)
        older = self.older.get(state.label)
        if older is not None:
            present.add(OLDER_IN_PLACE)
        newest_applied = max(state.applied, default=None)
        fresh = [n for n in names if n not in state.applied and n not in state.skipped]
        if (state.applied - present) or (
            fresh and newest_applied is not None and fresh[0] < newest_applied
        ):
            # compacted, or written out of order (another machine's clock): start again
            state.reset()
            fresh = names
        if older is not None and OLDER_IN_PLACE not in state.applied:
            state.apply(OLDER_IN_PLACE, Batch(puts=older))
        for name in fresh:
            batch = self._read_batch(state.label, name)
            if batch is None:
                state.skipped.add(name)
            else:
                state.apply(name, batch)
        state.greatest = greatest

    def _read_batch(self, label: str, name: str) -> Batch | None:
        key = keys.batch_key(label, name)
        try:
            data = self.storage.read(key)
        except OSError as exc:
            self.reporter.unreadable(key, exc)
            return None
        if data is None:
            return None  # moved aside (or compacted) since it was listed
        try:
            content = self.codec.decode(data, RecordKind.STORE_BATCH, batch_identity(label, name))
            batch = decode_batch(name, content)
            if any(
                namespace[0] != label
                for namespace in (
                    *(t.namespace for t in batch.touches),
                    *(namespace for namespace, _ in batch.deletes),
                    *(p.namespace for p in batch.puts),
                )
            ):
                raise RecordDamagedError(f"the batch changes items outside the label {label!r}")
            return batch
        except RecordDamagedError as exc:
            self.reporter.damaged(key, exc, data)
            return None

    def write(self, label: str, batch: Batch, *, durable: bool = True) -> None:
        """Append ``batch`` to ``label``'s log (one record) and apply it here."""
        self.update(label, lambda _: batch, durable=durable)

    def delete_expired(self, label: str, now: float) -> int:
        """Delete ``label``'s items expired at ``now`` (judged under the label's lock, so an
        item put again meanwhile is kept); returns how many."""
        expired: list[ItemKey] = []

        def deletions(state: LabelItems) -> Batch | None:
            expired.extend(place for place, item in state.items.items() if item.expired(now))
            return Batch(deletes=expired) if expired else None

        self.update(label, deletions, durable=True)
        return len(expired)

    def update(
        self, label: str, make: Callable[[LabelItems], Batch | None], *, durable: bool = True
    ) -> None:
        """Append the batch ``make`` returns (nothing if ``None``), made from ``label``'s
        items as they are under the label's lock: no process writes in between."""
        state = self.current(label)
        with self.storage.lock(state.prefix, exclusive=True):
            self._catch_up(state)
            batch = make(state)
            if batch is None:
                return
            name = new_batch_name(state.greatest)
            for position, item in enumerate(batch.puts):
                item.version = f"{name}/{position}"
            data = self.codec.encode(
                RecordKind.STORE_BATCH, batch_identity(label, name), encode_batch(batch)
            )
            self.storage.write(keys.batch_key(label, name), data, replace=False, durable=durable)
            state.apply(name, batch)
            # we hold the label's lock: no batch can have been named after ours
            state.greatest = name + keys.BATCH_SUFFIX
        if state.needs_compaction:
            self.compact(label)

    def compact(self, label: str, *, now: float | None = None) -> int:
        """Write ``label``'s live items again as packs, dropping every dead version and
        every expired item; returns how many batches were replaced."""
        state = self.current(label)
        with self.storage.lock(state.prefix, exclusive=True):
            self._catch_up(state)
            # a batch found damaged is moved aside by the reporter, or, if it may not move
            # anything (quarantine=False), left as it is: never deleted here
            old = sorted(n for n in state.applied if n != OLDER_IN_PLACE)
            if not old:
                return 0
            now = time.time() if now is None else now
            live = sorted(
                (item for item in state.items.values() if not item.expired(now)),
                key=lambda item: (item.namespace, item.key),
            )
            changes: dict[str, bytes | None] = {keys.batch_key(label, n): None for n in old}
            base = max(old)
            packs = []
            for number, items in enumerate(pack_items(live)):
                name = f"{base}-p{number:04d}"
                for position, item in enumerate(items):
                    item.version = f"{name}/{position}"
                batch = Batch(puts=items)
                changes[keys.batch_key(label, name)] = self.codec.encode(
                    RecordKind.STORE_BATCH, batch_identity(label, name), encode_batch(batch)
                )
                packs.append((name, batch))
            self.storage.compact(state.prefix, changes=changes)
            state.reset()
            for name, batch in packs:
                state.apply(name, batch)
            state.greatest = self.storage.greatest_name(state.prefix)
            return len(old)

    def forget(self) -> None:
        """Drop what this process knows: the next call reads every log again."""
        self._labels.clear()
