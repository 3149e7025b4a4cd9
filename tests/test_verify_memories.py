"""``verify`` and ``repair`` of a whole store cover memory items and node cache entries.

A ``VerifiedSaver``, a ``VerifiedStore`` and a ``VerifiedCache`` share one store
(a directory, or one ``MemoryStorage``). Damage is made on purpose (a flipped byte
in the batch of an item's put, in the batch of a TTL refresh and in an ``.entry``, a
batch copied to another batch's place) and what verify reports, what repair moves
and what reads see afterwards is asserted, in the API and on the command line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from logtools import lose_parity, view_log

from langgraph_checkpoint_verified import (
    MemoryStorage,
    VerifiedCache,
    VerifiedSaver,
    VerifiedStore,
)
from langgraph_checkpoint_verified.records.keys import batch_key, cache_entry_key

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
COPY = batch_key("users", "2999999999999999999-c0ffee")
"""Where ``damage`` copies bob's batch: a name of the same label, after every other."""


def flip_last_byte(data: bytes) -> bytes:
    """The record with its last payload byte flipped: the frame parses, a digest fails."""
    return data[:-3] + bytes([data[-3] ^ 0x01]) + data[-2:]


def batch_holding(store: VerifiedStore, namespace: tuple[str, ...], key: str) -> str:
    """The key of the batch record whose version of the item ``store`` reads."""
    version = store.logs.current(namespace[0]).items[(namespace, key)].version
    return batch_key(namespace[0], version.rsplit("/", 1)[0])


class Faces:
    """A saver, a store and a cache on one set of records; each opened again on demand."""

    def __init__(self, opener: Callable[..., Any]) -> None:
        self.open = opener
        self.saver: VerifiedSaver = opener(VerifiedSaver)
        self.store: VerifiedStore = opener(VerifiedStore)
        self.cache: VerifiedCache[Any] = opener(VerifiedCache)
        self.storage = self.saver.storage

    def batches(self) -> dict[str, str]:
        """The batch records the fixture wrote: ada's put, bob's put, and the touch of
        ada's TTL refresh (each ``batch`` call is one record per first label)."""
        store = self.open(VerifiedStore)
        ada, bob = batch_holding(store, *ADA), batch_holding(store, *BOB)
        [touch] = [k for k in self.storage.walk("memories") if k not in (ada, bob)]
        return {"ada": ada, "bob": bob, "touch": touch}


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
    made.store.get(*ADA, refresh_ttl=True)  # writes a batch with ada's touch
    made.cache.set({(("n",), "k"): ("cached", None), (GONE[0], GONE[1]): ("x", None)})
    return made


def damage(faces: Faces) -> dict[str, bytes]:
    """Damage ada's put, the touch of her refresh and a cache entry, and copy bob's put
    to another batch's place.

    Returns:
        The bytes now at each damaged key.
    """
    storage = faces.storage
    batches = faces.batches()
    damaged = {}
    for key in (batches["ada"], batches["touch"], cache_entry_key(("n",), "k")):
        damaged[key] = flip_last_byte(storage.read(key))
        storage.write(key, damaged[key])
    # intact bytes, at the wrong key: only the identity check catches it
    copied = storage.read(batches["bob"])
    storage.write(COPY, copied)
    damaged[COPY] = copied
    return damaged


def test_an_intact_store_verifies_and_counts_every_record(faces: Faces) -> None:
    report = faces.saver.verify()
    assert report.ok
    # 1 checkpoint; 3 batches (2 puts, 1 touch); 2 cache entries
    assert report.records_checked == 6
    assert (report.checkpoints_checked, report.store_records_checked) == (1, 3)
    assert report.cache_entries_checked == 2
    assert report.to_dict()["store_records_checked"] == 3


