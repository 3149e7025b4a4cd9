"""``sweep``, ``prune --dry-run`` and ``import --replace`` on stores written by real graphs.

A dry run must change no byte of the store and say exactly what the real run then
does; a sweep's arguments are checked before the store is opened, and a bad one is
one line on stderr and exit code 2. Expired threads are written with old ``ts``
times through ``saver.put`` (LangGraph stamps a graph's checkpoints with the time
they are made, and tests do not wait).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from s3server import s3_client
from test_cli import build_graph, config, history, run_conversations
from test_cli_console import console
from test_cli_s3 import bucket  # noqa: F401 (a fixture)
from test_delta_channels import CONFIG as DELTA_CONFIG
from test_delta_channels import THREAD as DELTA_THREAD
from test_delta_channels import build as build_delta_graph
from test_delta_channels import run_all as run_delta_graph
from test_delta_channels import walk_of

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.cli import main
from langgraph_checkpoint_verified.cli.sweep import parse_duration

LONG_AGO = "2020-01-0{day}T00:00:00+00:00"


def run(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def put_thread(
    saver: VerifiedSaver, thread_id: str, times: list[str], metadata: dict[str, Any] | None = None
) -> None:
    """A thread of one checkpoint written at each of ``times``, each the child of the one before."""
    parent: str | None = None
    for step, ts in enumerate(times):
        checkpoint_id = f"1ef00000-0000-6000-8000-{step:012d}"
        checkpoint = {
            "v": 1,
            "id": checkpoint_id,
            "ts": ts,
            "channel_values": {"step": step},
            "channel_versions": {"step": step + 1},
            "versions_seen": {},
        }
        configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
        if parent is not None:
            configurable["checkpoint_id"] = parent
        own = {"source": "loop", "step": step, **(metadata or {})}
        saver.put({"configurable": configurable}, checkpoint, own, {"step": step + 1})
        parent = checkpoint_id


def put_old_thread(
    saver: VerifiedSaver, thread_id: str, days: list[int], metadata: dict[str, Any] | None = None
) -> None:
    """A thread of one checkpoint per day of January 2020."""
    put_thread(saver, thread_id, [LONG_AGO.format(day=day) for day in days], metadata)


def fingerprint(store: Path) -> dict[str, str]:
    """Every file and directory of a store: its path, and for a file the sha256 of its bytes."""
    return {
        path.relative_to(store).as_posix(): (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "directory"
        )
        for path in sorted(store.rglob("*"))
    }


def checkpoint_counts(store: Path | str) -> dict[str, int]:
    saver = VerifiedSaver(store)
    return {
        thread_id: len(list(saver.list(config(thread_id))))
        for thread_id in sorted(saver.engine.thread_ids())
    }


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The echo chat's alpha (6 checkpoints) and beta (3), written now; ``old`` (3
    checkpoints, idle since 2020) and ``pinned`` (1, from 2020, pinned)."""
    path = tmp_path / "store"
    saver = VerifiedSaver(path, fsync=False)
    run_conversations(build_graph(saver))
    put_old_thread(saver, "old", [1, 2, 3])
    put_old_thread(saver, "pinned", [1], metadata={"pinned": True})
    return path


# -- sweep ------------------------------------------------------------------------------


