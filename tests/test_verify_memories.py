"""``verify`` and ``repair`` of a whole store cover memory items and node cache entries.

A ``VerifiedSaver``, a ``VerifiedStore`` and a ``VerifiedCache`` share one store
(a directory, or one ``MemoryStorage``). Damage is made on purpose (a flipped byte
in a ``.item``, a ``.touch`` and an ``.entry``, an item copied to another key's
place) and what verify reports, what repair moves and what reads see afterwards is
asserted, in the API and on the command line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_verified import (
    MemoryStorage,
    VerifiedCache,
    VerifiedSaver,
    VerifiedStore,
)
from langgraph_checkpoint_verified.records.keys import (
    cache_entry_key,
    store_item_key,
    store_touch_key,
)

SCRIPT = Path(sys.executable).parent / "langgraph-verified"
CONFIG = {"configurable": {"thread_id": "t"}}
CHECKPOINT = {
    "v": 1,
    "id": "1",
    "ts": "",
    "channel_values": {},
    "channel_versions": {},
    "versions_seen": {},
}
ADA, BOB, GONE = (("users", "ada"), "prefs"), (("users", "bob"), "prefs"), (("n",), "gone")


def flip_last_byte(data: bytes) -> bytes:
    """The record with its last payload byte flipped: the frame parses, a digest fails."""
    return data[:-3] + bytes([data[-3] ^ 0x01]) + data[-2:]


class Faces:
    """A saver, a store and a cache on one set of records; each opened again on demand."""

    def __init__(self, opener: Callable[..., Any]) -> None:
        self.open = opener
        self.saver: VerifiedSaver = opener(VerifiedSaver)
        self.store: VerifiedStore = opener(VerifiedStore)
        self.cache: VerifiedCache[Any] = opener(VerifiedCache)
        self.storage = self.saver.storage


@pytest.fixture(params=["files", "memory"])
def faces(request: pytest.FixtureRequest, tmp_path: Path) -> Faces:
    if request.param == "memory":
        memory = MemoryStorage()
        made = Faces(lambda face, **kwargs: face(storage=memory, **kwargs))
    else:
        made = Faces(lambda face, **kwargs: face(tmp_path / "store", **kwargs))
    made.saver.put(CONFIG, CHECKPOINT, {}, {})
    made.store.put(*ADA, {"theme": "dark"}, ttl=60)
    made.store.put(*BOB, {"theme": "light"})
    made.store.get(*ADA, refresh_ttl=True)  # writes ada's .touch
    made.cache.set({(("n",), "k"): ("cached", None), (GONE[0], GONE[1]): ("x", None)})
    return made


def damage(faces: Faces) -> dict[str, bytes]:
    """Damage an item, a touch and a cache entry, and copy an item to another's place.

    Returns:
        The bytes now at each damaged key.
    """
    storage = faces.storage
    damaged = {}
    for key in (store_item_key(*ADA), store_touch_key(*ADA), cache_entry_key(("n",), "k")):
        damaged[key] = flip_last_byte(storage.read(key))
        storage.write(key, damaged[key])
    # intact bytes, at the wrong key: only the identity check catches it
    copied = storage.read(store_item_key(*BOB))
    storage.write(store_item_key(("users", "eve"), "prefs"), copied)
    damaged[store_item_key(("users", "eve"), "prefs")] = copied
    return damaged


def test_an_intact_store_verifies_and_counts_every_record(faces: Faces) -> None:
    report = faces.saver.verify()
    assert report.ok
    # 1 checkpoint, 2 items, 1 touch, 2 cache entries
    assert report.records_checked == 6
    assert (report.checkpoints_checked, report.store_items_checked) == (1, 2)
    assert report.cache_entries_checked == 2
    assert report.to_dict()["store_items_checked"] == 2


def test_verify_reports_each_damaged_record_and_moves_nothing(faces: Faces) -> None:
    damaged = damage(faces)
    report = faces.saver.verify()
    assert not report.ok and report.needs_repair
    found = {d.key: d for d in report.damaged}
    assert set(found) == set(damaged)
    assert {key: d.kind for key, d in found.items()} == {
        store_item_key(*ADA): "store_item",
        store_touch_key(*ADA): "store_touch",
        cache_entry_key(("n",), "k"): "cache_entry",
        store_item_key(("users", "eve"), "prefs"): "store_item",
    }
    assert (
        "belongs at store/users/bob/prefs.item"
        in found[store_item_key(("users", "eve"), "prefs")].reason
    )
    assert all(d.quarantined_to is None for d in report.damaged)
    assert report.records_checked == 7 and report.store_items_checked == 3
    assert not report.unusable_checkpoints
    for key, data in damaged.items():
        assert faces.storage.read(key) == data  # verify only looks


def test_one_threads_verify_leaves_memories_and_cache_alone(faces: Faces) -> None:
    damage(faces)
    report = faces.saver.verify("t")
    assert report.ok and report.records_checked == 1
    assert report.store_items_checked == report.cache_entries_checked == 0


def test_repair_moves_damage_aside_byte_for_byte_and_reads_then_miss(faces: Faces) -> None:
    damaged = damage(faces)
    report = faces.saver.verify(repair=True)
    assert {d.key for d in report.damaged} == set(damaged)
    quarantine = faces.storage.location("quarantine")
    for found in report.damaged:
        assert found.quarantined_to is not None and found.quarantined_to.startswith(quarantine)
        assert faces.storage.read(found.key) is None
        moved = found.quarantined_to[len(faces.storage.location("")) :].lstrip("/")
        assert faces.storage.read(moved) == damaged[found.key]
        # the reason a read would find, as for a checkpoint
        reason = faces.saver.reporter.quarantined_reason(found.key)
        assert reason is not None and reason["kind"] == found.kind
    assert faces.saver.verify().ok
    assert faces.store.verify().ok
    store, cache = faces.open(VerifiedStore), faces.open(VerifiedCache)
    assert store.get(*ADA) is None  # quarantined: missing, as a damaged read leaves it
    assert store.get(*BOB).value == {"theme": "light"}
    assert store.get(("users", "eve"), "prefs") is None
    assert cache.get([(("n",), "k"), GONE]) == {GONE: "x"}
    assert store.stats.damaged_records == cache.stats.damaged_records == 0


def test_repair_and_a_read_that_finds_the_damage_agree(faces: Faces) -> None:
    """What repair does to a damaged item is what a read that finds it does."""
    key = store_item_key(*ADA)
    faces.storage.write(key, flip_last_byte(faces.storage.read(key)))
    assert faces.open(VerifiedStore).get(*ADA) is None  # the read quarantined it
    report = faces.saver.verify(repair=True)
    assert report.ok and not report.damaged
    assert len(faces.saver.reporter.quarantined_under("store/")) == 1


def test_the_store_verifies_and_repairs_itself(faces: Faces) -> None:
    damage(faces)
    report = faces.store.verify()
    assert {d.kind for d in report.damaged} == {"store_item", "store_touch"}
    assert report.cache_entries_checked == 0 and report.checkpoints_checked == 0
    repaired = faces.store.verify(repair=True)
    assert all(d.quarantined_to for d in repaired.damaged)
    assert faces.store.verify().ok
    # the cache's damage is the saver's to find still
    assert [d.kind for d in faces.saver.verify().damaged] == ["cache_entry"]


def test_repair_with_quarantine_off_moves_nothing(faces: Faces) -> None:
    damaged = damage(faces)
    report = faces.open(VerifiedSaver, quarantine=False).verify(repair=True)
    assert {d.key for d in report.damaged} == set(damaged)
    assert all(d.quarantined_to is None for d in report.damaged)
    assert all(faces.storage.read(key) == data for key, data in damaged.items())


# -- the command line ---------------------------------------------------------------


def console(*argv: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *map(str, argv)], capture_output=True, text=True, timeout=120
    )


def test_verify_repair_and_stats_on_the_command_line(tmp_path: Path) -> None:
    made = Faces(lambda face, **kwargs: face(tmp_path / "store", **kwargs))
    made.saver.put(CONFIG, CHECKPOINT, {}, {})
    made.store.put(*ADA, {"theme": "dark"})
    made.store.put(*BOB, {"theme": "light"})
    made.cache.set({(("n",), "k"): ("cached", None)})
    store = tmp_path / "store"

    stats = json.loads(console("stats", store, "--json").stdout)
    assert (stats["threads"], stats["store_items"], stats["cache_entries"]) == (1, 2, 1)
    assert stats["store_bytes"] == sum(
        p.stat().st_size for p in (store / "store").rglob("*") if p.is_file()
    )
    assert stats["cache_bytes"] == (store / "cache" / "n" / "k.entry").stat().st_size

    item, entry = store / "store/users/ada/prefs.item", store / "cache/n/k.entry"
    item.write_bytes(flip_last_byte(item.read_bytes()))
    entry.write_bytes(flip_last_byte(entry.read_bytes()))
    done = console("verify", store)
    assert done.returncode == 1, done.stderr
    assert "checked 4 records (1 checkpoints, 2 memory items, 1 cache entries)" in done.stdout
    assert f"store_item  {item}" in done.stdout and f"cache_entry  {entry}" in done.stdout
    assert f"langgraph-verified repair {store}" in done.stdout

    as_json = json.loads(console("verify", store, "--json").stdout)
    assert sorted(d["kind"] for d in as_json["damaged"]) == ["cache_entry", "store_item"]

    done = console("repair", store)
    assert done.returncode == 0, done.stderr
    assert f"moved {item}" in done.stdout and f"moved {entry}" in done.stdout
    assert "quarantined 2 record(s)" in done.stdout and "the store verifies now" in done.stdout
    assert not item.exists() and not entry.exists()
    assert console("verify", store).returncode == 0
    stats = json.loads(console("stats", store, "--json").stdout)
    assert (stats["store_items"], stats["cache_entries"], stats["quarantined_records"]) == (
        1,
        0,
        2,
    )
    assert VerifiedStore(store).get(*ADA) is None
