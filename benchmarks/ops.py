"""Figures 3, 4 and 6: single saver calls, timed one by one, savers interleaved.

* ``calls_section`` (4): rounds of ``put`` + ``get_tuple`` + ``list(limit=10)`` on a
  growing chat-shaped thread, then rounds of ``put`` of a ~1 MB state, for
  VerifiedSaver (files, and in memory) next to SqliteSaver and InMemorySaver.
* ``history_section`` (3 and 6): a 10,000-checkpoint thread written once into a
  store and a SQLite database; ``get_tuple`` of the newest checkpoint and
  ``list(limit=10)`` in interleaved rounds; a new saver opened and asked for the
  newest checkpoint; then the newest K checkpoints damaged (recovery).

Every saver measured is opened with its defaults (``VerifiedSaver(path)``
fsyncs). Fixtures that are only read are written with ``fsync=False`` (and
SQLite's ``synchronous=OFF``), which writes the same bytes faster.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from chat import MEMORY, SQLITE, VERIFIED_FILES, VERIFIED_MEMORY
from damage import checkpoint_spans, flip_bytes, log_entries, past_hint, write_anew
from langgraph.checkpoint.base import create_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from measure import FULL_COLLECTIONS, p50_p99, paired_ratio, percentile, rotated, tree_bytes
from memory_bench import measure as memory_over_threads
from workload import TextSource, big_checkpoints, raw_checkpoints

from langgraph_checkpoint_verified import VerifiedSaver

CALL_SAVERS = (VERIFIED_FILES, SQLITE, VERIFIED_MEMORY, MEMORY)
CALL_COMPARISONS = ((VERIFIED_FILES, SQLITE), (VERIFIED_MEMORY, MEMORY))
LIST_LIMIT = 10


def open_saver(name: str, workdir: Path) -> Any:
    if name == VERIFIED_FILES:
        return VerifiedSaver(workdir / "verified")
    if name == SQLITE:
        return SqliteSaver(sqlite3.connect(workdir / "sqlite.db", check_same_thread=False))
    if name == VERIFIED_MEMORY:
        return VerifiedSaver.in_memory()
    if name == MEMORY:
        return InMemorySaver()
    raise ValueError(name)


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - started, result


def compare(stats: dict[str, dict[str, float]], pairs: Any) -> dict[str, dict[str, float]]:
    """Ratios of p50 to p50 and p99 to p99 (distributions, so not paired)."""
    return {
        f"{name} / {base}": {
            "p50": stats[name]["p50_ms"] / stats[base]["p50_ms"],
            "p99": stats[name]["p99_ms"] / stats[base]["p99_ms"],
        }
        for name, base in pairs
    }


# -- 4. put / get_tuple / list, and put of a 1 MB state ---------------------------


def calls_section(settings: Any, workdir: Path) -> dict[str, Any]:
    workdir.mkdir()
    savers = {name: open_saver(name, workdir) for name in CALL_SAVERS}
    ops = ("put", "get_tuple", "list", "put_1mb")
    samples: dict[str, dict[str, list[float]]] = {
        name: {op: [] for op in ops} for name in CALL_SAVERS
    }
    # calls during which the interpreter ran a full garbage collection
    collected: dict[str, dict[str, int]] = {name: dict.fromkeys(ops, 0) for name in CALL_SAVERS}

    def sample(name: str, op: str, fn: Any, *args: Any) -> Any:
        before = FULL_COLLECTIONS.count
        seconds, result = timed(fn, *args)
        samples[name][op].append(seconds)
        collected[name][op] += FULL_COLLECTIONS.count != before
        return result

    config = {"configurable": {"thread_id": "calls"}}
    calls = list(raw_checkpoints(TextSource(seed=3), settings.call_rounds, thread_id="calls"))
    for round_, args in enumerate(calls):
        for name in rotated(CALL_SAVERS, round_):
            saver = savers[name]
            sample(name, "put", saver.put, *args)
            found = sample(name, "get_tuple", saver.get_tuple, config)
            assert found is not None and found.checkpoint["id"] == args[1]["id"], name
            items = sample(name, "list", lambda s=saver: list(s.list(config, limit=LIST_LIMIT)))
            assert len(items) == min(LIST_LIMIT, round_ + 1), name

    big = list(big_checkpoints(TextSource(seed=5), settings.big_rounds, state_chars=1_000_000))
    state_chars = sum(len(m.content) for m in big[0][1]["channel_values"]["messages"])
    for round_, args in enumerate(big):
        for name in rotated(CALL_SAVERS, round_):
            sample(name, "put_1mb", savers[name].put, *args)
    savers[SQLITE].conn.close()
    held = held_values(settings, workdir / "held")

    out: dict[str, Any] = {
        "rounds": settings.call_rounds,
        "big_rounds": settings.big_rounds,
        "big_state_chars": state_chars,
        "big_state_messages": len(big[0][1]["channel_values"]["messages"]),
        "list_limit": LIST_LIMIT,
    }
    for op in ops:
        stats = {name: p50_p99(samples[name][op]) for name in CALL_SAVERS}
        full = {name: collected[name][op] for name in CALL_SAVERS}
        out[op] = {**stats, "ratios": compare(stats, CALL_COMPARISONS), "full_collections": full}
    out["held"] = held
    return {"calls": out}


HELD_CHECKPOINTS = 2_000
HELD_EVERY = 10
HELD_VALUE_CHARS = 4_096


def held_checkpoints(count: int) -> list[Any]:
    """``put`` arguments of a thread where a 4 KB ``doc`` channel changes every
    ``HELD_EVERY``-th checkpoint and a small ``counter`` at each: the newest checkpoint's
    ``doc`` is held by an older record, as a long-lived document or profile is."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    calls = []
    checkpoint = empty_checkpoint()
    parent: str | None = None
    versions: dict[str, int] = {}
    for step in range(count):
        checkpoint = {**checkpoint, "id": str(uuid6(clock_seq=step))}
        values = dict(checkpoint["channel_values"])
        values["counter"] = step
        changed = ["counter"]
        if step % HELD_EVERY == 0:
            values["doc"] = f"{step:08d}" + "x" * (HELD_VALUE_CHARS - 8)
            changed.append("doc")
        new_versions = {}
        for channel in changed:
            versions[channel] = versions.get(channel, 0) + 1
            new_versions[channel] = f"{versions[channel]:032}.{0.5:016}"
        checkpoint["channel_values"] = values
        checkpoint["channel_versions"] = {**checkpoint["channel_versions"], **new_versions}
        config = {"configurable": {"thread_id": "held", "checkpoint_ns": ""}}
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent
        calls.append((config, checkpoint, {"source": "loop", "step": step}, new_versions))
        parent = checkpoint["id"]
    return calls


