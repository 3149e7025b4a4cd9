"""Two savers on one store: what one rewrites, the other must not trust from memory."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config

from langgraph_checkpoint_verified import MemoryStorage, VerifiedSaver


@pytest.fixture(params=["files", "memory"])
def two_savers(request, tmp_path):
    if request.param == "files":
        return VerifiedSaver(tmp_path / "store"), VerifiedSaver(tmp_path / "store")
    storage = MemoryStorage()
    return VerifiedSaver(storage=storage), VerifiedSaver(storage=storage)


def checkpoint(n: int):
    return generate_checkpoint(
        channel_values={"big": "unchanged", "n": n}, channel_versions={"big": 1, "n": n}
    )


@pytest.mark.parametrize("maintenance", ["delete_for_runs", "prune"])
def test_put_after_another_saver_rewrote_the_parent(two_savers, maintenance):
    """`big` lives in the first checkpoint's record; the other saver deletes that record
    (moving `big` into the survivor). The next put must not point at the deleted record."""
    writer, maintainer = two_savers
    first = writer.put(generate_config("t"), checkpoint(1), {"run_id": "r1"}, {"big": 1, "n": 1})
    second = writer.put(first, checkpoint(2), {"run_id": "r2"}, {"n": 2})
    if maintenance == "delete_for_runs":
        maintainer.delete_for_runs(["r1"])
    else:
        maintainer.prune(["t"], strategy="keep_latest")

    third = writer.put(second, checkpoint(3), {"run_id": "r2"}, {"n": 3})

    loaded = writer.get_tuple(third)
    assert loaded.config["configurable"]["checkpoint_id"] == third["configurable"]["checkpoint_id"]
    assert loaded.checkpoint["channel_values"] == {"big": "unchanged", "n": 3}
    assert maintainer.get_tuple(generate_config("t")).checkpoint["channel_values"]["n"] == 3
    assert writer.verify().ok
    assert writer.stats.fallbacks == 0


def test_a_keyed_store_refuses_to_open_without_its_key_or_with_another(tmp_path):
    """Without the marker check every record would look damaged and be quarantined."""
    from langgraph_checkpoint_verified import StoreKeyError

    key = b"k" * 32
    store = tmp_path / "store"
    first = VerifiedSaver(store, key=key)
    first.put(generate_config("t"), checkpoint(1), {}, {"big": 1, "n": 1})
    files = sorted(p.name for p in store.rglob("*"))

    with pytest.raises(StoreKeyError, match="written with a key") as missing:
        VerifiedSaver(store)
    assert missing.value.store_is_keyed
    with pytest.raises(StoreKeyError, match="key does not match"):
        VerifiedSaver(store, key=b"x" * 32)
    with pytest.raises(StoreKeyError, match="written without a key"):
        VerifiedSaver(tmp_path / "plain").close() or VerifiedSaver(tmp_path / "plain", key=key)

    assert sorted(p.name for p in store.rglob("*")) == files  # nothing moved
    reopened = VerifiedSaver(store, key=key)
    assert reopened.get_tuple(generate_config("t")).checkpoint["channel_values"]["n"] == 1


def test_a_damaged_marker_of_a_plain_store_is_set_aside_and_rewritten(tmp_path):
    store = tmp_path / "store"
    VerifiedSaver(store).put(generate_config("t"), checkpoint(1), {}, {"big": 1, "n": 1})
    marker = store / "store.marker"
    marker.write_bytes(marker.read_bytes()[:-1] + b"?")

    saver = VerifiedSaver(store)

    assert saver.stats.quarantined_records == 1
    assert saver.get_tuple(generate_config("t")).checkpoint["channel_values"]["n"] == 1
    VerifiedSaver(store)  # the new marker verifies
    assert saver.stats.quarantined_records == 1


def test_a_keyed_store_without_its_marker_is_checked_against_its_records(tmp_path):
    """A copy of threads/ without store.marker must not be opened with the wrong key
    (which would take every record for damage and quarantine the store)."""
    from langgraph_checkpoint_verified import StoreKeyError

    key = b"k" * 32
    store = tmp_path / "store"
    VerifiedSaver(store, key=key).put(generate_config("t"), checkpoint(1), {}, {"big": 1, "n": 1})
    (store / "store.marker").unlink()

    with pytest.raises(StoreKeyError, match="written with a key"):
        VerifiedSaver(store)
    with pytest.raises(StoreKeyError, match="does not verify"):
        VerifiedSaver(store, key=b"x" * 32)
    assert not (store / "store.marker").exists()
    assert not (store / "quarantine").exists()
    saver = VerifiedSaver(store, key=key)
    assert saver.get_tuple(generate_config("t")).checkpoint["channel_values"]["n"] == 1
    assert (store / "store.marker").exists()
