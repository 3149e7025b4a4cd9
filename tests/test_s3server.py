"""The S3 server the tests start (tests/s3server.py) does what an S3 backend relies on.

Each test talks to moto through obstore, the client the backend uses, directly or
through a FaultProxy, and pins down one behaviour: conditional writes, listing
after an offset, ETags, obstore's retries and the errors it raises, and how the
proxy counts requests.
"""

from __future__ import annotations

import http.client
import threading
from datetime import timedelta

import pytest
from s3server import FaultProxy, MotoServer, create_bucket, operation, s3_store

obstore = pytest.importorskip("obstore")
from obstore.exceptions import (  # noqa: E402
    AlreadyExistsError,
    GenericError,
    PermissionDeniedError,
    PreconditionError,
)

# Retries without waiting long; a deadline far above what any retry here takes.
FAST_RETRIES = {
    "max_retries": 2,
    "backoff": {
        "init_backoff": timedelta(milliseconds=1),
        "max_backoff": timedelta(milliseconds=5),
    },
    "retry_timeout": timedelta(seconds=120),
}


@pytest.fixture
def store(s3_bucket):
    endpoint, bucket = s3_bucket
    return s3_store(endpoint, bucket)


@pytest.fixture
def proxied(s3_bucket, fault_proxy):
    """A store that reaches the bucket through the proxy, retrying at most twice."""
    _, bucket = s3_bucket
    return s3_store(fault_proxy.endpoint, bucket, retry_config=FAST_RETRIES)


def keys(store, **kwargs) -> list[str]:
    return [meta["path"] for chunk in obstore.list(store, **kwargs) for meta in chunk]


# --- the server ---------------------------------------------------------------------


def test_put_in_create_mode_twice_raises_already_exists(store):
    obstore.put(store, "k", b"first", mode="create")
    with pytest.raises(AlreadyExistsError):
        obstore.put(store, "k", b"second", mode="create")
    assert obstore.get(store, "k").bytes() == b"first"


def test_put_on_an_etag_needs_the_current_one(store):
    first = obstore.put(store, "k", b"one")["e_tag"]
    second = obstore.put(store, "k", b"two", mode={"e_tag": first})["e_tag"]
    assert second != first
    with pytest.raises(PreconditionError):
        obstore.put(store, "k", b"three", mode={"e_tag": first})
    assert obstore.get(store, "k").bytes() == b"two"


def test_put_on_an_etag_of_a_missing_object_raises_precondition(store):
    # moto answers 404 NoSuchKey, as S3 does; obstore makes it a PreconditionError
    with pytest.raises(PreconditionError):
        obstore.put(store, "missing", b"x", mode={"e_tag": '"0123456789abcdef"'})
    with pytest.raises(FileNotFoundError):
        obstore.head(store, "missing")


def test_head_gives_the_etag_the_put_returned(store):
    etag = obstore.put(store, "k", b"hello")["e_tag"]
    meta = obstore.head(store, "k")
    assert meta["e_tag"] == etag
    assert meta["size"] == 5


def test_missing_objects_raise_file_not_found_and_delete_is_quiet(store):
    # obstore raises the builtin FileNotFoundError, not obstore.exceptions.NotFoundError
    with pytest.raises(FileNotFoundError):
        obstore.get(store, "missing")
    with pytest.raises(FileNotFoundError):
        obstore.head(store, "missing")
    obstore.delete(store, "missing")


def test_list_with_an_offset_returns_only_the_keys_after_it(store):
    for name in ["a/1", "a/2", "a/3", "a/4", "a/5", "b/1"]:
        obstore.put(store, name, b"x")
    assert keys(store, prefix="a/") == ["a/1", "a/2", "a/3", "a/4", "a/5"]
    assert keys(store, prefix="a/", offset="a/3") == ["a/4", "a/5"]
    assert keys(store, prefix="a/", offset="a/2x") == ["a/3", "a/4", "a/5"]
    assert keys(store, prefix="a/", offset="a/5") == []


def test_list_with_an_offset_sends_start_after(s3_bucket, fault_proxy, proxied):
    obstore.put(proxied, "a/1", b"x")
    assert keys(proxied, prefix="a/", offset="a/0") == ["a/1"]
    (listing,) = [r for r in fault_proxy.requests if r.method == "LIST"]
    assert "start-after=a%2F0" in listing.query or "start-after=a/0" in listing.query


