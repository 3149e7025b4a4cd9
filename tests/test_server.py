"""VerifiedSaver behind the real LangGraph server: ``langgraph dev``, real HTTP, real SIGKILL.

Each server test copies ``tests/server_app/`` (a graph that interrupts, and
logs every node that runs) into a temporary directory, starts ``langgraph dev``
there in its own process group, waits until ``/ok`` answers, and drives it
with ``langgraph-sdk``. The server is then killed with SIGKILL (the whole
process group) and started again on the same store. What must hold:

* the thread's state and history after the restart are the ones before it:
  the same checkpoints (ids, parents, steps) with the same values;
* no node that had finished runs again (``nodes.log``); a node killed while it
  ran runs again from its start, as LangGraph promises (at least once);
* the run can be finished after the restart;
* the checkpoints are in the ``VerifiedSaver`` store: opened directly once the
  server is stopped, it lists the thread's checkpoints, and they verify.

``langgraph dev`` keeps its own registry of threads and runs in
``.langgraph_api/`` and writes it to disk every ten seconds; checkpoints go to
the checkpointer. The first test waits (on the file, not on a clock) until the
registry on disk records the run as running, so the restarted server retries
it; the second deletes the registry, the worst case of a crash within those ten
seconds, and shows the thread coming back from the store alone.

Nothing leaves the machine: the server gets the variables that turn off its
analytics, version check and tracing, and no LangSmith or license key.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import pytest
from langgraph.graph import START, StateGraph
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from langgraph_sdk.errors import NotFoundError
from langgraph_sdk.schema import Command
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import (
    RetentionPolicy,
    StoreKeyError,
    VerifiedSaver,
    VerifiedSaverError,
)
from langgraph_checkpoint_verified import server as verified_server
from langgraph_checkpoint_verified.server import (
    DEFAULT_STORE,
    KEY_FILE_ENV,
    STORE_CONFIG_ENV,
    STORE_ENV,
    checkpointer,
    embeddings_from_config,
    open_from_env,
    open_store_from_env,
    retention_from_env,
)

T = TypeVar("T")

APP = Path(__file__).with_name("server_app")
GUARD = 300.0
"""Seconds before a wait gives up: a bound for a hung server, not an expectation."""
POLL = 0.05
KEY = bytes(range(32))
STATE_KEYS = {"topic", "draft", "approved", "published"}
"""The graph's state; a store also holds LangGraph's own channels (``branch:to:...``)."""

needs_server = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="langgraph dev (langgraph-api) runs on Python 3.11 or later only",
)

# Loopback only, never through a proxy the environment may name.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# Variables that would make the server talk to LangSmith or LangChain.
_PHONE_HOME_PREFIXES = ("LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_", "OTEL_")


def server_env(store: Path, key_file: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PHONE_HOME_PREFIXES)}
    env.update(
        LANGGRAPH_CLI_NO_ANALYTICS="1",  # langgraph-cli: no usage report
        LANGGRAPH_NO_VERSION_CHECK="true",  # langgraph-api: no PyPI version lookup
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
        PYTHONDONTWRITEBYTECODE="1",
    )
    env[STORE_ENV] = str(store)
    if key_file is not None:
        env[KEY_FILE_ENV] = str(key_file)
    return env


def wait_until(condition: Callable[[], T], what: str, server: Server | None = None) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``GUARD`` seconds."""
    deadline = time.monotonic() + GUARD
    while True:
        value = condition()
        if value:
            return value
        if server is not None and server.process.poll() is not None:
            pytest.fail(
                f"the server exited ({server.process.returncode}) while waiting for "
                f"{what}:\n{server.output()[-20000:]}"
            )
        if time.monotonic() > deadline:
            log = server.output()[-20000:] if server is not None else ""
            pytest.fail(f"waited {GUARD:.0f}s for {what}\n{log}")
        time.sleep(POLL)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """``langgraph dev`` in ``app``, in its own process group, on the store ``store``."""

    def __init__(
        self,
        app: Path,
        store: Path,
        *,
        config: str = "langgraph.json",
        key_file: Path | None = None,
    ) -> None:
        self.app, self.store, self.config, self.key_file = app, store, config, key_file
        self.starts = 0
        self.process: subprocess.Popen[bytes]
        self.url = ""

    def start(self) -> SyncLangGraphClient:
        self.starts += 1
        self.log = self.app / f"server-{self.starts}.out"
        port = free_port()
        executable = Path(sys.executable).with_name("langgraph")
        argv = [str(executable), "dev", "--no-browser", "--no-reload"]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--config", self.config]
        with self.log.open("wb") as output:
            self.process = subprocess.Popen(
                argv,
                cwd=self.app,
                env=server_env(self.store, self.key_file),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed as one
            )

        def answers() -> bool:
            # langgraph dev takes another port, and says so, if ours was taken meanwhile
            moved = re.search(r"already in use, using port (\d+)", self.output())
            self.url = f"http://127.0.0.1:{moved.group(1) if moved else port}"
            try:
                with _LOOPBACK.open(self.url + "/ok", timeout=10) as response:
                    return bool(response.status == 200)
            except (OSError, http.client.HTTPException):
                return False

        wait_until(answers, "the server to answer /ok", self)
        return get_sync_client(url=self.url, timeout=GUARD)

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """Shut down cleanly (the server leaves the checkpointer's context)."""
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=GUARD)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the server did not stop on SIGTERM:\n{self.output()[-20000:]}")

    def close(self) -> None:
        if self.starts and self.process.poll() is None:
            self.kill()

    def output(self) -> str:
        """The server's log so far, without colours."""
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return re.sub(r"\x1b\[[0-9;]*m", "", text)

    def nodes(self) -> list[str]:
        """The lines ``tests/server_app/agent.py`` logged, complete ones only."""
        try:
            return (self.app / "nodes.log").read_text().split("\n")[:-1]
        except FileNotFoundError:
            return []


