"""results.md (the same tables go to stdout) and the PNG plots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from chat import (
    COMPARISONS,
    MEMORY,
    SAVERS,
    SQLITE,
    SQLITE_ASYNC,
    VERIFIED_FILES,
    VERIFIED_FILES_ASYNC,
    VERIFIED_MEMORY,
    VERIFIED_UNSYNCED,
)
from fuse import FUSE_SQLITE, FUSE_VERIFIED
from s3 import BASELINE_S3, METHODS, VERIFIED_S3
from store_bench import MEMORY_STORE, SQLITE_CACHE, SQLITE_STORE, VERIFIED_CACHE, VERIFIED_STORE

HEADER = "| figure | VerifiedSaver | baseline | ratio |\n|---|---:|---:|---:|"
PLOTS = {
    "overhead": "overhead_per_step.png",
    "step": "step_time.png",
    "disk": "bytes_on_disk.png",
}

_SHORT = {
    VERIFIED_FILES: "files, invoke",
    VERIFIED_FILES_ASYNC: "files, ainvoke",
    VERIFIED_MEMORY: "in_memory(), invoke",
    VERIFIED_UNSYNCED: "files with fsync=False (not durable), invoke",
}


def ms(value: float) -> str:
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def mb(value: float) -> str:
    return f"{value / 1e6:.1f} MB"


def x(value: float) -> str:
    return f"{value:.2f}x"


def row(figure: str, verified: str, baseline: str, ratio: str) -> str:
    return f"| {figure} | {verified} | {baseline} | {ratio} |"


def base_name(name: str) -> str:
    return name.split(",")[0]


# -- sections ----------------------------------------------------------------------


def chat_tables(results: dict[str, Any]) -> list[str]:
    chat = results["chat"]
    lengths = chat["lengths"]
    at = chat["at_length"]
    rounds = at[str(lengths[0])]["rounds"]
    lines = [
        "## 1. Per-step overhead in a chat graph",
        "",
        f"One `graph.invoke` (or `ainvoke`) per step, ~1 KB of new messages per step, "
        f"{chat['steps']} steps ({chat['checkpoints']:,} checkpoints per saver), six savers "
        f"interleaved step by step. Overhead = wall time covered by the saver's own "
        f"`put`/`put_writes`/`get_tuple` calls (async twins for `ainvoke`) in that step. "
        f"Each figure is the median over the {rounds} steps centred on the length; "
        f"the ratio is the median of the per-step ratios (both savers ran that step one "
        f"after the other), so it can differ from the quotient of the two medians.",
        "",
        HEADER,
    ]
    for length in lengths:
        entry = at[str(length)]
        for name, base in COMPARISONS:
            lines.append(
                row(
                    f"overhead/step at {length} steps, {_SHORT[name]}",
                    ms(entry[name]["saver_ms"]),
                    f"{base_name(base)} {ms(entry[base]['saver_ms'])}",
                    x(entry["ratios"][f"{name} / {base}"]["saver"]),
                )
            )
    for key in ("short", "short_sync"):
        short = chat.get(key)
        if short is None:
            continue
        mode = "" if key == "short" else f', durability="{short["durability"]}"'
        for ratio in short["ratios"]:
            name, base = ratio.split(" / ")
            lines.append(
                row(
                    f"overhead/turn, {short['chats']} chats of {short['turns']} turns "
                    f"(a new thread each), {_SHORT[name]}{mode}",
                    ms(short[name]["saver_ms"]),
                    f"{base_name(base)} {ms(short[base]['saver_ms'])}",
                    x(short["ratios"][ratio]),
                )
            )
    lines += [
        "",
        "Whole step (`graph.invoke` wall time, what the caller waits):",
        "",
        HEADER,
    ]
    for length in lengths:
        entry = at[str(length)]
        for name, base in COMPARISONS[:3]:
            lines.append(
                row(
                    f"step at {length} steps, {_SHORT[name]}",
                    ms(entry[name]["step_ms"]),
                    f"{base_name(base)} {ms(entry[base]['step_ms'])}",
                    x(entry["ratios"][f"{name} / {base}"]["step"]),
                )
            )
    lines += ["", "All savers, median per step (saver calls / whole step):", ""]
    lines.append("| saver | " + " | ".join(f"{n} steps" for n in lengths) + " |")
    lines.append("|---|" + "---:|" * len(lengths))
    for name in SAVERS:
        cells = [
            f"{ms(at[str(n)][name]['saver_ms'])} / {ms(at[str(n)][name]['step_ms'])}"
            for n in lengths
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def disk_tables(results: dict[str, Any]) -> list[str]:
    disk = results["disk"]
    growth = disk["growth"]
    lines = [
        "## 2. Bytes on disk after the chat",
        "",
        "The `graph.invoke` stores of section 1, measured while open: allocated bytes "
        "(`du`; st_blocks), SQLite's database with its -wal and -shm files. "
        "File bytes (st_size) are in the JSON.",
        "",
        HEADER,
    ]
    for length, sizes in disk["at_length"].items():
        verified, sqlite = sizes[VERIFIED_FILES], sizes[SQLITE]
        lines.append(
            row(
                f"on disk after {length} steps",
                f"{mb(verified['allocated'])} ({verified['files']:,} files)",
                f"SqliteSaver {mb(sqlite['allocated'])}",
                x(verified["allocated"] / sqlite["allocated"]),
            )
        )
    lines.append(
        row(
            f"growth {growth['to']} / {growth['from']} steps",
            x(growth[VERIFIED_FILES]),
            f"SqliteSaver {x(growth[SQLITE])}",
            x(growth[VERIFIED_FILES] / growth[SQLITE]),
        )
    )
    lines.append("")
    return lines


def history_tables(results: dict[str, Any]) -> list[str]:
    history = results["history"]
    lines = [
        f"## 3. Reads on a {history['checkpoints']:,}-checkpoint thread",
        "",
        f"Files store vs SQLite database holding the same chat-shaped checkpoints "
        f"(20-message window), savers interleaved; p50/p99 of "
        f"{history['get_tuple'][VERIFIED_FILES]['samples']} rounds of get_tuple, "
        f"{history['list'][VERIFIED_FILES]['samples']} of list and "
        f"{history['open_get_tuple'][VERIFIED_FILES]['samples']} of open + get_tuple.",
        "",
        HEADER,
    ]
    titles = {
        "get_tuple": "get_tuple (newest)",
        "list": f"list(limit={history['list_limit']})",
        "open_get_tuple": "new saver: open + get_tuple",
    }
    for op, title in titles.items():
        lines.extend(percentile_rows(history[op], title, VERIFIED_FILES, SQLITE))
    first = history.get("first_open_after_writer")
    if first:
        past = first.get("past_writer_hint")
        where = (
            f", {past['entries']} entries ({past['bytes'] / 1024:.0f} KB) past it" if past else ""
        )
        lines.append(
            row(
                "new process: open + get_tuple of a store as its writer left it (the "
                f"writer's hint{where}, no reader's yet), median of {first.get('rounds', 3)}",
                ms(first[VERIFIED_FILES] * 1e3),
                f"{SQLITE} {ms(first[SQLITE] * 1e3)}",
                x(first[VERIFIED_FILES] / first[SQLITE]),
            )
        )
    puts = history.get("put_mean_ms")
    if puts:
        lines.append(
            row(
                f"writing the thread: put, mean over checkpoints {puts['from']:,} to "
                f"{history['checkpoints']:,} (no syncs either side; savers taking turns)",
                ms(puts[VERIFIED_FILES]),
                f"{SQLITE} {ms(puts[SQLITE])}",
                x(puts["ratio"]),
            )
        )
    memory = history.get("memory")
    if memory:
        gain = memory["gain_mb"]
        lines.append(
            row(
                f"memory a new process gains reading the newest checkpoint of "
                f"{memory['threads']:,} threads ({memory['steps']} steps each; VmRSS, median "
                f"of {memory['rounds']} processes each)",
                f"+{gain[VERIFIED_FILES]:.1f} MB",
                f"{SQLITE} +{gain[SQLITE]:.1f} MB",
                "",
            )
        )
    lines.append("")
    return lines


def percentile_rows(entry: dict[str, Any], title: str, name: str, base: str) -> list[str]:
    """The p50 and p99 rows of one operation: ``name`` next to ``base``."""
    ratios = entry["ratios"][f"{name} / {base}"]
    return [
        row(
            f"{title}, {pct}",
            ms(entry[name][f"{pct}_ms"]),
            f"{base} {ms(entry[base][f'{pct}_ms'])}",
            x(ratios[pct]),
        )
        for pct in ("p50", "p99")
    ]


def full_collection_lines(calls: dict[str, Any], titles: dict[str, str]) -> list[str]:
    """How many calls of each kind ran a full collection of the interpreter's cyclic
    garbage collector (it lands in whichever call allocates when one is due)."""
    counts = [
        f"{title}: " + ", ".join(f"{name} {n}" for name, n in calls[op]["full_collections"].items())
        for op, title in titles.items()
        if "full_collections" in calls[op]
    ]
    if not counts:
        return []
    return [
        "",
        "Calls during which the interpreter ran a full garbage collection, which walks "
        "every object of the process (LangGraph's and LangChain's included) and lands in "
        "whichever call allocates when one is due; a p99 is often one of them: "
        + "; ".join(counts)
        + ".",
    ]


def calls_tables(results: dict[str, Any]) -> list[str]:
    calls = results["calls"]
    lines = [
        "## 4. Single calls: put, get_tuple, list, put of a 1 MB state",
        "",
        f"{calls['rounds']} interleaved rounds of put + get_tuple + "
        f"list(limit={calls['list_limit']}) on one chat-shaped thread; then "
        f"{calls['big_rounds']} rounds of put of a state of "
        f"{calls['big_state_messages']:,} messages ({calls['big_state_chars'] / 1e6:.2f} M "
        f"characters), the messages channel changed each time. With "
        f"{calls['big_rounds']} samples, p99 is close to the largest.",
        "",
        HEADER,
    ]
    titles = {
        "put": "put",
        "get_tuple": "get_tuple",
        "list": f"list(limit={calls['list_limit']})",
        "put_1mb": "put, 1 MB state",
    }
    for op, title in titles.items():
        entry = calls[op]
        for name, base, where in (
            (VERIFIED_FILES, SQLITE, "files"),
            (VERIFIED_MEMORY, MEMORY, "memory"),
        ):
            lines.extend(percentile_rows(entry, f"{title}, {where}", name, base))
    lines.extend(full_collection_lines(calls, titles))
    held = calls.get("held")
    if held:
        lines += [
            "",
            f"A value held by an older record: a thread of {held['checkpoints']:,} "
            f"checkpoints whose 4 KB `doc` channel changes every {held['every']}th "
            "checkpoint and a small counter at each; `get_tuple` of the newest (its `doc` "
            "lies in an older record) from the savers that wrote it, in interleaved rounds, "
            "and from a new saver each time (open included). p50 ratios are medians of "
            "paired rounds.",
            "",
            HEADER,
        ]
        lines.extend(
            percentile_rows(held["warm"], "get_tuple, value held elsewhere", VERIFIED_FILES, SQLITE)
        )
        lines.extend(
            percentile_rows(
                held["new_saver"],
                "new saver + get_tuple, value held elsewhere",
                VERIFIED_FILES,
                SQLITE,
            )
        )
    lines.append("")
    return lines


def cli_tables(results: dict[str, Any]) -> list[str]:
    cli = results["cli"]
    store, thread = cli["inspect_store"], cli["export_thread"]
    startup = cli["median_s"]["startup (--help)"]
    lines = [
        "## 5. The console script",
        "",
        f"`{' '.join(Path(c).name for c in cli['command'])}` run as a subprocess, median of "
        f"{cli['rounds']} interleaved rounds. The stores were written by the chat graph: "
        f"{store['threads']} threads x {store['turns']} steps for `inspect`, one thread of "
        f"{thread['turns']} steps for `export` (its output: {mb(thread['output_bytes'])}). "
        f"Baseline: the script's start-up alone (`--help`).",
        "",
        HEADER,
        row(
            f"inspect STORE ({store['checkpoints']:,} checkpoints)"
            if store["checkpoints"]
            else "inspect STORE",
            f"{cli['median_s']['inspect']:.2f} s",
            f"start-up {startup:.2f} s",
            x(cli["ratio_vs_startup"]["inspect"]),
        ),
        row(
            f"export --thread T ({thread['checkpoints']:,} checkpoints)",
            f"{cli['median_s']['export']:.2f} s",
            f"start-up {startup:.2f} s",
            x(cli["ratio_vs_startup"]["export"]),
        ),
    ]
    if "threads" in cli["median_s"]:
        lines.append(
            row(
                f"threads STORE ({store['threads']} threads)",
                f"{cli['median_s']['threads']:.2f} s",
                f"start-up {startup:.2f} s",
                x(cli["ratio_vs_startup"]["threads"]),
            )
        )
    lines.append(
        row("--help (start-up: the command line built, nothing read)", f"{startup:.2f} s", "", "")
    )
    lines.append("")
    return lines


def _recovery_rows(label: str, case: dict[str, Any]) -> list[str]:
    """The first read, the second, and the read after the next step, of one recovery case."""
    sqlite_ms = case["sqlite_open_get_tuple_ms"]
    note = "" if case["returned_expected"] else ", returned the wrong checkpoint!"
    rows = [
        row(
            f"{label}, first read ({case['quarantined_records']} quarantined, "
            f"{case.get('healed_blocks', 0)} blocks rebuilt{note})",
            ms(case["first_read_ms"]),
            f"SqliteSaver {ms(sqlite_ms)}",
            x(case["first_ratio_vs_sqlite"]),
        ),
        row(
            f"{label}, second read",
            ms(case["second_read_ms"]),
            f"SqliteSaver {ms(sqlite_ms)}",
            x(case["second_read_ms"] / sqlite_ms),
        ),
    ]
    if "after_step_read_ms" in case:
        expected = case["after_step_returned_expected"]
        note = "" if expected else ", returned the wrong checkpoint!"
        rows.append(
            row(
                f"{label}, a new saver after the thread's next step{note}",
                ms(case["after_step_read_ms"]),
                f"SqliteSaver {ms(sqlite_ms)}",
                x(case["after_step_read_ms"] / sqlite_ms),
            )
        )
    return rows


def recovery_tables(results: dict[str, Any]) -> list[str]:
    rec = results["recovery"]
    lines = ["## 6. Recovery: open + get_tuple with the newest K checkpoints damaged", ""]
    if "skipped" in rec:
        return [*lines, f"Not measured: {rec['skipped']}.", ""]
    lines += [
        f"A {rec['checkpoints']:,}-checkpoint thread (section 3's store, copies with their "
        f"logs hard-linked), one byte flipped in the middle of each of the newest K "
        f"checkpoint records (in their files, or their entries of the thread's log); median "
        f"of {rec['repeats']}. The first read rebuilds each damaged record it reads from the "
        f"log's parity, or quarantines it and falls back; the second is a new saver on the "
        f"same copy; the third a new saver once the first one put the thread's next "
        f"checkpoint (the thread goes on: that append writes rebuilt blocks back in place, "
        f"and hints cover what was quarantined). Baseline: SqliteSaver open + get_tuple, "
        f"undamaged (SQLite cannot fall back past damage).",
        "",
    ]
    writer_left = rec.get("writer_left")
    if writer_left:
        past = writer_left["past_writer_hint"]
        lines += [
            f"The store has been read by then: its hint covers the whole log, and the reads "
            f"find the damage. The last rows are K={writer_left['damaged']} on copies with "
            f"the hint its writer left ({past['entries']} entries, "
            f"{past['bytes'] / 1024:.0f} KB, past it), as after a crash: the scan that "
            f"opens the thread finds the damaged entries past the hint.",
            "",
        ]
    lines.append(HEADER)
    labelled = [(f"K={damaged}", case) for damaged, case in rec["cases"].items()]
    if writer_left:
        labelled.append((f"K={writer_left['damaged']}, the writer's hint", writer_left))
    for label, case in labelled:
        lines += _recovery_rows(label, case)
    lines.append("")
    unread = rec.get("unread_damage")
    if unread:
        lines += [
            f"Damage no read needs: on a copy of the store with no parity and no hint, an "
            f"older checkpoint's entry (a quarter into the log) damaged; a saver reads the "
            f"newest checkpoint (finding the damage), the thread goes on for "
            f"{unread['steps']:,} checkpoints, then a new process opens it and reads its "
            f"newest (median of {unread['rounds']}). Baseline: SqliteSaver, the same in a "
            f"new process, undamaged.",
            "",
            HEADER,
        ]
        for where, what in (
            ("record", "a byte of its record (its entry still names it)"),
            ("header", "its entry's header (the bytes name nothing)"),
        ):
            case = unread[where]
            hinted = "hinted" if case["hinted"] else "no hint"
            lines.append(
                row(
                    f"new process after damage no read needs: {what}; {hinted}",
                    ms(case[VERIFIED_FILES]),
                    f"SqliteSaver {ms(case[SQLITE])}",
                    x(case[VERIFIED_FILES] / case[SQLITE]),
                )
            )
        lines.append("")
    return lines


def fsync_tables(results: dict[str, Any]) -> list[str]:
    chat = results["chat"]
    lines = [
        "## 7. fsync calls per chat step",
        "",
        "`os.fsync` + `os.fdatasync` calls during each step of section 1, counted by "
        "wrapping both (SQLite syncs from C, out of sight: no baseline).",
        "",
        HEADER,
    ]
    for name in (VERIFIED_FILES, VERIFIED_FILES_ASYNC):
        for length in chat["lengths"]:
            entry = chat["at_length"][str(length)][name]
            lines.append(
                row(
                    f"fsyncs/step at {length} steps, {_SHORT[name]} (median)",
                    f"{entry['fsyncs']:g}",
                    "",
                    "",
                )
            )
        totals = chat["fsyncs"][name]
        lines.append(
            row(
                f"fsyncs/step over the whole chat, {_SHORT[name]} (mean)",
                f"{totals['per_step_mean']:.2f}",
                "",
                "",
            )
        )
        lines.append(
            row(
                f"fsyncs per saver call, {_SHORT[name]} (mean)",
                f"{totals['per_saver_call_mean']:.2f}",
                "",
                "",
            )
        )
    lines.append("")
    return lines


def count(value: float) -> str:
    """A request count: whole, or a mean with two decimals."""
    return f"{value:.0f}" if value == int(value) else f"{value:.2f}"


def kb(value: float) -> str:
    return f"{value / 1e3:.1f} KB"


def requests_cell(counts: dict[str, float]) -> str:
    """``4 (2 GET, 2 LIST)``: the requests of a call or step, by method."""
    parts = ", ".join(f"{count(counts[m])} {m}" for m in METHODS if counts.get(m))
    return f"{count(counts['all'])} ({parts})" if parts else "0"


def s3_tables(results: dict[str, Any]) -> list[str]:
    s3 = results["s3"]
    lines = ["## 8. S3-compatible object storage", ""]
    if "skipped" in s3:
        return [*lines, f"Not measured: {s3['skipped']}.", ""]
    chat, thread = s3["chat"], s3["thread"]
    has_baseline = BASELINE_S3 in s3["savers"]
    against = (
        f"next to `S3CheckpointSaver` ({s3['baseline']}), both"
        if has_baseline
        else f"alone ({s3['baseline']})"
    )
    lines += [
        f"`VerifiedSaver(storage=ObjectStorage('s3://bucket/prefix', endpoint=...))` "
        f"{against} on one moto S3 server on 127.0.0.1 behind a proxy that counts every "
        f"request, each saver in buckets of its own, taking turns step by step and call by "
        f"call. Chat: {chat['steps']} `graph.invoke` steps of "
        f"section 1's chat graph; requests per step are the mean over the steps, bytes "
        f"uploaded those of the request bodies; `put` and `get_tuple` are each call the "
        f"graph made; after each step a new saver, as on a new machine (its client made "
        f"beforehand, not timed), reads the newest checkpoint. Long thread: chat-shaped "
        f"checkpoints (a 20-message window) `put` one after the other; at each length, "
        f"{thread['rounds']} rounds of `get_tuple` of the newest, from the saver that wrote "
        f"them (open) and from a new saver: requests and time are the median, the time "
        f"ratio the median of per-round ratios. A method missing from a cell was not used "
        f"(neither saver deletes anything here). This section alone: "
        f"`python benchmarks/run.py --only s3 --out DIR`.",
        "",
        "The request counts hold against any S3 endpoint. The times do not: moto is a "
        "Python server on the loopback interface, with no network between it and the "
        "savers, so a request costs what moto's code costs, where S3's cost a network "
        "round trip each; take the time ratios as a rough guide only.",
        "",
        HEADER,
    ]

    def compared(
        figure: str, verified: str, baseline: Callable[[], str], ratio: Callable[[], str]
    ) -> str:
        if not has_baseline:
            return row(figure, verified, "not measured", "")
        return row(figure, verified, f"{BASELINE_S3} {baseline()}", ratio())

    def ratio_of(a: float, b: float) -> str:
        return x(a / b) if b else ""

    mine, theirs = chat[VERIFIED_S3], chat.get(BASELINE_S3, {})
    ratios = chat.get("ratios", {})
    lines += [
        compared(
            "requests per chat step (mean)",
            requests_cell(mine["requests_per_step"]),
            lambda: requests_cell(theirs["requests_per_step"]),
            lambda: x(ratios["requests"]),
        ),
        compared(
            "bytes uploaded per chat step (mean)",
            kb(mine["requests_per_step"]["bytes_up"]),
            lambda: kb(theirs["requests_per_step"]["bytes_up"]),
            lambda: x(ratios["bytes_up"]),
        ),
        compared(
            f"bytes uploaded per chat step, last {chat['last_steps']} steps (median)",
            kb(mine["bytes_up_last_steps"]),
            lambda: kb(theirs["bytes_up_last_steps"]),
            lambda: ratio_of(mine["bytes_up_last_steps"], theirs["bytes_up_last_steps"]),
        ),
    ]
    for key, title in (("step", "chat step, graph.invoke"), ("saver", "saver calls per step")):
        lines.append(
            compared(
                f"{title} (median)",
                ms(mine[f"{key}_ms"]),
                lambda k=key: ms(theirs[f"{k}_ms"]),
                lambda k=key: x(ratios[k]),
            )
        )
    for call, title in (("put", "put"), ("get_tuple", "get_tuple, open saver")):
        for pct in ("p50", "p99"):
            lines.append(
                compared(
                    f"{title}, {pct} ({mine[call]['samples']:,} calls in the chat)",
                    ms(mine[call][f"{pct}_ms"]),
                    lambda c=call, p=pct: ms(theirs[c][f"{p}_ms"]),
                    lambda c=call, p=pct: x(ratios[c][p]),
                )
            )
    lines += [
        compared(
            "new saver + get_tuple after a chat step: requests (mean)",
            requests_cell(mine["new_requests"]),
            lambda: requests_cell(theirs["new_requests"]),
            lambda: x(ratios["new_requests"]),
        ),
        compared(
            "new saver + get_tuple after a chat step: requests (most)",
            count(mine["new_requests_max"]),
            lambda: count(theirs["new_requests_max"]),
            lambda: ratio_of(mine["new_requests_max"], theirs["new_requests_max"]),
        ),
    ]
    for pct in ("p50", "p99"):
        lines.append(
            compared(
                f"new saver + get_tuple after a chat step, {pct}",
                ms(mine["new"][f"{pct}_ms"]),
                lambda p=pct: ms(theirs["new"][f"{p}_ms"]),
                lambda p=pct: x(ratios["new"][p]),
            )
        )

    puts = thread["put_requests"]
    lines.append(
        compared(
            "requests per put, long thread (mean)",
            requests_cell(puts[VERIFIED_S3]),
            lambda: requests_cell(puts[BASELINE_S3]),
            lambda: ratio_of(puts[VERIFIED_S3]["all"], puts[BASELINE_S3]["all"]),
        )
    )
    for size in thread["sizes"]:
        entry = thread["at_size"][str(size)]
        mine, theirs = entry[VERIFIED_S3], entry.get(BASELINE_S3, {})
        for kind, title in (("open", "open saver"), ("new", "new saver + get_tuple")):
            lines += [
                compared(
                    f"newest of {size:,} checkpoints, {title}: requests",
                    requests_cell(mine[f"{kind}_requests"]),
                    lambda t=theirs, k=kind: requests_cell(t[f"{k}_requests"]),
                    lambda e=entry, k=kind: x(e["ratios"][k]["requests"]),
                ),
                compared(
                    f"newest of {size:,} checkpoints, {title}: time",
                    ms(mine[f"{kind}_ms"]),
                    lambda t=theirs, k=kind: ms(t[f"{k}_ms"]),
                    lambda e=entry, k=kind: x(e["ratios"][k]["time"]),
                ),
            ]
    lines.append("")
    return lines


def retention_tables(results: dict[str, Any]) -> list[str]:
    ret = results["retention"]
    seconds = ret["seconds"]
    return [
        "## 9. Retention: a sweep of many threads",
        "",
        f"A store of {ret['threads']:,} threads of three checkpoints each, {ret['expired']:,} "
        f"of them idle for 400 days. `sweep(RetentionPolicy(idle=30 days))` judges every "
        f"thread by its checkpoints' times and deletes the expired ones "
        f"({ret['checkpoints_dropped']:,} checkpoints, {mb(ret['bytes_freed'])} of records); "
        f"the baseline deletes the same threads with `SqliteSaver.delete_thread`, one call "
        f"each, given the list. Wall time of the whole job, one run each.",
        "",
        HEADER,
        row(
            "sweep: judge every thread, delete the expired",
            f"{seconds['sweep']:.2f} s",
            f"{seconds[SQLITE]:.2f} s",
            x(ret["ratio_sweep_vs_sqlite"]),
        ),
        row(
            "delete_thread per expired thread",
            f"{seconds[VERIFIED_FILES]:.2f} s",
            f"{seconds[SQLITE]:.2f} s",
            x(ret["ratio_delete_vs_sqlite"]),
        ),
        "",
    ]


def headline(results: dict[str, Any]) -> list[str]:
    lines = ["## Headline", "", HEADER]
    if "chat" in results:
        chat = results["chat"]
        lengths = chat["lengths"]
        for length in (lengths[len(lengths) // 2], lengths[-1]):
            entry = chat["at_length"][str(length)]
            for name, base in COMPARISONS[:3]:
                lines.append(
                    row(
                        f"overhead/step at {length} steps, {_SHORT[name]}",
                        ms(entry[name]["saver_ms"]),
                        f"{base_name(base)} {ms(entry[base]['saver_ms'])}",
                        x(entry["ratios"][f"{name} / {base}"]["saver"]),
                    )
                )
    if "disk" in results:
        disk = results["disk"]
        top = max(disk["at_length"], key=int)
        sizes = disk["at_length"][top]
        lines.append(
            row(
                f"on disk after {top} steps",
                mb(sizes[VERIFIED_FILES]["allocated"]),
                f"SqliteSaver {mb(sizes[SQLITE]['allocated'])}",
                x(sizes[VERIFIED_FILES]["allocated"] / sizes[SQLITE]["allocated"]),
            )
        )
        growth = disk["growth"]
        lines.append(
            row(
                f"disk growth {growth['to']} / {growth['from']} steps",
                x(growth[VERIFIED_FILES]),
                f"SqliteSaver {x(growth[SQLITE])}",
                x(growth[VERIFIED_FILES] / growth[SQLITE]),
            )
        )

    def p50_against_sqlite(title: str, entry: dict[str, Any]) -> str:
        return row(
            f"{title}, p50",
            ms(entry[VERIFIED_FILES]["p50_ms"]),
            f"SqliteSaver {ms(entry[SQLITE]['p50_ms'])}",
            x(entry["ratios"][f"{VERIFIED_FILES} / {SQLITE}"]["p50"]),
        )

    if "history" in results:
        history = results["history"]
        length = f"{history['checkpoints']:,} checkpoints"
        for op, title in (("get_tuple", "get_tuple (newest)"), ("list", "list(limit=10)")):
            lines.append(p50_against_sqlite(f"{title} on {length}", history[op]))
    if "calls" in results:
        for op, title in (("put", "put"), ("put_1mb", "put, 1 MB state")):
            lines.append(p50_against_sqlite(f"{title}, files", results["calls"][op]))
    if "cli" in results:
        cli = results["cli"]
        lines.append(
            row(
                f"inspect STORE, {cli['inspect_store']['checkpoints'] or '?'} checkpoints",
                f"{cli['median_s']['inspect']:.2f} s",
                f"start-up {cli['median_s']['startup (--help)']:.2f} s",
                x(cli["ratio_vs_startup"]["inspect"]),
            )
        )
    if "cases" in results.get("recovery", {}):
        cases = results["recovery"]["cases"]
        worst = max(cases, key=int)
        lines.append(
            row(
                f"open + get_tuple, newest {worst} damaged",
                ms(cases[worst]["first_read_ms"]),
                f"SqliteSaver (undamaged) {ms(cases[worst]['sqlite_open_get_tuple_ms'])}",
                x(cases[worst]["first_ratio_vs_sqlite"]),
            )
        )
        writer_left = results["recovery"].get("writer_left")
        if writer_left:
            lines.append(
                row(
                    f"open + get_tuple, newest {writer_left['damaged']} damaged, the writer's hint",
                    ms(writer_left["first_read_ms"]),
                    f"SqliteSaver (undamaged) {ms(writer_left['sqlite_open_get_tuple_ms'])}",
                    x(writer_left["first_ratio_vs_sqlite"]),
                )
            )
    if "chat" in results:
        fsyncs = results["chat"]["fsyncs"][VERIFIED_FILES]
        lines.append(row("fsyncs per step, files (mean)", f"{fsyncs['per_step_mean']:.2f}", "", ""))
    if "savers" in results.get("s3", {}):
        s3 = results["s3"]
        has_baseline = BASELINE_S3 in s3["savers"]
        chat = s3["chat"]
        top = str(s3["thread"]["sizes"][-1])
        entry = s3["thread"]["at_size"][top]
        for figure, mine, theirs, ratio, shown in (
            (
                "S3: requests per chat step (mean)",
                chat[VERIFIED_S3]["requests_per_step"]["all"],
                chat.get(BASELINE_S3, {}).get("requests_per_step", {}).get("all"),
                chat.get("ratios", {}).get("requests"),
                count,
            ),
            (
                "S3: bytes uploaded per chat step (mean)",
                chat[VERIFIED_S3]["requests_per_step"]["bytes_up"],
                chat.get(BASELINE_S3, {}).get("requests_per_step", {}).get("bytes_up"),
                chat.get("ratios", {}).get("bytes_up"),
                kb,
            ),
            (
                "S3: new saver after a chat step, requests (mean)",
                chat[VERIFIED_S3]["new_requests"]["all"],
                chat.get(BASELINE_S3, {}).get("new_requests", {}).get("all"),
                chat.get("ratios", {}).get("new_requests"),
                count,
            ),
            (
                f"S3: new saver, newest of {int(top):,} checkpoints, requests",
                entry[VERIFIED_S3]["new_requests"]["all"],
                entry.get(BASELINE_S3, {}).get("new_requests", {}).get("all"),
                entry.get("ratios", {}).get("new", {}).get("requests"),
                count,
            ),
            (
                f"S3: new saver, newest of {int(top):,} checkpoints, time",
                entry[VERIFIED_S3]["new_ms"],
                entry.get(BASELINE_S3, {}).get("new_ms"),
                entry.get("ratios", {}).get("new", {}).get("time"),
                ms,
            ),
        ):
            lines.append(
                row(
                    figure,
                    shown(mine),
                    f"{BASELINE_S3} {shown(theirs)}" if has_baseline else "",
                    x(ratio) if has_baseline else "",
                )
            )
    lines.append("")
    return lines


def store_tables(results: dict[str, Any]) -> list[str]:
    st = results["store"]
    lines = [
        "## 10. The memory store and the node cache",
        "",
        f"Three stores of the same {st['items']:,} items (ten namespaces), put before "
        f"anything is timed: `VerifiedStore(path)` (fsync on), `SqliteStore` on a file, "
        f"`InMemoryStore`. p50 (p99) per call over {st['rounds']} interleaved rounds "
        f"({st['search_rounds']} for searches); the ratio is VerifiedStore's time over "
        f"the other's in the same round (median over rounds). The filtered search asks "
        f"for 10 items one in ten passes; the vector search ranks all {st['items']:,} "
        f"items ({st['dims']} dims, the same fake embedding for every store) and "
        f"returns the top 10.",
        "",
        f"| figure | {VERIFIED_STORE} | {SQLITE_STORE} | {MEMORY_STORE} "
        f"| vs SqliteStore | vs InMemoryStore |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def cell(timing: dict[str, float] | None) -> str:
        return "-" if timing is None else f"{ms(timing['p50_ms'])} ({ms(timing['p99_ms'])})"

    def ratio(value: float | None) -> str:
        return "-" if value is None else x(value)

    for key, title in (
        ("put", "put (new item)"),
        ("get", "get"),
        ("search_filter", "search, filter, limit 10"),
        ("search_vector", "search, query, top 10"),
    ):
        fig = st[key]
        lines.append(
            f"| {title} | {cell(fig['ms'][VERIFIED_STORE])} "
            f"| {cell(fig['ms'].get(SQLITE_STORE))} | {cell(fig['ms'].get(MEMORY_STORE))} "
            f"| {ratio(fig['ratios'].get(SQLITE_STORE))} "
            f"| {ratio(fig['ratios'].get(MEMORY_STORE))} |"
        )
    disk = st["bytes"]
    lines += [
        f"| bytes on disk after the puts (allocated) | {mb(disk[VERIFIED_STORE]['allocated'])} "
        f"({disk[VERIFIED_STORE]['files']:,} files) | {mb(disk[SQLITE_STORE]['allocated'])} "
        f"| - | {x(st['ratio_bytes_vs_sqlite'])} | - |",
        "",
    ]
    if "left_out" in st["search_vector"]:
        lines += [f"Vector search without SqliteStore: {st['search_vector']['left_out']}.", ""]
    lines += [
        "The node cache: one cached entry read back (a hit).",
        "",
        f"| figure | {VERIFIED_CACHE} | {SQLITE_CACHE} | ratio |",
        "|---|---:|---:|---:|",
    ]
    hit = st["cache_hit"]
    lines += [
        f"| get, a hit | {cell(hit['ms'][VERIFIED_CACHE])} | {cell(hit['ms'][SQLITE_CACHE])} "
        f"| {x(hit['ratios'][SQLITE_CACHE])} |",
        "",
    ]
    return lines


def damage_tables(results: dict[str, Any]) -> list[str]:
    dmg = results["damage"]
    checkpoints = dmg["checkpoints"]
    lines = [
        "## 11. Damage trials: one bit flipped or one 4 KB block zeroed",
        "",
        f"One chat of {dmg['steps']} `graph.invoke` steps on one thread (a `messages` "
        f"channel, ~1 KB AIMessage per step; LangGraph writes three checkpoints per step: "
        f"{checkpoints[VERIFIED_FILES]:,} in `VerifiedSaver(dir)`, "
        f"{checkpoints[SQLITE]:,} in `SqliteSaver` on a file), built once. Each trial "
        f"damages a fresh copy once: a bit flipped, or a 4096-aligned block zeroed, in a "
        f"file drawn by size among the thread's files (`threads/<T>/`, "
        f"{mb(dmg['bytes'][VERIFIED_FILES])}) or the database's files "
        f"({mb(dmg['bytes'][SQLITE])}); seeded, so a run repeats its draws. A new saver "
        f"then reads the thread: `get_tuple` (how many checkpoints before the true newest "
        f"the one returned is; nothing returned counts as falling back past the first), "
        f"and `list` (every other checkpoint must read back exactly as undamaged: "
        f"checkpoint, metadata, parent, pending writes). Wrong data: `get_tuple` returned, "
        "without an error, something that differs from the undamaged read of that "
        "checkpoint other than by pending writes left out (counted beside it). After "
        "repair (VerifiedSaver): `verify(repair=True)` on the damaged copy, then a new "
        "saver reads the newest and every checkpoint again. This section alone: "
        "`python benchmarks/run.py --only damage --out DIR`.",
        "",
        "| damage | saver | trials | newest is the true newest | falls back 1 checkpoint "
        "| falls back more (median / max) | wrong data returned | error raised "
        "| other checkpoints not exact | after repair exact |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for kind, by_saver in dmg["rows"].items():
        for name, r in by_saver.items():
            more = str(r["back_more"])
            if r["back_more"]:
                more += f" ({r['back_more_median']:g} / {r['back_more_max']})"
            if r["unknown_returned"]:
                more += f"; {r['unknown_returned']} unknown checkpoint(s)"
            raised = str(r["raised"])
            if r["list_raised"]:
                raised += f" (list: {r['list_raised']})"
            wrong = str(r["wrong"])
            if r["writes_lost"]:
                wrong += f" (pending writes left out: {r['writes_lost']})"
            if r["others_not_exact_trials"]:
                others = (
                    f"in {r['others_not_exact_trials']} trials: "
                    f"{r['others_missing_total']:,} missing, "
                    f"{r['others_writes_lost_total']:,} with writes left out, "
                    f"{r['others_different_total']:,} different "
                    f"(most in one trial: {r['others_not_exact_max']:,})"
                )
            else:
                others = "none"
            if "after_repair_exact_trials" not in r:
                after = "no repair"
            elif r["after_repair_exact_trials"] == r["trials"]:
                after = f"all {r['checkpoints']:,} exact in every trial"
            else:
                after = (
                    f"all {r['checkpoints']:,} exact in {r['after_repair_exact_trials']} "
                    f"of {r['trials']} trials; {r['after_repair_not_exact_total']:,} not exact "
                    f"in all "
                    f"(most in one trial: {r['after_repair_not_exact_max']:,})"
                )
                if r["repair_raised"]:
                    after += f"; repair raised in {r['repair_raised']}"
            lines.append(
                f"| {dmg['damages'][kind]} | {name} | {r['trials']} | {r['newest']} "
                f"| {r['back_1']} | {more} | {wrong} | {raised} | {others} | {after} |"
            )
    lines += [
        "",
        "Every trial (the damage drawn and what was read) is in `results/latest.json`.",
        "",
    ]
    return lines


def fuse_tables(results: dict[str, Any]) -> list[str]:
    fuse = results["fuse"]
    lines = [
        "## 12. A FUSE file system",
        "",
        '`graph.invoke(..., durability="sync")` (and, last, chats of 10 turns with '
        "LangGraph's default durability, saver time per turn as in section 1) with both "
        "stores on a `bindfs` mount (a FUSE "
        "pass-through: every file-system call goes to the bindfs process and back, as on "
        "NFS, EFS or gcsfuse), against `SqliteSaver` on the same mount; median of "
        "interleaved rounds, ratio the median of the per-round ratios. This section alone: "
        "`python benchmarks/run.py --only fuse --out DIR`.",
        "",
    ]
    if "not_measured" in fuse:
        return [*lines, f"Not measured: {fuse['not_measured']}.", ""]
    lines.append(HEADER)
    for figure, entry in fuse["figures"].items():
        lines.append(
            row(
                f"{figure}, per invoke ({entry['rounds']} rounds)",
                ms(entry["median_ms"][FUSE_VERIFIED]),
                f"{ms(entry['median_ms'][FUSE_SQLITE])} (SqliteSaver)",
                x(entry["ratio"]),
            )
        )
    short = fuse.get("short_chats")
    if short is not None:
        lines.append(
            row(
                f"{short['chats']} chats of {short['turns']} turns (a new thread each), "
                "default durability, saver time per turn",
                ms(short["saver_ms"][FUSE_VERIFIED]),
                f"{ms(short['saver_ms'][FUSE_SQLITE])} (SqliteSaver)",
                x(short["ratio"]),
            )
        )
    return [*lines, ""]


_PARTS = (
    (headline, None, None, ""),
    (chat_tables, "chat", "chat", "## 1. Per-step overhead in a chat graph"),
    (disk_tables, "disk", "chat", "## 2. Bytes on disk after the chat"),
    (history_tables, "history", "history", "## 3. Reads on a long thread"),
    (
        calls_tables,
        "calls",
        "calls",
        "## 4. Single calls: put, get_tuple, list, put of a 1 MB state",
    ),
    (cli_tables, "cli", "cli", "## 5. The console script"),
    (recovery_tables, "recovery", "history", "## 6. Recovery"),
    (fsync_tables, "chat", "chat", "## 7. fsync calls per chat step"),
    (s3_tables, "s3", "s3", "## 8. S3-compatible object storage"),
    (retention_tables, "retention", "retention", "## 9. Retention: a sweep of many threads"),
    (store_tables, "store", "store", "## 10. The memory store and the node cache"),
    (damage_tables, "damage", "damage", "## 11. Damage trials"),
    (fuse_tables, "fuse", "fuse", "## 12. A FUSE file system"),
)
"""(renderer, the results key it needs, the section that makes it, its title when missing)."""


def markdown(results: dict[str, Any], plots: dict[str, str] | None, plot_note: str) -> str:
    env = results["environment"]
    synchronous = results.get("chat", {}).get("sqlite_pragma_synchronous", "?")
    lines = [
        "# Benchmark results",
        "",
        f"Reproduce: `{results['command']}`"
        + (" (what `make bench` runs)" if results["command"] == "python benchmarks/run.py" else "")
        + ". Method: [README.md](README.md).",
        "",
        f"* run: {results['started']}, {results['total_seconds']:.0f} s in all "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in results['section_seconds'].items())})",
        f"* code: {results['code']}",
        f"* machine: Python {env['python']}, {env['platform']}, {env['cpus']} CPUs, "
        f"load average at start {env['load_average']}",
        f"* SQLite {env['sqlite']}, `PRAGMA synchronous` = {synchronous} (2 = FULL); "
        f'LangGraph\'s default durability (`"async"`); `VerifiedSaver(path)` with its '
        f"defaults (fsync on)",
        "",
    ]
    for name, why in results.get("failed", {}).items():
        lines += [f"**Section {name} failed**: {why}", ""]
    if plots:
        lines += [
            f"![per-step overhead vs chat length](results/{PLOTS['overhead']})",
            f"![bytes on disk vs chat length](results/{PLOTS['disk']})",
            f"![step time vs chat length](results/{PLOTS['step']})",
            "",
        ]
    else:
        lines += [f"Plots not drawn: {plot_note}", ""]
    not_run = results.get("not_run", [])
    for part, key, section, title in _PARTS:
        if key is None or key in results:
            lines += part(results)
        elif section in not_run:
            continue  # left out on purpose (--only)
        else:
            lines += [title, "", "Not measured: the section failed (see the run's stderr).", ""]
    return "\n".join(lines)


# -- plots -----------------------------------------------------------------------------

_STYLE = {
    VERIFIED_FILES: ("tab:blue", "-"),
    VERIFIED_FILES_ASYNC: ("tab:blue", "--"),
    VERIFIED_MEMORY: ("tab:cyan", "-"),
    SQLITE: ("tab:red", "-"),
    SQLITE_ASYNC: ("tab:red", "--"),
    MEMORY: ("tab:gray", "-"),
}


def plot(results: dict[str, Any], directory: Path) -> tuple[dict[str, str] | None, str]:
    """Draw the PNGs into ``directory``; (names, "") or (None, why not)."""
    if "chat" in results.get("not_run", []):
        return None, "the chat section was not run (--only)."
    if "chat" not in results or "disk" not in results:
        return None, "the chat section failed."
    try:
        import matplotlib
    except ImportError:
        return None, "matplotlib is not installed (`pip install -e '.[bench]'`)."
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    directory.mkdir(parents=True, exist_ok=True)
    chat = results["chat"]
    tiles = chat["tiles"]
    command = results["command"]
    for key, ylabel, title in (
        ("saver", "ms per step in saver calls", "Per-step overhead of the checkpointer"),
        ("step", "ms per graph.invoke / ainvoke", "Time per chat step"),
    ):
        fig, (ax, below) = plt.subplots(
            2, 1, figsize=(8, 8), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
        )
        for name in SAVERS:
            color, style = _STYLE[name]
            ax.plot(tiles["lengths"], tiles[name][key], style, color=color, label=name)
            ax.plot(
                chat["lengths"],
                [chat["at_length"][str(n)][name][f"{key}_ms"] for n in chat["lengths"]],
                "o",
                color=color,
            )
        ax.set_ylabel(ylabel)
        ax.set_title(
            f"{title}\nlines: median of each {tiles['tile_steps']} steps; dots: median of "
            f"the {2 * chat['half_window'] + 1} steps around each length of the tables\n"
            f"{command}",
            fontsize=9,
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        # the machine's speed drifts during the run; the paired ratios do not
        for name, base in COMPARISONS[:3]:
            color, style = _STYLE[name]
            below.plot(
                tiles["lengths"],
                tiles["ratios"][f"{name} / {base}"][key],
                style,
                color=color,
                label=f"{name} / {base_name(base)}",
            )
        below.axhline(1, color="black", linewidth=0.8)
        below.set_ylim(bottom=0)
        below.set_ylabel("ratio (median of per-step ratios)")
        below.set_xlabel("chat length (steps, ~1 KB of messages each)")
        below.grid(alpha=0.3)
        below.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(directory / PLOTS["overhead" if key == "saver" else "step"], dpi=110)
        plt.close(fig)

    every = results["disk"]["every"]
    lengths = [int(n) for n in every]
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, label in (
        (VERIFIED_FILES, "VerifiedSaver(path)"),
        (SQLITE, "SqliteSaver (db + -wal + -shm)"),
    ):
        color, _ = _STYLE[name]
        ax.plot(
            lengths,
            [every[str(n)][name]["allocated"] / 1e6 for n in lengths],
            "o-",
            color=color,
            label=label,
            markersize=3,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")  # log-log: a line's slope is the growth, 1 linear, 2 quadratic
    plain = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.set_xlabel("chat length (steps, ~1 KB of messages each)")
    ax.set_ylabel("MB on disk (du)")
    ax.set_title(
        f"Bytes on disk after the chat (log-log: slope 1 = linear growth, 2 = quadratic)"
        f"\n{command}",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / PLOTS["disk"], dpi=110)
    plt.close(fig)
    return dict(PLOTS), ""