def race(workers: int, write) -> list[int]:
    """Run ``write(i)`` in ``workers`` threads released at once; the ``i`` that succeeded."""
    start = threading.Barrier(workers)
    winners: list[int] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        start.wait()
        try:
            write(i)
        except (AlreadyExistsError, PreconditionError):
            return
        with lock:
            winners.append(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return winners


def test_racing_creates_have_exactly_one_winner(store):
    for round in range(5):
        key = f"k{round}"

        def create(i: int, key: str = key) -> None:
            obstore.put(store, key, b"%d" % i, mode="create")

        winners = race(8, create)
        assert len(winners) == 1
        assert obstore.get(store, key).bytes() == b"%d" % winners[0]


def test_racing_updates_on_one_etag_have_exactly_one_winner(store):
    for round in range(5):
        key = f"k{round}"
        etag = obstore.put(store, key, b"base")["e_tag"]

        def update(i: int, key: str = key, etag: str = etag) -> None:
            obstore.put(store, key, b"%d" % i, mode={"e_tag": etag})

        winners = race(8, update)
        assert len(winners) == 1
        assert obstore.get(store, key).bytes() == b"%d" % winners[0]


def test_a_server_starts_and_stops():
    with MotoServer() as server:
        assert server.endpoint is not None
        create_bucket(server.endpoint, "a-bucket")
        store = s3_store(server.endpoint, "a-bucket")
        obstore.put(store, "k", b"v")
        process = server.process
        assert process is not None
    assert process.poll() is not None
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    with pytest.raises(ConnectionRefusedError):
        connection.request("GET", "/")


# --- through the proxy ----------------------------------------------------------------


def test_the_proxy_forwards_and_counts_each_operation(s3_bucket, fault_proxy, proxied):
    _, bucket = s3_bucket
    obstore.put(proxied, "k", b"hello")
    assert obstore.head(proxied, "k")["size"] == 5
    assert obstore.get(proxied, "k").bytes() == b"hello"
    assert keys(proxied, prefix="") == ["k"]
    obstore.delete(proxied, "k")
    assert fault_proxy.counts == {"GET": 1, "PUT": 1, "HEAD": 1, "DELETE": 1, "POST": 0, "LIST": 1}
    assert [(r.method, r.path, r.status, r.fault) for r in fault_proxy.requests] == [
        ("PUT", f"/{bucket}/k", 200, False),
        ("HEAD", f"/{bucket}/k", 200, False),
        ("GET", f"/{bucket}/k", 200, False),
        ("LIST", f"/{bucket}", 200, False),
        # obstore deletes with DeleteObjects (POST ?delete), counted as a DELETE
        ("DELETE", f"/{bucket}", 200, False),
    ]
    fault_proxy.clear_counts()
    assert fault_proxy.counts["PUT"] == 0
    assert fault_proxy.requests == []


def test_obstore_sends_a_small_put_with_a_content_length(fault_proxy, proxied):
    etag = obstore.put(proxied, "k", b"hello")["e_tag"]
    obstore.put(proxied, "k", b"again", mode={"e_tag": etag})
    obstore.put(proxied, "new", b"x", mode="create")
    first, second, third = fault_proxy.requests
    assert first.headers["content-length"] == "5"
    assert "transfer-encoding" not in first.headers
    assert second.headers["if-match"] == etag
    assert third.headers["if-none-match"] == "*"


def test_a_503_is_retried_without_the_caller_seeing_it(fault_proxy, proxied):
    fault_proxy.fail_next(1, status=503)
    obstore.put(proxied, "k", b"v", mode="create")
    assert fault_proxy.counts["PUT"] == 2
    assert [(r.status, r.fault) for r in fault_proxy.requests] == [(503, True), (200, False)]
    assert obstore.get(proxied, "k").bytes() == b"v"


def test_more_failures_than_retries_raise_a_generic_error(fault_proxy, proxied):
    fault_proxy.fail_next(3, status=503, method="PUT")
    with pytest.raises(GenericError, match="503"):
        obstore.put(proxied, "k", b"v")
    assert fault_proxy.counts["PUT"] == 3  # the request and its two retries
    with pytest.raises(FileNotFoundError):
        obstore.head(proxied, "k")  # none of them reached the server


def test_errors_obstore_does_not_retry(fault_proxy, proxied):
    obstore.put(proxied, "k", b"v")
    fault_proxy.fail_next(1, status=403)
    with pytest.raises(PermissionDeniedError):
        obstore.get(proxied, "k")
    fault_proxy.fail_next(1, status=404)
    with pytest.raises(FileNotFoundError):
        obstore.get(proxied, "k")
    assert fault_proxy.counts["GET"] == 2


def test_a_fault_can_wait_for_its_operation(fault_proxy, proxied):
    fault_proxy.fail_next(1, status=500, method="GET")
    obstore.put(proxied, "k", b"v")
    assert obstore.get(proxied, "k").bytes() == b"v"
    assert [(r.method, r.status) for r in fault_proxy.requests] == [
        ("PUT", 200),
        ("GET", 500),
        ("GET", 200),
    ]


def test_fail_every_fails_each_kth_request(fault_proxy, proxied):
    obstore.put(proxied, "k", b"v")
    fault_proxy.fail_every(2, method="GET")
    for _ in range(3):
        assert obstore.get(proxied, "k").bytes() == b"v"
    # requests 2 and 4 fail: the second GET's first try and the third GET's
    assert [r.status for r in fault_proxy.requests if r.method == "GET"] == [
        200,
        503,
        200,
        503,
        200,
    ]
    fault_proxy.fail_every(0)
    obstore.get(proxied, "k")
    assert fault_proxy.requests[-1].status == 200


def test_a_dropped_connection_is_retried_even_for_a_put(fault_proxy, proxied):
    fault_proxy.drop_next(1, method="PUT")
    obstore.put(proxied, "k", b"v", mode="create")
    assert [(r.status, r.fault) for r in fault_proxy.requests] == [(None, True), (200, False)]


def test_a_lost_answer_to_a_create_turns_into_already_exists(fault_proxy, proxied):
    """The server wrote the object, its answer never came, obstore sent the PUT
    again, and the retry found the object there: the writer is told it lost
    although its own bytes are stored. A backend must check whose they are."""
    fault_proxy.drop_answer_next(1, method="PUT")
    with pytest.raises(AlreadyExistsError):
        obstore.put(proxied, "k", b"mine", mode="create")
    assert [(r.status, r.fault) for r in fault_proxy.requests] == [(None, True), (412, False)]
    assert obstore.get(proxied, "k").bytes() == b"mine"


def test_a_lost_answer_to_an_update_turns_into_a_precondition_failure(fault_proxy, proxied):
    etag = obstore.put(proxied, "k", b"one")["e_tag"]
    fault_proxy.drop_answer_next(1, method="PUT")
    with pytest.raises(PreconditionError):
        obstore.put(proxied, "k", b"two", mode={"e_tag": etag})
    assert obstore.get(proxied, "k").bytes() == b"two"


def test_reset_forgets_faults_and_counts(fault_proxy, proxied):
    fault_proxy.fail_next(5)
    fault_proxy.fail_every(1)
    fault_proxy.reset()
    assert fault_proxy.counts == dict.fromkeys(fault_proxy.counts, 0)
    obstore.put(proxied, "k", b"v")
    assert [r.status for r in fault_proxy.requests] == [200]


def test_stop_ends_kept_alive_connections(moto_server):
    proxy = FaultProxy(moto_server.endpoint)
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=60)
    connection.request("GET", "/")
    connection.getresponse().read()
    proxy.stop()  # returns although the connection is still open
    connection.close()


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/bucket", "list-type=2&prefix=a%2F", "LIST"),
        ("GET", "/bucket/", "prefix=a", "LIST"),
        ("GET", "/bucket", "", "LIST"),
        ("GET", "/bucket", "location", "GET"),
        ("GET", "/bucket/key", "", "GET"),
        ("GET", "/bucket/key", "prefix=a", "GET"),
        ("GET", "/", "", "GET"),
        ("POST", "/bucket", "delete", "DELETE"),
        ("POST", "/bucket/key", "uploads", "POST"),
        ("PUT", "/bucket/key", "", "PUT"),
        ("HEAD", "/bucket/key", "", "HEAD"),
        ("DELETE", "/bucket/key", "", "DELETE"),
    ],
)
def test_operation(method, path, query, expected):
    assert operation(method, path, query) == expected
