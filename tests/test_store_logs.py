"""``VerifiedStore``'s logs: one log of verified batches per first label.

What the layout promises, on every backend where it applies (the ``open_store``
fixture of ``test_store``: files, memory, S3): a damaged batch is reported, moved
aside, and the items it changed read as their earlier version; a put on files is
one append and one sync; a get costs the same whatever the store holds, and sees
what another process wrote; compaction keeps every live item exactly; a store of
the older layout (one record per item under ``store/``) is moved into the logs; a
process killed mid-put loses no acknowledged item; one flipped bit in a log heals;
a search after damage never returns a wrong value.

Damage is made on purpose: on files, in the log's bytes beyond what its parity
rebuilds (``logtools.lose_parity``), elsewhere by writing flipped bytes at the
batch's key. Time is moved with ``time_machine``; processes are waited for by what
they print, never by sleeping.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from faultfs import FaultFS, Tally
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import PutOp
from logtools import lose_parity, view_log
from test_store import (  # noqa: F401 (open_store is a fixture)
    INDEX,
    T0,
    batch_of,
    batches,
    embed,
    flip_byte,
    items,
    open_store,
    read_batch,
)

from langgraph_checkpoint_verified import Damage, FileStorage, MemoryStorage, VerifiedStore
from langgraph_checkpoint_verified.records.format import RecordKind, pack
from langgraph_checkpoint_verified.records.keys import store_item_key, store_touch_key
from langgraph_checkpoint_verified.storage.log.parity import STRIPE_SIZE
from langgraph_checkpoint_verified.store.batches import PACK_ITEMS
from langgraph_checkpoint_verified.store.logs import COMPACT_AFTER


def damage_batch(store: VerifiedStore, key: str) -> None:
    """Make the batch record at ``key`` fail verification, beyond what parity rebuilds.

    On files the byte is flipped in the label's log itself (its parity removed
    first, as if the parity of that stripe were damaged too); elsewhere flipped
    bytes are written at the key.
    """
    storage = store.storage
    if isinstance(storage, FileStorage):
        label_dir = key.rsplit("/", 1)[0]
        log = storage.root / label_dir / "log"
        view = view_log(log.read_bytes(), label_dir)
        assert not view.is_last(key), "damage to the log's last entry is a torn tail"
        entry = view.entry(key)
        lose_parity(log)
        data = bytearray(log.read_bytes())
        data[entry.data_offset + entry.data_size // 2] ^= 0x10
        log.write_bytes(bytes(data))
    else:
        data = storage.read(key)
        storage.write(key, flip_byte(data, len(data) // 2))


def counted(storage: Any) -> Counter[str]:
    """Counts the calls made to ``storage``'s record methods from now on (one counter per
    storage object, however often it is asked for)."""
    calls = storage.__dict__.get("_counted_calls")
    if calls is not None:
        return calls
    calls = storage.__dict__["_counted_calls"] = Counter()
    for name in ("read", "list", "walk", "greatest_name", "write", "write_many", "delete"):
        real = getattr(storage, name)

        def wrapper(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kwargs)

        setattr(storage, name, wrapper)
    return calls


# -- 1. a damaged batch: reported, moved aside, its items read as before ----------------


def test_a_damaged_batch_is_quarantined_and_its_items_read_as_their_earlier_version(
    open_store,  # noqa: F811 (the fixture)
):
    writer = open_store()
    ns = ("users", "ada")
    with time_machine.travel(T0, tick=False) as clock:
        writer.batch([PutOp(ns, "k", {"v": 1}), PutOp(ns, "gone", {"v": 1})])
        clock.shift(10)
        writer.batch(  # the batch damaged below
            [PutOp(ns, "k", {"v": 2}), PutOp(ns, "only", {"v": 2}), PutOp(ns, "gone", {"v": 2})]
        )
        clock.shift(10)
        writer.delete(ns, "gone")  # a later batch, undamaged
        clock.shift(10)
        writer.put(("users", "bob"), "k", {"v": 3})  # the same label's log, after it
    damaged = batch_of(writer, ns, "k")
    assert damaged == batch_of(writer, ns, "only")
    damage_batch(writer, damaged)

    seen: list[Damage] = []
    reader = open_store(on_corruption=seen.append)
    k = reader.get(ns, "k")
    assert k.value == {"v": 1}
    assert k.created_at == k.updated_at == T0  # the earlier version itself, times and all
    assert reader.get(ns, "only") is None  # no earlier version: missing
    assert reader.get(ns, "gone") is None  # the later delete still wins over version 1
    assert reader.get(("users", "bob"), "k").value == {"v": 3}
    found = {(tuple(i.namespace), i.key): i.value for i in reader.search(("users",))}
    assert found == {(ns, "k"): {"v": 1}, (("users", "bob"), "k"): {"v": 3}}

    assert [(d.kind, d.key, d.healed) for d in seen] == [("store_batch", damaged, False)]
    assert seen[0].quarantined_to is not None
    assert reader.storage.read(damaged) is None and damaged not in batches(reader)
    moved = [k for k in reader.storage.walk("quarantine") if k.endswith(".record")]
    assert len(moved) == 1
    assert (reader.stats.damaged_records, reader.stats.quarantined_records) == (1, 1)

    # moved aside, it is found once: the next store reads the same and reports nothing
    again = open_store(on_corruption=seen.append)
    assert again.get(ns, "k").value == {"v": 1}
    assert again.get(ns, "only") is None and again.get(ns, "gone") is None
    assert len(seen) == 1
    again.put(ns, "only", {"v": "new"})
    assert open_store().get(ns, "only").value == {"v": "new"}


# -- 2. a put on files: one append, one sync --------------------------------------------


@pytest.mark.parametrize("fsync", [True, False])
def test_a_put_is_one_append_and_one_sync(tmp_path, fsync):
    root = tmp_path / "store"
    root.mkdir()
    with FaultFS.counting(root) as disk:
        store = VerifiedStore(root, fsync=fsync)
        # each label's log, its parity and its lock are made by its first put
        store.put(("users", "warm"), "k", {"v": 0})
        store.put(("teams", "warm"), "k", {"v": 0})
        puts = []
        for i in range(5):
            with disk.capture() as ops:
                store.put(("users", str(i)), "k", {"v": i, "text": "x" * 100 * i})
            puts.append(ops)
        with disk.capture() as many:  # one batch of 100 puts: still one record
            store.batch([PutOp(("users", "many"), str(i), {"v": i}) for i in range(100)])
        with disk.capture() as two:  # one batch over two labels: one record each
            store.batch([PutOp(("users", "x"), "k", {"v": 1}), PutOp(("teams", "y"), "k", {})])
    assert not disk.unmodelled
    syncs = 1 if fsync else 0
    for ops in [*puts, many]:
        tally = Tally.of(ops)
        assert (tally.file_syncs, tally.dir_syncs, tally.writes) == (syncs, 0, 2), ops
        assert tally.new_files == tally.new_dirs == tally.renames == tally.links == 0, ops
        assert [(op.kind, op.path) for op in ops] == [
            ("write", "memories/users/log"),
            *([("sync", "memories/users/log")] if fsync else []),
            ("write", "memories/users/log.parity"),  # never synced on its own
        ]
    tally = Tally.of(two)
    assert (tally.file_syncs, tally.dir_syncs, tally.writes, tally.new_files) == (
        2 * syncs,
        0,
        4,
        0,
    )
    assert VerifiedStore(root).get(("users", "many"), "99").value == {"v": 99}


# -- 3. a get: the same cost whatever the store holds; another process's puts seen -------


def test_a_get_costs_the_same_whatever_the_store_holds(open_store):  # noqa: F811 (the fixture)
    store = open_store(fsync=False)
    ns = ("users", "ada")
    store.put(ns, "k0", {"i": 0})
    assert store.get(ns, "k0").value == {"i": 0}  # warm
    calls = counted(store.storage)
    calls.clear()
    assert store.get(ns, "k0").value == {"i": 0}
    small = dict(calls)

    for start in range(1, 2000, 50):
        store.batch([PutOp(ns, f"k{i}", {"i": i}) for i in range(start, start + 50)])
    assert len(batches(store, "users")) == 41
    calls.clear()
    assert store.get(ns, "k0").value == {"i": 0}
    assert dict(calls) == small
    calls.clear()
    assert store.get(ns, "k1999").value == {"i": 1999}
    assert dict(calls) == small
    assert calls["read"] == 0  # served from the view the store keeps up to date

    # a store opened afresh reads the log once; then its gets cost the same
    reader = open_store()
    assert reader.get(ns, "k1000").value == {"i": 1000}
    reader_calls = counted(reader.storage)
    reader_calls.clear()
    assert reader.get(ns, "k1001").value == {"i": 1001}
    assert dict(reader_calls) == small

    # another store object's put: the next get reads that one batch, nothing else
    open_store().put(ns, "from another", {"by": "another"})
    calls.clear()
    assert store.get(ns, "from another").value == {"by": "another"}
    assert calls["read"] == 1


def test_on_s3_a_get_lists_no_more_when_the_label_holds_more_batches(s3_bucket):
    from test_s3 import s3_storage

    store = VerifiedStore(storage=s3_storage(*s3_bucket))
    ns = ("users", "ada")
    store.put(ns, "k0", {"i": 0})
    listed: list[int] = []  # names each LIST returned (what a bucket's LIST costs)
    real_list_meta = store.storage.bucket.list_meta

    def counting_list_meta(*args, **kwargs):
        found = real_list_meta(*args, **kwargs)
        listed.append(len(found))
        return found

    store.storage.bucket.list_meta = counting_list_meta
    assert store.get(ns, "k0").value == {"i": 0}
    small = sum(listed)
    assert len(listed) == 1 and small <= 1  # one LIST, of the batch this process wrote
    for i in range(1, 60):
        store.put(ns, f"k{i}", {"i": i})  # distinct keys: nothing to compact
    listed.clear()
    assert store.get(ns, "k0").value == {"i": 0}
    assert len(listed) == 1 and sum(listed) == small  # not 60 names


PUT_FROM_ANOTHER_PROCESS = textwrap.dedent(
    """
    import sys
    from langgraph_checkpoint_verified import VerifiedStore
    store = VerifiedStore(sys.argv[1])
    store.put(("users", "ada"), "k", {"v": 2, "by": "the child"})
    store.put(("users", "bob"), "new", {"v": 3})
    store.delete(("users", "ada"), "old")
    """
)


def in_another_process(script: str, store_dir: Path) -> None:
    """Run ``script`` on the store at ``store_dir`` (its ``sys.argv[1]``) in a new process."""
    subprocess.run([sys.executable, "-c", script, str(store_dir)], check=True, timeout=120)


def test_another_process_put_is_seen_by_the_next_get(tmp_path):
    store_dir = tmp_path / "store"
    store = VerifiedStore(store_dir)
    store.put(("users", "ada"), "k", {"v": 1})
    store.put(("users", "ada"), "old", {"v": 0})
    assert store.get(("users", "ada"), "k").value == {"v": 1}  # warm: the view is built
    in_another_process(PUT_FROM_ANOTHER_PROCESS, store_dir)
    assert store.get(("users", "ada"), "k").value == {"v": 2, "by": "the child"}
    assert store.get(("users", "bob"), "new").value == {"v": 3}
    assert store.get(("users", "ada"), "old") is None
    store.put(("users", "ada"), "after", {"v": 4})  # named after the child's batches
    reader = VerifiedStore(store_dir)
    assert reader.get(("users", "ada"), "k").value == {"v": 2, "by": "the child"}
    assert reader.get(("users", "ada"), "after").value == {"v": 4}
    assert reader.stats.damaged_records == 0


DELETE_AND_COMPACT_FROM_ANOTHER_PROCESS = textwrap.dedent(
    """
    import sys
    from langgraph_checkpoint_verified import VerifiedStore
    store = VerifiedStore(sys.argv[1])
    store.delete(("users", "ada"), "gone")
    store.put(("users", "ada"), "k", {"v": 2})
    assert store.logs.compact("users") > 0
    """
)


def test_a_label_another_process_compacted_is_read_again_not_on_top_of_what_was_known(
    tmp_path,
):
    """Another process deletes an item, then compacts the label's log: the batches this
    store applied are gone, and the delete with them. The next read starts the label
    again from the log as it is: the item is gone here too, nothing else changed."""
    store_dir = tmp_path / "store"
    store = VerifiedStore(store_dir)
    store.put(("users", "ada"), "gone", {"v": 0})
    store.put(("users", "ada"), "k", {"v": 1})
    assert store.get(("users", "ada"), "gone").value == {"v": 0}  # warm: the view is built
    in_another_process(DELETE_AND_COMPACT_FROM_ANOTHER_PROCESS, store_dir)
    assert store.get(("users", "ada"), "gone") is None
    assert [(i.key, i.value) for i in store.search(("users",))] == [("k", {"v": 2})]
    assert store.stats.damaged_records == 0


# -- 4. compaction ------------------------------------------------------------------------


@pytest.fixture(params=["files", "memory"])
def open_local_store(request, tmp_path: Path) -> Any:
    """``open_store`` without S3, for tests of a thousand puts or more: on S3 every put
    lists all of its label's batches (see the test above), which takes minutes there."""
    if request.param == "memory":
        memory = MemoryStorage()
        return lambda **kwargs: VerifiedStore(storage=memory, **kwargs)
    return lambda **kwargs: VerifiedStore(tmp_path / "store", **kwargs)


