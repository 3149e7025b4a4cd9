"""Checkpoint records already verified and decoded, and the bytes they were decoded from.

Reading a checkpoint costs a read, a checksum, a decompression and a parse of
its record, and usually of the record holding a value it did not change (a
channel written a few steps back). The same records are read again and again:
every ``invoke`` starts with ``get_tuple`` of the checkpoint the last one
wrote, a server polls ``get_state``, ``list`` walks the newest ones.

A read still reads the record's bytes from storage, every time; when they are
byte for byte the bytes a record was decoded from (or encoded to, by this
process's ``put``), that record is the answer and the checksum, decompression
and parse are skipped: decoding is a function of the bytes. Damage, a rewrite
or a compaction anywhere in between changes the bytes and the record is
decoded (and verified) again. A record holds serialized values; what they
deserialize to is kept apart (``engine.decoded_values``) and handed out as copies,
so every caller still gets values of its own.

``put`` also needs the refs of a parent (not its values): those summaries are
kept for many more checkpoints, under the storage ``stamp`` the record had
when it was read or written, and trusted while the stamp is unchanged.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

from langgraph_checkpoint_verified.records.kinds import CheckpointRecord

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
"""Serialized bytes of the records kept whole (values included). Decoded, a record
takes about three times its serialized size in memory (measured: 16 MB of records
held some 50 MB after reading the newest checkpoints of 2,000 threads), so this
bounds the cache at about 12 MB; a thread's working set (its newest checkpoint and
the records holding its values) is a small part of it."""
DEFAULT_MAX_SUMMARIES = 4096
"""Records kept as their refs and chain position only."""

_Identity = tuple[str, str, str]


def _size(record: CheckpointRecord) -> int:
    return (
        len(record.checkpoint[1])
        + len(record.metadata[1])
        + sum(len(stored.typed[1]) for stored in record.values.values())
    )


def summary_of(record: CheckpointRecord) -> CheckpointRecord:
    """What ``put`` needs of a parent: its refs and chain position, not its values."""
    return CheckpointRecord(
        thread_id=record.thread_id,
        checkpoint_ns=record.checkpoint_ns,
        checkpoint_id=record.checkpoint_id,
        parent_checkpoint_id=record.parent_checkpoint_id,
        checkpoint=("", b""),
        metadata=("", b""),
        values={},
        refs=record.refs,
        since_full=record.since_full,
    )


class RecordCache:
    """Decoded checkpoint records by identity, each with the bytes it was decoded from.

    Records handed out are shared: callers must not change them (copy first,
    as maintenance does before rewriting one).
    """

    def __init__(
        self, max_bytes: int = DEFAULT_MAX_BYTES, max_summaries: int = DEFAULT_MAX_SUMMARIES
    ) -> None:
        self.max_bytes = max_bytes
        self.max_summaries = max_summaries
        self._whole: OrderedDict[_Identity, tuple[bytes, CheckpointRecord, int]] = OrderedDict()
        self._summaries: OrderedDict[_Identity, tuple[Hashable, CheckpointRecord]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def remember(self, record: CheckpointRecord, data: bytes, stamp: Hashable | None) -> None:
        """Keep ``record``, decoded from or encoded to ``data``; its summary too if the
        storage ``stamp`` of ``data`` is known (taken before the read, after the write)."""
        identity = (record.thread_id, record.checkpoint_ns, record.checkpoint_id)
        size = len(data) + _size(record)
        with self._lock:
            if stamp is not None:
                self._summaries[identity] = (stamp, summary_of(record))
                self._summaries.move_to_end(identity)
                while len(self._summaries) > self.max_summaries:
                    self._summaries.popitem(last=False)
            self._drop_whole(identity)
            if size > self.max_bytes:
                return
            self._whole[identity] = (data, record, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._drop_whole(next(iter(self._whole)))

    def _drop_whole(self, identity: _Identity) -> None:
        found = self._whole.pop(identity, None)
        if found is not None:
            self._bytes -= found[2]

    def record(self, identity: _Identity, data: bytes) -> CheckpointRecord | None:
        """The record ``data`` decodes to, if these very bytes were decoded before."""
        with self._lock:
            found = self._whole.get(identity)
            if found is None or found[0] != data:
                return None
            self._whole.move_to_end(identity)
            return found[1]

    def bytes_of(self, identity: _Identity) -> bytes | None:
        """The bytes the record kept whole for ``identity`` was decoded from, if kept."""
        with self._lock:
            found = self._whole.get(identity)
            return None if found is None else found[0]

    def summary(self, identity: _Identity, stamp: Hashable | None) -> CheckpointRecord | None:
        """The record's refs and chain position, if it was kept at this very ``stamp``."""
        if stamp is None:
            return None
        with self._lock:
            found = self._summaries.get(identity)
            if found is None or found[0] != stamp:
                return None
            self._summaries.move_to_end(identity)
            return found[1]

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for identity in [i for i in self._whole if i[0] == thread_id]:
                self._drop_whole(identity)
            for identity in [i for i in self._summaries if i[0] == thread_id]:
                del self._summaries[identity]
