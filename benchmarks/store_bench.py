"""Section 10: the long-term memory store and the node cache, next to LangGraph's own.

Three stores hold the same ``store_items`` items (a small JSON document each, in
ten namespaces ``("bench", "u0")`` .. ``("bench", "u9")``), put in batches of 100
before anything is timed: ``VerifiedStore(path)`` with its defaults (fsync on),
``SqliteStore`` on a file and ``InMemoryStore``. Then, in ``store_rounds``
interleaved rounds (each round runs every store once, ``rotated`` so that none
always goes first), one call each of:

* ``put`` of a new item;
* ``get`` of an existing item (a different one each round);
* ``search`` of the whole ``("bench",)`` prefix with a filter that one item in ten
  passes, ``limit=10``.

A second set of the three stores is made with an index (384 dims, the same
deterministic fake embedding for all: a function of the text's BLAKE2b digest, no
model), and a vector ``search`` (``query``, top 10 of ``store_items``) is timed in
``max(3, store_rounds // 10)`` rounds: it reads every vector, so it costs most.
Bytes on disk are taken after the puts (the store directory vs the SQLite file
and its -wal). The node cache: ``VerifiedCache.get`` vs ``SqliteCache.get`` of
one cached entry (a hit), ``store_rounds`` rounds.

Figures are p50 (and p99) in ms per call; ratios are medians over rounds of
VerifiedStore's time over the baseline's in the same round (``paired_ratio``).
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.cache.sqlite import SqliteCache
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore
from measure import p50_p99, paired_ratio, rotated, sqlite_bytes, tree_bytes

from langgraph_checkpoint_verified import VerifiedCache, VerifiedStore

VERIFIED_STORE = "VerifiedStore(path)"
SQLITE_STORE = "SqliteStore"
MEMORY_STORE = "InMemoryStore"
STORES = (VERIFIED_STORE, SQLITE_STORE, MEMORY_STORE)
VERIFIED_CACHE = "VerifiedCache(path)"
SQLITE_CACHE = "SqliteCache"
DIMS = 384
NAMESPACES = 10
KINDS = 10
FILL_BATCH = 100


def fake_embed(texts: list[str]) -> list[list[float]]:
    """A deterministic stand-in for an embedding model: the same vector for the same text."""
    vectors = []
    for text in texts:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
        rng = random.Random(seed)
        vectors.append([rng.uniform(-1.0, 1.0) for _ in range(DIMS)])
    return vectors


def item(n: int) -> tuple[tuple[str, ...], str, dict[str, Any]]:
    value = {
        "kind": f"k{n % KINDS}",
        "n": n,
        "text": f"memory {n}: the user said something about topic {n % 37}",
        "tags": ["a", "b"],
    }
    return ("bench", f"u{n % NAMESPACES}"), f"item-{n:06d}", value


def open_stores(workdir: Path, *, indexed: bool) -> tuple[dict[str, Any], str | None]:
    """The three stores (with an index if ``indexed``), and why SqliteStore is left out, if it is.

    SqliteStore's vector search needs the sqlite-vec extension, loaded through
    ``Connection.enable_load_extension``: a Python built without it cannot run it.
    """
    index: dict[str, Any] | None = (
        {"dims": DIMS, "embed": fake_embed, "fields": ["text"]} if indexed else None
    )
    name = "indexed" if indexed else "plain"
    stores: dict[str, Any] = {
        VERIFIED_STORE: VerifiedStore(workdir / name, index=index),  # type: ignore[arg-type]
    }
    conn = sqlite3.connect(workdir / f"{name}.db", check_same_thread=False, isolation_level=None)
    sqlite = SqliteStore(conn, index=index)  # type: ignore[arg-type]
    left_out = None
    try:
        sqlite.setup()
        stores[SQLITE_STORE] = sqlite
    except (AttributeError, sqlite3.Error, ImportError) as exc:
        if not indexed:
            raise
        left_out = f"SqliteStore's vector search could not be set up: {exc}"
        conn.close()
    stores[MEMORY_STORE] = InMemoryStore(index=index)  # type: ignore[arg-type]
    return stores, left_out


def fill(stores: dict[str, Any], count: int) -> None:
    for start in range(0, count, FILL_BATCH):
        ops = [PutOp(*item(n)) for n in range(start, min(start + FILL_BATCH, count))]
        for store in stores.values():
            store.batch(ops)


def timed_rounds(
    names: tuple[str, ...], rounds: int, call: Callable[[str, int], Any]
) -> dict[str, list[float]]:
    """``call(name, round)`` for each name in each round, rotated; seconds per call."""
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(rounds):
        for name in rotated(names, turn):
            started = time.perf_counter()
            call(name, turn)
            seconds[name].append(time.perf_counter() - started)
    return seconds


def summary(
    seconds: dict[str, list[float]], verified: str, baselines: tuple[str, ...]
) -> dict[str, Any]:
    return {
        "ms": {name: p50_p99(samples) for name, samples in seconds.items()},
        "ratios": {
            base: paired_ratio(seconds[verified], seconds[base])
            for base in baselines
            if base in seconds
        },
    }


def store_section(settings: Any, workdir: Path) -> dict[str, Any]:
    workdir.mkdir()
    count, rounds = settings.store_items, settings.store_rounds
    search_rounds = max(3, rounds // 10)
    baselines = (SQLITE_STORE, MEMORY_STORE)
    rng = random.Random(7)

    stores, _ = open_stores(workdir, indexed=False)
    fill(stores, count)
    disk = {
        VERIFIED_STORE: tree_bytes(workdir / "plain"),
        SQLITE_STORE: sqlite_bytes(workdir / "plain.db"),
    }
    figures: dict[str, Any] = {}
    figures["put"] = summary(
        timed_rounds(
            STORES,
            rounds,
            lambda name, turn: stores[name].put(
                ("bench", "new"), f"new-{turn:06d}", item(count + turn)[2]
            ),
        ),
        VERIFIED_STORE,
        baselines,
    )
    wanted = [item(rng.randrange(count))[:2] for _ in range(rounds)]

    def get(name: str, turn: int) -> None:
        assert stores[name].get(*wanted[turn]) is not None

    figures["get"] = summary(timed_rounds(STORES, rounds, get), VERIFIED_STORE, baselines)

    def filtered(name: str, turn: int) -> None:
        found = stores[name].search(("bench",), filter={"kind": f"k{turn % KINDS}"}, limit=10)
        assert len(found) == 10

    figures["search_filter"] = summary(
        timed_rounds(STORES, search_rounds, filtered), VERIFIED_STORE, baselines
    )

    indexed, left_out = open_stores(workdir, indexed=True)
    fill(indexed, count)

    def vector(name: str, turn: int) -> None:
        found = indexed[name].search(("bench",), query=f"topic {turn % 37}", limit=10)
        assert len(found) == 10 and found[0].score is not None

    figures["search_vector"] = summary(
        timed_rounds(tuple(indexed), search_rounds, vector), VERIFIED_STORE, baselines
    )
    if left_out:
        figures["search_vector"]["left_out"] = left_out

    caches: dict[str, Any] = {
        VERIFIED_CACHE: VerifiedCache(workdir / "cache"),
        SQLITE_CACHE: SqliteCache(path=str(workdir / "cache.db")),
    }
    entries: dict[Any, tuple[Any, int | None]] = {
        (("node", "summarize"), f"input-{n}"): ({"text": f"summary {n}"}, None) for n in range(100)
    }
    for cache in caches.values():
        cache.set(entries)
    cached = list(entries)

    def hit(name: str, turn: int) -> None:
        key = cached[turn % len(cached)]
        assert key in caches[name].get([key])

    figures["cache_hit"] = summary(
        timed_rounds((VERIFIED_CACHE, SQLITE_CACHE), rounds, hit), VERIFIED_CACHE, (SQLITE_CACHE,)
    )
    return {
        "store": {
            "items": count,
            "rounds": rounds,
            "search_rounds": search_rounds,
            "dims": DIMS,
            "bytes": disk,
            "ratio_bytes_vs_sqlite": disk[VERIFIED_STORE]["allocated"]
            / disk[SQLITE_STORE]["allocated"],
            **figures,
        }
    }
