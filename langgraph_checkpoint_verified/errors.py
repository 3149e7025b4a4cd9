"""Exceptions. All derive from ``VerifiedSaverError``.

Each carries what a person needs to act on it: which record, where it is, what
was expected and what was found, and what to do next.
"""

from __future__ import annotations


class VerifiedSaverError(Exception):
    """Base class of every error this package raises on purpose."""


class RecordDamagedError(VerifiedSaverError):
    """A stored record failed verification.

    The read paths of ``VerifiedSaver`` never raise it: they report the damage
    (as a ``Damage``) and fall back. It reaches callers that decode records
    themselves.

    Attributes:
        reason: Which check failed, e.g. ``"record checksum mismatch"``.
        location: Where the record lives (a file path or a memory key), when known.
        identity: What the record says it is, when its header verified before another
            check failed (``Codec.read_header`` would find it again), else ``None``.

    Example:
        >>> from langgraph_checkpoint_verified.records.format import Codec, RecordKind
        >>> record = Codec().encode(RecordKind.WRITES, {"thread_id": "t"}, b"payload")
        >>> try:
        ...     Codec().decode(record[:-1] + b"?", RecordKind.WRITES, {"thread_id": "t"})
        ... except RecordDamagedError as error:
        ...     print(error.reason)
        record checksum mismatch
    """

    def __init__(
        self,
        reason: str,
        *,
        location: str | None = None,
        identity: dict[str, str] | None = None,
    ) -> None:
        self.reason = reason
        self.location = location
        self.identity = identity
        where = f" at {location}" if location else ""
        super().__init__(f"damaged record{where}: {reason}")


class NewerFormatError(VerifiedSaverError):
    """A record verified, but holds something only a newer version of this package reads.

    Not damage: the record is whole, so it is neither quarantined nor skipped (skipping
    it would resume a thread from an older checkpoint than its newest). Upgrade
    ``langgraph-checkpoint-verified`` in every process that reads the store.

    Attributes:
        reason: What this version does not know, e.g. ``"value encoding 3"``.

    Example:
        >>> error = NewerFormatError("value encoding 3")
        >>> error.reason, str(error).startswith("a record holds value encoding 3, which a newer")
        ('value encoding 3', True)
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"a record holds {reason}, which a newer version of langgraph-checkpoint-verified"
            " wrote: upgrade it in every process that reads this store"
        )


class CheckpointDamagedError(VerifiedSaverError):
    """A checkpoint that must be read exactly does not verify.

    Raised in ``strict`` mode when a requested checkpoint does not verify, and
    always when a ``DeltaChannel``'s history runs through a checkpoint (or a
    pending-writes record) that cannot be used: there is no fallback then.

    Attributes:
        thread_id: Thread of the checkpoint.
        checkpoint_ns: Namespace of the checkpoint.
        checkpoint_id: The checkpoint that cannot be used.
        reason: What failed, and in which record.
    """

    def __init__(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        reason: str,
        *,
        advice: str | None = None,
    ):
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.reason = reason
        if advice is None:
            advice = (
                "Without strict=True the saver falls back to the nearest ancestor that "
                "verifies; run `langgraph-verified verify` on the store for a full report."
            )
        super().__init__(
            f"checkpoint {checkpoint_id!r} of thread {thread_id!r} (namespace "
            f"{checkpoint_ns!r}) does not verify: {reason}. {advice}"
        )


class StoreKeyError(VerifiedSaverError):
    """The store's key does not match the one given (or one is missing).

    Raised when a saver is opened, before anything is read, so a forgotten or
    wrong key never makes the whole store look damaged.

    Attributes:
        store_is_keyed: Whether the store was written with a key.
        marker: Location of the record that says so.
    """

    def __init__(self, message: str, *, store_is_keyed: bool, marker: str) -> None:
        self.store_is_keyed = store_is_keyed
        self.marker = marker
        super().__init__(f"{message} (store marker {marker})")


class StoreWriteError(VerifiedSaverError):
    """A write could not be made durable (disk full, permission denied, ...).

    Nothing was acknowledged, the store stays readable, and everything written
    before is intact. The original ``OSError`` is chained as ``__cause__``.

    Attributes:
        location: The record that was being written.
        errno: The operating system's error number.
    """

    def __init__(self, location: str, error: OSError) -> None:
        self.location = location
        self.errno = error.errno
        super().__init__(
            f"could not write {location}: {error.strerror or error}. Nothing was saved for "
            f"this step; free disk space or fix permissions, then resume the thread."
        )


class StoreUnavailableError(VerifiedSaverError):
    """The store could not be used: an object store that did not answer (after retries),
    or answered that the bucket is not there.

    Nothing was read or acknowledged: an unreachable store is never taken for
    a damaged or missing record, so no read falls back to an older checkpoint
    because of it. The original error is chained as ``__cause__``.

    Attributes:
        operation: ``"read"``, ``"write"``, ``"list"`` or ``"delete"``.
        location: The record (or prefix) it was for.
    """

    def __init__(self, operation: str, location: str, error: BaseException | str) -> None:
        self.operation = operation
        self.location = location
        super().__init__(
            f"could not {operation} {location}: {error}. Nothing was read or saved by this "
            f"call: check the endpoint, the bucket, the network and the credentials, then retry."
        )


class ToolOutcomeUnknownError(VerifiedSaverError):
    """An at-most-once tool started before a crash and its outcome was never recorded.

    Attributes:
        tool_name: The tool.
        tool_call_id: The call whose outcome is unknown.
        idempotency_key: The key the tool was given for that call.
    """

    def __init__(self, tool_name: str, tool_call_id: str, idempotency_key: str) -> None:
        self.tool_name = tool_name
        self.tool_call_id = tool_call_id
        self.idempotency_key = idempotency_key
        super().__init__(
            f"tool {tool_name!r} (call {tool_call_id!r}, idempotency key "
            f"{idempotency_key!r}) is at-most-once and started before an interruption, but "
            f"its result was never recorded: it may or may not have taken effect. It was "
            f"not run again; check the external system for that key before retrying."
        )
