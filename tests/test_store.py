"""``VerifiedStore``: LangGraph's long-term memory store on verified records.

Every test runs on files, in memory and on S3 where the backend matters. Time is
moved with ``time_machine``, never waited for. Damage is made on purpose (a flipped
byte in a batch record, a batch copied to another batch's place) and what a store
opened afterwards sees is asserted. A model test runs random operations on
``VerifiedStore`` and LangGraph's ``InMemoryStore`` and compares what they return.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any

import greenlet
import pytest
import time_machine
from hypothesis import example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.config import get_store
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedStore, ToolNode
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from logtools import lose_parity, view_log
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import (
    Damage,
    MemoryStorage,
    StoreKeyError,
    VerifiedCache,
    VerifiedSaver,
    VerifiedSaverError,
    VerifiedStore,
)
from langgraph_checkpoint_verified.records.format import Codec, RecordKind
from langgraph_checkpoint_verified.records.keys import batch_key, memories_prefix
from langgraph_checkpoint_verified.store.batches import (
    Batch,
    ItemVersion,
    Touch,
    decode_batch,
    encode_batch,
)
from langgraph_checkpoint_verified.store.logs import batch_identity, new_batch_name

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
BACKENDS = ["files", "memory", "s3"]
AES_KEY = b"0123456789abcdef0123456789abcdef"
WORDS = ["apple", "banana", "cherry", "dog", "cat", "mouse", "sky", "sea"]


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: how often each of ``WORDS`` occurs, plus a constant."""
    return [[float(text.lower().count(word)) for word in WORDS] + [0.1] for text in texts]


async def aembed(texts: list[str]) -> list[list[float]]:
    return embed(texts)


INDEX = {"dims": len(WORDS) + 1, "embed": embed}