@pytest.fixture
def app(tmp_path: Path) -> Path:
    target = tmp_path / "app"
    shutil.copytree(APP, target, ignore=shutil.ignore_patterns("__pycache__", "conftest.py"))
    return target


@pytest.fixture
def servers():
    started: list[Server] = []

    def make(*args: Any, **kwargs: Any) -> Server:
        started.append(Server(*args, **kwargs))
        return started[-1]

    yield make
    for server in started:  # after a failure too: no server outlives its test
        server.close()


class _Opaque:
    """Stands in for any object of the server's own in its registry file."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


class _RegistryReader(pickle.Unpickler):
    """Reads ``langgraph dev``'s registry without importing the server's modules."""

    _KNOWN = {
        ("uuid", "UUID"),
        ("datetime", "datetime"),
        ("datetime", "timezone"),
        ("datetime", "timedelta"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._KNOWN:
            return super().find_class(module, name)
        return _Opaque


def run_status_on_disk(app: Path, run_id: str) -> str | None:
    """The run's status as the server's registry file (written every ten seconds) has it."""
    try:
        data = (app / ".langgraph_api" / ".langgraph_ops.pckl").read_bytes()
    except FileNotFoundError:
        return None
    registry = _RegistryReader(io.BytesIO(data)).load()
    for run in registry.get("runs", []):
        if str(run["run_id"]) == run_id:
            return str(run["status"])
    return None


def checkpoints(history: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must survive a restart, newest first: identity, place in the chain, values."""
    return [
        (
            entry["checkpoint"]["checkpoint_id"],
            (entry["parent_checkpoint"] or {}).get("checkpoint_id"),
            entry["metadata"]["step"],
            entry["values"],
            entry["next"],
        )
        for entry in history
    ]


def stored_checkpoints(saver: VerifiedSaver, thread_id: str) -> list[tuple[Any, ...]]:
    """The same view, read from the store directly."""
    return [
        (
            item.config["configurable"]["checkpoint_id"],
            item.parent_config["configurable"]["checkpoint_id"] if item.parent_config else None,
            item.metadata["step"],
            {k: v for k, v in item.checkpoint["channel_values"].items() if k in STATE_KEYS},
        )
        for item in saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    ]