def test_overwrites_are_compacted_away(open_local_store):
    """Compaction starts itself; how it rewrites a log on S3 is tested below."""
    store = open_local_store(fsync=False)
    ns = ("users", "ada")
    store.put(("users", "bob"), "kept", {"v": "kept"})
    for i in range(COMPACT_AFTER + 76):
        store.put(ns, "k", {"i": i})
    # compacted once the dead versions reached COMPACT_AFTER: one pack, then the puts since
    held = batches(store, "users")
    assert 1 <= len(held) <= 1 + 76
    reader = open_local_store()
    assert reader.get(ns, "k").value == {"i": COMPACT_AFTER + 75}
    assert reader.get(("users", "bob"), "kept").value == {"v": "kept"}
    assert items(reader) == [(("users", "ada"), "k"), (("users", "bob"), "kept")]


def test_compaction_keeps_every_live_item_exactly_and_drops_the_rest(open_store):  # noqa: F811 (the fixture)
    store = open_store(fsync=False, ttl={"refresh_on_read": True})

    def place(i: int) -> tuple[tuple[str, ...], str]:
        return ("users", str(i % 7)), f"k{i}"

    def everything(reader: VerifiedStore) -> dict[Any, Any]:
        return {
            (tuple(i.namespace), i.key): (i.value, i.created_at, i.updated_at)
            for i in reader.search(("users",), limit=10_000, refresh_ttl=False)
        }

    with time_machine.travel(T0, tick=False) as clock:
        for start in range(0, 600, 50):
            store.batch(
                [
                    PutOp(*place(i), {"i": i, "text": "x" * (i % 13)})
                    for i in range(start, start + 50)
                ]
            )
            clock.shift(1)
        store.batch([PutOp(*place(i), {"i": -i}) for i in range(0, 600, 5)])  # overwritten
        store.batch([PutOp(*place(i), None) for i in range(1, 600, 10)])  # deleted
        store.put(("users", "ttl"), "touched", {"t": 1}, ttl=10)
        store.put(("users", "ttl"), "expires", {"t": 2}, ttl=10)
        store.put(("teams",), "elsewhere", {"t": 3})
        clock.shift(9 * 60)
        assert store.get(("users", "ttl"), "touched").value == {"t": 1}  # refreshed: to 19 min
        before = open_store()  # opened, and its view built, before the compaction
        expected = everything(before)
        clock.shift(2 * 60)  # "expires" has expired, "touched" lives on
        del expected[(("users", "ttl"), "expires")]
        assert len(expected) == 600 - 60 + 1
        old = batches(store, "users")

        assert store.logs.compact("users") == len(old)

        packs = batches(store, "users")
        assert len(packs) == math.ceil(len(expected) / PACK_ITEMS)
        contents = [read_batch(store, key) for key in packs]
        assert all(not c.deletes and not c.touches for c in contents)
        assert all(len(c.puts) <= PACK_ITEMS for c in contents)
        packed = [(p.namespace, p.key) for c in contents for p in c.puts]
        assert sorted(packed) == sorted(expected)  # the expired item and the dead versions gone
        for reader in (store, open_store(), before):  # before: notices, and builds again
            assert everything(reader) == expected
        assert open_store().get(("teams",), "elsewhere").value == {"t": 3}  # another log

        # the store opened before writes on, named after the packs, and everyone sees it
        before.put(("users", "0"), "after", {"v": "after"})
        assert store.get(("users", "0"), "after").value == {"v": "after"}
        assert everything(open_store()) == {**expected, **everything(before)}
        clock.shift(7 * 60)  # 18 minutes: the refresh was folded into the pack
        assert open_store().get(("users", "ttl"), "touched", refresh_ttl=False).value == {"t": 1}
        clock.shift(60)
        assert open_store().get(("users", "ttl"), "touched", refresh_ttl=False) is None