def flip_byte(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def items(store: VerifiedStore) -> list[tuple[tuple[str, ...], str]]:
    """Every item the store's batches hold now (expired ones too, until a sweep), as
    ``(namespace, key)``, read from the records by a store object opened afresh."""
    fresh = VerifiedStore(storage=store.storage, key=store.codec.key)
    return sorted(
        place for label in fresh.logs.labels() for place in fresh.logs.current(label).items
    )


def batches(store: VerifiedStore, label: str | None = None) -> list[str]:
    """The keys of the batch records under ``memories/`` (of one first label, if given)."""
    where = memories_prefix(label) if label is not None else "memories"
    return [k for k in store.storage.walk(where) if k.endswith(".batch")]


def read_batch(store: VerifiedStore, key: str) -> Batch:
    """The changes in the batch record at ``key``, verified."""
    content = store.codec.decode(store.storage.read(key), RecordKind.STORE_BATCH, None)
    return decode_batch(key.rsplit("/", 1)[1][: -len(".batch")], content)


def batch_of(store: VerifiedStore, namespace: tuple[str, ...], key: str) -> str:
    """The key of the batch record that holds the version of an item the store reads."""
    version = store.logs.current(namespace[0]).items[(namespace, key)].version
    return batch_key(namespace[0], version.rsplit("/", 1)[0])


@pytest.fixture(params=BACKENDS)
def open_store(request, tmp_path: Path) -> Callable[..., VerifiedStore]:
    """Opens a store on one backend; each call opens it again (same items)."""
    if request.param == "s3":
        endpoint, bucket = request.getfixturevalue("s3_bucket")
        from test_s3 import s3_storage

        return lambda **kwargs: VerifiedStore(storage=s3_storage(endpoint, bucket), **kwargs)
    if request.param == "memory":
        memory = MemoryStorage()
        return lambda **kwargs: VerifiedStore(storage=memory, **kwargs)
    return lambda **kwargs: VerifiedStore(tmp_path / "store", **kwargs)


# -- get, put, delete, batch -------------------------------------------------------


def test_put_get_delete_and_the_items_times(open_store):
    store = open_store()
    ns = ("users", "ada")
    with time_machine.travel(T0, tick=False) as clock:
        store.put(ns, "prefs", {"theme": "dark", "nested": {"n": [1, 2.5, None]}})
        clock.shift(60)
        store.put(ns, "prefs", {"theme": "light"})
    item = open_store().get(ns, "prefs")  # another store object on the same records
    assert item is not None
    assert (item.namespace, item.key, item.value) == (ns, "prefs", {"theme": "light"})
    # created_at survives the update; updated_at moves with it
    assert item.created_at == T0
    assert item.updated_at == T0 + timedelta(seconds=60)
    assert store.get(ns, "other") is None
    assert store.get(("users",), "prefs") is None  # a namespace does not reach below it
    store.delete(ns, "prefs")
    assert store.get(ns, "prefs") is None
    assert open_store().get(ns, "prefs") is None
    assert items(store) == []
    store.delete(ns, "never there")  # not an error


def test_batch_returns_results_in_op_order_and_reads_before_puts(open_store):
    store = open_store()
    ns = ("docs",)
    store.put(ns, "a", {"v": "old"})
    results = store.batch(
        [
            PutOp(ns, "a", {"v": "new"}),
            GetOp(ns, "a"),  # sees the store before this batch's puts, as InMemoryStore
            SearchOp(ns),
            PutOp(ns, "b", {"v": 1}),
            PutOp(ns, "b", {"v": 2}),  # the last put of an item wins
            ListNamespacesOp(),
            GetOp(ns, "missing"),
        ]
    )
    assert results[0] is None and results[3] is None and results[4] is None
    assert results[1].value == {"v": "old"}
    assert [i.value for i in results[2]] == [{"v": "old"}]
    assert results[5] == [ns]
    assert results[6] is None
    assert store.get(ns, "a").value == {"v": "new"}
    assert store.get(ns, "b").value == {"v": 2}


def test_the_async_twins_match_the_sync_calls(open_store):
    store = open_store()
    ns = ("notes", "u1")

    async def run() -> tuple[Any, ...]:
        await store.aput(ns, "k", {"text": "hello", "n": 3})
        await store.aput(ns, "gone", {"n": 1})
        await store.adelete(ns, "gone")
        got = await store.aget(ns, "k")
        found = await store.asearch(("notes",), filter={"n": {"$gte": 3}})
        names = await store.alist_namespaces(prefix=("notes",))
        return got, found, names

    got, found, names = asyncio.run(run())
    assert got.value == {"text": "hello", "n": 3}
    assert [(i.key, i.value) for i in found] == [("k", {"text": "hello", "n": 3})]
    assert names == [ns]
    assert open_store().get(ns, "gone") is None


class WatchedLock:
    """The store's lock, noting the most callers (cores or threads) inside it at once."""

    def __init__(self, lock: Any) -> None:
        self.lock, self.inside, self.most = lock, [], 0

    def __enter__(self) -> None:
        self.lock.__enter__()
        self.inside.append(greenlet.getcurrent())  # a thread's own, or a core's
        self.most = max(self.most, len(set(map(id, self.inside))))

    def __exit__(self, *exc: object) -> None:
        self.inside.remove(greenlet.getcurrent())
        self.lock.__exit__(*exc)


def test_async_batches_at_once_hold_the_store_s_lock_one_at_a_time(open_store):
    """Each batch sees one state: concurrent ``abatch`` calls take the store's lock in
    turn. On S3 they run as cores on one thread, where a thread's re-entrant lock would
    let a second one in while the first awaits a request inside it."""
    writer = open_store()
    for n in range(8):
        writer.put((f"label{n}",), "k", {"n": n})
    store = open_store()  # nothing read yet: each batch reads its label inside the lock
    watched = store.logs.lock = WatchedLock(store.logs.lock)

    async def run() -> list[Any]:
        gets = [store.aget((f"label{n}",), "k") for n in range(8)]
        puts = [store.aput((f"label{n}",), "j", {"n": n}) for n in range(8)]
        return await asyncio.gather(*gets, *puts)

    results = asyncio.run(run())
    assert [item.value for item in results[:8]] == [{"n": n} for n in range(8)]
    assert watched.most == 1
    assert [open_store().get((f"label{n}",), "j").value for n in range(8)] == [
        {"n": n} for n in range(8)
    ]


def test_namespaces_are_validated_even_when_batch_is_called_directly():
    store = VerifiedStore.in_memory()
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("a.b",), "k", {"v": 1})])
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("",), "k")])
    with pytest.raises(InvalidNamespaceError):
        store.batch([SearchOp(("a\0",))])
    with pytest.raises(InvalidNamespaceError):
        store.batch([ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("x.y",)),))])
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph",), "k", {"v": 1})
    with pytest.raises(TypeError, match="dict"):
        store.put(("ns",), "k", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lone surrogate"):
        store.put(("ns",), "\ud800", {"v": 1})
    assert items(store) == []
    assert batches(store) == []  # refused before anything was written


# -- search: filters, order, pages -------------------------------------------------


def filled(store: VerifiedStore) -> VerifiedStore:
    rows = {
        "a": {"n": 1, "kind": "fruit", "meta": {"color": "red", "size": 3}, "tags": ["x"]},
        "b": {"n": 2, "kind": "fruit", "meta": {"color": "yellow", "size": 7}},
        "c": {"n": 10, "kind": "animal", "meta": {"color": "red"}, "ok": True},
        "d": {"n": 2.5, "kind": "animal", "ok": 1},
        "e": {"n": "10", "kind": "text"},
    }
    with time_machine.travel(T0, tick=False) as clock:
        for key, value in rows.items():
            store.put(("things",), key, value)
            clock.shift(1)
        store.put(("elsewhere",), "z", {"n": 1, "kind": "fruit"})
    return store


def keys_of(results) -> list[str]:
    return [item.key for item in results]


def test_filters_on_fields_nested_values_and_operators(open_store):
    store = filled(open_store())
    ns = ("things",)

    def search(filter: dict[str, Any]) -> list[str]:
        return sorted(keys_of(store.search(ns, filter=filter)))

    assert search({"kind": "fruit"}) == ["a", "b"]
    assert search({"meta": {"color": "red"}}) == ["a", "c"]  # nested: these fields match
    assert search({"tags": ["x"]}) == ["a"]
    assert search({"n": 2}) == ["b"]
    assert search({"n": {"$eq": 2.5}}) == ["d"]
    assert search({"n": {"$ne": 2}}) == ["a", "c", "d", "e"]
    # numbers compare as numbers (10 > 2.5), never with the string "10"
    assert search({"n": {"$gt": 2}}) == ["c", "d"]
    assert search({"n": {"$gte": 2, "$lt": 10}}) == ["b", "d"]
    assert search({"n": {"$lte": 1}}) == ["a"]
    assert search({"n": {"$gt": "1"}}) == ["e"]  # strings with strings
    # JSON's types: true is not 1
    assert search({"ok": True}) == ["c"]
    assert search({"ok": 1}) == ["d"]
    assert search({"$or": [{"kind": "animal"}, {"n": 1}]}) == ["a", "c", "d"]
    assert search({"$and": [{"kind": "fruit"}, {"meta": {"size": {"$gt": 5}}}]}) == ["b"]
    assert search({"$or": [{"$and": [{"kind": "animal"}, {"n": {"$lt": 5}}]}, {"n": 1}]}) == [
        "a",
        "d",
    ]
    assert search({"missing": {"$gt": 0}}) == []
    with pytest.raises(ValueError, match="operator"):
        store.search(ns, filter={"n": {"$regex": "1"}})
    with pytest.raises(ValueError, match=r"\$or takes a list"):
        store.search(ns, filter={"$or": {"n": 1}})


def test_search_is_newest_first_and_pages_are_stable(open_store):
    store = filled(open_store())
    assert keys_of(store.search(("things",))) == ["e", "d", "c", "b", "a"]
    assert keys_of(store.search((), limit=3)) == ["z", "e", "d"]
    pages = [keys_of(store.search((), limit=2, offset=o)) for o in (0, 2, 4, 6)]
    assert pages == [["z", "e"], ["d", "c"], ["b", "a"], []]
    # the same time: by namespace, then key
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        store.put(("things",), "b", {"n": 2})
        store.put(("elsewhere",), "y", {"n": 2})
    assert keys_of(store.search((), limit=3)) == ["y", "b", "z"]
    assert keys_of(store.search((), filter={"n": 2})) == ["y", "b"]


def test_list_namespaces_prefix_suffix_wildcards_and_depth(open_store):
    store = open_store()
    for ns in [
        ("users", "1", "prefs"),
        ("users", "1", "notes"),
        ("users", "2", "prefs"),
        ("teams", "a", "prefs"),
        ("teams",),
        ("users", "2", "deep", "er"),
    ]:
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces() == [
        ("teams",),
        ("teams", "a", "prefs"),
        ("users", "1", "notes"),
        ("users", "1", "prefs"),
        ("users", "2", "deep", "er"),
        ("users", "2", "prefs"),
    ]
    assert store.list_namespaces(prefix=("users", "1")) == [
        ("users", "1", "notes"),
        ("users", "1", "prefs"),
    ]
    assert store.list_namespaces(suffix=("prefs",)) == [
        ("teams", "a", "prefs"),
        ("users", "1", "prefs"),
        ("users", "2", "prefs"),
    ]
    assert store.list_namespaces(prefix=("users", "*", "prefs")) == [
        ("users", "1", "prefs"),
        ("users", "2", "prefs"),
    ]
    assert store.list_namespaces(prefix=("users",), suffix=("*", "prefs")) == [
        ("users", "1", "prefs"),
        ("users", "2", "prefs"),
    ]
    assert store.list_namespaces(max_depth=2) == [
        ("teams",),
        ("teams", "a"),
        ("users", "1"),
        ("users", "2"),
    ]
    assert store.list_namespaces(limit=2, offset=1) == [
        ("teams", "a", "prefs"),
        ("users", "1", "notes"),
    ]
    store.delete(("teams",), "k")
    assert ("teams",) not in store.list_namespaces()  # a namespace is its items


# -- TTL -----------------------------------------------------------------------------


def test_an_expired_item_is_never_returned_even_before_a_sweep(open_store):
    store = open_store(ttl={"default_ttl": 10, "refresh_on_read": False})
    ns = ("ns",)
    with time_machine.travel(T0, tick=False) as clock:
        store.put(ns, "default", {"v": 1})  # the default: 10 minutes
        store.put(ns, "short", {"v": 2}, ttl=1)
        store.put(ns, "forever", {"v": 3}, ttl=None)
        clock.shift(59)
        assert sorted(keys_of(store.search(ns))) == ["default", "forever", "short"]
        clock.shift(1)  # exactly at the expiry: gone
        assert store.get(ns, "short") is None
        assert sorted(keys_of(store.search(ns))) == ["default", "forever"]
        clock.shift(9 * 60)
        assert keys_of(store.search(ns)) == ["forever"]
        assert store.list_namespaces() == [ns]
        assert len(items(store)) == 3  # still stored: only a sweep frees them
        assert store.sweep_ttl() == 2
        assert items(store) == [(ns, "forever")]
        store.delete(ns, "forever")
        assert store.list_namespaces() == []


def test_a_read_refreshes_the_ttl_unless_told_not_to(open_store):
    store = open_store(ttl={"default_ttl": 10})  # refresh_on_read defaults to True
    ns = ("ns",)
    with time_machine.travel(T0, tick=False) as clock:
        store.put(ns, "read", {"v": 1})
        store.put(ns, "searched", {"v": 2})
        store.put(ns, "untouched", {"v": 3})
        clock.shift(9 * 60)
        assert store.get(ns, "read").value == {"v": 1}
        assert keys_of(store.search(ns, filter={"v": 2})) == ["searched"]
        assert store.get(ns, "untouched", refresh_ttl=False) is not None
        clock.shift(2 * 60)
        # the refresh is stored: another store object, or process, sees it
        again = open_store(ttl={"default_ttl": 10})
        assert again.get(ns, "read", refresh_ttl=False).value == {"v": 1}
        assert again.get(ns, "searched", refresh_ttl=False).value == {"v": 2}
        assert again.get(ns, "untouched") is None
        clock.shift(9 * 60)
        assert again.get(ns, "read") is None
        # a put starts the item again: an old refresh does not extend the new version
        store.put(ns, "read", {"v": "new"}, ttl=1)
        now = datetime.now(timezone.utc).timestamp()
        reopened = open_store(ttl={"default_ttl": 10})
        assert reopened.logs.current("ns").items[(ns, "read")].expires_at == now + 60
        clock.shift(60)
        assert store.get(ns, "read") is None


def test_a_touch_left_from_an_older_version_extends_nothing(open_store):
    store = open_store()
    ns = ("ns",)
    with time_machine.travel(T0, tick=False) as clock:
        store.put(ns, "k", {"v": 1}, ttl=5)
        clock.shift(4 * 60)
        store.get(ns, "k", refresh_ttl=True)  # a touch for this version, to 9 minutes
        old_version = store.logs.current("ns").items[(ns, "k")].version
        [touched] = [t for key in batches(store, "ns") for t in read_batch(store, key).touches]
        assert touched.version == old_version
        store.put(ns, "k", {"v": 2}, ttl=1)  # a new version ...
        # ... and the old touch written again, after it, in a batch of its own
        store.logs.write("ns", Batch(touches=[touched]))
        clock.shift(60)
        assert store.get(ns, "k") is None
        assert open_store().get(ns, "k") is None  # read from the records alike
        assert store.stats.damaged_records == 0


def test_a_touch_written_late_never_shortens_a_later_one(open_store):
    """Touches of one version may be written out of the order of the reads that made
    them (two processes reading at once): an item lives until the latest of them."""
    store = open_store()
    ns = ("ns",)
    with time_machine.travel(T0, tick=False) as clock:
        store.put(ns, "k", {"v": 1}, ttl=5)
        clock.shift(4 * 60)
        store.get(ns, "k", refresh_ttl=True)  # a touch to T0 + 9 minutes
        [touched] = [t for key in batches(store, "ns") for t in read_batch(store, key).touches]
        # a touch made by a read at T0 + 1 minute, written only now
        early = Touch(ns, "k", touched.version, touched.expires_at - 3 * 60)
        store.logs.write("ns", Batch(touches=[early]))
        clock.shift(4 * 60)  # T0 + 8 minutes: before the later touch's end
        assert store.get(ns, "k", refresh_ttl=False).value == {"v": 1}
        assert open_store().get(ns, "k", refresh_ttl=False).value == {"v": 1}


def test_a_put_over_an_expired_item_makes_a_new_item(open_store):
    """An expired item is gone, swept or not: a put of its key creates the item anew."""
    store = open_store()
    ns = ("ns",)
    with time_machine.travel(T0, tick=False) as clock:
        store.put(ns, "k", {"v": 1}, ttl=1)
        clock.shift(2 * 60)
        store.put(ns, "k", {"v": 2})
    for reader in (store, open_store()):
        item = reader.get(ns, "k")
        assert item.value == {"v": 2}
        assert item.created_at == item.updated_at == T0 + timedelta(minutes=2)


def test_the_ttl_sweeper_runs_in_the_background_and_stops(tmp_path):
    store = VerifiedStore(tmp_path / "store", ttl={"default_ttl": 1, "sweep_interval_minutes": 60})
    with time_machine.travel(T0, tick=False) as clock:
        store.put(("ns",), "k", {"v": 1})
        clock.shift(120)
    done = store.start_ttl_sweeper()
    assert store.start_ttl_sweeper() is done  # one sweeper per store object
    # the first sweep runs at once; wait for it to end, not for a time
    assert store._sweeper.wait_for_sweeps(1, timeout=60)
    assert items(store) == []
    assert store.stop_ttl_sweeper()
    assert done.done()
    assert VerifiedStore.in_memory().start_ttl_sweeper().done()  # no TTL: nothing to run

    async def on_a_loop() -> bool:
        async with VerifiedStore(tmp_path / "store", ttl={"default_ttl": 1}) as store:
            store.start_ttl_sweeper()
            assert store._sweeper.task is not None  # a task, not a thread, on a loop
            while store._sweeper.sweeps < 1:
                await asyncio.sleep(0)  # yield to the sweep task; no time is waited for
        return store._sweeper is None

    assert asyncio.run(on_a_loop())


def test_ttl_is_checked():
    with pytest.raises(ValueError, match="default_ttl"):
        VerifiedStore.in_memory(ttl={"default_ttl": -1})
    with pytest.raises(TypeError, match="ttl"):
        VerifiedStore.in_memory().put(("ns",), "k", {"v": 1}, ttl="5")  # type: ignore[arg-type]


# -- vector search -------------------------------------------------------------------


def test_vector_search_scores_best_first_like_in_memory_store(open_store):
    docs = {
        "fruit": {"text": "apple banana cherry apple"},
        "pets": {"text": "dog cat dog"},
        "mix": {"text": "apple dog sky"},
        "sea": {"text": "sea sea sky", "other": "apple apple apple"},
        "plain": {"text": "nothing here"},
    }
    store, reference = open_store(index=INDEX), InMemoryStore(index=INDEX)
    for target in (store, reference):
        for key, value in docs.items():
            target.put(("docs",), key, value)
        target.put(("docs",), "unindexed", {"text": "apple apple"}, index=False)
        target.put(("docs",), "by_field", {"text": "dog", "other": "cherry"}, index=["other"])
    for query in ("apple", "dog", "sky sea", "cherry"):
        found = store.search(("docs",), query=query, limit=4)
        expected = reference.search(("docs",), query=query, limit=4)
        assert keys_of(found) == keys_of(expected), query
        assert [round(i.score, 6) for i in found] == [round(i.score, 6) for i in expected]
    # the unindexed item has no score: it comes after every scored one
    everything = store.search(("docs",), query="apple", limit=20)
    assert everything[-1].key == "unindexed" and everything[-1].score is None
    assert [i.key for i in store.search(("docs",), query="apple", filter={"text": "dog"})] == [
        "by_field"
    ]
    # the vectors are in the verified record: another store object scores the same
    assert keys_of(open_store(index=INDEX).search(("docs",), query="dog", limit=2)) == [
        "pets",
        "mix",
    ]


def test_vector_fields_with_paths_and_an_async_embedding(tmp_path):
    index = {"dims": len(WORDS) + 1, "embed": aembed, "fields": ["title", "body[*].text"]}

    async def run() -> list[tuple[str, float]]:
        async with VerifiedStore(tmp_path / "store", index=index) as store:
            await store.aput(("d",), "1", {"title": "cat", "body": [{"text": "sea"}]})
            await store.aput(("d",), "2", {"title": "sky", "body": [{"text": "dog"}]})
            await store.aput(("d",), "3", {"title": "mouse", "body": []})
            return [(i.key, i.score) for i in await store.asearch(("d",), query="sea sea")]

    found = asyncio.run(run())
    # "1" matched through its body's text, not its title
    assert found[0][0] == "1" and found[0][1] > 0.9
    assert {key for key, _ in found[1:]} == {"2", "3"}
    assert all(score < 0.1 for _, score in found[1:])


def test_vector_search_without_numpy(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy now raises ImportError
    store = VerifiedStore.in_memory(index=INDEX)
    store.put(("d",), "a", {"text": "apple"})
    store.put(("d",), "b", {"text": "dog"})
    found = store.search(("d",), query="dog")
    assert keys_of(found) == ["b", "a"]
    assert found[0].score == pytest.approx(1.0)


# -- damage --------------------------------------------------------------------------


def test_a_flipped_byte_is_reported_and_the_item_reads_as_missing(open_store):
    """A batch that fails verification is never used: each store that finds it reports
    it, moves it aside, and reads the item it alone held as missing. (The store that
    wrote a batch keeps the view it verified when writing: readers are opened afresh.)"""
    damages: list[Damage] = []
    store = open_store()
    ns = ("ns",)
    store.put(ns, "k", {"secret": "value"})
    store.put(ns, "other", {"fine": True})
    key = batch_of(store, ns, "k")
    assert key != batch_of(store, ns, "other")
    data = store.storage.read(key)
    for at in (30, len(data) // 2, len(data) - 1, 31, 32):
        store.storage.write(key, flip_byte(data, at))
        reader = open_store(on_corruption=damages.append)
        assert reader.get(ns, "k") is None  # never a wrong value
        assert keys_of(reader.search(ns)) == ["other"]
        assert reader.list_namespaces() == [ns]  # "other" still lives there
        assert (reader.stats.damaged_records, reader.stats.quarantined_records) == (1, 1)
        assert reader.storage.read(key) is None  # moved aside
    assert [d.key for d in damages] == [key] * 5
    assert {d.kind for d in damages} == {"store_batch"}
    assert all(d.quarantined_to is not None and not d.healed for d in damages)
    assert items(store) == [(ns, "other")]
    reader.put(ns, "k", {"secret": "again"})
    assert reader.get(ns, "k").value == {"secret": "again"}
    assert open_store().get(ns, "k").value == {"secret": "again"}


def test_a_damaged_batch_in_the_log_on_disk(tmp_path):
    store_dir = tmp_path / "store"
    writer = VerifiedStore(store_dir)
    writer.put(("users", "ada"), "prefs", {"v": 1})
    writer.put(("users", "bob"), "prefs", {"v": 2})  # after it: ada's is not the log's tail
    key = batch_of(writer, ("users", "ada"), "prefs")
    log = store_dir / "memories" / "users" / "log"
    assert log.is_file()
    view = view_log(log.read_bytes(), "memories/users")
    name = key.rsplit("/", 1)[1][: -len(".batch")]
    assert Codec().decode(
        view.read(key), RecordKind.STORE_BATCH, {"store_label": "users", "store_batch": name}
    )
    entry = view.entry(key)
    lose_parity(log)  # damage beyond what the log's parity rebuilds
    raw = bytearray(log.read_bytes())
    raw[entry.data_offset + entry.data_size - 5] ^= 0xFF
    log.write_bytes(bytes(raw))
    reopened = VerifiedStore(store_dir)
    assert reopened.get(("users", "ada"), "prefs") is None
    assert reopened.get(("users", "bob"), "prefs").value == {"v": 2}
    assert reopened.storage.read(key) is None
    assert reopened.stats.damaged_records == 1
    assert len(list((store_dir / "quarantine").glob("*.record"))) == 1
    again = VerifiedStore(store_dir)  # moved aside: found once
    assert again.get(("users", "ada"), "prefs") is None
    assert again.stats.damaged_records == 0


def test_a_batch_copied_to_another_place_is_rejected(open_store):
    store = open_store()
    store.put(("ns",), "mine", {"v": "mine"})
    store.put(("ns",), "yours", {"v": "yours"})
    mine_key, yours_key = batch_of(store, ("ns",), "mine"), batch_of(store, ("ns",), "yours")
    mine = store.storage.read(mine_key)
    store.storage.write(yours_key, mine)  # over another batch of its label
    store.storage.write(batch_key("other", new_batch_name(None)), mine)  # under another label
    reader = open_store()
    assert reader.get(("ns",), "yours") is None
    assert reader.get(("ns",), "mine").value == {"v": "mine"}
    assert reader.get(("other",), "mine") is None
    assert reader.stats.damaged_records == 2
    # written again after a newer version, an old batch does not bring its version back
    store.put(("ns",), "mine", {"v": "newer"})
    newest = max(k.rsplit("/", 1)[1] for k in batches(store, "ns"))
    store.storage.write(batch_key("ns", new_batch_name(newest)), mine)
    # found by a search of the whole store (no label asked for) it is rejected too
    store.storage.write(batch_key("third", new_batch_name(None)), mine)
    reader = open_store()
    assert reader.get(("ns",), "mine").value == {"v": "newer"}
    assert keys_of(reader.search(())) == ["mine"]
    assert reader.list_namespaces() == [("ns",)]
    assert reader.stats.damaged_records == 2


def test_a_batch_named_before_what_a_reader_applied_is_read_in_name_order():
    """Another machine, its clock behind, writes a batch named before one this reader
    applied already (two machines on one bucket write at once): the reader applies the
    label again in name order, as every reader opening it does, so that all of them
    agree on which version of an item is the newest."""
    shared = MemoryStorage()
    with time_machine.travel(T0 - timedelta(hours=1), tick=False):
        behind = VerifiedStore(storage=MemoryStorage())
        behind.put(("ns",), "k", {"v": "written late, named early"})
    early_key = batch_of(behind, ("ns",), "k")
    with time_machine.travel(T0, tick=False):
        writer = VerifiedStore(storage=shared)
        writer.put(("ns",), "k", {"v": "named last"})
        reader = VerifiedStore(storage=shared)
        assert reader.get(("ns",), "k").value == {"v": "named last"}
        shared.write(early_key, behind.storage.read(early_key))
        writer.put(("ns",), "other", {"v": 1})  # the reader has new batches to read
        fresh = VerifiedStore(storage=shared)
        assert fresh.get(("ns",), "k").value == {"v": "named last"}
        assert reader.get(("ns",), "k").value == {"v": "named last"}
        assert reader.get(("ns",), "other").value == {"v": 1}


@pytest.mark.parametrize("kind", [RecordKind.CACHE_ENTRY, RecordKind.STORE_ITEM])
def test_a_record_of_another_kind_is_not_a_batch(open_store, kind):
    store = open_store()
    store.put(("ns",), "first", {"v": 0})
    item = ItemVersion(("ns",), "k", "", 1, 2, None, None, store.serde.dumps_typed({"v": 1}))
    content = encode_batch(Batch(puts=[item]))
    name = new_batch_name(max(k.rsplit("/", 1)[1] for k in batches(store, "ns")))
    forged = store.codec.encode(kind, batch_identity("ns", name), content)
    store.storage.write(batch_key("ns", name), forged)
    reader = open_store()
    assert reader.get(("ns",), "k") is None
    assert reader.get(("ns",), "first").value == {"v": 0}
    assert reader.stats.damaged_records == 1
    # the same content as a batch record is read: only the kind was wrong
    later = new_batch_name(name)
    record = store.codec.encode(RecordKind.STORE_BATCH, batch_identity("ns", later), content)
    store.storage.write(batch_key("ns", later), record)
    assert open_store().get(("ns",), "k").value == {"v": 1}


def test_a_batch_that_changes_items_of_another_label_is_damage(open_store):
    """A batch record is framed with its label, and every item it changes must be of that
    label: one that is not (well framed, but not what any writer makes) is reported and
    set aside, and brings no item into a namespace it does not hold."""
    store = open_store()
    store.put(("ns",), "first", {"v": 0})
    item = ItemVersion(("other",), "k", "", 1, 2, None, None, store.serde.dumps_typed({"v": 1}))
    name = new_batch_name(max(k.rsplit("/", 1)[1] for k in batches(store, "ns")))
    record = store.codec.encode(
        RecordKind.STORE_BATCH, batch_identity("ns", name), encode_batch(Batch(puts=[item]))
    )
    store.storage.write(batch_key("ns", name), record)
    reader = open_store()
    assert reader.get(("ns",), "first").value == {"v": 0}
    assert keys_of(reader.search(())) == ["first"]
    assert reader.list_namespaces() == [("ns",)]
    assert reader.stats.damaged_records == 1


def test_a_damaged_touch_costs_the_refresh_never_the_value(open_store):
    store = open_store(ttl={"default_ttl": 10})
    with time_machine.travel(T0, tick=False) as clock:
        store.put(("ns",), "k", {"v": 1})
        clock.shift(5 * 60)
        store.get(("ns",), "k")  # a touch to 15 minutes, in a batch of its own
        [touch_key] = [k for k in batches(store, "ns") if read_batch(store, k).touches]
        assert touch_key != batch_of(store, ("ns",), "k")
        data = store.storage.read(touch_key)
        store.storage.write(touch_key, flip_byte(data, len(data) // 2))
        reader = open_store(ttl={"default_ttl": 10})
        assert reader.get(("ns",), "k", refresh_ttl=False).value == {"v": 1}
        assert reader.stats.damaged_records == 1
        clock.shift(5 * 60)  # the item's own expiry holds
        assert reader.get(("ns",), "k") is None


def test_items_written_with_a_key_need_it(tmp_path):
    store_dir = tmp_path / "store"
    VerifiedStore(store_dir, key=b"k" * 32).put(("ns",), "k", {"v": 1})
    with pytest.raises(StoreKeyError):
        VerifiedStore(store_dir)
    assert VerifiedStore(store_dir, key=b"k" * 32).get(("ns",), "k").value == {"v": 1}


def test_an_encrypted_serializer_keeps_values_unreadable_at_rest(open_store):
    serde = EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY)
    store = open_store(serde=serde)
    store.put(("secret",), "k", {"text": "a very secret value"})
    [key] = batches(store, "secret")
    record = store.storage.read(key)
    content = store.codec.decode(record, RecordKind.STORE_BATCH, None)
    assert read_batch(store, key).puts[0].key == "k"  # the item's batch, verified
    assert b"a very secret value" not in content and b"a very secret value" not in record
    assert open_store(serde=serde).get(("secret",), "k").value == {"text": "a very secret value"}
    assert keys_of(open_store(serde=serde).search((), filter={"text": "a very secret value"})) == [
        "k"
    ]


# -- keys ----------------------------------------------------------------------------

HOSTILE = [
    (("/", "~2e~2e"), "../../etc/passwd"),  # labels may not hold "." (LangGraph's rule)
    (("a/b",), "a/b"),
    (("x" * 10_000,), "é" * 5_000),
    (("ns",), ""),
    (("~", "~~"), "."),
    (("a", "k"), "k"),
    (("a",), "k"),
    (("CASE",), "Case"),
    (("case",), "case"),
    (("a,b",), "k"),
    (("a", "b"), "k"),
    (("a", "b"), "k.item"),
]


def test_hostile_keys_and_namespaces_stay_inside_the_store(open_store, tmp_path):
    store = open_store()
    for i, (ns, key) in enumerate(HOSTILE):
        store.put(ns, key, {"i": i})
    for i, (ns, key) in enumerate(HOSTILE):
        assert store.get(ns, key).value == {"i": i}
    stored = items(store)
    assert stored == sorted(set(stored)) and len(stored) == len(HOSTILE)  # no two share a place
    # one log per first label, its name decoded back to the label exactly
    assert store.logs.labels() == sorted({ns[0] for ns, _ in HOSTILE})
    records = list(store.storage.walk("memories"))
    assert records and all(k.startswith("memories/") for k in records)
    assert all(".." not in k.split("/") and len(s) < 255 for k in records for s in k.split("/"))
    on_disk = list(tmp_path.rglob("*"))
    assert all(len(p.name) < 255 for p in on_disk)
    outside = [p for p in on_disk if p.is_file() and "store" not in p.parts]
    assert outside == []
    assert sorted(store.list_namespaces()) == sorted({ns for ns, _ in HOSTILE})
    assert keys_of(store.search(("a",))) != []
    assert sorted(keys_of(store.search(("a", "b")))) == ["k", "k.item"]
    assert store.get(("/", "~2e~2e"), "../../etc/passwd").value == {"i": 0}
    assert keys_of(store.search(("x" * 10_000,))) == ["é" * 5_000]


# -- processes, graphs, the object -----------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from langgraph_checkpoint_verified import VerifiedStore
    store = VerifiedStore(sys.argv[1])
    if sys.argv[2] == "put":
        for i in range(int(sys.argv[3])):
            store.put(("child", str(i)), "k", {"i": i})
    else:
        print(store.get(("parent", "ns"), "k").value, store.list_namespaces(prefix=("parent",)))
    """
)


def test_another_process_reads_what_this_one_wrote(tmp_path):
    store_dir = str(tmp_path / "store")
    VerifiedStore(store_dir).put(("parent", "ns"), "k", {"from": "the parent"})
    shown = subprocess.run(
        [sys.executable, "-c", CHILD, store_dir, "get"], check=True, capture_output=True, text=True
    )
    assert shown.stdout.strip() == "{'from': 'the parent'} [('parent', 'ns')]"
    child = subprocess.Popen([sys.executable, "-c", CHILD, store_dir, "put", "30"])
    store = VerifiedStore(store_dir)
    for i in range(30):
        store.put(("parent", str(i)), "k", {"i": i})
    assert child.wait() == 0
    assert len(store.list_namespaces(prefix=("child",))) == 30
    assert sorted(i.value["i"] for i in store.search(("child",), limit=100)) == list(range(30))
    assert store.stats.damaged_records == 0


class State(TypedDict):
    user: str
    visits: int
    note: str


def test_a_graph_uses_the_store_beside_a_saver_and_a_cache(tmp_path):
    """One directory: checkpoints, the node cache and long-term memory, each verified."""

    def count_visit(state: State) -> dict[str, Any]:
        store = get_store()
        seen = store.get(("visits", state["user"]), "count")
        visits = (seen.value["n"] if seen else 0) + 1
        store.put(("visits", state["user"]), "count", {"n": visits})
        return {"visits": visits}

    def remember(state: State, *, store: BaseStore) -> dict[str, Any]:  # injected by name
        store.put(("notes", state["user"]), f"visit-{state['visits']}", {"n": state["visits"]})
        return {"note": f"{len(store.search(('notes', state['user'])))} notes"}

    directory = tmp_path / "store"
    builder = StateGraph(State)
    builder.add_node("count_visit", count_visit)
    builder.add_node("remember", remember)
    builder.add_edge(START, "count_visit")
    builder.add_edge("count_visit", "remember")
    graph = builder.compile(
        checkpointer=VerifiedSaver(directory),
        store=VerifiedStore(directory),
        cache=VerifiedCache(directory),
    )
    for thread in ("t1", "t2"):
        result = graph.invoke(
            {"user": "ada", "visits": 0, "note": ""}, {"configurable": {"thread_id": thread}}
        )
    assert result == {"user": "ada", "visits": 2, "note": "2 notes"}

    async def again() -> dict[str, Any]:
        return await graph.ainvoke(
            {"user": "ada", "visits": 0, "note": ""}, {"configurable": {"thread_id": "t3"}}
        )

    assert asyncio.run(again())["note"] == "3 notes"
    assert sorted(p.name for p in directory.iterdir()) == ["memories", "store.marker", "threads"]
    assert VerifiedSaver(directory).verify().ok
    assert VerifiedStore(directory).get(("visits", "ada"), "count").value == {"n": 3}


def test_construction_and_closing(tmp_path):
    with pytest.raises(TypeError, match="exactly one"):
        VerifiedStore()
    with pytest.raises(TypeError, match="exactly one"):
        VerifiedStore(tmp_path, storage=MemoryStorage())
    with pytest.raises(TypeError, match="PathLike"):
        VerifiedStore(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="embed"):
        VerifiedStore.in_memory(index={"dims": 3})  # type: ignore[typeddict-item]
    with VerifiedStore.from_conn_string(str(tmp_path / "store")) as store:
        store.put(("ns",), "k", {"v": 1})
        assert repr(store).startswith("VerifiedStore(FileStorage(")
    with pytest.raises(VerifiedSaverError, match="closed"):
        store.get(("ns",), "k")
    with VerifiedStore.from_conn_string(":memory:") as memory:
        assert isinstance(memory.storage, MemoryStorage)

    async def use() -> None:
        async with VerifiedStore.in_memory() as store:
            await store.aput(("ns",), "k", {"v": 1})
        with pytest.raises(VerifiedSaverError, match="closed"):
            await store.aget(("ns",), "k")

    asyncio.run(use())


@pytest.mark.parametrize("fsync", [True, False])
def test_a_put_is_durable_only_with_fsync(tmp_path, fsync):
    from faultfs import FaultFS

    store_dir = tmp_path / "store"
    store = VerifiedStore(store_dir, fsync=fsync)
    store.put(("warm",), "k", {"v": 0})
    with FaultFS(store_dir) as disk:
        store.put(("ns", "deep"), "k", {"v": 1})
        unsynced = disk.unsynced()
        disk.cut_power()
    if fsync:
        # the label's new log and its directory are synced; the parity beside the log is
        # written after the sync and never synced on its own (docs/format.md)
        assert [line for line in unsynced if "memories/ns/log.parity" not in line] == []
        assert VerifiedStore(store_dir).get(("ns", "deep"), "k").value == {"v": 1}
    else:
        assert any(line.startswith("memories/ns/log:") for line in unsynced), unsynced


# -- the same behaviour as InMemoryStore ------------------------------------------------

NAMESPACES = st.sampled_from([("a",), ("a", "b"), ("b",), ("a", "b", "c")])
KEYS = st.sampled_from(["k", "l", "../k", "K"])
VALUES = st.fixed_dictionaries(
    {"n": st.integers(-5, 5), "tag": st.sampled_from(["x", "y"])},
    optional={"nested": st.fixed_dictionaries({"m": st.integers(0, 3)})},
)
FILTERS = st.none() | st.sampled_from(
    [
        {"tag": "x"},
        {"n": {"$gt": 0}},
        {"n": {"$gte": -1, "$lte": 2}},
        {"n": {"$ne": 0}},
        {"nested": {"m": 1}},
        {"tag": "y", "n": {"$lt": 3}},
    ]
)
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), NAMESPACES, KEYS, VALUES),
        st.tuples(st.just("delete"), NAMESPACES, KEYS),
        st.tuples(st.just("get"), NAMESPACES, KEYS),
        st.tuples(st.just("search"), st.sampled_from([(), ("a",), ("a", "b"), ("b",)]), FILTERS),
        st.tuples(
            st.just("list"),
            st.none() | st.sampled_from([("a",), ("*", "b")]),
            st.none() | st.integers(1, 2),
        ),
    ),
    max_size=30,
)


NARROW_PREFIX = [
    ("put", ("a", "b"), "l", {"n": 0, "tag": "x"}),
    ("put", ("a", "b", "c"), "k", {"n": 0, "tag": "x"}),
    ("put", ("a", "b"), "k", {"n": 1, "tag": "y"}),
    ("search", ("a", "b"), None),
    ("search", ("a",), {"tag": "x"}),
]
"""Several namespaces under a prefix narrower than their first label: tried by both model
tests whatever Hypothesis draws."""


def _view(found) -> list[tuple[tuple[str, ...], str, Any]]:
    return sorted((tuple(i.namespace), i.key, i.value) for i in found)


def _apply_to_both(
    verified: VerifiedStore, reference: InMemoryStore, operation: str, args: list[Any]
) -> None:
    """One put, delete, get or search on both stores; what they return must agree."""
    if operation == "put":
        verified.put(*args)
        reference.put(*args)
    elif operation == "delete":
        verified.delete(*args)
        reference.delete(*args)
    elif operation == "get":
        mine, theirs = verified.get(*args), reference.get(*args)
        assert (mine and mine.value) == (theirs and theirs.value)
    else:
        prefix, filter = args
        assert _view(verified.search(prefix, filter=filter, limit=100)) == _view(
            reference.search(prefix, filter=filter, limit=100)
        )


@settings(derandomize=True, database=None, max_examples=150, deadline=None)
@given(OPERATIONS)
@example(NARROW_PREFIX)
def test_it_behaves_as_in_memory_store(operations):
    verified, reference = VerifiedStore.in_memory(), InMemoryStore()
    for operation, *args in operations:
        if operation != "list":
            _apply_to_both(verified, reference, operation, args)
        else:
            prefix, depth = args
            # InMemoryStore keeps listing a namespace whose items were all deleted
            # (or that a get only looked at); a namespace here is its items
            live = {tuple(i.namespace) for i in reference.search((), limit=1000)}
            expected = sorted(
                {
                    ns[:depth] if depth else ns
                    for ns in live
                    if prefix is None
                    or (
                        len(ns) >= len(prefix)
                        and all(p in ("*", n) for n, p in zip(ns, prefix, strict=False))
                    )
                }
            )
            assert verified.list_namespaces(prefix=prefix, max_depth=depth) == expected
    assert _view(verified.search((), limit=1000)) == _view(reference.search((), limit=1000))


@settings(derandomize=True, database=None, max_examples=60, deadline=None)
@given(
    OPERATIONS,
    st.lists(st.integers(0, 29), max_size=3),
    st.lists(st.integers(0, 29), max_size=3),
)
@example(
    NARROW_PREFIX,
    [3],
    [],
)
def test_on_files_it_behaves_as_in_memory_store_through_compaction_and_reopening(
    operations, reopen_at, compact_at
):
    """The same model test on a file store whose labels compact on their own after 4
    dead versions (as many as live items), are compacted at random points too, and
    which is opened again (its logs replayed) at random points."""
    import tempfile

    from langgraph_checkpoint_verified.store import logs

    real_threshold = logs.COMPACT_AFTER
    logs.COMPACT_AFTER = 4
    try:
        with tempfile.TemporaryDirectory() as directory:
            verified, reference = VerifiedStore(directory), InMemoryStore()
            for step, (operation, *args) in enumerate(operations):
                if step in reopen_at:
                    verified = VerifiedStore(directory)
                if step in compact_at:
                    for label in verified.logs.labels():
                        verified.logs.compact(label)
                if operation != "list":
                    _apply_to_both(verified, reference, operation, args)
            expected = _view(reference.search((), limit=1000))
            assert _view(verified.search((), limit=1000)) == expected
            again = VerifiedStore(directory)
            assert _view(again.search((), limit=1000)) == expected
            assert again.stats.damaged_records == 0
            assert again.verify().ok
    finally:
        logs.COMPACT_AFTER = real_threshold


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_tool_with_an_injected_store_remembers_across_threads(tmp_path, mode):
    """A ``ToolNode`` tool declared with ``InjectedStore``: LangGraph hands it the graph's
    ``VerifiedStore``; what it puts in one thread is found from another, and by a new
    store on the same directory."""

    @tool
    def remember(fact: str, user: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
        """Remember a fact about a user."""
        key = f"fact-{len(store.search(('facts', user))) + 1}"
        store.put(("facts", user), key, {"fact": fact})
        return key

    @tool
    def recall(user: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
        """Everything remembered about a user."""
        return "; ".join(sorted(i.value["fact"] for i in store.search(("facts", user))))

    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([remember, recall]))
    builder.add_edge(START, "tools")
    directory = tmp_path / "state"
    graph = builder.compile(checkpointer=VerifiedSaver(directory), store=VerifiedStore(directory))

    def call(name: str, args: dict[str, Any], thread: str) -> str:
        message = AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"{thread}-1"}])
        config = {"configurable": {"thread_id": thread}}
        state = {"messages": [message]}
        result = (
            graph.invoke(state, config)
            if mode == "sync"
            else asyncio.run(graph.ainvoke(state, config))
        )
        return result["messages"][-1].content

    assert call("remember", {"fact": "likes tea", "user": "ada"}, "monday") == "fact-1"
    assert call("remember", {"fact": "has a cat", "user": "ada"}, "tuesday") == "fact-2"
    assert call("recall", {"user": "ada"}, "wednesday") == "has a cat; likes tea"
    again = VerifiedStore(directory)
    assert again.get(("facts", "ada"), "fact-1").value == {"fact": "likes tea"}
    assert again.stats.damaged_records == 0