def without_next(view: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [entry[:4] for entry in view]


def history_of(client: SyncLangGraphClient, thread_id: str) -> list[dict[str, Any]]:
    return list(client.threads.get_history(thread_id, limit=1000))


@needs_server
def test_run_killed_mid_node_is_retried_from_its_last_checkpoint(app, servers, tmp_path):
    store = tmp_path / "store"
    server = servers(app, store)
    client = server.start()

    # The server took our saver, and found every method it uses beyond the base contract.
    assert "Using custom checkpointer: VerifiedSaver" in server.output()
    assert "Custom checkpointer missing" not in server.output()

    thread_id = client.threads.create()["thread_id"]
    paused = client.runs.wait(thread_id, "agent", input={"topic": "tea"})
    assert paused["__interrupt__"][0]["value"] == {
        "question": "publish this?",
        "draft": "a post about tea",
    }
    state = client.threads.get_state(thread_id)
    assert state["values"] == {"topic": "tea", "draft": "a post about tea"}
    assert state["next"] == ["approve"]
    assert [entry["next"] for entry in history_of(client, thread_id)] == [
        ["approve"],
        ["draft"],
        ["__start__"],
    ]

    run = client.runs.create(thread_id, "agent", command=Command(resume="yes"))
    wait_until(lambda: "publish started" in server.nodes(), "publish to start", server)
    # The restarted server retries a run only if its registry file says the run was running.
    wait_until(
        lambda: run_status_on_disk(app, run["run_id"]) == "running",
        "the server's registry to record the run as running",
        server,
    )
    before = checkpoints(history_of(client, thread_id))
    assert before[0][3:] == (
        {"topic": "tea", "draft": "a post about tea", "approved": "yes"},
        ["publish"],
    )
    assert len(before) == 4

    server.kill()
    client = server.start()

    # The run is retried from the checkpoint after approve: publish starts again, and waits.
    wait_until(
        lambda: server.nodes().count("publish started") == 2, "the run to be retried", server
    )
    assert checkpoints(history_of(client, thread_id)) == before
    assert client.threads.get_state(thread_id)["checkpoint"]["checkpoint_id"] == before[0][0]

    (app / "gate").touch()
    client.runs.join(thread_id, run["run_id"])
    assert client.runs.get(thread_id, run["run_id"])["status"] == "success"
    final = client.threads.get_state(thread_id)
    assert final["values"] == {
        "topic": "tea",
        "draft": "a post about tea",
        "approved": "yes",
        "published": True,
    }
    after = checkpoints(history_of(client, thread_id))
    assert after[1:] == before
    assert after[0][4] == []
    # Finished nodes ran once; publish, killed while it ran, ran again from its start.
    assert server.nodes() == [
        "draft",
        "approve",
        "publish started",
        "publish started",
        "publish finished",
    ]

    # The server's thread copy and delete go to the saver's copy_thread / delete_thread.
    copy_id = client.threads.copy(thread_id)["thread_id"]
    assert [entry[3] for entry in checkpoints(history_of(client, copy_id))] == [
        entry[3] for entry in after
    ]
    client.threads.delete(copy_id)
    server.stop()

    saver = VerifiedSaver(store)
    assert stored_checkpoints(saver, thread_id) == without_next(after)
    assert stored_checkpoints(saver, copy_id) == []
    assert saver.verify().ok


@needs_server
def test_interrupted_thread_comes_back_from_the_store_alone(app, servers, tmp_path):
    """File form of ``checkpointer.path``, a keyed store, and the server's registry lost."""
    store = tmp_path / "store"
    key_file = tmp_path / "store.key"
    key_file.write_bytes(KEY)
    (app / "gate").touch()
    server = servers(app, store, config="langgraph_file_form.json", key_file=key_file)
    client = server.start()

    thread_id = client.threads.create()["thread_id"]
    client.runs.wait(thread_id, "agent", input={"topic": "tea"})
    before = checkpoints(history_of(client, thread_id))
    assert [entry[4] for entry in before] == [["approve"], ["draft"], ["__start__"]]
    interrupts = client.threads.get_state(thread_id)["interrupts"]
    assert [interrupt["value"]["question"] for interrupt in interrupts] == ["publish this?"]

    server.kill()
    # What a crash within the registry's ten-second write interval leaves at worst.
    shutil.rmtree(app / ".langgraph_api", ignore_errors=True)
    client = server.start()

    with pytest.raises(NotFoundError):
        client.threads.get(thread_id)
    # Registering the thread again, with its graph, is all it takes: the state is in the store.
    client.threads.create(thread_id=thread_id, metadata={"graph_id": "agent"})
    assert checkpoints(history_of(client, thread_id)) == before
    assert client.threads.get_state(thread_id)["interrupts"] == interrupts

    done = client.runs.wait(thread_id, "agent", command=Command(resume="yes"))
    assert done == {
        "topic": "tea",
        "draft": "a post about tea",
        "approved": "yes",
        "published": True,
    }
    assert server.nodes() == ["draft", "approve", "publish started", "publish finished"]
    after = checkpoints(history_of(client, thread_id))
    server.stop()

    with pytest.raises(StoreKeyError):
        VerifiedSaver(store)
    saver = VerifiedSaver(store, key=KEY)
    assert stored_checkpoints(saver, thread_id) == without_next(after)
    assert saver.verify().ok


# -- open_from_env and checkpointer, without a server ----------------------------------------


class Count(TypedDict):
    count: int


def count_graph():
    builder = StateGraph(Count)
    builder.add_node("inc", lambda state: {"count": state["count"] + 1})
    builder.add_edge(START, "inc")
    return builder


def test_the_default_store_is_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    saver = open_from_env({})
    assert saver.storage.root == tmp_path / DEFAULT_STORE  # type: ignore[attr-defined]
    assert (tmp_path / DEFAULT_STORE).is_dir()


def test_a_relative_store_is_resolved_once_at_open(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    saver = open_from_env({STORE_ENV: "state/checkpoints"})
    monkeypatch.chdir("/")
    config = {"configurable": {"thread_id": "t"}}
    count_graph().compile(checkpointer=saver).invoke({"count": 1}, config)
    assert VerifiedSaver(tmp_path / "state" / "checkpoints").get_tuple(config) is not None


def test_a_key_file_makes_a_keyed_store(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    environ = {STORE_ENV: str(tmp_path / "store"), KEY_FILE_ENV: str(key_file)}
    config = {"configurable": {"thread_id": "t"}}
    count_graph().compile(checkpointer=open_from_env(environ)).invoke({"count": 1}, config)
    with pytest.raises(StoreKeyError):
        VerifiedSaver(tmp_path / "store")
    latest = open_from_env(environ).get_tuple(config)
    assert latest is not None
    assert latest.checkpoint["channel_values"] == {"count": 2}


def test_a_key_mismatch_says_which_variable_to_change(tmp_path):
    key_file, other_key_file = tmp_path / "key", tmp_path / "other"
    key_file.write_bytes(KEY)
    other_key_file.write_bytes(bytes(reversed(KEY)))
    keyed, unkeyed = str(tmp_path / "keyed"), str(tmp_path / "unkeyed")
    config = {"configurable": {"thread_id": "t"}}
    graph = count_graph()
    graph.compile(checkpointer=VerifiedSaver(keyed, key=KEY)).invoke({"count": 1}, config)
    graph.compile(checkpointer=VerifiedSaver(unkeyed)).invoke({"count": 1}, config)
    with pytest.raises(StoreKeyError, match=f"set {KEY_FILE_ENV} to the file"):
        open_from_env({STORE_ENV: keyed})
    with pytest.raises(StoreKeyError, match=f"unset {KEY_FILE_ENV}"):
        open_from_env({STORE_ENV: unkeyed, KEY_FILE_ENV: str(key_file)})
    with pytest.raises(StoreKeyError, match="does not hold this store's key"):
        open_from_env({STORE_ENV: keyed, KEY_FILE_ENV: str(other_key_file)})


def test_an_unreadable_key_file_names_the_variable(tmp_path):
    environ = {STORE_ENV: str(tmp_path / "store"), KEY_FILE_ENV: str(tmp_path / "missing")}
    with pytest.raises(ValueError, match=KEY_FILE_ENV):
        open_from_env(environ)


def test_a_key_of_the_wrong_length_is_refused(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_bytes(b"short")
    with pytest.raises(ValueError, match="16 to 64 bytes"):
        open_from_env({STORE_ENV: str(tmp_path / "store"), KEY_FILE_ENV: str(key_file)})


def test_options_reach_the_saver(tmp_path):
    saver = open_from_env({STORE_ENV: str(tmp_path / "store")}, fsync=False, strict=True)
    assert saver.strict
    assert not saver.storage.fsync  # type: ignore[attr-defined]


async def test_checkpointer_opens_off_the_event_loop_and_closes_at_exit(tmp_path, monkeypatch):
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "store"))
    opened_on: list[int] = []

    def recording_open(*args: Any, **kwargs: Any) -> VerifiedSaver:
        opened_on.append(threading.get_ident())
        return open_from_env(*args, **kwargs)

    monkeypatch.setattr(verified_server, "open_from_env", recording_open)
    config = {"configurable": {"thread_id": "t"}}
    async with checkpointer() as saver:
        await count_graph().compile(checkpointer=saver).ainvoke({"count": 1}, config)
    assert opened_on and opened_on[0] != threading.get_ident()
    with pytest.raises(VerifiedSaverError):
        saver.get_tuple(config)
    assert await asyncio.to_thread(VerifiedSaver(tmp_path / "store").get_tuple, config)


# -- the server's thread TTL -------------------------------------------------------------


@needs_server
def test_a_ttl_in_langgraph_json_sweeps_idle_threads_under_langgraph_dev(app, servers, tmp_path):
    """``"checkpointer": {"ttl": ...}`` in ``langgraph.json`` reaches the server process
    (``langgraph dev`` passes the block on as ``LANGGRAPH_CHECKPOINTER``); the factory
    starts a sweeper with it: a thread idle for years goes, one written now stays."""
    import time_machine
    from echo_graph import build_graph

    store = tmp_path / "store"
    graph = build_graph(VerifiedSaver(store))
    with time_machine.travel(datetime(2020, 1, 1, tzinfo=timezone.utc)):
        graph.invoke({"messages": [("user", "long ago")]}, {"configurable": {"thread_id": "idle"}})
    graph.invoke({"messages": [("user", "now")]}, {"configurable": {"thread_id": "recent"}})
    recent = VerifiedSaver(store).get_tuple({"configurable": {"thread_id": "recent"}})
    config = json.loads((app / "langgraph.json").read_text())
    config["checkpointer"]["ttl"] = {
        "strategy": "delete",
        "default_ttl": 60 * 24,
        "sweep_interval_minutes": 1,
    }
    (app / "langgraph_ttl.json").write_text(json.dumps(config))
    server = servers(app, store, config="langgraph_ttl.json")
    client = server.start()
    wait_until(
        lambda: "idle" not in VerifiedSaver(store).engine.thread_ids(),
        "the server's sweeper to delete the idle thread",
        server,
    )
    after = VerifiedSaver(store).get_tuple({"configurable": {"thread_id": "recent"}})
    assert after == recent
    # and the server's own prune call removes a thread from the store
    thread_id = client.threads.create()["thread_id"]
    client.runs.wait(thread_id, "agent", input={"topic": "tea"})
    assert thread_id in VerifiedSaver(store).engine.thread_ids()
    client.threads.prune([thread_id])
    assert thread_id not in VerifiedSaver(store).engine.thread_ids()
    server.stop()
    assert "thread TTL" in server.output()


def test_the_thread_ttl_variable_replaces_the_checkpointer_blocks(tmp_path):
    block = {"path": "x", "ttl": {"strategy": "keep_latest", "default_ttl": 30}}
    environ = {
        STORE_ENV: str(tmp_path / "store"),
        "LANGGRAPH_CHECKPOINTER": json.dumps(block),
    }
    from_block = retention_from_env(environ)
    assert from_block is not None
    assert from_block.policy == RetentionPolicy(idle=timedelta(minutes=30), on_expiry="keep_latest")
    assert (from_block.interval, from_block.limit) == (300.0, 10_000)
    overridden = retention_from_env(
        {**environ, "LANGGRAPH_THREAD_TTL": '{"default_ttl": 0.5, "sweep_interval_minutes": 2}'}
    )
    assert overridden is not None
    assert overridden.policy.idle == timedelta(seconds=30)
    assert overridden.policy.on_expiry == "delete" and overridden.interval == 120.0
    saver = open_from_env(environ)
    try:
        assert saver.retention == from_block.policy and saver.sweeper is not None
    finally:
        saver.close()
    assert retention_from_env({"LANGGRAPH_CHECKPOINTER": json.dumps({"path": "x"})}) is None
    with pytest.raises(ValueError, match="LANGGRAPH_THREAD_TTL is not valid JSON"):
        retention_from_env({"LANGGRAPH_THREAD_TTL": "{nope"})
    with pytest.raises(ValueError, match="strategy must be 'delete' or 'keep_latest'"):
        retention_from_env({"LANGGRAPH_THREAD_TTL": '{"default_ttl": 5, "strategy": "archive"}'})
    with pytest.raises(ValueError, match="default_ttl must be more than 0 minutes"):
        retention_from_env({"LANGGRAPH_THREAD_TTL": "0"})


@needs_server
def test_the_store_factory_keeps_items_across_a_sigkill_under_langgraph_dev(app, servers, tmp_path):
    """``"store": {"path": "langgraph_checkpoint_verified.server.store"}`` in
    ``langgraph.json``: the SDK's store calls reach a ``VerifiedStore`` on the
    checkpointer's directory, and every item the server acknowledged is there after
    the server is killed with SIGKILL and started again."""
    from langgraph_checkpoint_verified import VerifiedStore

    store = tmp_path / "store"
    config = json.loads((app / "langgraph.json").read_text())
    config["store"] = {"path": "langgraph_checkpoint_verified.server.store"}
    (app / "langgraph_store.json").write_text(json.dumps(config))
    server = servers(app, store, config="langgraph_store.json")
    client = server.start()
    for i in range(6):
        user = "ada" if i % 2 else "grace"
        client.store.put_item(["users", user], f"memory-{i}", {"i": i, "user": user})
    client.store.put_item(["users", "ada", "prefs"], "theme", {"theme": "dark"})
    assert client.store.get_item(["users", "ada"], "memory-1")["value"] == {"i": 1, "user": "ada"}
    found = client.store.search_items(["users"], filter={"i": {"$gte": 3}}, limit=10)
    assert sorted(item["key"] for item in found["items"]) == ["memory-3", "memory-4", "memory-5"]
    assert client.store.list_namespaces(prefix=["users"])["namespaces"] == [
        ["users", "ada"],
        ["users", "ada", "prefs"],
        ["users", "grace"],
    ]
    client.store.delete_item(["users", "grace"], "memory-0")
    server.kill()
    # the items are verified records in the checkpointer's directory, under store/
    assert VerifiedStore(store).get(("users", "ada", "prefs"), "theme").value == {"theme": "dark"}
    client = server.start()
    for i in range(1, 6):
        user = "ada" if i % 2 else "grace"
        got = client.store.get_item(["users", user], f"memory-{i}")
        assert got["value"] == {"i": i, "user": user}
    assert len(client.store.search_items(["users"], limit=100)["items"]) == 6
    try:  # the SDK answers a missing item with None or a 404, by version
        deleted = client.store.get_item(["users", "grace"], "memory-0")
    except NotFoundError:
        deleted = None
    assert deleted is None
    server.stop()
    assert VerifiedStore(store).stats.damaged_records == 0


# -- the store block's ttl and index -------------------------------------------------------

DAY = 24 * 60
"""Minutes."""


@needs_server
def test_the_store_blocks_ttl_and_index_reach_the_verified_store_under_langgraph_dev(
    app, servers, tmp_path
):
    """``"store": {"path": ..., "ttl": {...}, "index": {...}}`` in ``langgraph.json``:
    ``langgraph dev`` hands the block to the process as ``LANGGRAPH_STORE`` and, for
    a custom store, runs no TTL sweeper of its own. The factory opens the
    ``VerifiedStore`` with the block's TTL and index (its ``embed`` names a function
    in a file, which the factory loads as the server does for its own store) and
    starts the store's sweeper."""
    import time_machine

    from langgraph_checkpoint_verified import VerifiedStore
    from langgraph_checkpoint_verified.records.format import RecordKind
    from langgraph_checkpoint_verified.store.batches import decode_batch

    store = tmp_path / "store"
    with time_machine.travel(datetime(2020, 1, 1, tzinfo=timezone.utc)):
        VerifiedStore(store).put(("notes",), "stale", {"text": "old tea"}, ttl=1)

    def held() -> set[str]:
        """The keys the records of ("notes",) hold: expired ones too, until a sweep."""
        return {key for _, key in VerifiedStore(store).logs.current("notes").items}

    assert held() == {"stale"}
    config = json.loads((app / "langgraph.json").read_text())
    config["graphs"]["notes"] = "./notes.py:graph"
    config["store"] = {
        "path": "langgraph_checkpoint_verified.server.store",
        "ttl": {"default_ttl": DAY, "refresh_on_read": False, "sweep_interval_minutes": 1},
        "index": {"dims": 3, "embed": "./embed.py:embed", "fields": ["text"]},
    }
    (app / "langgraph_store_ttl_index.json").write_text(json.dumps(config))
    server = servers(app, store, config="langgraph_store_ttl_index.json")
    client = server.start()
    # sweep_interval_minutes: the factory's sweeper, whose first sweep runs at once
    wait_until(
        lambda: "stale" not in held(), "the store's sweeper to delete an expired item", server
    )

    client.store.put_item(["notes"], "tea", {"text": "tea and cake"})
    client.store.put_item(["notes"], "coffee", {"text": "coffee, coffee, coffee"}, ttl=60)
    client.runs.wait(None, "notes", input={"key": "cake", "text": "cake, cake and more cake"})

    # index: every item was embedded with tests/server_app/embed.py when it was put
    found = client.store.search_items(["notes"], query="cake", limit=10)["items"]
    assert [(item["key"], round(item["score"], 3)) for item in found] == [
        ("cake", 1.0),
        ("tea", 0.707),
        ("coffee", 0.0),
    ]
    unranked = client.store.search_items(["notes"], limit=10)["items"]
    assert {item["key"]: item.get("score") for item in unranked} == {
        "cake": None,
        "tea": None,
        "coffee": None,
    }

    # refresh_on_read: false, so a read writes no touch unless it asks for one
    def touches() -> list[str]:
        """The keys of the items whose TTL a batch of ("notes",) refreshes."""
        reader = VerifiedStore(store)
        found = []
        for key in reader.storage.walk("memories/notes"):
            content = reader.codec.decode(reader.storage.read(key), RecordKind.STORE_BATCH, None)
            name = key.rsplit("/", 1)[1][: -len(".batch")]
            found += [touch.key for touch in decode_batch(name, content).touches]
        return sorted(found)

    assert client.store.get_item(["notes"], "coffee")["value"] == {"text": "coffee, coffee, coffee"}
    assert touches() == []
    client.store.get_item(["notes"], "coffee", refresh_ttl=True)
    assert touches() == ["coffee"]
    server.stop()
    assert "store TTL: expired items are swept every 1 minutes" in server.output()

    memory = VerifiedStore(store)
    items = {"tea": ("notes",), "coffee": ("notes",), "cake": ("notes", "from-a-run")}

    def alive_in(minutes: float) -> list[str]:
        with time_machine.travel(datetime.now(timezone.utc) + timedelta(minutes=minutes)):
            return sorted(
                key
                for key, namespace in items.items()
                if memory.get(namespace, key, refresh_ttl=False) is not None
            )

    assert alive_in(0) == ["cake", "coffee", "tea"]
    assert alive_in(2 * 60) == ["cake", "tea"]  # put_item(ttl=60)
    # a node's put without a ttl takes the block's default_ttl; an item put through
    # the API without one never expires: the server passes ttl=None, not "the default"
    assert alive_in(DAY + 60) == ["tea"]
    assert alive_in(100 * 365 * DAY) == ["tea"]
    assert memory.stats.damaged_records == 0


def test_the_store_blocks_embed_may_name_a_function_in_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(APP / "embed.py", tmp_path / "embed.py")

    def environ(embed: str) -> dict[str, str]:
        block = {"index": {"dims": 3, "embed": embed, "fields": ["text"]}}
        return {STORE_ENV: "store", STORE_CONFIG_ENV: json.dumps(block)}

    opened = open_store_from_env(environ("./embed.py:embed"))
    opened.put(("notes",), "tea", {"text": "tea and cake"})
    opened.put(("notes",), "coffee", {"text": "coffee"})
    assert [(i.key, round(i.score or 0, 3)) for i in opened.search(("notes",), query="tea")] == [
        ("tea", 0.707),
        ("coffee", 0.0),
    ]
    # the same file is loaded once, however many stores the server opens, by any path
    assert embeddings_from_config("./embed.py:embed") is embeddings_from_config(
        f"{tmp_path}/embed.py:embed"
    )
    with pytest.raises(ValueError, match=r"names ./missing.py, which is not a file"):
        open_store_from_env(environ("./missing.py:embed"))
    with pytest.raises(ValueError, match=r"defines no 'nothing'"):
        open_store_from_env(environ("./embed.py:nothing"))
    # a model id goes to VerifiedStore as it is, for LangChain's init_embeddings
    assert embeddings_from_config("openai:text-embedding-3-small") == (
        "openai:text-embedding-3-small"
    )
