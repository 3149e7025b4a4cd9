"""The newest checkpoint of each thread read lately, kept as its verified parts.

``get_tuple`` of a thread's newest checkpoint finds the greatest checkpoint id,
reads its record, the records holding its values and its pending writes, and
checks each. While nothing in the thread changed since, the answer is the same:
the storage's ``thread_stamp`` says so (on files, one 16-byte read of the log
where this process knows it to end), and the parts read then are used again.

The records they came from are still read at every use, and must be the very
bytes verified then (``Storage.still_holds``): damage since sends the read the
long way, which finds it, heals it from parity or falls back, and reports it.
Only serialized parts are kept (records, value parts, write values), never a
value: each reader deserializes its own (``DecodedValues`` copies the values it
has deserialized before), so nothing a caller changes reaches another.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from langgraph_checkpoint_verified.records.kinds import CheckpointRecord, Typed
from langgraph_checkpoint_verified.records.values import ValueParts

NEWEST_KEPT = 256
"""Threads (and namespaces) whose newest checkpoint's parts are kept. The parts are
the records' own, which the record cache holds anyway while they are in use."""


@dataclass(frozen=True)
class CheckpointParts:
    """A checkpoint as read and verified: its record, every channel's serialized value
    parts, and its pending writes with their values still serialized (``None``: not
    read yet)."""

    record: CheckpointRecord
    entries: dict[str, ValueParts]
    writes: list[tuple[str, str, Typed]] | None
    sources: tuple[tuple[str, bytes], ...] | None
    """``(key, bytes)`` of each record read for it, read again at each use (``None``:
    not known, so never used again)."""


class NewestCheckpoints:
    """The parts of the newest checkpoint read per ``(thread, namespace)``, with the
    thread's stamp when it was read.

    Example:
        >>> newest = NewestCheckpoints()
        >>> newest.put("t", "", ("log", 1, 100), "parts")
        >>> newest.get("t", "", ("log", 1, 100)), newest.get("t", "", ("log", 1, 180))
        ('parts', None)
    """

    def __init__(self, size: int = NEWEST_KEPT) -> None:
        self._size = size
        self._kept: OrderedDict[tuple[str, str], tuple[Hashable, CheckpointParts]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, thread_id: str, checkpoint_ns: str, stamp: Hashable) -> CheckpointParts | None:
        """The parts kept for the thread's namespace if its stamp is still ``stamp``."""
        with self._lock:
            kept = self._kept.get((thread_id, checkpoint_ns))
            if kept is None or kept[0] != stamp:
                return None
            self._kept.move_to_end((thread_id, checkpoint_ns))
            return kept[1]

    def put(
        self, thread_id: str, checkpoint_ns: str, stamp: Hashable, parts: CheckpointParts
    ) -> None:
        """Keep ``parts`` as the newest of the namespace while the thread is at ``stamp``
        (taken before they were read: if it changed in between, no later stamp matches)."""
        with self._lock:
            self._kept[(thread_id, checkpoint_ns)] = (stamp, parts)
            self._kept.move_to_end((thread_id, checkpoint_ns))
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for where in [w for w in self._kept if w[0] == thread_id]:
                del self._kept[where]
