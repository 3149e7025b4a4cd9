"""The typer application behind ``langgraph-verified``: commands, rich output, errors.

``cli.main`` runs it. Commands whose behaviour predates this module (``inspect``,
``verify``, ``repair``, ``diff``, ``migrate``) hand their arguments to the
argparse implementation in ``cli``, so they behave exactly as before; the others
(``threads``, ``history``, ``show``, ``stats``, ``prune``, ``export``, ``import``)
live here and in ``_cli_export``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Literal

import click
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from langgraph_checkpoint_verified import cli

app = typer.Typer(
    name=cli.PROG,
    help="Look into, check, repair, export and import LangGraph checkpoint stores written by "
    "VerifiedSaver. Exit codes: 0 ok, 1 damage found, 2 the command could not run.",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

Store = Annotated[str, typer.Argument(metavar="STORE", help=cli.STORE_HELP)]
KeyFile = Annotated[
    str | None,
    typer.Option(
        "--key-file", metavar="FILE", help="file holding the store's secret key (raw bytes)"
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]

INTERNAL_PREFIXES = ("__", "branch:to:")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"{cli.PROG} {version('langgraph-checkpoint-verified')}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="print the version"),
    ] = False,
) -> None:
    """Look into, check, repair, export and import VerifiedSaver stores."""


# newer typer ships its own copy of click; argument errors come from whichever one it uses
_CLICK_ERRORS: tuple[type[click.ClickException], ...] = tuple(
    error
    for error in {
        click.ClickException,
        getattr(getattr(typer, "_click", None), "ClickException", None),
    }
    if error is not None
)


def run(argv: Sequence[str] | None) -> int:
    """Run the command line on ``argv`` and return the exit code; never raises."""
    command = typer.main.get_command(app)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = command.main(args=args, prog_name=cli.PROG, standalone_mode=False)
    except typer.Exit as exit_:
        return int(exit_.exit_code)
    except _CLICK_ERRORS as exc:
        message = exc.format_message().strip().replace("\n", " ")
        print(f"{cli.PROG}: error: {message}", file=sys.stderr)
        return cli.EXIT_ERROR
    except typer.Abort:
        print(f"{cli.PROG}: interrupted", file=sys.stderr)
        return 130
    return int(result) if isinstance(result, int) else cli.EXIT_OK


# -- rich helpers ----------------------------------------------------------------


def out() -> Console:
    """A console on stdout: colour only on a terminal and without ``NO_COLOR``."""
    wide = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
    return Console(
        file=sys.stdout, highlight=False, soft_wrap=True, width=wide, color_system=_colours()
    )


def err() -> Console:
    return Console(file=sys.stderr, highlight=False, color_system=_colours())


def _colours() -> Literal["auto"] | None:
    # rich drops colours for NO_COLOR but keeps bold and underline: none of either
    return None if os.environ.get("NO_COLOR") else "auto"


@contextlib.contextmanager
def progress(description: str) -> Iterator[Progress]:
    """A progress bar on stderr; drawn on a terminal only, and gone when done."""
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err(),
        transient=True,
        disable=not sys.stderr.isatty(),
    )
    if bar.disable:
        yield bar  # never started: some versions of rich still end a stopped bar's line
        return
    with bar:
        yield bar


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=repr))


def table(*headers: str, title: str | None = None) -> Table:
    grid = Table(title=title, title_justify="left", header_style="bold")
    for header in headers:
        grid.add_column(header, overflow="fold")
    return grid


def is_internal(channel: str) -> bool:
    return channel.startswith(INTERNAL_PREFIXES)


# -- commands that keep their argparse implementation --------------------------------


def _legacy(*argv: str | None) -> int:
    return cli.legacy_main([a for a in argv if a is not None])


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
        str, typer.Argument(metavar="STORE", help=f"{cli.STORE_HELP} (created if missing)")
    ],
    key_file: KeyFile = None,
) -> int:
    """Copy every thread of a SqliteSaver database into a store."""
    return _legacy("migrate", source, store, *_opt("--key-file", key_file))


# -- the new commands live in their own modules; importing registers them ------------

from langgraph_checkpoint_verified import _cli_export, _cli_state  # noqa: E402, F401

__all__ = ["app", "run"]
