"""What each call costs on S3, counted request by request, and where its CPU work runs.

A ``FaultProxy`` (``tests/s3server.py``) in front of moto's S3 counts every
request. A durable call is one request; what this process wrote, or just saw
listed unchanged, is never asked for again (``ObjectStorage.fresh_for``); past
that, it is revalidated with a ``HEAD`` or a ``GET`` answered ``304 Not
Modified`` without its bytes. ``docs/s3.md`` ("Requests per call") gives the
same figures. And an async twin runs none of its serializing or compressing on
the caller's event loop thread.
"""

from __future__ import annotations

import asyncio
import threading

from echo_graph import build_graph
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from test_s3 import THREAD, put_chain, put_step, s3_storage

from langgraph_checkpoint_verified import VerifiedSaver


def only(**counts: int) -> dict[str, int]:
    """Counts of ``FaultProxy.counts``: these, and no request of another kind."""
    return {**dict.fromkeys(("GET", "PUT", "HEAD", "LIST", "DELETE", "POST"), 0), **counts}


def counted(proxy) -> dict[str, int]:
    return {**only(), **{method: n for method, n in proxy.counts.items() if n}}


def test_a_chat_step_is_one_request_per_durable_call_and_two_lists(fault_proxy, s3_bucket):
    """One ``invoke`` of the echo chat: ``get_tuple`` (the newest checkpoint's LIST and its
    pending writes' LIST), three ``put`` and two ``put_writes``, one PUT each."""
    _, bucket = s3_bucket
    graph = build_graph(VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket)))
    chat = {"configurable": {"thread_id": "chat"}}
    graph.invoke({"messages": [("user", "turn 1")]}, chat)  # the first also makes the head
    for turn in range(2, 7):
        fault_proxy.clear_counts()
        state = graph.invoke({"messages": [("user", f"turn {turn}")]}, chat)
        assert len(state["messages"]) == 2 * turn
        assert counted(fault_proxy) == only(PUT=5, LIST=2), f"turn {turn}"


def test_a_thread_this_process_wrote_is_read_without_a_get(fault_proxy, s3_bucket):
    _, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    configs = put_chain(saver, 20)
    saver.put_writes(configs[-1], [("x", 1), ("log", 2)], "task")
    fault_proxy.clear_counts()

    found = saver.get_tuple(THREAD)
    assert found.config == configs[-1]
    assert found.checkpoint["channel_values"]["log"] == list(range(20))
    assert len(found.pending_writes) == 2
    assert counted(fault_proxy) == only(LIST=2)

    fault_proxy.clear_counts()
    by_id = saver.get_tuple(configs[5])
    assert by_id.checkpoint["channel_values"]["log"] == list(range(6))
    assert counted(fault_proxy) == only(LIST=1)  # its pending writes, if another machine wrote some


def test_past_fresh_for_objects_are_revalidated_without_their_bytes(fault_proxy, s3_bucket):
    """With ``fresh_for=0`` nothing is taken from memory unasked: a ``put`` asks for its
    parent's ETag (``HEAD``), and a read of a record asks whether it changed (``GET``
    with ``If-None-Match``, answered ``304`` without the bytes)."""
    _, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket, fresh_for=0))
    configs = put_chain(saver, 3)
    fault_proxy.clear_counts()
    put_chain_from = configs[-1]
    for n in range(4, 7):
        put_chain_from = put_step(saver, put_chain_from, n)
    assert counted(fault_proxy) == only(PUT=3, HEAD=3)

    fault_proxy.clear_counts()
    found = saver.get_tuple(configs[1])
    assert found.checkpoint["channel_values"]["log"] == list(range(2))
    gets = [r for r in fault_proxy.requests if r.method == "GET"]
    # the record, unchanged: no bytes came back (its `log` list's parts are known, so the
    # records that list extends are not read)
    assert [r.status for r in gets] == [304]
    assert all("if-none-match" in r.headers for r in gets)


