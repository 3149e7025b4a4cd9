"""The arguments and options several typer commands share: STORE, --key-file, --json.

Each is an ``Annotated`` type a command's parameter is declared with, so that every
command names, explains and parses them alike.
"""

from __future__ import annotations

from typing import Annotated

import typer

from langgraph_checkpoint_verified.cli.store import STORE_HELP

Store = Annotated[str, typer.Argument(metavar="STORE", help=STORE_HELP)]
"""The STORE argument: a directory or ``s3://bucket/prefix``."""

KeyFile = Annotated[
    str | None,
    typer.Option(
        "--key-file", metavar="FILE", help="file holding the store's secret key (raw bytes)"
    ),
]
"""The --key-file option: the store's secret key, raw bytes in a file."""

AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
"""The --json option: JSON on stdout instead of a table."""