# -- 5. the older layout: one record per item under store/ ---------------------------------

SERDE = JsonPlusSerializer()


def legacy_identity(namespace: tuple[str, ...], key: str, version: str) -> dict[str, str]:
    return {
        "store_namespace": json.dumps(list(namespace), ensure_ascii=False, separators=(",", ":")),
        "store_key": key,
        "store_version": version,
    }


def legacy_item(
    store: VerifiedStore,
    namespace: tuple[str, ...],
    key: str,
    value: dict[str, Any],
    *,
    created: datetime,
    updated: datetime,
    ttl: float | None = None,
    vectors: dict[str, list[float]] | None = None,
    version: str = "00aa11bb22cc33dd",
) -> tuple[str, bytes]:
    """A ``.item`` record as ``VerifiedStore`` wrote it before ``memories/``."""
    type_, blob = SERDE.dumps_typed(value)
    content = {
        "v": 1,
        "created_at": round(created.timestamp() * 1_000_000),
        "updated_at": round(updated.timestamp() * 1_000_000),
        "ttl": ttl,
        "expires_at": None if ttl is None else updated.timestamp() + ttl * 60,
        "value": [type_, blob],
        "vectors": vectors or {},
    }
    identity = legacy_identity(namespace, key, version)
    return store_item_key(namespace, key), store.codec.encode(
        RecordKind.STORE_ITEM, identity, pack(content)
    )


