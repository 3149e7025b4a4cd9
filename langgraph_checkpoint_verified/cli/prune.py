"""``prune``: drop all but the newest checkpoint of threads, or the threads themselves.

Registered by ``app`` as the command of the same name; ``--dry-run`` counts exactly
what a prune would drop, from the changes it would make, and changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from langgraph_checkpoint_verified.cli.output import EXIT_OK
from langgraph_checkpoint_verified.cli.params import KeyFile, Store
from langgraph_checkpoint_verified.cli.store import (
    CommandError,
    need_thread,
    open_store,
    run_guarded,
)
from langgraph_checkpoint_verified.records import keys as record_keys

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.saver import VerifiedSaver


def checkpoint_count(saver: VerifiedSaver, thread_id: str) -> int:
    """How many checkpoints a thread has, in every namespace (names only, nothing read).

    Args:
        saver: The opened store.
        thread_id: The thread.

    Returns:
        The number of its checkpoint records, whether or not they verify.
    """
    engine = saver.engine
    return sum(len(engine.checkpoint_ids(thread_id, ns)) for ns in engine.namespaces(thread_id))


def prune_plan(saver: VerifiedSaver, thread_id: str, strategy: str) -> int:
    """How many checkpoints ``prune`` would drop from a thread, from the changes it would make.

    The plan is the one ``saver.prune`` carries out (``maintenance.trim_changes``
    for ``keep_latest``, ``delete_changes`` for ``delete``), so a dry run counts
    exactly what a prune drops: the ``DeltaChannel`` ancestors a kept checkpoint
    is rebuilt from stay, and so do checkpoints that do not verify.

    Args:
        saver: The opened store.
        thread_id: A thread the store has.
        strategy: ``keep_latest`` or ``delete``.

    Returns:
        The number of checkpoints the prune would remove.
    """
    from langgraph_checkpoint_verified.engine import maintenance

    if strategy == "keep_latest":
        _, dropped = maintenance.trim_changes(saver.engine, thread_id, keep_last=1)
        return dropped
    changes = maintenance.delete_changes(saver.engine, thread_id)
    return sum(1 for key in changes if record_keys.is_checkpoint_key(key))


def prune(
    store: Store,
    thread_ids: Annotated[list[str], typer.Argument(metavar="THREAD...")],
    strategy: Annotated[
        str, typer.Option("--strategy", help="keep_latest or delete")
    ] = "keep_latest",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="say exactly what would go; change nothing")
    ] = False,
    key_file: KeyFile = None,
) -> int:
    """Drop all but the newest checkpoint of threads (or the threads themselves)."""

    def body() -> int:
        if strategy not in ("keep_latest", "delete"):
            raise CommandError(f"unknown strategy {strategy!r}; use keep_latest or delete")
        saver = open_store(store, key_file, quarantine=not dry_run)
        for thread_id in thread_ids:
            need_thread(saver, thread_id, store)
        for thread_id in thread_ids:
            before = checkpoint_count(saver, thread_id)
            if dry_run:
                dropped = prune_plan(saver, thread_id, strategy)
            else:
                # pruned before it is said: a prune may be refused (a bucket refusing writes)
                saver.prune([thread_id], strategy=strategy)
                dropped = before - checkpoint_count(saver, thread_id)
            print(
                f"{'would drop' if dry_run else 'dropped'} {dropped} checkpoint(s) of thread "
                f"{thread_id!r}, kept {before - dropped}"
            )
        return EXIT_OK

    return run_guarded(body, store=store)
