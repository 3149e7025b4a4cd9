"""The ``langgraph-verified`` console script on ``s3://`` stores, as a real process.

The store is written by real graphs through ``VerifiedSaver("s3://bucket/store")``
into a bucket of the tests' moto server (``conftest.py``); the script reaches it
the way a person's shell does, through ``AWS_ENDPOINT_URL`` and the other
``AWS_*`` variables. Damage is done to the objects themselves, with boto3. Errors
(no server, no bucket, no store, a bucket that refuses writes, no obstore) are
one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, s3_client
from test_cli import config, run_conversations, sqlite_db  # noqa: F401 (a fixture)
from test_cli_console import fill_store

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.records import keys

SCRIPT = Path(sys.executable).parent / "langgraph-verified"
PREFIX = "store"


def cli(*argv: Any, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the console script with this process's environment (``AWS_*`` included),
    changed by ``env``."""
    return subprocess.run(
        [str(SCRIPT), *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def ok_json(*argv: Any) -> Any:
    done = cli(*argv, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The single line a command that could not run prints: exit 2, nothing else."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("langgraph-verified: error: ")
    assert done.stdout == ""
    return line


def objects(endpoint: str, bucket: str, prefix: str) -> dict[str, bytes]:
    client = s3_client(endpoint)
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def history_rows(store: str | Path, thread_id: str) -> list[dict[str, Any]]:
    """A thread's ``history --json`` rows without their sizes (a copy may store its
    records in other sizes: an imported list is stored whole, not as what it gained)."""
    rows = ok_json("history", store, thread_id)["checkpoints"]
    return [{k: v for k, v in row.items() if k != "bytes"} for row in rows]


@pytest.fixture
def bucket(s3_bucket: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """``(endpoint, bucket)``, and the ``AWS_*`` environment (of this process and so
    of the script) pointing at it, as a person would set it in their shell."""
    endpoint, name = s3_bucket
    for variable in [v for v in os.environ if v.startswith("AWS_")]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    return endpoint, name


@pytest.fixture
def store(bucket: tuple[str, str]) -> str:
    """``s3://<bucket>/store``: the echo chat's threads alpha and beta, and a thread
    waiting at an interrupt."""
    url = f"s3://{bucket[1]}/{PREFIX}"
    fill_store(VerifiedSaver(url))
    return url


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port of 127.0.0.1 that refuses connections: bound by this test, never listening,
    so no other program can start serving on it meanwhile."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


# -- reading ----------------------------------------------------------------------------


def test_threads_history_show_diff_stats_and_verify_read_the_bucket(store: str) -> None:
    saver = VerifiedSaver(store)
    newest = saver.get_tuple(config("alpha"))
    found = {t["thread_id"]: t for t in ok_json("threads", store)["threads"]}
    assert sorted(found) == ["alpha", "beta", "waiting"]
    assert (found["alpha"]["checkpoints"], found["alpha"]["last_step"]) == (6, 4)
    assert found["alpha"]["last_checkpoint_id"] == newest.config["configurable"]["checkpoint_id"]
    assert found["alpha"]["bytes"] > 0
    (waiting,) = found["waiting"]["interrupts"]
    assert waiting["value"] == {"question": "approve refund?"}

    rows = ok_json("history", store, "alpha")["checkpoints"]
    assert [r["checkpoint_id"] for r in rows] == [
        c.config["configurable"]["checkpoint_id"] for c in saver.list(config("alpha"))
    ]
    assert [r["step"] for r in rows] == [4, 3, 2, 1, 0, -1]
    assert {r["status"] for r in rows} == {"ok"}
    assert rows[0]["changed_channels"] == ["branch:to:reply", "messages", "turns"]

    state = ok_json("show", store, "alpha")
    assert state["checkpoint_id"] == rows[0]["checkpoint_id"]
    assert state["channels"]["turns"] == 2
    assert [m["kwargs"]["content"] for m in state["channels"]["messages"]] == [
        "hi",
        "echo: hi",
        "how are you?",
        "echo: how are you?",
    ]

    diff = ok_json("diff", store, "alpha", rows[3]["checkpoint_id"], rows[0]["checkpoint_id"])
    changed = {c["channel"]: c for c in diff["changes"]}
    assert (diff["a"]["step"], diff["b"]["step"]) == (1, 4)
    added = changed["messages"]["messages"]["added"]
    assert [m["kwargs"]["content"] for m in added] == ["how are you?", "echo: how are you?"]
    assert (changed["turns"]["a"], changed["turns"]["b"]) == (1, 2)

    stats = ok_json("stats", store)
    assert stats["store"] == f"{store}/"
    assert (stats["threads"], stats["checkpoints"], stats["quarantined_records"]) == (3, 11, 0)
    assert stats["bytes"] > 0 and stats["compression_ratio"] > 1

    report = ok_json("verify", store)
    assert report["ok"] is True and report["damaged"] == []
    assert report["checkpoints_checked"] == 11

    summary = ok_json("inspect", store)
    assert [t["thread_id"] for t in summary["threads"]] == ["alpha", "beta", "waiting"]


# -- damage -----------------------------------------------------------------------------


def test_a_damaged_object_is_reported_by_verify_and_quarantined_by_repair(
    store: str, bucket: tuple[str, str]
) -> None:
    endpoint, name = bucket
    checkpoints = list(VerifiedSaver(store).list(config("alpha")))
    newest, parent = (c.config["configurable"]["checkpoint_id"] for c in checkpoints[:2])
    key = keys.checkpoint_key("alpha", "", newest)
    client = s3_client(endpoint)
    damaged = bytearray(client.get_object(Bucket=name, Key=f"{PREFIX}/{key}")["Body"].read())
    damaged[len(damaged) // 2] ^= 0x01
    client.put_object(Bucket=name, Key=f"{PREFIX}/{key}", Body=bytes(damaged))

    done = cli("verify", store, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert [(d["key"], d["location"]) for d in report["damaged"]] == [(key, f"{store}/{key}")]
    assert report["damaged"][0]["reason"] == "record checksum mismatch"
    text = cli("verify", store)
    assert text.returncode == 1
    assert f"run `langgraph-verified repair {store}`" in text.stdout
    assert "read-only" not in text.stdout
    rows = history_rows(store, "alpha")
    assert (rows[0]["checkpoint_id"], rows[0]["status"]) == (newest, "unusable")
    assert "record checksum mismatch" in rows[0]["problem"]

    repair = cli("repair", store)
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert repair.stdout.splitlines()[-1] == "the store verifies now"
    # moved aside: the exact bytes under quarantine/, the object gone
    stored = objects(endpoint, name, f"{PREFIX}/")
    assert f"{PREFIX}/{key}" not in stored
    quarantined = [
        k for k in stored if k.startswith(f"{PREFIX}/quarantine/") and k.endswith(".record")
    ]
    assert [stored[k] for k in quarantined] == [bytes(damaged)]
    assert ok_json("verify", store)["ok"] is True
    assert ok_json("stats", store)["quarantined_records"] == 1
    assert ok_json("show", store, "alpha")["checkpoint_id"] == parent


# -- export, import, prune, migrate ---------------------------------------------------------


def test_export_from_s3_and_import_into_a_directory_or_a_bucket_keep_the_history(
    store: str, bucket: tuple[str, str], tmp_path: Path
) -> None:
    exported = tmp_path / "threads.jsonl"
    done = cli("export", store, exported)
    assert done.returncode == 0, done.stderr
    local, copy = tmp_path / "local", f"s3://{bucket[1]}/copy"
    for target in (local, copy):
        done = cli("import", target, exported)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("imported 11 checkpoint(s)")
    for thread_id in ("alpha", "beta", "waiting"):
        expected = history_rows(store, thread_id)
        assert history_rows(local, thread_id) == expected
        assert history_rows(copy, thread_id) == expected
    assert (
        ok_json("show", copy, "waiting")["interrupts"]
        == ok_json("show", store, "waiting")["interrupts"]
    )
    assert ok_json("verify", copy)["ok"] is True


def test_prune_keeps_the_newest_checkpoint_of_each_thread(store: str) -> None:
    done = cli("prune", store, "alpha", "beta")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "dropped 5 checkpoint(s) of thread 'alpha', kept 1",
        "dropped 2 checkpoint(s) of thread 'beta', kept 1",
    ]
    found = {t["thread_id"]: t["checkpoints"] for t in ok_json("threads", store)["threads"]}
    assert found == {"alpha": 1, "beta": 1, "waiting": 2}
    assert ok_json("show", store, "alpha")["channels"]["turns"] == 2


def test_migrate_copies_a_sqlite_database_into_a_bucket(
    sqlite_db: Path,  # noqa: F811
    bucket: tuple[str, str],
) -> None:
    target = f"s3://{bucket[1]}/migrated"
    done = cli("migrate", sqlite_db, target)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "ok: every record verifies"
    found = {t["thread_id"]: t["checkpoints"] for t in ok_json("threads", target)["threads"]}
    assert found == {"alpha": 6, "beta": 3}
    assert ok_json("show", target, "beta")["channels"]["turns"] == 1


# -- what cannot run --------------------------------------------------------------------


def test_an_endpoint_with_nothing_listening_is_one_line(store: str, closed_port: int) -> None:
    endpoint = f"http://127.0.0.1:{closed_port}"
    line = one_line_error(cli("threads", store, AWS_ENDPOINT_URL=endpoint))
    assert line == (
        f"langgraph-verified: error: cannot reach {store} at {endpoint} (Connection refused, "
        f"after 10 retries): check AWS_ENDPOINT_URL, the network and the credentials, then retry"
    )


def test_a_bucket_that_does_not_exist_is_one_line(bucket: tuple[str, str]) -> None:
    endpoint, _ = bucket
    for command in ("verify", "repair", "threads"):
        line = one_line_error(cli(command, "s3://no-such-bucket/store"))
        assert line == (
            f"langgraph-verified: error: no bucket 'no-such-bucket' at {endpoint} (store "
            f"s3://no-such-bucket/store): check the bucket's name, AWS_ENDPOINT_URL and "
            f"AWS_REGION, or create the bucket"
        )


def test_a_prefix_that_holds_no_store_is_refused_and_left_empty(
    store: str, bucket: tuple[str, str]
) -> None:
    endpoint, name = bucket
    typo = f"s3://{name}/stroe"
    for command in ("verify", "repair", "stats"):
        line = one_line_error(cli(command, typo))
        assert (
            line
            == f"langgraph-verified: error: no store at {typo}: nothing is stored under that prefix"
        )
    assert objects(endpoint, name, "stroe") == {}
    inside = f"{store}/threads"
    line = one_line_error(cli("threads", inside))
    assert line.endswith(f"{inside} is not a store: it has neither threads/ nor quarantine/")


def test_a_plain_http_endpoint_needs_allow_http(store: str, bucket: tuple[str, str]) -> None:
    endpoint, _ = bucket
    line = one_line_error(cli("stats", store, AWS_ALLOW_HTTP="false"))
    assert line.endswith(f"{endpoint} is plain http, which is refused unless AWS_ALLOW_HTTP=true")


def test_a_bucket_that_refuses_writes_is_one_line_and_nothing_moves(
    store: str, bucket: tuple[str, str], fault_proxy: Any, tmp_path: Path
) -> None:
    endpoint, name = bucket
    key = keys.checkpoint_key(
        "beta",
        "",
        VerifiedSaver(store).get_tuple(config("beta")).config["configurable"]["checkpoint_id"],
    )
    client = s3_client(endpoint)
    client.put_object(Bucket=name, Key=f"{PREFIX}/{key}", Body=b"not a record")
    before = objects(endpoint, name, f"{PREFIX}/")
    fault_proxy.refuse_writes(403)

    proxied = fault_proxy.endpoint
    line = one_line_error(cli("repair", store, AWS_ENDPOINT_URL=proxied))
    assert line == (
        f"langgraph-verified: error: cannot repair {store}: the bucket refuses this process's "
        f"writes, so nothing was moved; check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and the "
        f"bucket's policy, then run repair again"
    )
    assert fault_proxy.counts["PUT"] > 0
    assert objects(endpoint, name, f"{PREFIX}/") == before
    for strategy in ("keep_latest", "delete"):
        pruned = cli("prune", store, "alpha", "--strategy", strategy, AWS_ENDPOINT_URL=proxied)
        line = one_line_error(pruned)  # nothing said dropped, since nothing was
        assert line.startswith(f"langgraph-verified: error: {store} at {proxied} refused to change")
        assert objects(endpoint, name, f"{PREFIX}/") == before

    exported = tmp_path / "threads.jsonl"
    assert cli("export", store, exported, "--thread", "alpha").returncode == 0
    line = one_line_error(cli("import", f"s3://{name}/copy", exported, AWS_ENDPOINT_URL=proxied))
    assert line.startswith(
        f"langgraph-verified: error: s3://{name}/copy at {proxied} refused to change threads/alpha/"
    )
    assert line.endswith(
        "(403 AccessDenied): check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and the bucket's policy"
    )


def test_a_server_that_answers_errors_is_one_line(store: str, fault_proxy: Any) -> None:
    fault_proxy.fail_every(1, status=503)
    line = one_line_error(cli("threads", store, AWS_ENDPOINT_URL=fault_proxy.endpoint))
    assert line.startswith(
        f"langgraph-verified: error: {store} at {fault_proxy.endpoint} answered 503 SlowDown "
        f"(list, after "
    )
    assert line.endswith("): the store is failing or overloaded; retry later")


def test_without_obstore_one_line_says_what_to_install(store: str, tmp_path: Path) -> None:
    # an obstore package that fails to import, found before the installed one
    (tmp_path / "obstore").mkdir()
    (tmp_path / "obstore" / "__init__.py").write_text("raise ImportError('no obstore here')\n")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    line = one_line_error(cli("threads", store, PYTHONPATH=path))
    assert line == (
        f"langgraph-verified: error: {store} is in S3-compatible object storage, which needs "
        f"obstore: pip install 'langgraph-checkpoint-verified[s3]'"
    )
    # a directory store needs no obstore
    local = tmp_path / "local"
    VerifiedSaver(local)
    assert cli("threads", local, PYTHONPATH=path).returncode == 0