def test_an_object_listed_with_another_etag_is_read_again(fault_proxy, s3_bucket):
    """Another machine's rewrite of a record this process wrote (a maintenance rewrite, a
    repair) shows in the next LIST: the record is read again, not taken from memory."""
    endpoint, bucket = s3_bucket
    writer = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    configs = put_chain(writer, 3)
    other = VerifiedSaver(storage=s3_storage(endpoint, bucket))
    newest = configs[-1]["configurable"]["checkpoint_id"]
    key = f"threads/t/ns/~/checkpoints/{newest}.ckpt"
    stored = other.storage.read(key)
    damaged = bytearray(stored)
    damaged[len(damaged) // 2] ^= 0x01
    other.storage.write(key, bytes(damaged))
    fault_proxy.clear_counts()
    assert writer.get_tuple(THREAD).config == configs[-2]
    assert writer.stats.damaged_records == 1
    assert [r.method for r in fault_proxy.requests].count("GET") >= 1


class ThreadRecordingSerde(JsonPlusSerializer):
    """LangGraph's serializer, noting the thread each value is serialized on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def dumps_typed(self, obj):
        self.threads.add(threading.get_ident())
        return super().dumps_typed(obj)

    def loads_typed(self, data):
        self.threads.add(threading.get_ident())
        return super().loads_typed(data)


def test_async_twins_serialize_and_compress_off_the_callers_loop(s3_bucket, monkeypatch):
    """A large state's serializing, hashing and compressing run on the store's thread:
    the caller's event loop thread runs none of it, so it keeps serving meanwhile."""
    endpoint, bucket = s3_bucket
    serde = ThreadRecordingSerde()
    saver = VerifiedSaver(storage=s3_storage(endpoint, bucket), serde=serde)
    codec = saver.engine.codec
    coded: set[int] = set()
    for name in ("encode", "decode_with_header"):
        method = getattr(codec, name)

        def recorded(*args, _method=method, **kwargs):
            coded.add(threading.get_ident())
            return _method(*args, **kwargs)

        monkeypatch.setattr(codec, name, recorded)
    big = [{"id": n, "text": f"message {n} " * 40} for n in range(2000)]

    async def main() -> int:
        config: dict = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for n in range(1, 4):
            config = await saver.aput(
                config,
                generate_checkpoint(
                    channel_values={"big": big[: 500 * n]}, channel_versions={"big": n}
                ),
                generate_metadata(step=n),
                {"big": n},
            )
        await saver.aput_writes(config, [("big", big[:10])], "task")
        found = await saver.aget_tuple(THREAD)
        assert len(found.checkpoint["channel_values"]["big"]) == 1500
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert serde.threads and coded
    assert loop_thread not in serde.threads
    assert loop_thread not in coded
    # and a reader with nothing in memory decodes there too
    reader = VerifiedSaver(storage=s3_storage(endpoint, bucket), serde=serde)
    serde.threads.clear()

    async def read() -> int:
        found = await reader.aget_tuple(THREAD)
        assert len(found.checkpoint["channel_values"]["big"]) == 1500
        return threading.get_ident()

    assert read_thread_is_not_the_loop(asyncio.run(read()), serde.threads)


def read_thread_is_not_the_loop(loop_thread: int, threads: set[int]) -> bool:
    return bool(threads) and loop_thread not in threads


def test_a_first_read_fetches_a_chain_of_records_a_few_round_trips(fault_proxy, s3_bucket):
    """A machine reading a thread for the first time reads the newest record, then the
    records its `log` list extends: those GETs go out together, in batches that double
    (2, 4, 8...: read ahead), not one by one; the proxy lets none of the first batch
    through until all of it has arrived."""
    _, bucket = s3_bucket
    writer = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    configs = put_chain(writer, 12)
    checkpoints = "threads/t/ns/~/checkpoints"
    newest = f"{checkpoints}/{configs[-1]['configurable']['checkpoint_id']}.ckpt"

    def first_read(call) -> None:
        reader = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
        assert reader.storage.greatest_name(checkpoints) == newest.rpartition("/")[2]
        assert reader.storage.read(newest) is not None  # the head, the LIST, the newest
        batches: list[int] = []
        get_many = reader.storage.bucket.get_many

        def recorded(keys):
            batches.append(len(keys))
            return get_many(keys)

        reader.storage.bucket.get_many = recorded
        fault_proxy.clear_counts()
        fault_proxy.gather_next(2, method="GET", guard_seconds=30)
        found = call(reader)
        assert found.checkpoint["channel_values"]["log"] == list(range(12))
        assert fault_proxy.gathered, f"at most {fault_proxy.most_in_flight} in flight"
        # the 11 older records in three round trips, the LIST from the newest name and
        # that of the pending writes: nothing more
        assert batches == [2, 4, 5]
        assert counted(fault_proxy) == only(GET=11, LIST=2)

    first_read(lambda reader: reader.get_tuple(THREAD))
    first_read(lambda reader: asyncio.run(reader.aget_tuple(THREAD)))
