"""``VerifiedCache``: LangGraph's node cache on verified records.

Graph tests compile real ``StateGraph``s with ``CachePolicy`` nodes that count their
calls, on files, in memory and on S3, through ``invoke`` and ``ainvoke``: every count
is asserted exactly. Time is moved with ``time_machine``, never waited for. Damage is
made on purpose (a flipped byte, an entry copied to another key's place) and what the
graph and the counters see afterwards is asserted. A model test runs the same
operations on ``VerifiedCache`` and LangGraph's ``InMemoryCache`` and compares.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import time_machine
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import START, StateGraph
from langgraph.types import CachePolicy
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import (
    Damage,
    MemoryStorage,
    StoreKeyError,
    VerifiedCache,
    VerifiedSaver,
    VerifiedSaverError,
)
from langgraph_checkpoint_verified.records.format import Codec, RecordKind
from langgraph_checkpoint_verified.records.keys import cache_entry_key

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
BACKENDS = ["files", "memory", "s3"]
AES_KEY = b"0123456789abcdef0123456789abcdef"


class State(TypedDict):
    n: int


def counting_graph(cache: VerifiedCache, calls: list[int], *, ttl: int | None = None, **compile):
    """A one-node graph whose node doubles ``n`` and records each call in ``calls``."""

    def double(state: State) -> State:
        calls.append(state["n"])
        return {"n": state["n"] * 2}

    builder = StateGraph(State)
    builder.add_node("double", double, cache_policy=CachePolicy(ttl=ttl))
    builder.add_edge(START, "double")
    return builder.compile(cache=cache, **compile)


def entry_keys(cache: VerifiedCache) -> list[str]:
    return list(cache.storage.walk("cache"))


def flip_byte(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


@pytest.fixture(params=BACKENDS)
def open_cache(request, tmp_path: Path) -> Callable[..., VerifiedCache]:
    """Opens a cache on one store; each call opens it again (same entries)."""
    if request.param == "s3":
        endpoint, bucket = request.getfixturevalue("s3_bucket")
        from test_s3 import s3_storage

        return lambda **kwargs: VerifiedCache(storage=s3_storage(endpoint, bucket), **kwargs)
    if request.param == "memory":
        memory = MemoryStorage()
        return lambda **kwargs: VerifiedCache(storage=memory, **kwargs)
    return lambda **kwargs: VerifiedCache(tmp_path / "store", **kwargs)


# -- graphs ------------------------------------------------------------------------


def test_a_second_invoke_is_answered_from_the_cache(open_cache):
    calls: list[int] = []
    graph = counting_graph(open_cache(), calls)
    assert graph.invoke({"n": 21}) == {"n": 42}
    assert graph.invoke({"n": 21}) == {"n": 42}
    assert calls == [21]
    assert graph.invoke({"n": 5}) == {"n": 10}  # another input: another entry
    assert calls == [21, 5]
    # the entries outlive the cache object: a cache opened again answers too
    reopened = counting_graph(open_cache(), calls)
    assert reopened.invoke({"n": 5}) == {"n": 10}
    assert calls == [21, 5]


def test_ainvoke_is_answered_from_the_cache(open_cache):
    calls: list[int] = []
    graph = counting_graph(open_cache(), calls)

    async def run() -> list[Any]:
        return [await graph.ainvoke({"n": 21}), await graph.ainvoke({"n": 21})]

    assert asyncio.run(run()) == [{"n": 42}, {"n": 42}]
    assert calls == [21]
    # what the async side wrote, the sync side reads, and the other way round
    assert counting_graph(open_cache(), calls).invoke({"n": 21}) == {"n": 42}
    assert calls == [21]


def test_the_async_twins_match_the_sync_calls(open_cache):
    cache = open_cache()
    ns = ("nodes", "a")

    async def run() -> tuple[dict, dict]:
        await cache.aset({(ns, "k"): ({"v": 1}, None), (ns, "other"): ([1, 2], None)})
        found = await cache.aget([(ns, "k"), (ns, "other"), (ns, "missing")])
        await cache.aclear([ns])
        return found, await cache.aget([(ns, "k")])

    found, after_clear = asyncio.run(run())
    assert found == {(ns, "k"): {"v": 1}, (ns, "other"): [1, 2]}
    assert after_clear == {}


def test_a_cache_policy_ttl_expires_the_entry(open_cache):
    calls: list[int] = []
    graph = counting_graph(open_cache(), calls, ttl=60)
    with time_machine.travel(T0, tick=False) as clock:
        graph.invoke({"n": 1})
        clock.shift(59)
        graph.invoke({"n": 1})
        assert calls == [1]
        clock.shift(1)  # exactly at the expiry: gone, as in InMemoryCache
        graph.invoke({"n": 1})
        assert calls == [1, 1]
        graph.invoke({"n": 1})  # the run just made a fresh entry
        assert calls == [1, 1]


def test_an_expired_entry_is_deleted_when_found(open_cache):
    cache = open_cache()
    key = (("ns",), "k")
    with time_machine.travel(T0, tick=False) as clock:
        cache.set({key: ("soon gone", 10), (("ns",), "kept"): ("kept", None)})
        assert entry_keys(cache) == [
            cache_entry_key(("ns",), "k"),
            cache_entry_key(("ns",), "kept"),
        ]
        clock.shift(10)
        assert cache.get([key, (("ns",), "kept")]) == {(("ns",), "kept"): "kept"}
    assert entry_keys(cache) == [cache_entry_key(("ns",), "kept")]
    assert cache.stats.damaged_records == 0


def test_an_expiry_is_absolute_so_another_clock_reads_it(open_cache):
    with time_machine.travel(T0, tick=False):
        open_cache().set({(("ns",), "k"): ("v", 3600)})
    with time_machine.travel(T0 + timedelta(minutes=59), tick=False):
        assert open_cache().get([(("ns",), "k")]) == {(("ns",), "k"): "v"}
    with time_machine.travel(T0 + timedelta(minutes=61), tick=False):
        assert open_cache().get([(("ns",), "k")]) == {}


def test_clear_cache_of_one_node_and_of_all(open_cache):
    calls: list[int] = []
    graph = counting_graph(open_cache(), calls)
    graph.invoke({"n": 1})
    graph.clear_cache(["double"])
    graph.invoke({"n": 1})
    assert calls == [1, 1]
    graph.clear_cache()
    graph.invoke({"n": 1})
    assert calls == [1, 1, 1]

    async def aclear() -> None:
        await graph.aclear_cache()

    asyncio.run(aclear())
    graph.invoke({"n": 1})
    assert calls == [1, 1, 1, 1]


def test_clear_deletes_only_the_namespaces_named(open_cache):
    cache = open_cache()
    a, a_b, b = ("a",), ("a", "b"), ("b",)
    cache.set({(a, "k"): (1, None), (a_b, "k"): (2, None), (b, "k"): (3, None)})
    cache.clear([a, ("never used",)])
    # ("a",) is not a prefix of what it clears: its sub-namespace stays, as in InMemoryCache
    assert cache.get([(a, "k"), (a_b, "k"), (b, "k")]) == {(a_b, "k"): 2, (b, "k"): 3}
    cache.clear()
    assert cache.get([(a, "k"), (a_b, "k"), (b, "k")]) == {}
    assert entry_keys(cache) == []


def test_a_cache_and_a_saver_share_one_directory(tmp_path):
    store = tmp_path / "store"
    calls: list[int] = []
    saver, cache = VerifiedSaver(store), VerifiedCache(store)
    graph = counting_graph(cache, calls, checkpointer=saver)
    for thread in ("t1", "t2"):
        assert graph.invoke({"n": 3}, {"configurable": {"thread_id": thread}}) == {"n": 6}
    assert calls == [3]  # the second thread's node was answered from the cache
    assert saver.get_tuple({"configurable": {"thread_id": "t2"}}).checkpoint["channel_values"] == {
        "n": 6
    }
    assert sorted(p.name for p in store.iterdir()) == ["cache", "store.marker", "threads"]
    assert saver.verify().ok


# -- damage ------------------------------------------------------------------------


def test_a_flipped_byte_is_a_miss_reported_and_quarantined(open_cache):
    found: list[Damage] = []
    cache = open_cache(on_corruption=found.append)
    calls: list[int] = []
    graph = counting_graph(cache, calls)
    graph.invoke({"n": 7})
    [key] = entry_keys(cache)
    data = cache.storage.read(key)
    # every byte of the record is covered: try the identity, the payload, the digest
    for at in (30, len(data) // 2, len(data) - 1):
        cache.storage.write(key, flip_byte(data, at))
        assert graph.invoke({"n": 7}) == {"n": 14}  # the node ran again: never a wrong value
    assert calls == [7, 7, 7, 7]
    assert cache.stats.damaged_records == 3
    assert cache.stats.quarantined_records == 3
    assert [d.key for d in found] == [key] * 3
    assert all(d.quarantined_to for d in found)
    quarantined = [k for k in cache.storage.walk("quarantine") if k.endswith(".record")]
    assert sorted(cache.storage.read(k) for k in quarantined) == sorted(
        flip_byte(data, at) for at in (30, len(data) // 2, len(data) - 1)
    )
    # the run after the damage wrote a good entry again
    graph.invoke({"n": 7})
    assert calls == [7, 7, 7, 7]


def test_a_damaged_entry_file_on_disk(tmp_path):
    """On files, an entry is one file of its own at its key, outside every thread log."""
    store = tmp_path / "store"
    cache = VerifiedCache(store)
    cache.set({(("ns", "node"), "k"): ("value", None)})
    path = store / "cache" / "ns" / "node" / "k.entry"
    assert path.is_file()
    assert Codec().decode(
        path.read_bytes(), RecordKind.CACHE_ENTRY, {"cache_namespace": '["ns","node"]'}
    )
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    reopened = VerifiedCache(store)
    assert reopened.get([(("ns", "node"), "k")]) == {}
    assert not path.exists()
    assert reopened.stats.damaged_records == 1
    assert len(list((store / "quarantine").glob("*.record"))) == 1
    assert len(list((store / "quarantine").glob("*.reason"))) == 1


def test_an_entry_copied_to_another_keys_place_is_rejected(open_cache):
    cache = open_cache()
    ns = ("ns",)
    cache.set({(ns, "mine"): ("my value", None), (ns, "yours"): ("your value", None)})
    # a verified record, in the wrong place: its identity names another key
    cache.storage.write(
        cache_entry_key(ns, "yours"), cache.storage.read(cache_entry_key(ns, "mine"))
    )
    cache.storage.write(
        cache_entry_key(("other",), "mine"), cache.storage.read(cache_entry_key(ns, "mine"))
    )
    assert cache.get([(ns, "yours"), (("other",), "mine"), (ns, "mine")]) == {
        (ns, "mine"): "my value"
    }
    assert cache.stats.damaged_records == 2


def test_a_record_of_another_kind_is_not_an_entry(open_cache):
    cache = open_cache()
    identity = {"cache_namespace": '["ns"]', "cache_key": "k"}
    forged = cache.codec.encode(RecordKind.TOOL_RESULT, identity, b"\x80")
    cache.storage.write(cache_entry_key(("ns",), "k"), forged)
    assert cache.get([(("ns",), "k")]) == {}
    assert cache.stats.damaged_records == 1


def test_entries_written_with_a_key_need_it(tmp_path):
    store = tmp_path / "store"
    VerifiedCache(store, key=b"k" * 32).set({(("ns",), "k"): ("v", None)})
    with pytest.raises(StoreKeyError):
        VerifiedCache(store)
    with pytest.raises(StoreKeyError):
        VerifiedCache(store, key=b"x" * 32)
    assert VerifiedCache(store, key=b"k" * 32).get([(("ns",), "k")]) == {(("ns",), "k"): "v"}


# -- keys ----------------------------------------------------------------------------

HOSTILE = [
    (("../x",), "../../etc/passwd"),
    (("a/b",), "a/b"),
    (("\0",), "\0"),
    (("x" * 10_000,), "é" * 5_000),
    (("",), ""),
    ((), "no namespace"),
    (("~", "~~"), "."),
    (("a", ".."), ".."),
    (("CASE",), "Case"),
    (("case",), "case"),
    (("a,b",), "k"),
    (("a", "b"), "k"),
]


def test_hostile_keys_and_namespaces_stay_inside_the_store(open_cache, tmp_path):
    cache = open_cache()
    cache.set({key: (i, None) for i, key in enumerate(HOSTILE)})
    assert cache.get(HOSTILE) == {key: i for i, key in enumerate(HOSTILE)}
    keys = entry_keys(cache)
    assert len(keys) == len(HOSTILE)  # no two of them share an entry
    assert all(k.startswith("cache/") and k.endswith(".entry") for k in keys)
    assert all(".." not in k.split("/") and len(seg) < 255 for k in keys for seg in k.split("/"))
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and "store" not in p.parts]
    assert outside == []
    cache.clear([("a", "b")])
    assert (("a,b",), "k") in cache.get(HOSTILE)
    assert (("a", "b"), "k") not in cache.get(HOSTILE)


def test_keys_that_cannot_be_stored_are_refused():
    cache = VerifiedCache.in_memory()
    with pytest.raises(ValueError, match="lone surrogate"):
        cache.set({(("ns",), "\ud800"): ("v", None)})
    with pytest.raises(TypeError, match="tuple of strings"):
        cache.get([("ns", "k")])
    with pytest.raises(TypeError, match="must be a str"):
        cache.set({(("ns",), 1): ("v", None)})
    with pytest.raises(TypeError, match="ttl"):
        cache.set({(("ns",), "k"): ("v", "60")})


# -- processes, serializers, durability, the object ------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from langgraph_checkpoint_verified import VerifiedCache
    cache = VerifiedCache(sys.argv[1])
    if sys.argv[2] == "set":
        cache.set({(("child", str(i)), "k"): (i, None) for i in range(int(sys.argv[3]))})
    else:
        print(sorted(v for v in cache.get([(("parent", "ns"), "k")]).values()))
    """
)


