"""``VerifiedSaver`` on S3-compatible object storage, against a real S3 server.

The server is moto's, in a child process on 127.0.0.1 (``conftest.py``); a
``FaultProxy`` in front of it fails, drops or counts requests. What holds on
files holds here: the conformance suite passes, damage is skipped and
quarantined, and several processes writing one store lose nothing. What is
particular to a remote store is tested too: how many requests a call costs,
and that a store that does not answer raises ``StoreUnavailableError`` instead
of being taken for a damaged one.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from s3server import ACCESS_KEY_ID, REGION, REQUEST_TIMEOUT, SECRET_ACCESS_KEY, s3_client

from langgraph_checkpoint_verified import ObjectStorage, StoreUnavailableError, VerifiedSaver
from langgraph_checkpoint_verified.records import keys as record_keys
from langgraph_checkpoint_verified.records.format import FLAG_UNCOMPRESSED
from langgraph_checkpoint_verified.storage.objects import HEAD_EVERY

TESTS = Path(__file__).parent
THREAD = {"configurable": {"thread_id": "t"}}
# a failing request is retried twice, quickly: the tests wait on what happens, not on time
FEW_RETRIES = {
    "max_retries": 2,
    "backoff": {"init_backoff": timedelta(milliseconds=5), "max_backoff": timedelta(seconds=1)},
    "retry_timeout": timedelta(seconds=60),
}


def s3_storage(endpoint: str, bucket: str, prefix: str = "store", **options) -> ObjectStorage:
    client_options = {"timeout": REQUEST_TIMEOUT, **options.pop("client_options", {})}
    return ObjectStorage(
        f"s3://{bucket}/{prefix}",
        endpoint=endpoint,
        region=REGION,
        access_key_id=ACCESS_KEY_ID,
        secret_access_key=SECRET_ACCESS_KEY,
        client_options=client_options,
        **options,
    )


def put_step(saver: VerifiedSaver, parent: dict, n: int) -> dict:
    """The ``n``-th checkpoint of a chain: ``x`` is ``n``, the list ``log`` grows by one."""
    return saver.put(
        parent,
        generate_checkpoint(
            channel_values={"x": n, "log": list(range(n))}, channel_versions={"x": n, "log": n}
        ),
        generate_metadata(step=n),
        {"x": n, "log": n},
    )


def put_chain(saver: VerifiedSaver, count: int, thread_id: str = "t") -> list[dict]:
    config: dict = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    configs = []
    for n in range(1, count + 1):
        config = put_step(saver, config, n)
        configs.append(config)
    return configs


def s3_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
    }


# -- LangGraph's contract ------------------------------------------------------------


async def test_conformance_all_capabilities(s3_bucket, monkeypatch):
    endpoint, bucket = s3_bucket
    for name, value in s3_env(endpoint).items():
        monkeypatch.setenv(name, value)  # s3:// URLs read the usual environment
    stores = iter(range(10_000))

    @checkpointer_test(name="VerifiedSaver[s3]")
    async def factory():
        async with VerifiedSaver.from_conn_string(f"s3://{bucket}/c{next(stores)}") as saver:
            yield saver

    report = await validate(factory)
    failures = {n: r.failures for n, r in report.results.items() if not r.passed}
    assert not failures, failures
    assert {n for n, r in report.results.items() if r.detected} == {
        c.value for c in ALL_CAPABILITIES
    }
    assert all(r.tests_passed > 0 for r in report.results.values())


def test_records_are_the_same_verified_bytes_as_on_disk(s3_bucket, tmp_path):
    endpoint, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(endpoint, bucket))
    configs = put_chain(saver, 3)
    keys = list(saver.storage.walk("threads"))
    assert keys == sorted(keys) and len(keys) == 3
    assert all(k.startswith("threads/t/ns/~/checkpoints/") for k in keys)
    # compressed, however small: on object storage, bytes cross a network
    assert not any(saver.storage.read(k)[6] & FLAG_UNCOMPRESSED for k in keys)
    # the objects are where the docs say, under the store's prefix
    listed = s3_client(endpoint).list_objects_v2(Bucket=bucket, Prefix="store/threads/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [f"store/{k}" for k in keys]
    # copied to a files store record by record, they read back the same
    files = VerifiedSaver(tmp_path / "copy", fsync=False)
    for key in keys:
        files.storage.write(key, saver.storage.read(key))
    assert files.get_tuple(THREAD) == saver.get_tuple(THREAD)
    assert saver.get_tuple(THREAD).config == configs[-1]


# -- damage -----------------------------------------------------------------------------


def test_an_object_overwritten_behind_the_saver_is_skipped_and_quarantined(s3_bucket):
    endpoint, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(endpoint, bucket))
    configs = put_chain(saver, 3)
    newest = configs[-1]["configurable"]["checkpoint_id"]
    key = record_keys.checkpoint_key("t", "", newest)
    client = s3_client(endpoint)
    stored = client.get_object(Bucket=bucket, Key=f"store/{key}")["Body"].read()
    damaged = bytearray(stored)
    damaged[len(damaged) // 2] ^= 0x01
    client.put_object(Bucket=bucket, Key=f"store/{key}", Body=bytes(damaged))

    reader = VerifiedSaver(storage=s3_storage(endpoint, bucket))  # another machine
    assert reader.get_tuple(THREAD).config == configs[-2]
    assert reader.stats.damaged_records == 1
    assert reader.stats.fallbacks == 1
    # moved aside: a copy under quarantine/ (the exact bytes), the object deleted
    assert reader.storage.read(key) is None
    quarantined = [k for k in reader.storage.walk("quarantine") if k.endswith(".record")]
    assert len(quarantined) == 1
    assert reader.storage.read(quarantined[0]) == bytes(damaged)
    report = reader.verify()
    assert report.ok, report
    # the writer that had it in memory sees the damage too: every read checks the bytes
    assert saver.get_tuple(THREAD).config == configs[-2]


def test_a_read_past_several_damaged_objects_writes_one_reasons_object(fault_proxy, s3_bucket):
    """The three newest checkpoints' objects are damaged: the read that falls back past
    them copies each under quarantine/ and writes one object of the reasons for all
    three (four PUTs, not six), and a later verify counts them moved aside."""
    _, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    configs = put_chain(saver, 5)
    client = s3_client(s3_bucket[0])
    damaged = {}
    for config in configs[-3:]:
        key = record_keys.checkpoint_key("t", "", config["configurable"]["checkpoint_id"])
        data = bytearray(client.get_object(Bucket=bucket, Key=f"store/{key}")["Body"].read())
        data[len(data) // 2] ^= 0x01
        client.put_object(Bucket=bucket, Key=f"store/{key}", Body=bytes(data))
        damaged[key] = bytes(data)

    seen = []
    reader = VerifiedSaver(
        storage=s3_storage(fault_proxy.endpoint, bucket), on_corruption=seen.append
    )
    fault_proxy.clear_counts()
    assert reader.get_tuple(THREAD).config == configs[-4]
    assert fault_proxy.counts["PUT"] == 4, fault_proxy.counts
    assert {d.key for d in seen} == set(damaged) and reader.stats.quarantined_records == 3
    names = list(reader.storage.walk("quarantine"))
    assert sorted(k.rsplit(".", 1)[1] for k in names) == ["reasons", "record", "record", "record"]
    assert all(
        reader.storage.read(d.quarantined_to.split("/store/", 1)[1]) == damaged[d.key] for d in seen
    )
    assert reader.reporter.quarantined_under("threads/t/").keys() == set(damaged)
    assert reader.verify().ok


def test_a_keyed_store_rejects_records_written_without_its_key(s3_bucket):
    endpoint, bucket = s3_bucket
    key = b"k" * 32
    saver = VerifiedSaver(storage=s3_storage(endpoint, bucket), key=key)
    configs = put_chain(saver, 2)
    # a record made by a saver without the key, put where the newest one is
    unkeyed = VerifiedSaver(storage=s3_storage(endpoint, bucket, prefix="other"))
    forged = put_chain(unkeyed, 2)
    forged_key = record_keys.checkpoint_key("t", "", forged[-1]["configurable"]["checkpoint_id"])
    newest_key = record_keys.checkpoint_key("t", "", configs[-1]["configurable"]["checkpoint_id"])
    saver.storage.write(newest_key, unkeyed.storage.read(forged_key))
    reader = VerifiedSaver(storage=s3_storage(endpoint, bucket), key=key)
    assert reader.get_tuple(THREAD).config == configs[0]
    assert reader.stats.damaged_records == 1


# -- requests ---------------------------------------------------------------------------


def test_requests_per_call(fault_proxy, s3_bucket):
    _, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    configs = put_chain(saver, 2)  # the namespace's head is made with its first checkpoint
    fault_proxy.clear_counts()

    put_chain_from = configs[-1]
    for n in range(3, 3 + 10):
        put_chain_from = put_step(saver, put_chain_from, n)
    # one PUT per put: the parent is the one this process just wrote, and the ETag its
    # PUT was answered with is all a HEAD would have said
    assert fault_proxy.counts == {**dict.fromkeys(fault_proxy.counts, 0), "PUT": 10}

    fault_proxy.clear_counts()
    saver.put_writes(put_chain_from, [("x", 1), ("log", 2)], "task")
    assert fault_proxy.counts == {**dict.fromkeys(fault_proxy.counts, 0), "PUT": 1}

    # the newest checkpoint, from a machine that has read nothing yet: the head, one
    # LIST from the name it holds, the record and the records of its `log` list's
    # chain (12 versions, each stored as what it gained), the pending writes (a LIST
    # and the record)
    reader = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    fault_proxy.clear_counts()
    found = reader.get_tuple(THREAD)
    assert found.config == put_chain_from
    assert found.checkpoint["channel_values"]["log"] == list(range(12))
    assert len(found.pending_writes) == 2
    assert fault_proxy.counts == {
        **dict.fromkeys(fault_proxy.counts, 0),
        "LIST": 2,
        "GET": 1 + 12 + 1,
    }
    # again, on the same machine: no head, no chain, and no record read again: the two
    # LISTs (from the newest name, and the pending writes) name every object unchanged
    fault_proxy.clear_counts()
    assert reader.get_tuple(THREAD).config == put_chain_from
    assert fault_proxy.counts == {**dict.fromkeys(fault_proxy.counts, 0), "LIST": 2}


def test_a_first_read_walks_a_bounded_chain(fault_proxy, s3_bucket):
    _, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    limit = saver.storage.list_chain_limit
    configs = put_chain(saver, 3 * limit + 5)
    reader = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    fault_proxy.clear_counts()
    found = reader.get_tuple(THREAD)
    assert found.config == configs[-1]
    assert found.checkpoint["channel_values"]["log"] == list(range(3 * limit + 5))
    record_gets = fault_proxy.counts["GET"] - 2  # the head and the pending writes
    assert 1 <= record_gets <= limit + 1


def test_a_long_thread_is_never_listed_whole(fault_proxy, s3_bucket):
    _, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    count = HEAD_EVERY * 3 + 5
    configs = put_chain(saver, count)
    reader = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    fault_proxy.clear_counts()
    assert reader.get_tuple(THREAD).config == configs[-1]
    lists = [r for r in fault_proxy.requests if r.method == "LIST"]
    checkpoint_lists = [r for r in lists if "checkpoints" in r.query]
    assert len(checkpoint_lists) == 1
    assert "start-after" in checkpoint_lists[0].query


# -- a store that fails -------------------------------------------------------------------


def test_failed_requests_are_retried(fault_proxy, s3_bucket):
    _, bucket = s3_bucket
    saver = VerifiedSaver(
        storage=s3_storage(fault_proxy.endpoint, bucket, retry_config=FEW_RETRIES)
    )
    configs = put_chain(saver, 2)
    fault_proxy.clear_counts()
    fault_proxy.fail_next(2, status=503, method="PUT")
    configs += put_chain(saver, 1, thread_id="u")
    assert fault_proxy.counts["PUT"] >= 3
    fault_proxy.drop_next(1, method="GET")
    assert saver.get_tuple(THREAD).config == configs[1]
    assert saver.stats.damaged_records == 0


def test_a_write_whose_answer_was_lost_is_not_written_twice(fault_proxy, s3_bucket):
    _, bucket = s3_bucket
    saver = VerifiedSaver(
        storage=s3_storage(fault_proxy.endpoint, bucket, retry_config=FEW_RETRIES)
    )
    configs = put_chain(saver, 1)
    # the server stores the record, the answer never arrives: the retry finds it there
    # (If-None-Match fails) with the same bytes, which is success
    fault_proxy.drop_answer_next(1, method="PUT")
    configs += put_chain(saver, 1)
    assert saver.get_tuple(THREAD).config == configs[-1]
    fault_proxy.drop_answer_next(1, method="PUT")
    saver.put_writes(configs[-1], [("x", "w")], "task")
    found = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket)).get_tuple(THREAD)
    assert found.pending_writes == [("task", "x", "w")]


def test_a_store_that_does_not_answer_is_an_error_never_a_fallback(fault_proxy, s3_bucket):
    _, bucket = s3_bucket
    saver = VerifiedSaver(
        storage=s3_storage(fault_proxy.endpoint, bucket, retry_config=FEW_RETRIES)
    )
    configs = put_chain(saver, 3)
    reader = VerifiedSaver(
        storage=s3_storage(fault_proxy.endpoint, bucket, retry_config=FEW_RETRIES)
    )
    fault_proxy.fail_every(1, status=503)  # every request fails, retries included
    with pytest.raises(StoreUnavailableError, match="Nothing was read or saved"):
        reader.get_tuple(THREAD)
    with pytest.raises(StoreUnavailableError) as raised:
        put_chain(saver, 1, thread_id="u")
    assert raised.value.operation in ("read", "write")
    fault_proxy.reset()
    # nothing was taken for damage, nothing moved, and the newest is still the newest
    assert reader.get_tuple(THREAD).config == configs[-1]
    assert reader.stats.damaged_records == reader.stats.fallbacks == 0
    assert not list(reader.storage.walk("quarantine"))


def test_a_bucket_that_refuses_writes_is_a_write_error(s3_bucket, fault_proxy):
    _, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    configs = put_chain(saver, 1)
    fault_proxy.fail_next(5, status=403, method="PUT")
    from langgraph_checkpoint_verified import StoreWriteError

    with pytest.raises(StoreWriteError, match="permission denied"):
        put_chain(saver, 1, thread_id="u")
    assert saver.get_tuple(THREAD).config == configs[0]


# -- many writers ---------------------------------------------------------------------------


def test_four_processes_on_two_threads_lose_nothing(s3_bucket):
    endpoint, bucket = s3_bucket
    steps = 12
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.getcwd()])}
    children = {
        (thread_id, writer): subprocess.Popen(
            [
                sys.executable,
                str(TESTS / "s3_writer_child.py"),
                endpoint,
                bucket,
                thread_id,
                writer,
                str(steps),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for thread_id in ("a", "b")
        for writer in ("w1", "w2")
    }
    acknowledged: dict[str, dict[str, list[str]]] = {"a": {}, "b": {}}
    for (thread_id, _writer), child in children.items():
        out, err = child.communicate()
        assert child.returncode == 0, err
        lines = out.splitlines()
        assert len(lines) == steps, err
        for line in lines:
            checkpoint_id, log = line.split(" ", 1)
            acknowledged[thread_id][checkpoint_id] = json.loads(log)

    saver = VerifiedSaver(storage=s3_storage(endpoint, bucket, prefix="fleet"))
    for thread_id, written in acknowledged.items():
        assert len(written) == 2 * steps
        for checkpoint_id, log in written.items():
            config = {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}
            found = saver.get_tuple(config)
            assert found.config["configurable"]["checkpoint_id"] == checkpoint_id
            assert found.checkpoint["channel_values"]["log"] == log
            writer = log[-1].split(":")[0]
            assert found.pending_writes == [(f"task-{writer}", "log", f"pending {log[-1]}")]
        listed = [
            c.config["configurable"]["checkpoint_id"]
            for c in saver.list({"configurable": {"thread_id": thread_id}})
        ]
        assert sorted(listed) == sorted(written)
        newest = saver.get_tuple({"configurable": {"thread_id": thread_id}})
        assert newest.config["configurable"]["checkpoint_id"] == max(written)
    assert saver.verify().ok
    assert saver.stats.damaged_records == 0


# -- async: requests awaited on the store's event loop, no thread per call -------------------


def test_async_twins_await_requests_on_the_store_loop(fault_proxy, s3_bucket, monkeypatch):
    """Each async twin crosses once, to the store's event loop thread (not a pool's
    thread), and awaits its requests there; the caller's loop runs none of it."""
    import obstore

    _, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))

    def no_blocking_call(*args, **kwargs):
        raise AssertionError("an async twin made a blocking request or crossed to a thread")

    for name in ("get", "put", "head", "list_with_delimiter", "delete"):
        monkeypatch.setattr(obstore, name, no_blocking_call)
    monkeypatch.setattr(asyncio, "to_thread", no_blocking_call)
    loop_threads = set()
    get_async = obstore.get_async

    async def watched_get(*args, **kwargs):
        loop_threads.add(threading.get_ident())
        return await get_async(*args, **kwargs)

    monkeypatch.setattr(obstore, "get_async", watched_get)

    async def main() -> list:
        config: dict = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for n in range(1, 4):
            config = await saver.aput(
                config,
                generate_checkpoint(channel_values={"x": n}, channel_versions={"x": n}),
                generate_metadata(step=n),
                {"x": n},
            )
        await saver.aput_writes(config, [("x", "w")], "task")
        newest = await saver.aget_tuple(THREAD)
        listed = [c async for c in saver.alist(THREAD)]
        await saver.adelete_thread("t")
        assert await saver.aget_tuple(THREAD) is None
        return [newest, listed, threading.get_ident()]

    newest, listed, caller_thread = asyncio.run(main())
    assert newest.checkpoint["channel_values"] == {"x": 3}
    assert newest.pending_writes == [("task", "x", "w")]
    assert len(listed) == 3
    assert len(loop_threads) == 1 and caller_thread not in loop_threads
    assert fault_proxy.counts["PUT"] >= 4 and fault_proxy.counts["GET"] >= 1


