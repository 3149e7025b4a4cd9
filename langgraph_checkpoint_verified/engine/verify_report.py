"""What ``verify`` reports: damaged records, checkpoints no read can return, healed blocks.

``VerifyReport`` is what ``VerifiedSaver.verify`` and ``VerifiedStore.verify`` return;
``UnusableCheckpoint`` and ``HealedBlock`` are its entries beside the ``Damage`` of
each damaged record.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from langgraph_checkpoint_verified.engine.damage import Damage


@dataclass
class UnusableCheckpoint:
    """A checkpoint that cannot be returned, why, and what a person can do about it.

    Attributes:
        thread_id, checkpoint_ns, checkpoint_id: The checkpoint.
        because_of: Key of the record that is why: its own, or the one holding a
            channel value it needs.
        reason: What is wrong with that record, in words.
        resume_from: The checkpoint reads return instead (its nearest ancestor
            that loads), or ``None``: the thread starts again from step 0.
        advice: What to do about it.
        repairable: Whether ``verify(repair=True)`` moves it aside.
        quarantined_to: Where repair moved it, if it did.
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    because_of: str
    reason: str = ""
    resume_from: str | None = None
    advice: str = ""
    repairable: bool = False
    quarantined_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HealedBlock:
    """A 4 KB block of a thread's log that failed its CRC and was rebuilt from the parity.

    Attributes:
        location: ``<log path>@<offset>``.
        written_back: Whether repair wrote the rebuilt block in its place.
    """

    location: str
    written_back: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class VerifyReport:
    """What ``VerifiedSaver.verify`` found (and, with ``repair=True``, did).

    Attributes:
        records_checked: How many records were read and checked.
        checkpoints_checked: How many of those were checkpoints.
        store_records_checked: How many were records of a ``VerifiedStore``
            (its batches, ``memories/<label>/<name>.batch``, and items of the
            older layout under ``store/``), damaged ones included; a whole
            store's verification checks them, one thread's does not.
        cache_entries_checked: How many were node cache entries of a
            ``VerifiedCache`` (``cache/.../<key>.entry``), damaged ones included.
        damaged: Every damaged record, every record that is missing although
            others need it, and every orphaned pending-writes record (its
            checkpoint was quarantined: no read can use it).
        unusable_checkpoints: Checkpoints that cannot be returned, because their
            own record or a record they depend on (a channel value stored
            in another checkpoint's record) is damaged, quarantined or missing.
        repaired: Whether repair was asked for.
        rewritten: Keys of the checkpoints repair rewrote to hold channel values
            themselves, before it moved aside the records they kept them in.
        read_only: Repair was asked for but this process cannot write to the
            store (permissions, a read-only mount): what was not moved yet stays.
        healed: Damaged blocks of logs (threads, memories) that the logs' parity rebuilds, so
            that no record in them is lost; reads are served the rebuilt bytes,
            and repair writes them back.
        unprotected_bytes: Bytes of logs that no intact parity covers (appended
            without a sync, until their log's next sync; a store written before logs
            had parity; a lost parity record): one damaged block there costs its
            records. Repair adds the parity, where the log's own entries verify.
        protected_bytes: Bytes repair added parity for.
    """

    records_checked: int = 0
    checkpoints_checked: int = 0
    store_records_checked: int = 0
    cache_entries_checked: int = 0
    damaged: list[Damage] = field(default_factory=list)
    unusable_checkpoints: list[UnusableCheckpoint] = field(default_factory=list)
    repaired: bool = False
    rewritten: list[str] = field(default_factory=list)
    read_only: bool = False
    healed: list[HealedBlock] = field(default_factory=list)
    unprotected_bytes: int = 0
    protected_bytes: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is damaged (or every damaged block is written back healed)
        and every checkpoint is usable."""
        return (
            not self.damaged
            and not self.unusable_checkpoints
            and all(h.written_back for h in self.healed)
        )

    @property
    def needs_repair(self) -> bool:
        """Whether ``verify(repair=True)`` would change something: move damage that is
        still in place, write healed blocks back, or add missing parity."""
        return (
            any(d.quarantined_to is None and not d.reason.startswith(MISSING) for d in self.damaged)
            or any(u.repairable and u.quarantined_to is None for u in self.unusable_checkpoints)
            or any(not h.written_back for h in self.healed)
            or self.unprotected_bytes > 0
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records_checked": self.records_checked,
            "checkpoints_checked": self.checkpoints_checked,
            "store_records_checked": self.store_records_checked,
            "cache_entries_checked": self.cache_entries_checked,
            "damaged": [d.to_dict() for d in self.damaged],
            "unusable_checkpoints": [u.to_dict() for u in self.unusable_checkpoints],
            "repaired": self.repaired,
            "rewritten": list(self.rewritten),
            "read_only": self.read_only,
            "healed": [h.to_dict() for h in self.healed],
            "unprotected_bytes": self.unprotected_bytes,
            "protected_bytes": self.protected_bytes,
        }


MISSING = "missing: "
"""How the reason of a record that is not there, although others need it, starts."""
ORPHANED = "orphaned: "
"""How the reason of pending writes whose checkpoint is gone (or can never load) starts."""