def legacy_touch(
    store: VerifiedStore, namespace: tuple[str, ...], key: str, version: str, expires_at: float
) -> tuple[str, bytes]:
    """A ``.touch`` record: a TTL refresh naming the version of the item it extends."""
    identity = legacy_identity(namespace, key, version)
    return store_touch_key(namespace, key), store.codec.encode(
        RecordKind.STORE_TOUCH, identity, pack({"v": 1, "expires_at": expires_at})
    )


def write_older_layout(store: VerifiedStore) -> dict[str, bytes]:
    """Items of the older layout: with a refresh, with one of another version, without a
    TTL, and two that are damaged (a flipped byte; another item's record at its key)."""
    ada, bob = (("users", "ada"), "prefs"), (("users", "bob"), "notes")
    records = dict(
        [
            legacy_item(
                store,
                *ada,
                {"theme": "dark"},
                created=T0 - timedelta(days=1),
                updated=T0,
                ttl=60,
                vectors={"text": [1.0, 0.0, 0.5]},
                version="v-ada",
            ),
            legacy_touch(store, *ada, "v-ada", (T0 + timedelta(minutes=120)).timestamp()),
            legacy_item(
                store, *bob, {"text": "likes tea"}, created=T0, updated=T0, ttl=30, version="v-bob"
            ),
            legacy_touch(store, *bob, "v-older", (T0 + timedelta(days=9)).timestamp()),
            legacy_item(store, ("facts",), "../odd key", {"n": 1}, created=T0, updated=T0),
        ]
    )
    eve_key, eve = legacy_item(store, ("users", "eve"), "prefs", {"x": 1}, created=T0, updated=T0)
    records[eve_key] = flip_byte(eve, len(eve) - 3)
    records[store_item_key(("users", "mallory"), "prefs")] = records[store_item_key(*ada)]
    for key, data in records.items():
        store.storage.write(key, data)
    return records


