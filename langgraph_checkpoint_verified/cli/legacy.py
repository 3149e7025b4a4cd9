"""The argparse front of the commands that predate the typer app.

``inspect``, ``verify``, ``repair``, ``diff`` and ``migrate`` are typer commands
(``app``) that hand their arguments back to this parser, so that they parse,
refuse and print usage exactly as they always did. Each command's body lives in its
own module (``inspect``, ``verify``, ``diff``, ``migrate``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from langgraph_checkpoint_verified.cli.diff import run_diff
from langgraph_checkpoint_verified.cli.inspect import run_inspect
from langgraph_checkpoint_verified.cli.migrate import run_migrate
from langgraph_checkpoint_verified.cli.output import EXIT_ERROR, PROG
from langgraph_checkpoint_verified.cli.store import STORE_HELP, run_guarded
from langgraph_checkpoint_verified.cli.verify import run_repair, run_verify


def legacy_main(argv: Sequence[str]) -> int:
    """Parse ``argv`` with the argparse parser and run the command it names.

    Args:
        argv: The command and its arguments, e.g. ``["verify", STORE, "--json"]``.

    Returns:
        The command's exit code; ``2`` when the arguments are refused (argparse has
        printed the usage and why) or the command could not run.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse has printed the usage and why
        return exit_.code if isinstance(exit_.code, int) else EXIT_ERROR
    return run_guarded(lambda: args.run(args), store=args.store)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``inspect``, ``verify``, ``repair``, ``diff`` and ``migrate``.

    Returns:
        The parser; each subcommand's ``run`` default is the function that runs it.
    """
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, verify, repair, diff, export and migrate LangGraph checkpoint "
        "stores written by VerifiedSaver.",
        epilog="Exit codes: 0 ok, 1 damage found, 2 the command could not run.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, run: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_, description=help_)
        sub.set_defaults(run=run)
        return sub

    def store_arg(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("store", metavar="STORE", help=STORE_HELP)
        sub.add_argument(
            "--key-file",
            metavar="FILE",
            help="file holding the secret key the store was written with (raw bytes)",
        )

    sub = command("inspect", "show threads, namespaces and checkpoints of a store", run_inspect)
    store_arg(sub)
    sub.add_argument("--thread", metavar="T", help="show this thread's checkpoint history")
    sub.add_argument("--json", action="store_true", help="print JSON instead of a table")

    sub = command("verify", "check every record; exit 1 if anything is damaged", run_verify)
    store_arg(sub)
    sub.add_argument("--thread", metavar="T", help="check only this thread")
    sub.add_argument("--json", action="store_true", help="print the report as JSON")

    sub = command("repair", "move damaged records to the store's quarantine/", run_repair)
    store_arg(sub)
    sub.add_argument("--thread", metavar="T", help="repair only this thread")

    sub = command("diff", "show which channels differ between two checkpoints", run_diff)
    store_arg(sub)
    sub.add_argument("--thread", metavar="T", required=True, help="the thread")
    sub.add_argument("--ns", metavar="NS", default="", help="checkpoint namespace (default: root)")
    sub.add_argument("--json", action="store_true", help="print the diff as JSON")
    sub.add_argument("a", metavar="A", help="older checkpoint id (or a unique prefix)")
    sub.add_argument("b", metavar="B", help="newer checkpoint id (or a unique prefix)")

    sub = command(
        "migrate", "copy every thread of a SqliteSaver database into a store", run_migrate
    )
    sub.add_argument("source", metavar="SOURCE.sqlite", help="the SqliteSaver database file")
    sub.add_argument("store", metavar="STORE", help=f"{STORE_HELP} (created if missing)")
    sub.add_argument(
        "--key-file", metavar="FILE", help="write the store with this secret key (raw bytes)"
    )
    return parser
