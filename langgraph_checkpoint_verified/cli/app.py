"""The typer application behind ``langgraph-verified``: the command set and how it runs.

``cli.main`` runs it (``run``). This module builds ``app`` from the command modules,
in the order ``--help`` lists them: ``inspect``, ``verify``, ``repair``, ``diff`` and
``migrate`` hand their arguments to the argparse parser (``legacy``), so they behave
exactly as before; every other command is in a module of its own name (``threads``,
``history``, ``show``, ``stats``, ``prune``, ``sweep``, ``memories``), but for ``export``
and ``import``, both in ``export``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from langgraph_checkpoint_verified.cli import (
    export,
    history,
    memories,
    prune,
    show,
    stats,
    sweep,
    threads,
)
from langgraph_checkpoint_verified.cli.output import EXIT_ERROR, EXIT_OK, PROG
from langgraph_checkpoint_verified.cli.params import AsJson, KeyFile, Store
from langgraph_checkpoint_verified.cli.store import STORE_HELP

app = typer.Typer(
    name=PROG,
    help="Look into, check, repair, sweep, export and import LangGraph checkpoint stores written "
    "by VerifiedSaver. Exit codes: 0 ok, 1 damage found, 2 the command could not run.",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
"""The command line; ``run`` runs it."""


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"{PROG} {version('langgraph-checkpoint-verified')}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="print the version"),
    ] = False,
) -> None:
    """Look into, check, repair, export and import VerifiedSaver stores."""


def _click_errors() -> tuple[type[Exception], ...]:
    """The ``ClickException`` classes argument errors may come as.

    typer 0.17 to 0.2x runs on click (a dependency of theirs); newer typer ships its
    own copy and no longer installs click, so click may be absent. Asked for only
    when a command raised: importing click costs every run, ``--help`` included.
    """
    found: set[type[Exception]] = set()
    try:
        import click
    except ImportError:
        pass
    else:
        found.add(click.ClickException)
    vendored = getattr(getattr(typer, "_click", None), "ClickException", None)
    if vendored is not None:
        found.add(vendored)
    return tuple(found)


def run(argv: Sequence[str] | None) -> int:
    """Run the command line on ``argv`` and return the exit code; never raises.

    Args:
        argv: The arguments after the program name; ``None`` reads ``sys.argv``.

    Returns:
        The command's exit code: ``0`` ok, ``1`` damage, ``2`` the command could not
        run (a bad argument included), ``130`` interrupted.
    """
    command = typer.main.get_command(app)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except typer.Exit as exit_:
        return int(exit_.exit_code)
    except _click_errors() as exc:
        message = exc.format_message().strip().replace("\n", " ")  # type: ignore[attr-defined]
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return EXIT_ERROR
    except typer.Abort:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return int(result) if isinstance(result, int) else EXIT_OK


# -- commands that keep their argparse implementation --------------------------------


def _legacy(*argv: str | None) -> int:
    # imported when one of these commands runs: building the app (and --help) needs
    # only their signatures, here
    from langgraph_checkpoint_verified.cli.legacy import legacy_main

    # the arguments typer parsed, back to the argparse parser (None: left out)
    return legacy_main([a for a in argv if a is not None])


def _opt(flag: str, value: str | None) -> tuple[str | None, str | None]:
    return (flag, value) if value is not None else (None, None)


@app.command("inspect")
def inspect_(
    store: Store,
    thread: Annotated[str | None, typer.Option(metavar="T", help="this thread's history")] = None,
    as_json: AsJson = False,
    key_file: KeyFile = None,
) -> int:
    """Show threads, namespaces and checkpoints of a store (see also threads, history)."""
    return _legacy(
        "inspect",
        store,
        *_opt("--thread", thread),
        "--json" if as_json else None,
        *_opt("--key-file", key_file),
    )


@app.command()
def verify(
    store: Store,
    thread: Annotated[str | None, typer.Option(metavar="T", help="check only this thread")] = None,
    repair: Annotated[
        bool, typer.Option("--repair", help="then move the damage to quarantine/")
    ] = False,
    as_json: AsJson = False,
    key_file: KeyFile = None,
) -> int:
    """Check every record; exit 1 if anything is damaged."""
    if repair:
        return _legacy("repair", store, *_opt("--thread", thread), *_opt("--key-file", key_file))
    return _legacy(
        "verify",
        store,
        *_opt("--thread", thread),
        "--json" if as_json else None,
        *_opt("--key-file", key_file),
    )


@app.command("repair")
def repair_(
    store: Store,
    thread: Annotated[str | None, typer.Option(metavar="T", help="repair only this thread")] = None,
    key_file: KeyFile = None,
) -> int:
    """Move damaged records to the store's quarantine/."""
    return _legacy("repair", store, *_opt("--thread", thread), *_opt("--key-file", key_file))


@app.command()
def diff(
    store: Store,
    thread: Annotated[str, typer.Argument(metavar="THREAD")],
    a: Annotated[str, typer.Argument(metavar="A", help="older checkpoint id (or a prefix)")],
    b: Annotated[str, typer.Argument(metavar="B", help="newer checkpoint id (or a prefix)")],
    ns: Annotated[str, typer.Option("--ns", metavar="NS", help="namespace (default root)")] = "",
    as_json: AsJson = False,
    key_file: KeyFile = None,
) -> int:
    """Show which channels differ between two checkpoints."""
    return _legacy(
        "diff",
        store,
        "--thread",
        thread,
        "--ns",
        ns,
        "--json" if as_json else None,
        *_opt("--key-file", key_file),
        "--",
        a,
        b,
    )


@app.command()
def migrate(
    source: Annotated[str, typer.Argument(metavar="SOURCE.sqlite")],
    store: Annotated[
        str, typer.Argument(metavar="STORE", help=f"{STORE_HELP} (created if missing)")
    ],
    key_file: KeyFile = None,
) -> int:
    """Copy every thread of a SqliteSaver database into a store."""
    return _legacy("migrate", source, store, *_opt("--key-file", key_file))


# -- the commands of their own modules, in the order --help lists them ----------------

app.command()(threads.threads)
app.command()(history.history)
app.command()(show.show)
app.command()(stats.stats)
app.command()(prune.prune)
app.command()(sweep.sweep)
app.command()(export.export)
app.command("import")(export.import_)
app.command()(memories.memories)

__all__ = ["app", "run"]