def test_many_async_reads_are_in_flight_at_once(fault_proxy, s3_bucket):
    """More reads at once than any default thread pool has threads (a pool of 6 on
    two cores let 6 through): each starts with a GET, and the proxy lets none
    through until all of them have arrived."""
    _, bucket = s3_bucket
    writer = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    count = 40
    for n in range(count):
        put_chain(writer, 1, thread_id=f"t{n}")
    reader = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    fault_proxy.gather_next(count, method="GET")

    async def main() -> list:
        return await asyncio.gather(
            *(reader.aget_tuple({"configurable": {"thread_id": f"t{n}"}}) for n in range(count))
        )

    found = asyncio.run(main())
    assert fault_proxy.gathered, f"at most {fault_proxy.most_in_flight} in flight"
    assert [f.config["configurable"]["thread_id"] for f in found] == [f"t{n}" for n in range(count)]


def test_async_writes_of_one_task_at_once_all_land(s3_bucket):
    """Adding to a task's writes is read, merge, rewrite under the thread's exclusive
    lock: calls waiting for it give the event loop back to the one holding it."""
    endpoint, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(endpoint, bucket))
    (config,) = put_chain(saver, 1)
    writes = [("x", f"w{n}") for n in range(20)]

    async def main() -> None:
        await asyncio.gather(
            *(saver.aput_writes(config, writes[:k], "task") for k in range(1, len(writes) + 1))
        )

    asyncio.run(main())
    found = VerifiedSaver(storage=s3_storage(endpoint, bucket)).get_tuple(config)
    assert found.pending_writes == [("task", channel, value) for channel, value in writes]