def test_verify_reports_each_damaged_record_and_moves_nothing(faces: Faces) -> None:
    batches = faces.batches()
    damaged = damage(faces)
    report = faces.saver.verify()
    assert not report.ok and report.needs_repair
    found = {d.key: d for d in report.damaged}
    assert set(found) == set(damaged)
    assert {key: d.kind for key, d in found.items()} == {
        batches["ada"]: "store_batch",
        batches["touch"]: "store_batch",
        cache_entry_key(("n",), "k"): "cache_entry",
        COPY: "store_batch",
    }
    assert f"belongs at {batches['bob']}" in found[COPY].reason
    assert all(d.quarantined_to is None for d in report.damaged)
    assert report.records_checked == 7 and report.store_records_checked == 4
    assert not report.unusable_checkpoints
    for key, data in damaged.items():
        assert faces.storage.read(key) == data  # verify only looks


def test_one_threads_verify_leaves_memories_and_cache_alone(faces: Faces) -> None:
    damage(faces)
    report = faces.saver.verify("t")
    assert report.ok and report.records_checked == 1
    assert report.store_records_checked == report.cache_entries_checked == 0


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
    assert [(i.namespace, i.key) for i in store.search(("users",))] == [BOB]  # once
    assert cache.get([(("n",), "k"), GONE]) == {GONE: "x"}
    assert store.stats.damaged_records == cache.stats.damaged_records == 0


def test_repair_and_a_read_that_finds_the_damage_agree(faces: Faces) -> None:
    """What repair does to a damaged batch is what a read that finds it does."""
    key = faces.batches()["ada"]
    faces.storage.write(key, flip_last_byte(faces.storage.read(key)))
    assert faces.open(VerifiedStore).get(*ADA) is None  # the read quarantined it
    report = faces.saver.verify(repair=True)
    assert report.ok and not report.damaged
    assert len(faces.saver.reporter.quarantined_under("memories/")) == 1


def test_the_store_verifies_and_repairs_itself(faces: Faces) -> None:
    damage(faces)
    report = faces.store.verify()
    assert {d.kind for d in report.damaged} == {"store_batch"} and len(report.damaged) == 3
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
    ada = batch_holding(made.store, *ADA)

    stats = json.loads(console("stats", store, "--json").stdout)
    assert (stats["threads"], stats["store_batches"], stats["cache_entries"]) == (1, 2, 1)
    assert stats["store_bytes"] == sum(
        p.stat().st_size for p in (store / "memories").rglob("*") if p.is_file()
    )
    assert stats["cache_bytes"] == (store / "cache" / "n" / "k.entry").stat().st_size

    # ada's batch damaged on disk, beyond what the log's parity rebuilds
    log, entry = store / "memories" / "users" / "log", store / "cache" / "n" / "k.entry"
    where = view_log(log.read_bytes(), "memories/users").entry(ada)
    lose_parity(log)
    data = bytearray(log.read_bytes())
    data[where.data_offset + where.data_size - 3] ^= 0x01
    log.write_bytes(bytes(data))
    entry.write_bytes(flip_last_byte(entry.read_bytes()))
    item = f"{log}@{where.offset} ({ada})"
    done = console("verify", store)
    assert done.returncode == 1, done.stderr
    assert "checked 4 records (1 checkpoints, 2 memory records, 1 cache entries)" in done.stdout
    assert f"store_batch  {item}" in done.stdout and f"cache_entry  {entry}" in done.stdout
    assert f"langgraph-verified repair {store}" in done.stdout

    as_json = json.loads(console("verify", store, "--json").stdout)
    assert sorted(d["kind"] for d in as_json["damaged"]) == ["cache_entry", "store_batch"]

    done = console("repair", store)
    assert done.returncode == 0, done.stderr
    assert f"moved {item}" in done.stdout and f"moved {entry}" in done.stdout
    assert "quarantined 2 record(s)" in done.stdout and "the store verifies now" in done.stdout
    assert VerifiedStore(store).storage.read(ada) is None and not entry.exists()
    assert console("verify", store).returncode == 0
    stats = json.loads(console("stats", store, "--json").stdout)
    assert (stats["store_batches"], stats["cache_entries"], stats["quarantined_records"]) == (
        1,
        0,
        2,
    )
    assert VerifiedStore(store).get(*ADA) is None
    assert VerifiedStore(store).get(*BOB).value == {"theme": "light"}
