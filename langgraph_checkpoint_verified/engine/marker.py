"""The store marker: one small record that says whether a store is keyed, read at open.

Opening a keyed store without its key, or with another key, would make every
record look damaged, and reads would quarantine the whole store. The marker
turns that into one clear ``StoreKeyError`` when the saver opens. A store
without a marker (new, or copied without it) is judged by its first records.
"""

from __future__ import annotations

from langgraph_checkpoint_verified.engine.damage import CANNOT_WRITE_ERRNOS, DamageReporter
from langgraph_checkpoint_verified.errors import RecordDamagedError, StoreKeyError, StoreWriteError
from langgraph_checkpoint_verified.records.format import Codec, RecordKind, pack
from langgraph_checkpoint_verified.storage.base import Storage
from langgraph_checkpoint_verified.storage.memory import MemoryStorage

STORE_MARKER_KEY = "store.marker"
"""Key of the record saying whether the store is keyed (checked at open, one read)."""
MARKER_UNCOMPRESSED_BELOW = 1024
"""The marker's content is a few bytes: stored as it is, it is verified at every open
without a zstd context (which costs more to make than the rest of the check)."""


def check_key_against_records(storage: Storage, codec: Codec, sample: int = 3) -> None:
    """Raise ``StoreKeyError`` if the first few records say the key is wrong.

    A header that verifies settles it. Records whose headers all fail are
    judged by their keyed flag; an unkeyed store whose sample is damaged is
    left to the normal read paths.
    """
    flags = []
    for key in storage.walk("threads"):
        try:
            data = storage.read(key)
        except OSError:
            continue
        if data is None:
            continue
        try:
            codec.read_header(data)
            return
        except RecordDamagedError:
            flags.append(Codec.keyed_flag(data))
        if len(flags) >= sample:
            break
    if not flags:
        return
    where = storage.location("threads")
    if not codec.key and any(flags):
        raise StoreKeyError(
            "this store's records were written with a key: pass VerifiedSaver(..., key=...)",
            store_is_keyed=True,
            marker=where,
        )
    if codec.key and not any(flags):
        raise StoreKeyError(
            "this store's records were written without a key: open it without key=",
            store_is_keyed=False,
            marker=where,
        )
    if codec.key:
        raise StoreKeyError(
            "the key does not verify any of this store's records",
            store_is_keyed=True,
            marker=where,
        )


def check_store_marker(storage: Storage, codec: Codec, reporter: DamageReporter) -> None:
    """Read (or create) the one small record that says how the store is protected.

    Opening a keyed store without its key, or with another key, would make
    every record look damaged, and reads would quarantine the whole store.
    The marker turns that into one clear error at open time.
    """
    if isinstance(storage, MemoryStorage):
        return  # born with this saver: it cannot have been written with another key

    def write_marker(*, replace: bool) -> bool | None:
        # None: this process cannot write to the store. A store may be read-only
        # for good reasons (a backup mounted read-only, a copy made to look at):
        # it still opens, and the next saver that can write gives it its marker.
        marker = codec.encode(
            RecordKind.STORE_MARKER,
            {"store": "marker"},
            pack({"v": 1, "keyed": bool(codec.key)}),
            uncompressed_below=MARKER_UNCOMPRESSED_BELOW,
        )
        try:
            return storage.write(STORE_MARKER_KEY, marker, replace=replace)
        except StoreWriteError as exc:
            if exc.errno not in CANNOT_WRITE_ERRNOS:
                raise
            return None

    data = storage.read(STORE_MARKER_KEY)
    if data is None:
        # no marker (a new store, or one copied without it): the records themselves
        # must agree with the key before a marker vouches for it
        check_key_against_records(storage, codec)
        if not reporter.quarantine_enabled:
            return  # a saver that only looks (quarantine=False) writes nothing
        if write_marker(replace=False) is not False:
            return  # made, or the store cannot be written: the records vouched for the key
        data = storage.read(STORE_MARKER_KEY)  # another process made it first
        if data is None:
            return
    try:
        codec.decode(data, RecordKind.STORE_MARKER, {"store": "marker"})
        return
    except RecordDamagedError as exc:
        reason = exc.reason
        error = exc
    keyed = Codec.keyed_flag(data)
    where = storage.location(STORE_MARKER_KEY)
    if keyed and not codec.key:
        raise StoreKeyError(
            "this store was written with a key: pass VerifiedSaver(..., key=...)",
            store_is_keyed=True,
            marker=where,
        )
    if keyed is False and codec.key:
        raise StoreKeyError(
            "this store was written without a key: open it without key=",
            store_is_keyed=False,
            marker=where,
        )
    if codec.key:
        raise StoreKeyError(
            f"the key does not match this store's ({reason}). If you are sure the key is "
            f"right, the marker may be damaged: move it aside and open again; the key is "
            f"then checked against the records themselves",
            store_is_keyed=True,
            marker=where,
        )
    # an unkeyed marker that does not verify is plain damage: set it aside, write anew
    reporter.damaged(STORE_MARKER_KEY, error, data)
    if not reporter.quarantine_enabled:
        return  # reported; a saver that only looks leaves it as it is
    write_marker(replace=True)
