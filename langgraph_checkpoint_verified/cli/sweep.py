"""``sweep``: expire idle or old threads and trim the others' history, as a policy says.

A typer command, registered by ``app``: ``sweep`` builds a ``RetentionPolicy`` from
its options and runs ``VerifiedSaver.sweep`` once, then prints the ``SweepReport``
as tables or, with ``--json``, as ``SweepReport.to_dict()`` with the store's
location. ``--dry-run`` opens the store with ``quarantine=False`` and changes
nothing: the report says exactly what a sweep would do. ``parse_duration`` reads
the ``--idle`` and ``--max-age`` values (``90s``, ``30m``, ``12h``, ``30d``, ``2w``).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from langgraph_checkpoint_verified.cli.output import (
    EXIT_OK,
    escape,
    out,
    print_json,
    table,
    working,
)
from langgraph_checkpoint_verified.cli.params import AsJson, KeyFile, Store
from langgraph_checkpoint_verified.cli.store import CommandError, open_store, run_guarded

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.engine import SweepReport

DURATION_UNITS = {
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}
"""What each unit of a duration stands for (``m`` is minutes: no duration is in months)."""

_DURATION = re.compile(r"(\d+)\s*([smhdw])")
STRATEGIES = ("delete", "keep_latest")
"""The ``--strategy`` values: what expiry does to a thread (``RetentionPolicy.on_expiry``)."""


def parse_duration(value: str) -> timedelta:
    """A duration as the command line writes it: a whole number and a unit.

    Args:
        value: ``90s``, ``30m``, ``12h``, ``30d`` or ``2w`` (seconds, minutes,
            hours, days, weeks).

    Returns:
        The ``timedelta``.

    Raises:
        typer.BadParameter: Not such a duration, or zero; the command line prints it
            as one line and exits with 2.

    Example:
        >>> parse_duration("30d")
        datetime.timedelta(days=30)
        >>> parse_duration("12h") == timedelta(hours=12)
        True
    """
    found = _DURATION.fullmatch(value.strip().lower())
    if found is None:
        raise typer.BadParameter(
            f"{value!r} is not a duration: write a whole number and a unit, "
            f"as 90s, 30m, 12h, 30d or 2w"
        )
    duration = int(found[1]) * DURATION_UNITS[found[2]]
    if duration <= timedelta(0):
        raise typer.BadParameter(f"{value!r} is no time at all: a duration must be more than 0")
    return duration


def sweep(
    store: Store,
    idle: Annotated[
        timedelta | None,
        typer.Option(
            "--idle",
            parser=parse_duration,
            metavar="DURATION",
            help="expire threads with no checkpoint written for this long (90s, 30m, 12h, 30d, 2w)",
        ),
    ] = None,
    max_age: Annotated[
        timedelta | None,
        typer.Option(
            "--max-age",
            parser=parse_duration,
            metavar="DURATION",
            help="expire threads whose first checkpoint is older than this",
        ),
    ] = None,
    keep_last: Annotated[
        int | None,
        typer.Option(
            "--keep-last",
            metavar="N",
            min=1,
            help="trim threads that do not expire to their newest N checkpoints per namespace",
        ),
    ] = None,
    strategy: Annotated[
        str,
        typer.Option(
            "--strategy",
            metavar="delete|keep_latest",
            help="what expiry does: delete the thread, or keep_latest (its newest checkpoint)",
        ),
    ] = "delete",
    limit: Annotated[
        int | None,
        typer.Option("--limit", metavar="N", min=0, help="change at most N threads"),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="say exactly what would change; change nothing")
    ] = False,
    as_json: AsJson = False,
    key_file: KeyFile = None,
) -> int:
    """Expire idle or old threads and trim the others to their newest checkpoints."""

    def body() -> int:
        from langgraph_checkpoint_verified.engine import RetentionPolicy

        if strategy not in STRATEGIES:
            raise CommandError(f"unknown strategy {strategy!r}; use delete or keep_latest")
        if idle is None and max_age is None and keep_last is None:
            raise CommandError(
                "sweep needs a policy: give --idle, --max-age or --keep-last (or several)"
            )
        policy = RetentionPolicy(
            idle=idle,
            max_age=max_age,
            keep_last=keep_last,
            on_expiry="delete" if strategy == "delete" else "keep_latest",
        )
        # a dry run must not move damage it meets aside: it changes nothing at all
        saver = open_store(store, key_file, quarantine=not dry_run)
        threads = len(saver.engine.thread_ids())
        # the sweep reports no progress of its own: a spinner says it is at work
        with working(f"{'judging' if dry_run else 'sweeping'} {threads} thread(s)"):
            report = saver.sweep(policy, dry_run=dry_run, limit=limit)
        if as_json:
            print_json({"store": saver.storage.location(""), **report.to_dict()})
        else:
            print_report(saver.storage.location(""), report)
        return EXIT_OK

    return run_guarded(body, store=store)


def print_report(location: str, report: SweepReport) -> None:
    """Print a sweep's totals, then what happened to each thread it changed or skipped.

    Args:
        location: Where the store is, for the title.
        report: What ``saver.sweep`` returned.
    """
    console = out()
    console.print(
        f"dry run of a sweep of {escape(location)}: nothing was changed"
        if report.dry_run
        else f"swept {escape(location)}"
    )
    dry = report.dry_run
    totals = table("", "")
    totals.show_header = False
    for name, value in (
        ("threads checked", report.threads_checked),
        ("threads to delete" if dry else "threads deleted", len(report.threads_deleted)),
        ("threads to trim" if dry else "threads trimmed", len(report.threads_trimmed)),
        ("threads skipped", len(report.skipped)),
        ("checkpoints to drop" if dry else "checkpoints dropped", report.checkpoints_dropped),
        ("bytes to free" if dry else "bytes freed", report.bytes_freed),
    ):
        totals.add_row(name, str(value))
    console.print(totals)
    if not (report.threads_deleted or report.threads_trimmed or report.skipped):
        console.print("nothing to sweep")
        return
    deleted, trimmed = ("delete", "trim") if dry else ("deleted", "trimmed")
    outcomes = table("THREAD", "OUTCOME")
    for thread_id in report.threads_deleted:
        outcomes.add_row(escape(thread_id), deleted)
    for thread_id, dropped in report.threads_trimmed.items():
        outcomes.add_row(escape(thread_id), f"{trimmed}: {dropped} checkpoint(s) dropped")
    for thread_id, why in report.skipped.items():
        outcomes.add_row(escape(thread_id), f"[yellow]skipped: {escape(why)}[/]")
    console.print(outcomes)