def test_a_store_of_the_older_layout_is_moved_into_the_logs(open_store):  # noqa: F811 (the fixture)
    first = open_store()  # the store's marker
    written = write_older_layout(first)
    assert len(list(first.storage.walk("store"))) == len(written)
    eve, mallory = (
        store_item_key(("users", "eve"), "prefs"),
        store_item_key(("users", "mallory"), "prefs"),
    )

    seen: list[Damage] = []
    with time_machine.travel(T0, tick=False) as clock:
        store = open_store(on_corruption=seen.append)
        assert list(store.storage.walk("store")) == []  # the old records are gone
        kept = {(i.namespace, i.key): i for i in store.stored_items()}
        assert sorted(kept) == [
            (("facts",), "../odd key"),
            (("users", "ada"), "prefs"),
            (("users", "bob"), "notes"),
        ]
        ada = kept[(("users", "ada"), "prefs")]
        assert ada.value == {"theme": "dark"}
        assert (ada.created_at, ada.updated_at) == (T0 - timedelta(days=1), T0)
        assert ada.ttl == 60
        assert ada.expires_at == (T0 + timedelta(minutes=120)).timestamp()  # the touch, folded
        assert ada.vectors == {"text": [1.0, 0.0, 0.5]}
        bob = kept[(("users", "bob"), "notes")]
        assert bob.expires_at == (T0 + timedelta(minutes=30)).timestamp()  # another version's
        odd = kept[(("facts",), "../odd key")]
        assert (odd.value, odd.ttl, odd.expires_at, odd.vectors) == ({"n": 1}, None, None, {})

        # the damaged ones: reported and moved aside, as a read of them would have
        assert sorted((d.kind, d.key) for d in seen) == [
            ("store_item", eve),
            ("store_item", mallory),
        ]
        assert all(d.quarantined_to is not None for d in seen)
        assert len([k for k in store.storage.walk("quarantine") if k.endswith(".record")]) == 2
        assert store.get(("users", "eve"), "prefs") is None
        assert store.get(("users", "mallory"), "prefs") is None

        # the vectors came along: a similarity search needs no re-embedding
        index = {"dims": 3, "embed": lambda texts: [[1.0, 0.0, 0.5] for _ in texts]}
        found = open_store(index=index).search(("users",), query="dark", refresh_ttl=False)
        assert [(i.key, i.score) for i in found] == [("prefs", pytest.approx(1.0)), ("notes", None)]

        # moved once: another opening finds nothing more to move or report
        held = batches(store)
        again = open_store(on_corruption=seen.append)
        assert batches(again) == held and len(seen) == 2
        clock.shift(119 * 60)
        assert again.get(("users", "ada"), "prefs", refresh_ttl=False).value == {"theme": "dark"}
        assert again.get(("users", "bob"), "notes") is None  # its own 30 minutes
        clock.shift(60)
        assert again.get(("users", "ada"), "prefs") is None


