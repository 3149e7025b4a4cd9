"""``migrate``: copy every thread of a ``SqliteSaver`` database into a store.

An argparse command (see ``legacy``): ``run_migrate`` takes the parsed arguments.
The database is opened read-only; the copy itself is the library's
(``langgraph_checkpoint_verified.migration``), fed with the ``writes`` table as it is,
``task_path`` included. The copy is verified afterwards, as ``verify`` would.
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from langgraph_checkpoint_verified.cli.output import EXIT_DAMAGED, EXIT_OK
from langgraph_checkpoint_verified.cli.store import CommandError, create_or_open, is_object_store
from langgraph_checkpoint_verified.cli.verify import print_report, verify_progress

if TYPE_CHECKING:
    from langgraph.checkpoint.base import SerializerProtocol

    from langgraph_checkpoint_verified.migration import TaskWrites


def run_migrate(args: argparse.Namespace) -> int:
    """Copy a SqliteSaver database (``source``) into a store (``store``), then verify it.

    Args:
        args: ``source``, ``store`` and ``key_file``.

    Returns:
        ``0`` when the copy verifies, ``1`` when it has damage.

    Raises:
        CommandError: langgraph-checkpoint-sqlite is missing, the source is not a
            SqliteSaver database, the target is not a store, or it has a thread already.
    """
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        raise CommandError(
            "migrate reads SqliteSaver databases with langgraph-checkpoint-sqlite, which is "
            "not installed: pip install langgraph-checkpoint-sqlite"
        ) from None
    from langgraph_checkpoint_verified.migration import copy_threads, group_checkpoints

    source = Path(args.source)
    if not source.is_file():
        raise CommandError(f"no SQLite database at {source}")
    if not is_object_store(args.store):
        target = Path(args.store)
        if target.exists() and not target.is_dir():
            raise CommandError(f"{target} is not a store: a store is a directory")
    # read-only: migrating must never change the database it copies from
    conn = sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True)
    try:
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if not {"checkpoints", "writes"} <= tables:
            raise CommandError(
                f"{source} is not a SqliteSaver database (no checkpoints/writes tables)"
            )
        sqlite_saver = SqliteSaver(conn)
        groups = group_checkpoints(sqlite_saver.list(None))
        pending = sqlite_pending_writes(conn, sqlite_saver.serde)
    except sqlite3.DatabaseError as exc:
        raise CommandError(f"cannot read {source}: {exc}") from None
    finally:
        conn.close()

    saver = create_or_open(args.store, args.key_file)
    try:
        threads, checkpoints, writes = copy_threads(groups, pending, saver)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    print(
        f"migrated {threads} thread(s), {checkpoints} checkpoint(s) and {writes} pending "
        f"write(s) from {source} to {saver.storage.location('')}"
    )
    with verify_progress() as progress:
        report = saver.verify(progress=progress)
    print_report(saver, report)
    return EXIT_OK if report.ok else EXIT_DAMAGED


def sqlite_pending_writes(
    conn: sqlite3.Connection, serde: SerializerProtocol
) -> dict[tuple[str, str, str], dict[str, TaskWrites]]:
    """Every row of a SqliteSaver ``writes`` table, by checkpoint, then by task id.

    Read from the table rather than taken from ``SqliteSaver.list``, which returns
    pending writes without their ``task_path``: LangGraph orders a step's writes by
    ``task_path`` first (``writes_sort_key``), so a copy without it would replay the
    writes of parallel branches to an order-sensitive channel (a ``DeltaChannel``) in
    task-id order, a different value from the one the run produced.

    Args:
        conn: The database, opened read-only.
        serde: The serializer the SqliteSaver wrote the values with.

    Returns:
        The writes by ``(thread_id, checkpoint_ns, checkpoint_id)``, then by task id.
    """
    from langgraph_checkpoint_verified.migration import TaskWrites

    columns = {row[1] for row in conn.execute("PRAGMA table_info(writes)")}
    # a database written before SqliteSaver stored task_path reads as '', as SqliteSaver
    # itself reads it
    task_path = "task_path" if "task_path" in columns else "''"
    rows = conn.execute(
        "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, "
        f"{task_path}, idx, channel, type, value FROM writes"
    )
    found: dict[tuple[str, str, str], dict[str, TaskWrites]] = {}
    for thread_id, checkpoint_ns, checkpoint_id, task_id, path, idx, channel, type_, value in rows:
        tasks = found.setdefault((str(thread_id), checkpoint_ns, checkpoint_id), {})
        task = tasks.setdefault(task_id, TaskWrites(task_path=path))
        task.rows.append((idx, channel, serde.loads_typed((type_, value))))
    return found