def test_damage_in_a_bucket_this_process_cannot_write_is_read_past_and_left(fault_proxy, s3_bucket):
    endpoint, bucket = s3_bucket
    writer = VerifiedSaver(storage=s3_storage(endpoint, bucket))
    configs = put_chain(writer, 3)
    key = record_keys.checkpoint_key("t", "", configs[-1]["configurable"]["checkpoint_id"])
    damaged = bytearray(writer.storage.read(key))
    damaged[len(damaged) // 2] ^= 0x01
    writer.storage.write(key, bytes(damaged))
    fault_proxy.refuse_writes(403)  # credentials that may read, not write
    seen = []
    reader = VerifiedSaver(
        storage=s3_storage(fault_proxy.endpoint, bucket), on_corruption=seen.append
    )
    assert reader.get_tuple(THREAD).config == configs[-2]
    assert reader.stats.damaged_records == 1
    assert len(seen) == 1
    # left where it was (the bucket as a machine that has read nothing sees it)
    assert s3_storage(endpoint, bucket).read(key) == bytes(damaged)
    report = reader.verify(repair=True)
    assert report.read_only and not report.ok
    assert s3_storage(endpoint, bucket).read(key) == bytes(damaged)
    assert not list(writer.storage.walk("quarantine"))
    # with write access, repair moves it aside and the store verifies
    fault_proxy.reset()
    repaired = VerifiedSaver(storage=s3_storage(endpoint, bucket)).verify(repair=True)
    assert [d.key for d in repaired.damaged] == [key]
    assert repaired.damaged[0].quarantined_to.startswith("s3://")
    assert s3_storage(endpoint, bucket).read(key) is None
    assert VerifiedSaver(storage=s3_storage(endpoint, bucket)).verify().ok


def test_the_langgraph_server_factory_opens_a_bucket(s3_bucket, monkeypatch):
    from langgraph_checkpoint_verified.server import STORE_ENV, checkpointer

    endpoint, bucket = s3_bucket
    for name, value in s3_env(endpoint).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(STORE_ENV, f"s3://{bucket}/server")

    async def main() -> None:
        async with checkpointer() as saver:
            assert isinstance(saver.storage, ObjectStorage)
            config: dict = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            checkpoint = generate_checkpoint(channel_values={"x": 1}, channel_versions={"x": 1})
            await saver.aput(config, checkpoint, generate_metadata(step=1), {"x": 1})

    asyncio.run(main())
    stored = VerifiedSaver(storage=s3_storage(endpoint, bucket, prefix="server"))
    assert stored.get_tuple(THREAD).checkpoint["channel_values"] == {"x": 1}


def test_maintenance_keeps_the_heads_of_what_it_keeps(fault_proxy, s3_bucket):
    _, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    configs = put_chain(saver, 5)
    put_chain(saver, 3, thread_id="other")
    for config in configs:
        saver.put_writes(config, [("x", "w")], "task")
    heads = sorted(k for k in s3_keys(fault_proxy.endpoint, bucket) if "/heads/" in k)
    assert heads == ["store/heads/other/~.head", "store/heads/t/~.head"]

    saver.prune(["t"], strategy="keep_latest")  # deletes writes of the checkpoints it drops
    assert sorted(k for k in s3_keys(fault_proxy.endpoint, bucket) if "/heads/" in k) == heads
    reader = VerifiedSaver(storage=s3_storage(fault_proxy.endpoint, bucket))
    fault_proxy.clear_counts()
    assert reader.get_tuple(THREAD).config == configs[-1]
    lists = [r for r in fault_proxy.requests if r.method == "LIST" and "checkpoints" in r.query]
    assert len(lists) == 1 and "start-after" in lists[0].query  # from the head, not a listing

    saver.delete_thread("t")
    assert [k for k in s3_keys(fault_proxy.endpoint, bucket) if "/heads/" in k] == [heads[0]]


def s3_keys(endpoint: str, bucket: str) -> list[str]:
    listed = s3_client(endpoint).list_objects_v2(Bucket=bucket)
    return [o["Key"] for o in listed.get("Contents", [])]


def test_a_copied_thread_has_a_head_naming_its_newest_checkpoint(s3_bucket):
    endpoint, bucket = s3_bucket
    saver = VerifiedSaver(storage=s3_storage(endpoint, bucket))
    configs = put_chain(saver, 5)
    saver.copy_thread("t", "copy")
    head = s3_client(endpoint).get_object(Bucket=bucket, Key="store/heads/copy/~.head")
    newest = configs[-1]["configurable"]["checkpoint_id"]
    assert head["Body"].read().decode() == f"{newest}.ckpt"
    reader = VerifiedSaver(storage=s3_storage(endpoint, bucket))
    found = reader.get_tuple({"configurable": {"thread_id": "copy"}})
    assert found.config["configurable"]["checkpoint_id"] == newest
