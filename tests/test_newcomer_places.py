"""The project works from the places a newcomer clones it to.

A path with a space in it, and a directory under one only its owner can enter
(what ``mktemp -d`` makes; root's home is the same). For each, the checkout is
copied there, installed there into its own venv as ``make`` does (``pip install
-e .``), and then run from there: the console script on a store, ``make demo``,
and the read-only tests that run the console script as another user.

The venv there gets no network: it reuses what this environment has installed
(a ``.pth`` file naming its site-packages) and installs the package itself with
the build backend found here (``make`` installs it into the test environments).
A path with a ``:`` cannot hold a venv at all: ``make`` says so before it starts.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest
from echo_graph import build_graph

from langgraph_checkpoint_verified import VerifiedSaver

ROOT = Path(__file__).parent.parent
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv*", "__pycache__", "*.egg-info", ".*_cache", ".hypothesis", "site", "build",
    "dist",
)  # fmt: skip
PLACES = ["a path with a space", "under an owner-only directory"]
# A make started by `make test` must not take its flags (-j, -n, ...) from the outer one.
CLEAN_ENV = {
    key: value
    for key, value in os.environ.items()
    if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV")
}


def run(command: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True, timeout=timeout
    )


def checked(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{done.args} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module", params=PLACES)
def checkout(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A copy of this checkout in the place, with its own venv and the package
    installed into it from there."""
    if find_spec("hatchling") is None:
        pytest.fail("the build backend (hatchling) is not installed here: run `make test`")
    top = Path(tempfile.mkdtemp(prefix="lgv-newcomer-"))  # 0700, as mktemp -d makes it
    try:
        if request.param == "a path with a space":
            top.chmod(0o755)
            project = top / "my projects" / "langgraph checkpoint verified"
        else:
            assert top.stat().st_mode & 0o077 == 0
            project = top / "langgraph-checkpoint-verified"
        shutil.copytree(ROOT, project, ignore=NOT_COPIED)
        venv = project / ".venv"
        checked(run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=project))
        python = venv / "bin" / "python"
        purelib = checked(
            run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                project,
            )
        ).stdout.strip()
        # after the editable install's own .pth (they are read in name order), so that the
        # copy's sources come first
        reused = [*site.getsitepackages(), site.getusersitepackages()]
        Path(purelib, "zz_reused_site_packages.pth").write_text("\n".join(reused) + "\n")
        install = [str(python), "-m", "pip", "install", "--quiet", "--no-deps"]
        checked(run([*install, "--no-index", "--no-build-isolation", "-e", "."], cwd=project))
        (venv / ".installed-base").touch()  # what `make` leaves after the same install
        yield project
    finally:
        shutil.rmtree(top)


def test_the_package_is_installed_from_the_place(checkout: Path) -> None:
    python = checkout / ".venv" / "bin" / "python"
    where = checked(
        run(
            [str(python), "-c", "import langgraph_checkpoint_verified as m; print(m.__file__)"],
            Path("/"),
        )
    ).stdout.strip()
    assert Path(where) == checkout / "langgraph_checkpoint_verified" / "__init__.py"


def test_the_console_script_runs_from_the_place(checkout: Path) -> None:
    script = checkout / ".venv" / "bin" / "langgraph-verified"
    store = checkout / "a store"
    graph = build_graph(VerifiedSaver(store))
    graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "alpha"}})

    verify = run([str(script), "verify", str(store)], cwd=checkout)
    assert (verify.returncode, verify.stderr) == (0, ""), verify.stdout
    assert str(store) in verify.stdout
    listed = checked(run([str(script), "threads", str(store)], cwd=checkout))
    assert "alpha" in listed.stdout


def test_make_demo_runs_from_the_place(checkout: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("no make here")
    demo = run(["make", "demo"], cwd=checkout)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    lines = demo.stdout.splitlines()
    assert lines[0] == ".venv/bin/python examples/demo.py"  # nothing to install first
    assert lines[-1] == (
        "Done: every run finished with the right result, and no damaged record was used."
    )


def test_the_read_only_console_script_tests_pass_from_the_place(checkout: Path) -> None:
    """The unprivileged user cannot reach a venv under an owner-only directory: the
    test must still run it (tests/test_readonly.py)."""
    python = checkout / ".venv" / "bin" / "python"
    test = "tests/test_readonly.py::test_the_console_script_on_a_read_only_store"
    done = run([str(python), "-m", "pytest", "-q", "-rA", test], checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    unprivileged = f"{test}[unprivileged user]"
    if os.geteuid() == 0 and shutil.which("setpriv"):
        assert f"PASSED {unprivileged}" in done.stdout.splitlines()
    else:
        assert any(
            line.startswith(f"SKIPPED [1] {test.partition('::')[0]}")
            for line in done.stdout.splitlines()
        )


def test_make_says_before_it_starts_that_a_path_with_a_colon_cannot_work(
    tmp_path: Path,
) -> None:
    if shutil.which("make") is None:
        pytest.skip("no make here")
    project = tmp_path / "a:b" / "project"
    shutil.copytree(ROOT, project, ignore=NOT_COPIED)
    done = run(["make", "demo"], cwd=project)
    assert done.returncode != 0
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert f"{project} has a ':' in it" in line and "clone the project somewhere else" in line
    assert not (project / ".venv").exists()