def test_a_store_opened_with_quarantine_off_reads_the_older_layout_in_place(open_store):  # noqa: F811 (the fixture)
    """As the read-only commands open it: damage reported, nothing written or moved."""
    written = write_older_layout(open_store())
    eve = store_item_key(("users", "eve"), "prefs")
    mallory = store_item_key(("users", "mallory"), "prefs")
    seen: list[Damage] = []
    with time_machine.travel(T0, tick=False):
        look = open_store(quarantine=False, on_corruption=seen.append)
        ada = look.get(("users", "ada"), "prefs", refresh_ttl=False)
        assert ada.value == {"theme": "dark"} and ada.created_at == T0 - timedelta(days=1)
        assert look.get(("users", "bob"), "notes", refresh_ttl=False).value == {"text": "likes tea"}
        assert look.get(("users", "eve"), "prefs", refresh_ttl=False) is None
        assert sorted(i.key for i in look.search((), refresh_ttl=False)) == [
            "../odd key",
            "notes",
            "prefs",
        ]
    assert sorted(d.key for d in seen) == [eve, mallory]
    assert all(d.quarantined_to is None for d in seen)
    assert {k: look.storage.read(k) for k in look.storage.walk("store")} == written
    assert list(look.storage.walk("memories")) == []
    assert list(look.storage.walk("quarantine")) == []


