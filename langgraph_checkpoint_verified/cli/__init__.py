"""The ``langgraph-verified`` command line: a thin layer over the public API.

Subcommands look into a store (``inspect``), check it (``verify``), move damage
aside (``repair``), compare two checkpoints (``diff``), expire and trim threads
(``sweep``), export a thread as JSON lines (``export``) and copy a ``SqliteSaver``
database into a store (``migrate``). Every command is also callable in-process as
``main([...])``, which returns the exit code:

* ``0``: done, nothing wrong;
* ``1``: the store (or the migrated copy) has damage;
* ``2``: the command could not run (no such store, unknown thread, bad id,
  bad arguments, an object store that does not answer). One line on stderr says why.

A STORE is a directory or ``s3://bucket/prefix``: records in an S3-compatible
bucket, reached as boto3 and the aws CLI reach it, through ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` (and
``AWS_ALLOW_HTTP=true`` for a plain-http endpoint).

Commands that only read (``inspect``, ``verify``, ``diff``, ``export``) open the
store with ``quarantine=False``: looking at a store never moves anything.

The package, bottom up: ``output`` (names, exit codes, formatting and rich
helpers), ``store`` (opening a STORE, finding a thread or checkpoint, running a
command guarded), ``params`` (the shared typer arguments), one module per command
(``inspect``, ``verify``, ``diff``, ``migrate``, ``threads``, ``history``, ``show``,
``stats``, ``prune``, ``sweep``, ``memories``; ``export`` holds ``export`` and ``import``),
``legacy`` (the argparse parser of the older commands) and ``app`` (the typer
application made of them). Nothing below imports what is above it.

Building the application reads only the commands' signatures, so the modules import
the saver, the engine, storage, LangGraph and LangChain inside the functions that run
a command (annotations name them under ``TYPE_CHECKING``): ``--help`` and
``--version`` load typer and this package's light modules, nothing more
(``tests/test_cli_startup.py`` counts them).
"""

from __future__ import annotations

from collections.abc import Sequence

from langgraph_checkpoint_verified.cli.app import run
from langgraph_checkpoint_verified.cli.output import EXIT_DAMAGED, EXIT_ERROR, EXIT_OK, PROG

__all__ = ["EXIT_DAMAGED", "EXIT_ERROR", "EXIT_OK", "PROG", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code (``0`` ok, ``1`` damage, ``2`` error).

    Args:
        argv: The arguments after the program name; ``None`` reads ``sys.argv``.

    Returns:
        The exit code; errors are one line on stderr, never a traceback.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as store:
        ...     code = main(["verify", store])  # doctest: +ELLIPSIS
        checked 0 records (0 checkpoints) in ...
        ok: every record verifies
        >>> code
        0
        >>> main(["inspect", "/no/such/store"])
        2
    """
    return run(argv)
