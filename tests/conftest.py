"""Scripts that tests start as child processes are not test modules: never import them.

The S3 fixtures start a real S3-compatible server (moto, tests/s3server.py) on
127.0.0.1 the first time a test asks for one, and stop it when the session ends;
tests that ask for none of them start nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from s3server import FaultProxy, MotoServer, create_bucket

collect_ignore_glob = ["*_child.py"]


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """moto's S3 in a child process, for the whole session: ``.endpoint``."""
    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(moto_server: MotoServer) -> tuple[str, str]:
    """``(endpoint, bucket)``: a new empty bucket on the session's server."""
    assert moto_server.endpoint is not None
    bucket = f"test-{uuid.uuid4().hex}"
    create_bucket(moto_server.endpoint, bucket)
    return moto_server.endpoint, bucket


@pytest.fixture
def fault_proxy(moto_server: MotoServer) -> Iterator[FaultProxy]:
    """A FaultProxy in front of the session's server, stopped after the test: a
    client given ``fault_proxy.endpoint`` reaches every bucket of the server."""
    assert moto_server.endpoint is not None
    proxy = FaultProxy(moto_server.endpoint)
    try:
        yield proxy
    finally:
        proxy.stop()