def test_an_item_of_the_older_layout_written_after_the_move_is_moved_too(open_store):  # noqa: F811 (the fixture)
    """As a process still running the older version (a rolling upgrade), or an old
    backup copied back, would leave it."""
    first = open_store()
    first.storage.write(
        *legacy_item(first, ("users", "ada"), "k", {"v": 1}, created=T0, updated=T0)
    )
    assert open_store().get(("users", "ada"), "k").value == {"v": 1}  # moved
    first.storage.write(
        *legacy_item(first, ("users", "bob"), "k", {"v": 2}, created=T0, updated=T0)
    )
    assert list(first.storage.walk("store")) == [store_item_key(("users", "bob"), "k")]
    store = open_store()
    assert store.get(("users", "ada"), "k").value == {"v": 1}
    assert store.get(("users", "bob"), "k").value == {"v": 2}


# -- 6. a process killed mid-put -----------------------------------------------------------

PUT_UNTIL_KILLED = textwrap.dedent(
    """
    import sys
    from langgraph_checkpoint_verified import VerifiedStore
    store = VerifiedStore(sys.argv[1])
    i = 0
    while True:
        store.put(("killed", str(i % 3)), f"k{i}", {"i": i, "text": "x" * (i % 97)})
        print(f"k{i}", flush=True)  # after put returned: acknowledged
        i += 1
    """
)


def test_every_acknowledged_put_survives_a_sigkill(tmp_path):
    store_dir = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, "-c", PUT_UNTIL_KILLED, str(store_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged: list[str] = []
    try:
        while len(acknowledged) < 300:
            line = child.stdout.readline()
            assert line.endswith("\n"), f"the child stopped: {child.wait()}"
            acknowledged.append(line.strip())
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=120) == -signal.SIGKILL
        # what it printed before it was killed was acknowledged too
        acknowledged += [line.strip() for line in child.stdout if line.endswith("\n")]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()

    seen: list[Damage] = []
    store = VerifiedStore(store_dir, on_corruption=seen.append)
    for key in acknowledged:
        i = int(key[1:])
        item = store.get(("killed", str(i % 3)), key)
        assert item is not None, key
        assert item.value == {"i": i, "text": "x" * (i % 97)}
    assert seen == [] and store.stats.damaged_records == 0  # a torn tail is not damage
    store.put(("killed", "0"), "after", {"v": 1})
    assert VerifiedStore(store_dir).get(("killed", "0"), "after").value == {"v": 1}
    assert VerifiedStore(store_dir).get(("killed", "1"), acknowledged[1]) is not None


# -- 7. one flipped bit in a label's log heals ---------------------------------------------


def value_of(i: int) -> dict[str, Any]:
    return {"i": i, "text": random.Random(i).randbytes(400).hex()}  # compresses little


