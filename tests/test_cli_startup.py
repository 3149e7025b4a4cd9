"""What ``langgraph-verified --help`` and ``--version`` load: the command line, not the store.

Building the typer app needs every command's signature, not its body: the saver,
the engine, storage, LangGraph, LangChain, pydantic and obstore are imported when a
command runs. Counted in a fresh interpreter: which modules are loaded, never how
long it took (whole processes are timed from outside, e.g.
``farm-bench -n 5 -- .venv/bin/langgraph-verified --help``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

import pytest

NOT_FOR_HELP = (
    "langgraph",
    "langchain_core",
    "obstore",
    "greenlet",
    "zstandard",
    "ormsgpack",
    "langgraph_checkpoint_verified.saver",
    "langgraph_checkpoint_verified.engine",
    "langgraph_checkpoint_verified.storage",
    "langgraph_checkpoint_verified.migration",
    "langgraph_checkpoint_verified.cli.legacy",
)
"""Modules (and their submodules) that printing help or the version must not import."""

NOT_FOR_THE_ROOT = ("pydantic",)
"""Not imported by ``--help`` and ``--version`` either. A command's own ``--help`` does
import it: typer (0.29) builds that option's value check with pydantic."""


def run_and_list_modules(argv: list[str]) -> tuple[int, str, set[str]]:
    """``main(argv)`` in a fresh interpreter: its exit code, what it printed, what it loaded."""
    script = (
        "import json, sys\n"
        "import langgraph_checkpoint_verified.__main__\n"
        "from langgraph_checkpoint_verified.cli import main\n"
        f"code = main({argv!r})\n"
        "print(json.dumps({'code': code, 'modules': sorted(sys.modules)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    *printed, last = done.stdout.splitlines()
    result = json.loads(last)
    return result["code"], "\n".join(printed), set(result["modules"])


def among(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(
        name
        for name in modules
        if any(name == top or name.startswith(f"{top}.") for top in packages)
    )


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_and_version_load_only_the_command_line(argv):
    code, printed, modules = run_and_list_modules(argv)
    assert code == 0
    assert printed.strip()
    assert "langgraph_checkpoint_verified.cli.app" in modules
    assert among(modules, NOT_FOR_HELP + NOT_FOR_THE_ROOT) == []


@pytest.mark.parametrize("command", ["inspect", "verify", "migrate", "threads", "sweep", "export"])
def test_a_commands_help_loads_no_store(command):
    code, printed, modules = run_and_list_modules([command, "--help"])
    assert code == 0
    assert printed.startswith(f"Usage: langgraph-verified {command} ")
    assert among(modules, NOT_FOR_HELP) == []


def test_version_is_the_installed_one():
    code, printed, _ = run_and_list_modules(["--version"])
    assert (code, printed) == (0, f"langgraph-verified {version('langgraph-checkpoint-verified')}")


def test_a_command_that_runs_imports_what_it_needs(tmp_path):
    # the other side of the bargain: what help leaves out is there when a command runs
    code, printed, modules = run_and_list_modules(["verify", str(tmp_path)])
    assert code == 0
    assert "ok: every record verifies" in printed
    assert "langgraph_checkpoint_verified.saver" in modules
    assert "langgraph_checkpoint_verified.cli.legacy" in modules


@pytest.mark.parametrize("command", ["threads", "stats"])
def test_a_command_on_a_pipe_draws_no_bar_and_loads_none(tmp_path, command):
    # stderr is a pipe here, as when the output is piped into another command: no
    # progress bar is drawn, so rich's progress module is not even imported
    code, printed, modules = run_and_list_modules([command, str(tmp_path)])
    assert code == 0
    assert "langgraph_checkpoint_verified.saver" in modules
    assert among(modules, ("rich.progress",)) == []


@pytest.mark.parametrize("command", ["threads", "inspect", "verify"])
def test_a_store_that_is_not_there_is_told_before_langgraph_is_loaded(tmp_path, command):
    # a typo in STORE: the one-line error comes from the command line alone
    missing = tmp_path / "stroe"
    code, _, modules = run_and_list_modules([command, str(missing)])
    assert code == 2
    # the commands' own modules may load (inspect and verify run through cli.legacy)
    store_side = tuple(
        m for m in NOT_FOR_HELP if not m.startswith("langgraph_checkpoint_verified.cli")
    )
    assert among(modules, store_side) == []
    assert not missing.exists()