def held_values(settings: Any, workdir: Path) -> dict[str, Any]:
    """``get_tuple`` of the newest checkpoint whose 4 KB value an older record holds: in
    interleaved rounds from the savers that wrote the thread, and from new savers."""
    workdir.mkdir(parents=True)
    store, db = workdir / "verified", workdir / "sqlite.db"
    writers = {
        VERIFIED_FILES: VerifiedSaver(store),
        SQLITE: SqliteSaver(sqlite3.connect(db, check_same_thread=False)),
    }
    count = min(HELD_CHECKPOINTS, settings.history_checkpoints)
    for args in held_checkpoints(count):
        for saver in writers.values():
            saver.put(*args)
    config = {"configurable": {"thread_id": "held"}}
    rounds = max(10, settings.call_rounds)
    warm: dict[str, list[float]] = {name: [] for name in writers}
    cold: dict[str, list[float]] = {name: [] for name in writers}
    for round_ in range(rounds):
        for name in rotated(list(writers), round_):
            seconds, found = timed(writers[name].get_tuple, config)
            assert found is not None and len(found.checkpoint["channel_values"]["doc"]) == (
                HELD_VALUE_CHARS
            ), name
            warm[name].append(seconds)
    for round_ in range(max(5, rounds // 10)):
        for name in rotated(list(writers), round_):
            started = time.perf_counter()
            fresh = open_saver(name, workdir)
            found = fresh.get_tuple(config)
            cold[name].append(time.perf_counter() - started)
            assert found is not None, name
            if name == SQLITE:
                fresh.conn.close()
    writers[SQLITE].conn.close()
    out: dict[str, Any] = {"checkpoints": count, "every": HELD_EVERY}
    for label, samples in (("warm", warm), ("new_saver", cold)):
        stats = {name: p50_p99(s) for name, s in samples.items()}
        out[label] = {
            **stats,
            "ratios": {
                f"{VERIFIED_FILES} / {SQLITE}": {
                    "p50": paired_ratio(samples[VERIFIED_FILES], samples[SQLITE]),
                    "p99": stats[VERIFIED_FILES]["p99_ms"] / stats[SQLITE]["p99_ms"],
                }
            },
        }
    return out


# -- 3 and 6. a 10,000-checkpoint thread ----------------------------------------


def build_history(store: Path, db: Path, count: int) -> tuple[list[str], dict[str, Any]]:
    """Write the same ``count`` checkpoints into a store and a SQLite database, the two
    savers taking turns put by put; the ids, and what the puts of the second half of the
    thread cost each saver (neither syncs: ``fsync=False``, ``synchronous=OFF``), so that
    a cost which grows with the thread's length shows."""
    writer = VerifiedSaver(store, fsync=False)
    conn = sqlite3.connect(db, check_same_thread=False)
    conn.execute("PRAGMA synchronous=OFF")
    sqlite_writer = SqliteSaver(conn)
    ids: list[str] = []
    seconds: dict[str, list[float]] = {VERIFIED_FILES: [], SQLITE: []}
    for step, args in enumerate(raw_checkpoints(TextSource(seed=4), count, thread_id="history")):
        for name, saver in rotated(((VERIFIED_FILES, writer), (SQLITE, sqlite_writer)), step):
            taken, _ = timed(saver.put, *args)
            seconds[name].append(taken)
        ids.append(args[1]["id"])
    conn.close()
    os.sync()  # nothing left for a measured saver's fsync to flush
    half = {name: values[count // 2 :] for name, values in seconds.items()}
    puts = {
        "from": count // 2,
        **{name: 1000 * statistics.mean(values) for name, values in half.items()},
        "ratio": sum(half[VERIFIED_FILES]) / sum(half[SQLITE]),
    }
    return ids, puts


_OPEN_IN_A_NEW_PROCESS = """
import sqlite3, sys, time
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph_checkpoint_verified import VerifiedSaver
kind, path = sys.argv[1], sys.argv[2]
config = {"configurable": {"thread_id": "history"}}
started = time.perf_counter()
if kind == "sqlite":
    found = SqliteSaver(sqlite3.connect(path, check_same_thread=False)).get_tuple(config)
else:
    found = VerifiedSaver(path).get_tuple(config)
print(time.perf_counter() - started, found.checkpoint["id"])
"""


def open_in_a_new_process(kind: str, path: Path) -> tuple[float, str]:
    """Seconds a new process takes to open ``path`` (``kind``: ``files`` or ``sqlite``)
    and read the newest checkpoint of the thread ``history`` (imports done before the
    clock starts), and that checkpoint's id."""
    done = subprocess.run(
        [sys.executable, "-c", _OPEN_IN_A_NEW_PROCESS, kind, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, found = done.stdout.split()
    return float(seconds), found


def first_open_after_writer(
    store: Path, db: Path, workdir: Path, newest: str, rounds: int
) -> dict[str, Any]:
    """open + get_tuple of the newest checkpoint in a new process (imports done before
    the clock starts), on a copy of the store as its writer left it: the writer's hint,
    and the log it wrote past it, no reader's hint yet. SQLite's database likewise."""
    samples: dict[str, list[float]] = {VERIFIED_FILES: [], SQLITE: []}
    for round_ in range(rounds):
        copy = workdir / f"as-written-{round_}"
        shutil.copytree(store, copy, copy_function=link_logs)
        for name in rotated((VERIFIED_FILES, SQLITE), round_):
            seconds, found = open_in_a_new_process(
                *(("sqlite", db) if name == SQLITE else ("files", copy))
            )
            assert found == newest, name
            samples[name].append(seconds)
        shutil.rmtree(copy)
    entries, size = past_hint(next((store / "threads").iterdir()))
    return {
        **{name: percentile(values, 50) for name, values in samples.items()},
        # where the writer stopped, between two of its hints, sets how much the reader reads
        "past_writer_hint": {"entries": entries, "bytes": size},
        "rounds": rounds,
    }


def history_section(settings: Any, workdir: Path) -> dict[str, Any]:
    workdir.mkdir()
    store = workdir / "store"
    db = workdir / "sqlite.db"
    count = settings.history_checkpoints
    started = time.perf_counter()
    ids, puts = build_history(store, db, count)
    build_seconds = time.perf_counter() - started
    # the hint as the writer left it, before any reader writes its own (section 6)
    writer_hint = next((store / "threads").iterdir()) / "log.hint"
    if writer_hint.exists():
        shutil.copyfile(writer_hint, workdir / "writer.hint")
    # before any reader opens the store (and leaves its own hint)
    first_open = first_open_after_writer(
        store, db, workdir, max(ids), rounds=settings.process_rounds
    )
    newest = max(ids)
    config = {"configurable": {"thread_id": "history"}}
    names = (VERIFIED_FILES, SQLITE)

    # newest checkpoint and list(limit=10) on savers that stay open
    savers = {
        VERIFIED_FILES: VerifiedSaver(store),
        SQLITE: SqliteSaver(sqlite3.connect(db, check_same_thread=False)),
    }
    samples: dict[str, dict[str, list[float]]] = {
        name: {"get_tuple": [], "list": [], "open_get_tuple": []} for name in names
    }
    for round_ in range(settings.history_rounds):
        for name in rotated(names, round_):
            seconds, found = timed(savers[name].get_tuple, config)
            samples[name]["get_tuple"].append(seconds)
            assert found is not None and found.checkpoint["id"] == newest, name
            if round_ % settings.history_list_every:
                continue  # SqliteSaver's list takes ~0.1 s here: fewer rounds of it
            seconds, items = timed(lambda s=savers[name]: list(s.list(config, limit=LIST_LIMIT)))
            samples[name]["list"].append(seconds)
            assert len(items) == LIST_LIMIT, name
    savers[SQLITE].conn.close()

    # a new saver each time: open + get_tuple
    for round_ in range(settings.open_rounds):
        for name in rotated(names, round_):
            started = time.perf_counter()
            if name == SQLITE:
                saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
            else:
                saver = VerifiedSaver(store)
            found = saver.get_tuple(config)
            samples[name]["open_get_tuple"].append(time.perf_counter() - started)
            assert found is not None and found.checkpoint["id"] == newest, name
            if name == SQLITE:
                saver.conn.close()

    out: dict[str, Any] = {
        "checkpoints": count,
        "build_seconds": build_seconds,
        "put_mean_ms": puts,
        "store_bytes": tree_bytes(store)["apparent"],
        "list_limit": LIST_LIMIT,
    }
    for op in ("get_tuple", "list", "open_get_tuple"):
        stats = {name: p50_p99(samples[name][op]) for name in names}
        out[op] = {**stats, "ratios": compare(stats, [(VERIFIED_FILES, SQLITE)])}
    out["first_open_after_writer"] = first_open
    out["memory"] = memory_over_threads(workdir / "memory", settings.memory_threads, 10, 3)
    return {
        "history": out,
        "recovery": recovery(settings, workdir, store, db, ids, workdir / "writer.hint"),
    }


# -- 6. recovery --------------------------------------------------------------------


def _as_written(db: Path, config: dict[str, Any], found: Any) -> bool:
    """Whether ``found`` is the checkpoint SQLite holds under its id, values and all."""
    conn = sqlite3.connect(db, check_same_thread=False)
    try:
        wanted = {**config["configurable"], "checkpoint_id": found.checkpoint["id"]}
        written = SqliteSaver(conn).get_tuple({"configurable": wanted})
    finally:
        conn.close()
    return written is not None and written.checkpoint == found.checkpoint


def link_logs(source: str, target: str) -> None:
    """Copy a store's file: a thread's log as a hard link (``flip_bytes`` writes a damaged
    one anew), every other file (parity, hint, quarantine) as a file of its own, since a
    saver may write those in place and the pristine store must stay as it was."""
    if os.path.basename(source) == "log":
        os.link(source, target)
    else:
        shutil.copy2(source, target)


def unlink_logs(copy: Path) -> None:
    """Give each thread log of ``copy`` still hard-linked to the pristine store a file of its
    own, before anything appends to it."""
    for log in copy.glob("threads/*/log"):
        if log.stat().st_nlink > 1:
            write_anew(log, log.read_bytes())


def recovery(
    settings: Any, workdir: Path, store: Path, db: Path, ids: list[str], writer_hint: Path
) -> dict:
    """Open + get_tuple with the newest K checkpoints damaged (one byte flipped in each).

    Each case works on a copy of the store whose logs are hard links (a byte-for-byte
    copy would leave ~100 MB of dirty pages for the first fsync to write back),
    with the damaged files rewritten (``damage.py`` finds the records, in files of
    their own or in a thread's log). Timed: ``VerifiedSaver(copy)`` (defaults)
    + ``get_tuple``, the first read, which quarantines the damage, and the same
    again with a new saver; then, once the first saver put the thread's next
    checkpoint, the same again. Baseline: SqliteSaver open + get_tuple on the same
    checkpoints, undamaged (SQLite cannot read past damage at all).

    The store has been read by then, and its hint covers the whole log: the damage is
    found by the reads. The largest K is also measured on copies with the hint its
    writer left (``writer_hint``): the newest entries lie past it, as after a crash,
    and the scan that opens the thread finds those of them that are damaged.
    """
    newest_first = sorted(ids, reverse=True)
    spans = checkpoint_spans(store)
    missing = [c for c in newest_first[: max(settings.recovery_damaged)] if c not in spans]
    if missing:
        # a layout damage.py does not know: it cannot damage what it cannot find
        return {"skipped": f"the record of checkpoint {missing[0]} was not found in the store"}
    config = {"configurable": {"thread_id": "history"}}
    writer_left = writer_hint.exists()
    variants: list[tuple[int, bool]] = [(k, False) for k in settings.recovery_damaged]
    if writer_left:
        variants.append((max(settings.recovery_damaged), True))
    samples: dict[tuple[int, bool], dict[str, list[float]]] = {
        variant: {"first": [], "second": [], "after_step": [], "sqlite": []} for variant in variants
    }
    checks: dict[tuple[int, bool], dict[str, Any]] = {}
    for repeat in range(settings.recovery_repeats):
        for damaged, as_written in rotated(variants, repeat):
            copy = workdir / f"copy-{damaged}-{as_written}-{repeat}"
            shutil.copytree(store, copy, copy_function=link_logs)
            if as_written:
                shutil.copyfile(writer_hint, next((copy / "threads").iterdir()) / "log.hint")
            flip_bytes(copy, [spans[c] for c in newest_first[:damaged]])
            series = samples[(damaged, as_written)]
            checks[(damaged, as_written)] = _recovery_case(
                copy, db, config, newest_first[: damaged + 1], series
            )
            started = time.perf_counter()
            sqlite_saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
            baseline = sqlite_saver.get_tuple(config)
            series["sqlite"].append(time.perf_counter() - started)
            sqlite_saver.conn.close()
            assert baseline is not None
            shutil.rmtree(copy)

    def summary(variant: tuple[int, bool]) -> dict[str, Any]:
        series = samples[variant]
        first = percentile(series["first"], 50)
        sqlite_time = percentile(series["sqlite"], 50)
        return {
            "first_read_ms": 1000 * first,
            "second_read_ms": 1000 * percentile(series["second"], 50),
            "after_step_read_ms": 1000 * percentile(series["after_step"], 50),
            "sqlite_open_get_tuple_ms": 1000 * sqlite_time,
            "first_ratio_vs_sqlite": first / sqlite_time,
            **checks[variant],
        }

    out: dict[str, Any] = {
        "checkpoints": len(ids),
        "repeats": settings.recovery_repeats,
        "cases": {str(k): summary((k, False)) for k in settings.recovery_damaged},
    }
    if writer_left:
        k = max(settings.recovery_damaged)
        entries, size = past_hint(next((store / "threads").iterdir()), writer_hint)
        out["writer_left"] = {
            "damaged": k,
            "past_writer_hint": {"entries": entries, "bytes": size},
            **summary((k, True)),
        }
    out["unread_damage"] = unread_damage(settings, workdir, store, db)
    return out


def _recovery_case(
    copy: Path,
    db: Path,
    config: dict[str, Any],
    expected: list[str],
    series: dict[str, list[float]],
) -> dict[str, Any]:
    """The three reads of one damaged copy, timed into ``series``; what each returned.
    ``expected``: the ids a read may return (the damaged ones, and the newest undamaged)."""
    started = time.perf_counter()
    saver = VerifiedSaver(copy)
    found = saver.get_tuple(config)
    series["first"].append(time.perf_counter() - started)
    # A damaged checkpoint is rebuilt from parity, or quarantined, or (whole again but
    # its values held by a quarantined one) skipped: what is returned must be no
    # older than the newest undamaged checkpoint, and exactly what was written.
    checks: dict[str, Any] = {
        "returned_expected": found is not None
        and found.checkpoint["id"] in expected
        and _as_written(db, config, found),
        "quarantined_records": saver.stats.quarantined_records,
        "healed_blocks": saver.stats.healed_blocks,
    }

    started = time.perf_counter()
    found = VerifiedSaver(copy).get_tuple(config)
    series["second"].append(time.perf_counter() - started)
    checks["second_returned_expected"] = (
        found is not None and found.checkpoint["id"] in expected and _as_written(db, config, found)
    )

    # The thread goes on: the first saver puts the next checkpoint (which writes
    # a rebuilt block back in place, and lets hints cover quarantined damage), and
    # a new saver opens the thread after it.
    unlink_logs(copy)  # the pristine store's log must not grow
    step = found.metadata.get("step", 0) + 1
    next_config = saver.put(
        found.config,
        create_checkpoint(found.checkpoint, None, step),
        {"source": "loop", "step": step, "parents": {}},
        {},
    )
    started = time.perf_counter()
    found = VerifiedSaver(copy).get_tuple(config)
    series["after_step"].append(time.perf_counter() - started)
    checks["after_step_returned_expected"] = found is not None and found.config == next_config
    return checks


UNREAD_DAMAGE_STEPS = 1000
"""Checkpoints the thread goes on for after the damage was found: some 400 KB of log,
past what a writer appends before it leaves a new hint."""


def unread_damage(settings: Any, workdir: Path, store: Path, db: Path) -> dict[str, Any]:
    """A new process opening a thread that went on past damage no read needs.

    On a copy of the store with no parity (damage it cannot rebuild) and no hint (the
    next reader reads the whole log, as after a lost hint), an older checkpoint's entry,
    a quarter into the log, is damaged: a byte of its record (its entry still names
    it), or its entry's header (the bytes name nothing). A saver reads the newest
    checkpoint (finding the damage), and the thread goes on for
    ``UNREAD_DAMAGE_STEPS`` checkpoints; then a new process opens the thread and reads
    its newest checkpoint (median of ``process_rounds``). Baseline: SqliteSaver, the
    same in a new process, on its undamaged 10,000 checkpoints.
    """
    config = {"configurable": {"thread_id": "history"}}
    out: dict[str, Any] = {"steps": UNREAD_DAMAGE_STEPS, "rounds": settings.process_rounds}
    for where in ("record", "header"):
        copy = workdir / f"unread-{where}"
        shutil.copytree(store, copy, copy_function=link_logs)
        log = next((copy / "threads").iterdir()) / "log"
        for name in (f"{log.name}.parity", f"{log.name}.hint"):
            (log.parent / name).unlink(missing_ok=True)
        data = bytearray(log.read_bytes())
        entries = [e for e in log_entries(bytes(data)) if e[2].endswith(".ckpt")]
        offset, _, _, data_offset, data_length = entries[len(entries) // 4]
        at = offset if where == "header" else data_offset + data_length // 2
        data[at : at + 8] = bytes(b ^ 0xFF for b in data[at : at + 8])
        write_anew(log, bytes(data))
        saver = VerifiedSaver(copy, fsync=False)  # a fixture: the bytes, not the syncs
        found = saver.get_tuple(config)
        checkpoint, at_config = found.checkpoint, found.config
        for step in range(UNREAD_DAMAGE_STEPS):
            checkpoint = create_checkpoint(checkpoint, None, step)
            metadata = {"source": "loop", "step": step, "parents": {}, "pad": "x" * 300}
            at_config = saver.put(at_config, checkpoint, metadata, {})
        samples: dict[str, list[float]] = {VERIFIED_FILES: [], SQLITE: []}
        for round_ in range(settings.process_rounds):
            for name in rotated((VERIFIED_FILES, SQLITE), round_):
                seconds, newest = open_in_a_new_process(
                    *(("sqlite", db) if name == SQLITE else ("files", copy))
                )
                if name == VERIFIED_FILES:
                    assert newest == checkpoint["id"]
                samples[name].append(seconds)
        out[where] = {
            "hinted": (log.parent / f"{log.name}.hint").exists(),
            **{name: 1000 * percentile(values, 50) for name, values in samples.items()},
        }
        shutil.rmtree(copy)
    return out