def test_a_dry_run_changes_no_byte_and_reports_what_the_sweep_then_does(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = fingerprint(store)
    policy = ("--idle", "30d", "--keep-last", "2")
    code, table, _ = run(capsys, "sweep", store, *policy, "--dry-run")
    assert code == 0
    assert "dry run of a sweep" in table and "nothing was changed" in table
    code, dry_json, _ = run(capsys, "sweep", store, *policy, "--dry-run", "--json")
    assert code == 0
    assert fingerprint(store) == before, "a dry run changed the store"
    dry = json.loads(dry_json)
    assert dry["dry_run"] is True
    assert dry["threads_deleted"] == ["old"]
    assert dry["threads_trimmed"] == {"alpha": 4, "beta": 1}
    assert dry["checkpoints_dropped"] == 3 + 4 + 1
    assert list(dry["skipped"]) == ["pinned"] and "pinned" in dry["skipped"]["pinned"]
    assert dry["bytes_freed"] > 0

    code, real_json, _ = run(capsys, "sweep", store, *policy, "--json")
    assert code == 0
    real = json.loads(real_json)
    assert real == {**dry, "dry_run": False}
    assert checkpoint_counts(store) == {"alpha": 2, "beta": 2, "pinned": 1}
    assert VerifiedSaver(store).verify().ok
    # what stays is what the graph left: the newest state, still resumable
    newest = history(store, "alpha")[0].checkpoint["channel_values"]
    assert newest["turns"] == 2 and len(newest["messages"]) == 4


def test_the_table_names_each_thread_and_what_happened_to_it(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "sweep", store, "--idle", "30d", "--keep-last", "2")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"swept {store}"
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in lines if "│" in line}
    assert rows["threads deleted"] == "1" and rows["checkpoints dropped"] == "8"
    assert rows["old"] == "deleted"
    assert rows["alpha"] == "trimmed: 4 checkpoint(s) dropped"
    assert rows["pinned"].startswith("skipped: pinned")
    # a second sweep finds nothing left to do but the pinned thread
    code, out, _ = run(capsys, "sweep", store, "--idle", "30d", "--keep-last", "2", "--json")
    again = json.loads(out)
    assert again["threads_deleted"] == [] and again["threads_trimmed"] == {}


def test_keep_latest_expiry_keeps_the_newest_checkpoint_of_an_expired_thread(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "sweep", store, "--idle", "30d", "--strategy", "keep_latest", "--json"
    )
    assert code == 0
    report = json.loads(out)
    assert report["threads_deleted"] == [] and report["threads_trimmed"] == {"old": 2}
    assert checkpoint_counts(store) == {"alpha": 6, "beta": 3, "old": 1, "pinned": 1}
    (kept,) = history(store, "old")
    assert kept.checkpoint["channel_values"] == {"step": 2}


def test_max_age_expires_a_thread_by_its_first_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store"
    saver = VerifiedSaver(path, fsync=False)
    now = datetime.now(timezone.utc).isoformat()
    put_thread(saver, "started-long-ago", [LONG_AGO.format(day=1), now])  # and still in use
    run_conversations(build_graph(saver))
    code, out, _ = run(capsys, "sweep", path, "--idle", "30d", "--json")
    assert json.loads(out)["threads_deleted"] == []  # not idle
    code, out, _ = run(capsys, "sweep", path, "--max-age", "52w", "--json")
    assert code == 0 and json.loads(out)["threads_deleted"] == ["started-long-ago"]
    assert sorted(checkpoint_counts(path)) == ["alpha", "beta"]


