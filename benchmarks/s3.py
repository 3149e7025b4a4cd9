"""Figure 8: VerifiedSaver on S3-compatible object storage next to langgraph-checkpoint-s3.

One moto S3 server (``tests/s3server.py``) is started for the section, with one
``FaultProxy`` in front of it that every saver talks to, so that every request
is seen and counted; each saver has buckets of its own. Savers take turns, one
call or one step at a time, so the proxy's requests between two turns are those
of one saver (checked: they must all name its bucket).

* **chat**: the chat graph of section 1 (``workload.build_chat_graph``), one
  ``graph.invoke`` per step: requests per step by method, the bytes of the
  request bodies uploaded (``PUT``/``POST``), the step's wall time and the time
  covered by the saver's own calls, and the time of each ``put`` and ``get_tuple``
  call the graph makes; then, after each step, a new saver (a new machine: its
  client made beforehand, not timed) reads the newest checkpoint.
* **thread**: one thread of chat-shaped checkpoints (``workload.raw_checkpoints``)
  is ``put`` (the requests counted), and at each length N the newest checkpoint
  is read by ``get_tuple``, from the saver that wrote it (it stays open) and from
  a new saver, as a new machine would (its client is made beforehand and not
  timed; the saver and ``get_tuple`` are). A design that lists every checkpoint
  of a thread to find the newest makes one ``LIST`` per 1,000 keys (S3's page)
  and reads all those keys.
* **stall**: ``aput`` of a 1 MB state (``big_state``) from an asyncio event loop
  while a 1 ms timer ticks on that loop: the longest the timer fired late is how
  long every other request the loop serves waited. Measured as the async twins
  run (one crossing to the store's loop thread) and, for comparison, with the
  same core run on the caller's loop (``async_bridge.run_core``, how the twins
  ran before). The stall does not depend on the server; it depends on the CPU,
  and, the core running on another thread, on how long that thread keeps the
  GIL.

The baseline is ``S3CheckpointSaver`` of ``langgraph-checkpoint-s3`` (boto3). Its
0.1.3 release calls ``serde.dumps``/``serde.loads`` on the metadata, which
langgraph-checkpoint 3.0 removed from its serializers; it is given a serializer
that adds the two as JSON (what they were before), and nothing else. When the
package is not installed, VerifiedSaver is measured alone.

Times are those of a Python server on the loopback interface: they are not
those of S3 (whose every request crosses a network), and only their ratios are
reported. The request counts do not depend on the server.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from measure import SaverCallTimer, p50_p99, paired_ratio, rotated
from workload import TextSource, build_chat_graph, human_turns, raw_checkpoints

from langgraph_checkpoint_verified import VerifiedSaver

TESTS = Path(__file__).resolve().parent.parent / "tests"

VERIFIED_S3 = "VerifiedSaver(s3://)"
BASELINE_S3 = "S3CheckpointSaver"
BASELINE_PACKAGE = "langgraph-checkpoint-s3"
METHODS = ("PUT", "GET", "HEAD", "LIST", "DELETE", "POST")
"""What the proxy counts (a DeleteObjects ``POST`` counts as ``DELETE``)."""
PREFIX = "bench"
PCTS = ("p50", "p99")
METHOD_KEYS = (*METHODS, "all", "bytes_up")


class _MetadataJson(JsonPlusSerializer):
    """LangGraph's serializer with the ``dumps``/``loads`` that langgraph-checkpoint 3.0
    removed and that langgraph-checkpoint-s3 0.1.3 still calls on the metadata."""

    def dumps(self, obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # in sys.modules as None: imports of it are refused
        return False


def missing_requirements() -> str | None:
    """Why the section cannot run here, or None."""
    missing = [m for m in ("moto", "obstore", "boto3") if not installed(m)]
    if missing:
        return (
            f"{', '.join(missing)} not installed "
            f"(`pip install -e '.[test,s3,bench]'`, which `make bench` installs)"
        )
    return None


def load_baseline() -> tuple[Any, Any, str]:
    """``(S3CheckpointSaver or None, the serde to give it, a note on how it is run)``."""
    try:
        from langgraph_checkpoint_s3 import S3CheckpointSaver
    except ImportError:
        return None, None, f"{BASELINE_PACKAGE} is not installed (`pip install -e '.[bench]'`)"
    note = f"{BASELINE_PACKAGE} {importlib.metadata.version(BASELINE_PACKAGE)}"
    if hasattr(JsonPlusSerializer(), "dumps"):
        return S3CheckpointSaver, None, note
    langgraph_checkpoint = importlib.metadata.version("langgraph-checkpoint")
    note += (
        f" fails as released on langgraph-checkpoint {langgraph_checkpoint} (it calls "
        f"`serde.dumps` on the metadata, which langgraph-checkpoint 3.0 removed: "
        f"AttributeError at the first put); it is run with a serializer that adds "
        f"`dumps`/`loads` as JSON, nothing else changed"
    )
    return S3CheckpointSaver, _MetadataJson(), note


@dataclass
class Bench:
    """The server, the proxy every saver talks to, and how to open each saver."""

    endpoint: str  # the proxy's
    proxy: Any
    create_bucket: Callable[[str], None]  # on the server itself: the proxy does not count it
    names: tuple[str, ...]
    credentials: dict[str, str]
    baseline_class: Any = None
    baseline_serde: Any = None
    buckets: set[str] = field(default_factory=set)

    def bucket(self, part: str, name: str) -> str:
        """The bucket of ``name`` for ``part`` of the section, made the first time."""
        bucket = f"{part}-{'verified' if name == VERIFIED_S3 else 'baseline'}"
        if bucket not in self.buckets:
            self.create_bucket(bucket)
            self.buckets.add(bucket)
        return bucket

    def client(self) -> Any:
        """A boto3 client of its own (its own connection pool), as a new machine has."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session(
            aws_access_key_id=self.credentials["access_key_id"],
            aws_secret_access_key=self.credentials["secret_access_key"],
            region_name=self.credentials["region"],
        ).client("s3", endpoint_url=self.endpoint, config=Config(s3={"addressing_style": "path"}))

    def storage(self, bucket: str) -> Any:
        from langgraph_checkpoint_verified import ObjectStorage

        return ObjectStorage(f"s3://{bucket}/{PREFIX}", endpoint=self.endpoint, **self.credentials)

    def prepare(self, name: str, bucket: str) -> Callable[[], Any]:
        """Make the client (not timed); the returned function opens the saver (timed)."""
        if name == VERIFIED_S3:
            storage = self.storage(bucket)
            return lambda: VerifiedSaver(storage=storage)
        client = self.client()
        return lambda: self.baseline_class(
            bucket, prefix=f"{PREFIX}/", s3_client=client, serde=self.baseline_serde
        )

    def open(self, name: str, bucket: str) -> Any:
        return self.prepare(name, bucket)()

    def take_requests(self, bucket: str) -> dict[str, int]:
        """The requests since the last call, by method, and the bytes they uploaded."""
        requests = self.proxy.requests
        self.proxy.clear_counts()
        strays = [r for r in requests if bucket_of(r.path) != bucket]
        if strays:  # another saver's request in this one's turn: the counts would mix
            raise RuntimeError(f"requests outside bucket {bucket} in its turn: {strays[:3]}")
        counts = dict.fromkeys(METHODS, 0)
        for request in requests:
            counts[request.method] = counts.get(request.method, 0) + 1
        counts["all"] = len(requests)
        counts["bytes_up"] = sum(body_bytes(r) for r in requests if r.method in ("PUT", "POST"))
        return counts