@pytest.fixture(scope="module")
def two_hundred(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("memories") / "store"
    store = VerifiedStore(root, fsync=False)
    for i in range(200):
        store.put(("users", str(i % 5)), f"k{i}", value_of(i))
    assert (root / "memories" / "users" / "log").stat().st_size > 2 * STRIPE_SIZE
    return root


def read_all(store: VerifiedStore) -> None:
    for i in range(200):
        item = store.get(("users", str(i % 5)), f"k{i}")
        assert item is not None and item.value == value_of(i), i


def test_one_flipped_bit_anywhere_in_a_log_heals(two_hundred, tmp_path):
    rng = random.Random("memories-one-bit")
    for trial in range(8):
        copy = tmp_path / f"copy-{trial}"
        shutil.copytree(two_hundred, copy)
        log = copy / "memories" / "users" / "log"
        data = bytearray(log.read_bytes())
        offset = rng.randrange(len(data))
        data[offset] ^= 1 << rng.randrange(8)
        log.write_bytes(bytes(data))
        seen: list[Damage] = []
        store = VerifiedStore(copy, on_corruption=seen.append)
        read_all(store)  # every item, exactly: no fallback, nothing missing
        assert seen and all(d.healed for d in seen), (offset, seen)
        assert store.stats.damaged_records == store.stats.quarantined_records == 0, offset
        assert not (copy / "quarantine").exists() or not any((copy / "quarantine").iterdir())
        report = store.verify(repair=True)
        assert report.damaged == [] and all(h.written_back for h in report.healed), offset
        assert VerifiedStore(copy).verify().ok, offset
        shutil.rmtree(copy)


def test_a_healed_block_of_a_memories_log_is_reported(two_hundred, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(two_hundred, copy)
    log = copy / "memories" / "users" / "log"
    data = bytearray(log.read_bytes())
    data[STRIPE_SIZE + 100] ^= 0x01
    log.write_bytes(bytes(data))
    seen: list[Damage] = []
    store = VerifiedStore(copy, on_corruption=seen.append)
    read_all(store)
    read_all(store)  # served healed, reported once
    assert store.stats.healed_blocks == 1
    assert [(d.healed, d.location) for d in seen] == [(True, f"{log}@{STRIPE_SIZE}")]
    assert store.stats.damaged_records == store.stats.quarantined_records == 0


# -- 8. search after damage ------------------------------------------------------------------


def test_search_after_damage_never_returns_a_wrong_value(open_store):  # noqa: F811 (the fixture)
    writer = open_store(index=INDEX)
    ns = ("things",)
    rows = {
        "a": {"n": 1, "text": "dog"},
        "b": {"n": 2.5, "text": "cat"},
        "c": {"n": 9, "text": "sky"},
        "d": {"n": 10, "text": "sea"},
        "e": {"n": 100, "text": "mouse"},
        "s": {"n": "10", "text": "banana"},
    }
    for key, value in rows.items():
        writer.put(ns, key, value)
    writer.put(ns, "a", {"n": 50, "text": "apple apple apple"})  # damaged below
    writer.put(ns, "f", {"n": 3, "text": "cherry"})
    rows["f"] = {"n": 3, "text": "cherry"}
    damage_batch(writer, batch_of(writer, ns, "a"))

    seen: list[Damage] = []
    reader = open_store(index=INDEX, on_corruption=seen.append)

    def search(**kwargs: Any) -> dict[str, Any]:
        return {i.key: i.value for i in reader.search(ns, limit=100, **kwargs)}

    assert search() == rows  # "a" as it was before the damaged batch
    assert [d.kind for d in seen] == ["store_batch"]
    # numbers compare as numbers: 10 and 100 are greater than 9 (as text they sort
    # before it); the string "10" is not a number
    assert search(filter={"n": {"$gt": 9}}) == {"d": rows["d"], "e": rows["e"]}
    assert sorted(search(filter={"n": {"$gte": 2.5, "$lte": 10}})) == ["b", "c", "d", "f"]
    assert search(filter={"n": {"$lt": 2}}) == {"a": {"n": 1, "text": "dog"}}
    assert search(filter={"n": 50}) == {} and search(filter={"n": {"$gte": 50}}) == {"e": rows["e"]}
    # the damaged version's vectors are never used: "a" scores as "dog" does
    found = reader.search(ns, query="apple", limit=100)
    assert {i.key: i.value for i in found} == rows
    [a] = [i for i in found if i.key == "a"]
    [dog, apple] = embed(["dog", "apple"])
    cosine = sum(x * y for x, y in zip(dog, apple, strict=True)) / (
        math.sqrt(sum(x * x for x in dog)) * math.sqrt(sum(y * y for y in apple))
    )
    assert a.score == pytest.approx(cosine) and a.score < 0.1


def test_a_vector_search_survives_a_write_between_its_look_ups():
    storage = MemoryStorage()
    searcher = VerifiedStore(storage=storage, index=INDEX)
    other = VerifiedStore(storage=storage)
    searcher.put(("docs",), "x", {"text": "apple"})
    searcher.put(("docs",), "y", {"text": "dog"})
    current, looked = searcher.logs.current, []

    def current_then_another_writes(label: str) -> Any:
        looked.append(label)
        if len(looked) == 2:  # as another process might, between the two look-ups
            other.delete(("docs",), "x")
        return current(label)

    searcher.logs.current = current_then_another_writes
    found = searcher.search(("docs",), query="apple")
    assert [i.key for i in found] in (["x", "y"], ["y"])
