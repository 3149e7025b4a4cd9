"""The benchmark runs end to end in its quick form and writes its files (no timing is asserted).

matplotlib is an optional extra (``.[bench]``) that ``make test`` does not
install: without it the run must still succeed, write its tables and say that
the plots were skipped; with it, the plots must be there.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"
PLOTS = ("overhead_per_step.png", "bytes_on_disk.png", "step_time.png")


def test_quick_benchmark_writes_tables_and_plots(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    results = json.loads((tmp_path / "results" / "latest.json").read_text())
    for section in ("chat", "disk", "history", "calls", "cli", "recovery", "s3", "damage", "fuse"):
        assert section in results, section
    # measured where bindfs can mount (make bench says why not elsewhere)
    fuse = results["fuse"]
    if "not_measured" not in fuse:
        assert len(fuse["figures"]) == 3
        assert all(entry["ratio"] > 0 for entry in fuse["figures"].values())
    chat = results["chat"]
    # short chats: as they are, with a saver that never syncs beside them, and with
    # durability="sync"
    assert chat["short"]["ratios"]["VerifiedSaver(path, fsync=False) / SqliteSaver"] > 0
    assert chat["short_sync"]["durability"] == "sync"
    assert chat["short_sync"]["ratios"]["VerifiedSaver(path) / SqliteSaver"] > 0
    assert set(chat["at_length"]) == {str(n) for n in results["settings"]["chat_lengths"]}
    assert chat["fsyncs"]["VerifiedSaver(path)"]["per_step_mean"] > 0
    assert results["disk"]["growth"]["SqliteSaver"] > 1
    assert results["cli"]["inspect_store"]["checkpoints"] > 0
    for op in ("put", "get_tuple", "list", "put_1mb"):
        # calls that ran a full garbage collection, counted per saver among its samples
        entry = results["calls"][op]
        for saver, collected in entry["full_collections"].items():
            assert 0 <= collected <= entry[saver]["samples"], (op, saver)
    # where the writer left its last hint: what the first reader reads past it
    assert results["history"]["first_open_after_writer"]["past_writer_hint"]["entries"] > 0
    recovery = results["recovery"]
    # skipped (with its reason in the tables) if the store stops keeping a file per checkpoint
    assert "skipped" in recovery or set(recovery["cases"]) == {"0", "1", "10", "100"}
    for case in recovery.get("cases", {}).values():
        assert case["after_step_returned_expected"], case  # the checkpoint just put
    if "cases" in recovery:
        # the newest damaged past the hint its writer left, as after a crash: the scan
        # that opens the thread finds them, and what is returned is what was written
        writer_left = recovery["writer_left"]
        assert writer_left["past_writer_hint"]["entries"] > 0
        assert writer_left["quarantined_records"] == writer_left["damaged"] == 100
        assert writer_left["returned_expected"] and writer_left["second_returned_expected"]
        assert writer_left["after_step_returned_expected"], writer_left
    # a thread gone on past damage no read needs is opened from its hint, not read whole
    if "unread_damage" in recovery:
        unread = recovery["unread_damage"]
        assert unread["record"]["hinted"] and unread["header"]["hinted"], unread

    damage = results["damage"]
    settings = results["settings"]
    for kind, trials in (("bit", "damage_bit_trials"), ("block", "damage_block_trials")):
        for saver, row in damage["rows"][kind].items():
            assert row["trials"] == settings[trials] == len(damage["trials"][kind][saver])
            assert row["checkpoints"] == damage["checkpoints"][saver] > 0
            # every trial is counted once: a checkpoint returned (placed or unknown), or an error
            placed = row["newest"] + row["back_1"] + row["back_more"]
            assert placed + row["unknown_returned"] + row["raised"] == row["trials"], row
    assert set(damage["rows"]["bit"]) == {"VerifiedSaver(path)", "SqliteSaver"}
    assert "after_repair_exact_trials" in damage["rows"]["bit"]["VerifiedSaver(path)"]

    s3 = results["s3"]
    # measured wherever the test extra's S3 server and the s3 extra are installed
    if all(importlib.util.find_spec(m) for m in ("moto", "obstore")):
        assert set(s3) >= {"savers", "baseline", "chat", "thread"}, s3.get("skipped")
        saver = s3["savers"][0]
        assert s3["chat"][saver]["requests_per_step"]["PUT"] > 0
        assert s3["chat"][saver]["new_requests"]["all"] > 0
        sizes = {str(n) for n in results["settings"]["s3_thread_sizes"]}
        assert set(s3["thread"]["at_size"]) == sizes
        if importlib.util.find_spec("langgraph_checkpoint_s3") is not None:
            assert s3["savers"] == ["VerifiedSaver(s3://)", "S3CheckpointSaver"]
    else:
        assert "skipped" in s3

    table = (tmp_path / "results.md").read_text()
    for title in (
        "## 1.",
        "## 2.",
        "## 3.",
        "## 4.",
        "## 5.",
        "## 6.",
        "## 7.",
        "## 8.",
        "## 11.",
        "AsyncSqliteSaver",
    ):
        assert title in table, title
    assert table.strip() in done.stdout  # the same tables go to stdout

    plots = [tmp_path / "results" / name for name in PLOTS]
    if importlib.util.find_spec("matplotlib") is not None:
        assert all(p.stat().st_size > 0 for p in plots)
    else:
        assert "Plots not drawn" in table
        assert not any(p.exists() for p in plots)