def bucket_of(path: str) -> str:
    return unquote(path).lstrip("/").split("/", 1)[0]


def body_bytes(request: Any) -> int:
    """The body's size from the request's headers (the decoded size of an aws-chunked one)."""
    headers = request.headers
    size = headers.get("x-amz-decoded-content-length") or headers.get("content-length") or 0
    return int(size)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def mean_counts(samples: list[dict[str, int]]) -> dict[str, float]:
    return {key: sum(s[key] for s in samples) / len(samples) for key in samples[0]}


def median_counts(samples: list[dict[str, int]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


# -- the chat graph -------------------------------------------------------------------


class CallLatencies:
    """The wall time of each ``put`` and ``get_tuple`` call of one saver.

    Wrapped on the instance, before a graph reads its methods. A call made from
    inside another (a ``get_tuple`` that calls itself with the id it found) is
    not counted again.
    """

    def __init__(self, saver: Any) -> None:
        self.samples: dict[str, list[float]] = {"put": [], "get_tuple": []}
        self._inside = threading.local()
        for name, samples in self.samples.items():
            setattr(saver, name, self._wrap(getattr(saver, name), samples))

    def _wrap(self, method: Callable[..., Any], samples: list[float]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(self._inside, "active", False):
                return method(*args, **kwargs)
            self._inside.active = True
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                samples.append(time.perf_counter() - started)
                self._inside.active = False

        return timed


def chat_part(settings: Any, bench: Bench) -> dict[str, Any]:
    steps = settings.s3_chat_steps
    config = {"configurable": {"thread_id": "chat"}}
    inputs = human_turns(TextSource(seed=2), steps)
    graphs, timers, latencies, buckets = {}, {}, {}, {}
    for name in bench.names:
        buckets[name] = bench.bucket("chat", name)
        saver = bench.open(name, buckets[name])
        latencies[name] = CallLatencies(saver)  # on the instance, before the graph reads it
        timers[name] = SaverCallTimer(saver)
        graphs[name] = build_chat_graph(TextSource(seed=1)).compile(checkpointer=saver)
    bench.proxy.clear_counts()
    series: dict[str, dict[str, list[Any]]] = {
        name: {"step": [], "saver": [], "requests": [], "new": [], "new_requests": []}
        for name in bench.names
    }
    for step in range(steps):
        for name in rotated(bench.names, step):
            record = series[name]
            timers[name].take()
            seconds, state = timed(lambda n=name, i=step: graphs[n].invoke(inputs[i], config))
            saver_seconds, _ = timers[name].take()
            record["step"].append(seconds)
            record["saver"].append(saver_seconds)
            record["requests"].append(bench.take_requests(buckets[name]))
            assert len(state["messages"]) == 2 * (step + 1), name

            # the same thread read by a new machine: it has none of the open saver's caches
            new_saver = bench.prepare(name, buckets[name])
            bench.proxy.clear_counts()
            seconds, found = timed(lambda s=new_saver: s().get_tuple(config))
            record["new"].append(seconds)
            record["new_requests"].append(bench.take_requests(buckets[name]))
            messages = found.checkpoint["channel_values"]["messages"] if found else []
            assert len(messages) == 2 * (step + 1), name

    last = min(10, steps)
    out: dict[str, Any] = {"steps": steps, "last_steps": last}
    for name in bench.names:
        record = series[name]
        out[name] = {
            "requests_per_step": mean_counts(record["requests"]),
            "bytes_up_last_steps": statistics.median(
                r["bytes_up"] for r in record["requests"][-last:]
            ),
            "step_ms": 1000 * statistics.median(record["step"]),
            "saver_ms": 1000 * statistics.median(record["saver"]),
            "put": p50_p99(latencies[name].samples["put"]),
            "get_tuple": p50_p99(latencies[name].samples["get_tuple"]),
            "new": p50_p99(record["new"]),
            "new_requests": mean_counts(record["new_requests"]),
            "new_requests_max": max(r["all"] for r in record["new_requests"]),
            "requests_series": [r["all"] for r in record["requests"]],
            "bytes_up_series": [r["bytes_up"] for r in record["requests"]],
            "new_requests_series": [r["all"] for r in record["new_requests"]],
        }
    if BASELINE_S3 in bench.names:
        verified, baseline = series[VERIFIED_S3], series[BASELINE_S3]
        mine, theirs = out[VERIFIED_S3], out[BASELINE_S3]
        out["ratios"] = {
            "step": paired_ratio(verified["step"], baseline["step"]),
            "saver": paired_ratio(verified["saver"], baseline["saver"]),
            "new": {
                "p50": mine["new"]["p50_ms"] / theirs["new"]["p50_ms"],
                "p99": mine["new"]["p99_ms"] / theirs["new"]["p99_ms"],
                "paired": paired_ratio(verified["new"], baseline["new"]),
            },
            "new_requests": mine["new_requests"]["all"] / theirs["new_requests"]["all"],
            "requests": mine["requests_per_step"]["all"] / theirs["requests_per_step"]["all"],
            "bytes_up": mine["requests_per_step"]["bytes_up"]
            / theirs["requests_per_step"]["bytes_up"],
            **{
                call: {pct: mine[call][f"{pct}_ms"] / theirs[call][f"{pct}_ms"] for pct in PCTS}
                for call in ("put", "get_tuple")
            },
        }
    return out


# -- one long thread: the newest checkpoint at N checkpoints ----------------------------


def build_thread(bench: Bench, name: str, writer: Any, checkpoints: list[Any]) -> dict:
    """``put`` the checkpoints; the requests they took.

    The baseline's are ``put`` by a few threads at once (each is one object of its
    own), which only makes the fixture faster to build: nothing is timed here.
    """
    bench.proxy.clear_counts()
    if name == VERIFIED_S3:
        for args in checkpoints:
            writer.put(*args)
    else:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda args: writer.put(*args), checkpoints))
    return bench.take_requests(bench.bucket("thread", name))


def thread_part(settings: Any, bench: Bench) -> dict[str, Any]:
    sizes = sorted(settings.s3_thread_sizes)
    config = {"configurable": {"thread_id": "long"}}
    buckets = {name: bench.bucket("thread", name) for name in bench.names}
    writers = {name: bench.open(name, buckets[name]) for name in bench.names}
    checkpoints = list(raw_checkpoints(TextSource(seed=4), sizes[-1], thread_id="long"))
    put_requests: dict[str, list[dict[str, int]]] = {name: [] for name in bench.names}
    at: dict[str, Any] = {}
    built = 0
    for size in sizes:
        for name in bench.names:
            added = checkpoints[built:size]
            put_requests[name].append(build_thread(bench, name, writers[name], added))
        built = size
        newest = checkpoints[size - 1][1]["id"]
        samples = {
            name: {"open": [], "new": [], "open_requests": [], "new_requests": []}
            for name in bench.names
        }
        for round_ in range(settings.s3_get_rounds):
            for name in rotated(bench.names, round_):
                record = samples[name]
                bench.proxy.clear_counts()
                seconds, found = timed(lambda n=name: writers[n].get_tuple(config))
                record["open"].append(seconds)
                record["open_requests"].append(bench.take_requests(buckets[name]))
                assert found is not None and found.checkpoint["id"] == newest, name

                new_saver = bench.prepare(name, buckets[name])
                bench.proxy.clear_counts()
                seconds, found = timed(lambda s=new_saver: s().get_tuple(config))
                record["new"].append(seconds)
                record["new_requests"].append(bench.take_requests(buckets[name]))
                assert found is not None and found.checkpoint["id"] == newest, name
        entry: dict[str, Any] = {}
        for name in bench.names:
            record = samples[name]
            entry[name] = {
                "open_ms": 1000 * statistics.median(record["open"]),
                "new_ms": 1000 * statistics.median(record["new"]),
                "open_requests": median_counts(record["open_requests"]),
                "new_requests": median_counts(record["new_requests"]),
            }
        if BASELINE_S3 in bench.names:
            mine, theirs = entry[VERIFIED_S3], entry[BASELINE_S3]
            entry["ratios"] = {
                kind: {
                    "time": paired_ratio(samples[VERIFIED_S3][kind], samples[BASELINE_S3][kind]),
                    "requests": mine[f"{kind}_requests"]["all"] / theirs[f"{kind}_requests"]["all"],
                }
                for kind in ("open", "new")
            }
        at[str(size)] = entry

    per_put = {
        name: {key: sum(c[key] for c in put_requests[name]) / sizes[-1] for key in METHOD_KEYS}
        for name in bench.names
    }
    return {
        "sizes": sizes,
        "rounds": settings.s3_get_rounds,
        "put_requests": per_put,
        "at_size": at,
    }


# -- the event loop's stall during a 1 MB aput --------------------------------------------

STALL_ROUNDS = 20
STALL_TICK_S = 0.001


def big_state(seed: int, messages: int = 4000) -> list[dict[str, str]]:
    """About 1 MB serialized: chat-like messages of 30 words each."""
    import random

    rng = random.Random(seed)
    words = ("alpha", "beta", "gamma", "delta", "state", "message", "tool", "graph", "node")
    return [
        {
            "role": rng.choice(("user", "assistant")),
            "id": f"m{seed}-{n}",
            "content": " ".join(f"{rng.choice(words)}{rng.randrange(1000)}" for _ in range(30)),
        }
        for n in range(messages)
    ]


async def longest_stall(call: Any) -> tuple[Any, float]:
    """Await ``call`` while a ``STALL_TICK_S`` timer ticks on this loop: the result, and
    the most any tick fired late (seconds)."""
    import asyncio

    worst = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal worst
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(STALL_TICK_S)
            worst = max(worst, time.perf_counter() - started - STALL_TICK_S)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(2 * STALL_TICK_S)  # the ticker runs before the call starts
    try:
        result = await call
    finally:
        done.set()
        await task
    return result, worst


def stall_part(bench: Bench, rounds: int = STALL_ROUNDS) -> dict[str, Any]:
    import asyncio

    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    from langgraph_checkpoint_verified.storage import async_bridge

    saver = VerifiedSaver(storage=bench.storage(bench.bucket("stall", VERIFIED_S3)))
    states = [big_state(n) for n in range(rounds)]
    size = len(saver.serde.dumps_typed(states[0])[1])

    async def run() -> dict[str, list[float]]:
        stalls: dict[str, list[float]] = {"store_loop": [], "caller_loop": []}
        config: dict[str, Any] = {"configurable": {"thread_id": "stall", "checkpoint_ns": ""}}
        for n, state in enumerate(states):
            for how in rotated(tuple(stalls), n):
                checkpoint = {
                    **empty_checkpoint(),
                    "id": str(uuid6(clock_seq=len(stalls[how]) + n)),
                    "channel_values": {"big": state},
                    "channel_versions": {"big": f"{n}-{how}"},
                }
                args = (config, checkpoint, {"step": n}, {"big": f"{n}-{how}"})
                if how == "store_loop":
                    call = saver.aput(*args)
                else:  # the same core, run on this loop, as the twins ran it before
                    call = async_bridge.run_core(saver.put, *args)
                config, stall = await longest_stall(call)
                stalls[how].append(stall)
        return stalls

    stalls = asyncio.run(run())
    return {
        "rounds": rounds,
        "state_bytes": size,
        "tick_ms": 1000 * STALL_TICK_S,
        **{
            how: {
                "p50_ms": 1000 * statistics.median(samples),
                "max_ms": 1000 * max(samples),
            }
            for how, samples in stalls.items()
        },
    }


# -- the section -------------------------------------------------------------------------


def s3_section(settings: Any, workdir: Path) -> dict[str, Any]:
    """Start moto and the proxy, measure, and stop both whatever happens.

    ``workdir`` is not used: the server keeps every object in its memory.
    """
    why_not = missing_requirements()
    if why_not:
        return {"s3": {"skipped": why_not}}
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    import s3server

    baseline_class, baseline_serde, baseline_note = load_baseline()
    names = (VERIFIED_S3,) if baseline_class is None else (VERIFIED_S3, BASELINE_S3)
    server = s3server.MotoServer()
    proxy = None
    try:
        server.start()
        proxy = s3server.FaultProxy(server.endpoint)
        endpoint = server.endpoint
        bench = Bench(
            endpoint=proxy.endpoint,
            proxy=proxy,
            create_bucket=lambda bucket: s3server.create_bucket(endpoint, bucket),
            names=names,
            credentials={
                "access_key_id": s3server.ACCESS_KEY_ID,
                "secret_access_key": s3server.SECRET_ACCESS_KEY,
                "region": s3server.REGION,
            },
            baseline_class=baseline_class,
            baseline_serde=baseline_serde,
        )
        started = time.perf_counter()
        chat = chat_part(settings, bench)
        chat_seconds = time.perf_counter() - started
        started = time.perf_counter()
        thread = thread_part(settings, bench)
        thread_seconds = time.perf_counter() - started
        started = time.perf_counter()
        stall = stall_part(bench)
        stall_seconds = time.perf_counter() - started
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()
    return {
        "s3": {
            "savers": list(names),
            "baseline": baseline_note,
            "server": "moto (tests/s3server.py) on 127.0.0.1, through a counting proxy",
            "chat": chat,
            "thread": thread,
            "stall": stall,
            "seconds": {"chat": chat_seconds, "thread": thread_seconds, "stall": stall_seconds},
        }
    }