def test_another_process_sees_the_entries(tmp_path):
    store = str(tmp_path / "store")
    VerifiedCache(store).set({(("parent", "ns"), "k"): ("from the parent", None)})
    shown = subprocess.run(
        [sys.executable, "-c", CHILD, store, "get"], check=True, capture_output=True, text=True
    )
    assert shown.stdout.strip() == "['from the parent']"
    # both processes write at once; every entry of each is there afterwards
    child = subprocess.Popen([sys.executable, "-c", CHILD, store, "set", "40"])
    VerifiedCache(store).set({(("parent", str(i)), "k"): (i, None) for i in range(40)})
    assert child.wait() == 0
    cache = VerifiedCache(store)
    for side in ("child", "parent"):
        found = cache.get([((side, str(i)), "k") for i in range(40)])
        assert sorted(found.values()) == list(range(40))
    assert cache.stats.damaged_records == 0


CACHED_APP = textwrap.dedent(
    """
    from typing_extensions import TypedDict
    from langgraph.graph import START, StateGraph
    from langgraph.types import CachePolicy
    from langgraph_checkpoint_verified import VerifiedCache

    class State(TypedDict):
        n: int

    calls = []

    def double(state):
        calls.append(state["n"])
        return {"n": state["n"] * 2}

    def build(directory):
        builder = StateGraph(State)
        builder.add_node("double", double, cache_policy=CachePolicy())
        builder.add_edge(START, "double")
        return builder.compile(cache=VerifiedCache(directory))
    """
)
CHILD_GRAPH = textwrap.dedent(
    """
    import asyncio, sys
    import cached_app
    graph = cached_app.build(sys.argv[1])
    if sys.argv[2] == "async":
        results = [asyncio.run(graph.ainvoke({"n": n})) for n in (3, 4)]
    else:
        results = [graph.invoke({"n": n}) for n in (3, 4)]
    print([r["n"] for r in results], "runs:", cached_app.calls)
    """
)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_second_process_running_the_graph_reuses_its_cached_node_results(
    tmp_path, monkeypatch, mode
):
    """A ``CachePolicy`` node (of an app module, as a server loads one) whose result one
    process cached is not run again by the same graph in another process on the same
    directory; a new input runs it there, and this process then finds that result."""
    import importlib

    (tmp_path / "cached_app.py").write_text(CACHED_APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cached_app", raising=False)
    app = importlib.import_module("cached_app")
    store = str(tmp_path / "store")
    graph = app.build(store)
    assert graph.invoke({"n": 3}) == {"n": 6} and app.calls == [3]
    shown = subprocess.run(
        [sys.executable, "-c", CHILD_GRAPH, store, mode],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    # 3 was cached by this process; 4 is new, so the child runs the node for it alone
    assert shown.stdout.strip() == "[6, 8] runs: [4]"
    assert graph.invoke({"n": 4}) == {"n": 8} and app.calls == [3]  # the child's entry
    monkeypatch.delitem(sys.modules, "cached_app")


def test_an_encrypted_serializer_keeps_values_unreadable_at_rest(open_cache):
    serde = EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY)
    calls: list[int] = []
    cache = open_cache(serde=serde)
    graph = counting_graph(cache, calls)
    graph.invoke({"n": 1234567})
    assert counting_graph(open_cache(serde=serde), calls).invoke({"n": 1234567}) == {"n": 2469134}
    assert calls == [1234567]
    cache.set({(("secret",), "k"): ("a very secret value", None)})
    content = cache.codec.decode(
        cache.storage.read(cache_entry_key(("secret",), "k")), RecordKind.CACHE_ENTRY, None
    )
    assert b"a very secret value" not in content
    assert cache.get([(("secret",), "k")]) == {(("secret",), "k"): "a very secret value"}


@pytest.mark.parametrize("fsync", [True, False])
def test_a_set_is_durable_only_with_fsync(tmp_path, fsync):
    from faultfs import FaultFS

    store = tmp_path / "store"
    cache = VerifiedCache(store, fsync=fsync)
    cache.set({(("warm",), "k"): ("made before", None)})
    with FaultFS(store) as disk:
        cache.set({(("ns", "node"), "k"): ("value", None)})
        unsynced = disk.unsynced()
        disk.cut_power()
    if fsync:
        assert unsynced == []
        assert VerifiedCache(store).get([(("ns", "node"), "k")]) == {(("ns", "node"), "k"): "value"}
    else:
        assert any("cache/ns/node" in line for line in unsynced), unsynced


def test_construction_and_closing(tmp_path):
    with pytest.raises(TypeError, match="exactly one"):
        VerifiedCache()
    with pytest.raises(TypeError, match="exactly one"):
        VerifiedCache(tmp_path, storage=MemoryStorage())
    with pytest.raises(TypeError, match="PathLike"):
        VerifiedCache(42)  # type: ignore[arg-type]
    with VerifiedCache(tmp_path / "store") as cache:
        cache.set({(("ns",), "k"): ("v", None)})
        assert repr(cache).startswith("VerifiedCache(FileStorage(")
    with pytest.raises(VerifiedSaverError, match="closed"):
        cache.get([(("ns",), "k")])

    async def use() -> None:
        async with VerifiedCache.in_memory() as cache:
            await cache.aset({(("ns",), "k"): ("v", None)})
        with pytest.raises(VerifiedSaverError, match="closed"):
            await cache.aget([(("ns",), "k")])

    asyncio.run(use())


def test_an_s3_url_opens_an_object_store(s3_bucket, monkeypatch):
    from s3server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY

    endpoint, bucket = s3_bucket
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(name, value)
    cache = VerifiedCache(f"s3://{bucket}/prefix")
    assert type(cache.storage).__name__ == "ObjectStorage"
    cache.set({(("ns",), "k"): ("v", None)})
    assert VerifiedCache(f"s3://{bucket}/prefix").get([(("ns",), "k")]) == {(("ns",), "k"): "v"}


# -- the same behaviour as InMemoryCache ------------------------------------------------

NAMESPACES = st.sampled_from([("a",), ("a", "b"), ("b",), ()])
KEYS = st.sampled_from(["k", "l", "../k"])
FULL_KEYS = st.tuples(NAMESPACES, KEYS)
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("set"),
            st.dictionaries(
                FULL_KEYS,
                st.tuples(
                    st.integers(-1000, 1000) | st.text(max_size=5), st.none() | st.integers(0, 20)
                ),
                max_size=3,
            ),
        ),
        st.tuples(st.just("get"), st.lists(FULL_KEYS, max_size=4)),
        st.tuples(st.just("clear"), st.none() | st.lists(NAMESPACES, max_size=2)),
        st.tuples(st.just("wait"), st.integers(0, 15)),
    ),
    max_size=25,
)


@settings(derandomize=True, database=None, max_examples=150, deadline=None)
@given(OPERATIONS)
def test_it_behaves_as_in_memory_cache(operations):
    verified, reference = VerifiedCache.in_memory(), InMemoryCache()
    with time_machine.travel(T0, tick=False) as clock:
        for operation, argument in operations:
            if operation == "wait":
                clock.shift(argument)
            elif operation == "set":
                verified.set(argument)
                reference.set(argument)
            elif operation == "get":
                assert verified.get(argument) == reference.get(argument)
            else:
                verified.clear(argument)
                reference.clear(argument)
        everything = [
            (ns, k) for ns in [("a",), ("a", "b"), ("b",), ()] for k in ["k", "l", "../k"]
        ]
        assert verified.get(everything) == reference.get(everything)