def test_limit_changes_at_most_that_many_threads(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "sweep", store, "--keep-last", "1", "--limit", "1", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["threads_trimmed"] == {"alpha": 5}
    assert sorted(t for t, why in report["skipped"].items() if "limit" in why) == ["beta", "old"]
    assert checkpoint_counts(store)["beta"] == 3


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--idle", "30x"), "'30x' is not a duration"),
        (("--idle", "30"), "'30' is not a duration"),
        (("--max-age", "-1d"), "'-1d' is not a duration"),
        (("--idle", "0d"), "a duration must be more than 0"),
        ((), "give --idle, --max-age or --keep-last"),
        (("--idle", "1d", "--strategy", "archive"), "unknown strategy 'archive'"),
        (("--keep-last", "0"), "--keep-last"),
    ],
)
def test_bad_arguments_are_one_line_exit_2_and_change_nothing(
    store: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str
) -> None:
    before = fingerprint(store)
    code, out, err = run(capsys, "sweep", store, *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("langgraph-verified: error: "), err
    assert says in err
    assert fingerprint(store) == before


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("12h", timedelta(hours=12)),
        ("30d", timedelta(days=30)),
        ("2w", timedelta(weeks=2)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


def test_sweep_runs_as_the_console_script(store: Path) -> None:
    done = console("sweep", store, "--idle", "30d", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "old" in done.stdout and "delete" in done.stdout
    usage = console("--help")
    assert "sweep" in usage.stdout


def test_sweep_of_a_bucket_dry_run_then_for_real(bucket: tuple[str, str]) -> None:  # noqa: F811
    endpoint, name = bucket
    url = f"s3://{name}/store"
    saver = VerifiedSaver(url)
    run_conversations(build_graph(saver))
    put_old_thread(saver, "old", [1, 2])

    def objects() -> dict[str, str]:
        client = s3_client(endpoint)
        listed = client.list_objects_v2(Bucket=name, Prefix="store/").get("Contents", [])
        return {o["Key"]: o["ETag"] for o in listed}

    before = objects()
    dry = console("sweep", url, "--idle", "30d", "--keep-last", "2", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert objects() == before, "a dry run changed the bucket"
    real = console("sweep", url, "--idle", "30d", "--keep-last", "2", "--json")
    assert real.returncode == 0, real.stderr
    assert json.loads(real.stdout) == {**json.loads(dry.stdout), "dry_run": False}
    assert json.loads(real.stdout)["threads_deleted"] == ["old"]
    assert checkpoint_counts(url) == {"alpha": 2, "beta": 2}


# -- prune --dry-run ----------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["keep_latest", "delete"])
def test_prune_dry_run_counts_exactly_what_prune_drops_with_a_delta_channel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], strategy: str
) -> None:
    path = tmp_path / "store"
    saver = VerifiedSaver(path, fsync=False)
    run_delta_graph(build_delta_graph(saver))
    ancestors = walk_of(saver)  # the newest checkpoint's value is rebuilt from these
    total = len(list(saver.list(DELTA_CONFIG)))
    before = fingerprint(path)

    code, out, _ = run(capsys, "prune", path, DELTA_THREAD, "--strategy", strategy, "--dry-run")
    assert code == 0
    assert fingerprint(path) == before
    code, done, _ = run(capsys, "prune", path, DELTA_THREAD, "--strategy", strategy)
    assert code == 0
    left = len(list(VerifiedSaver(path).list(DELTA_CONFIG)))
    expected_left = 1 + len(ancestors) if strategy == "keep_latest" else 0
    assert left == expected_left
    dropped = total - left
    assert out == f"would drop {dropped} checkpoint(s) of thread {DELTA_THREAD!r}, kept {left}\n"
    assert done == out.replace("would drop", "dropped")


# -- import --replace ---------------------------------------------------------------------


def test_import_refuses_threads_the_store_has_unless_replace(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump, target = tmp_path / "dump.jsonl", tmp_path / "target"
    assert run(capsys, "export", store, dump, "--thread", "alpha")[0] == 0
    other = VerifiedSaver(target, fsync=False)
    graph = build_graph(other)
    graph.invoke({"messages": [("user", "another alpha")]}, config("alpha"))
    graph.invoke({"messages": [("user", "mine")]}, config("local"))
    before = fingerprint(target)

    code, out, err = run(capsys, "import", target, dump)
    assert (code, out) == (2, "")
    assert err == (
        f"langgraph-verified: error: {target} already has thread(s) 'alpha'; pass --replace "
        f"to replace them with the imported ones (nothing was imported)\n"
    )
    assert fingerprint(target) == before

    code, out, _ = run(capsys, "import", target, dump, "--replace")
    assert code == 0 and out.startswith("imported 6 checkpoint(s)")
    imported = history(target, "alpha")
    original = history(store, "alpha")
    assert [h.checkpoint for h in imported] == [h.checkpoint for h in original]
    assert [h.pending_writes for h in imported] == [h.pending_writes for h in original]
    assert len(history(target, "local")) == 3  # a thread the export does not have stays
    assert VerifiedSaver(target).verify().ok
