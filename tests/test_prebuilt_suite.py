"""langgraph-prebuilt's own test suite, with ``VerifiedToolNode`` standing in for ``ToolNode``.

The suite is the ``tests/`` folder of the sdist of the installed langgraph-prebuilt
(``pip download`` fetches it once per environment; it is kept under the
environment's prefix, which ``make clean`` removes). It tests ``ToolNode``,
``create_react_agent`` v1 and v2, interceptors, validation errors and injected
state. Each saver setup runs it twice in pytest subprocesses (see
``prebuilt_suite_plugin.py``): once as it ships, with ``ToolNode`` (the baseline),
and once with ``VerifiedToolNode`` in every place the suite and
``create_react_agent`` take ``ToolNode`` from. Every test that passes with
``ToolNode`` must pass with ``VerifiedToolNode``, except the ones listed in
``EXPECTED_DIFFERENCES``: tests that pin the re-run of a finished call on resume,
which is what ``VerifiedToolNode`` exists to prevent. Those must fail, and for the
reason given, so the list cannot hide another failure.

The suite's fixture parameters keep their names (``[memory-v1]`` is whatever
checkpointer this setup gives, ``VerifiedSaver`` included).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SAVERS = ("none", "memory", "sqlite", "verified")
# a stuck suite must not hold `make test` forever; it takes well under a minute here
SUITE_TIMEOUT = 1200


@dataclass(frozen=True)
class ExpectedDifference:
    """A test ``ToolNode`` passes that ``VerifiedToolNode`` fails on purpose (docs/tools.md)."""

    saver: str  # the setup it differs in
    test: str  # file and test name, without parameters
    parameters: str  # what the parametrized test's id must contain
    failure: str  # what the failure must say: the pinned re-run did not happen
    asserts: str
    instead: str


EXPECTED_DIFFERENCES = (
    ExpectedDifference(
        saver="verified",
        test="tests/test_react_agent.py::test_react_agent_parallel_tool_calls",
        parameters="-v1]",
        failure="get_weather_execution_count == 2",
        asserts=(
            "create_react_agent v1 with two tool calls in one message, get_weather and "
            "human_assistance (which interrupts): after the resume, get_weather has run "
            "twice, because the tools task is run again whole"
        ),
        instead=(
            "get_weather finished before the interrupt and was recorded: the resume "
            "answers it from its record, so it has run once (as the test expects of v2)"
        ),
    ),
)


def _differs(saver: str, test_id: str) -> ExpectedDifference | None:
    for difference in EXPECTED_DIFFERENCES:
        base, _, parameters = test_id.partition("[")
        if (
            difference.saver == saver
            and base == difference.test
            and difference.parameters in f"[{parameters}"
        ):
            return difference
    return None


def _download_suite(version: str, into: Path) -> None:
    """The sdist of langgraph-prebuilt ``version``, extracted into ``into``."""
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"langgraph-prebuilt=={version}",
                "-d",
                download,
            ],
            check=True,
            timeout=SUITE_TIMEOUT,
        )
        (sdist,) = Path(download).glob("langgraph_prebuilt-*.tar.gz")
        with tarfile.open(sdist) as archive:
            if hasattr(tarfile, "data_filter"):
                archive.extractall(into, filter="data")
            else:  # Pythons before the filter: refuse what would land outside `into`
                for member in archive.getmembers():
                    target = (into / member.name).resolve()
                    if not target.is_relative_to(into.resolve()) or member.issym():
                        raise ValueError(f"unsafe member in {sdist.name}: {member.name}")
                archive.extractall(into)


@pytest.fixture(scope="session")
def prebuilt_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The extracted sdist of the installed langgraph-prebuilt (its ``tests/`` inside)."""
    version = importlib.metadata.version("langgraph-prebuilt")
    name = f"langgraph_prebuilt-{version}"
    cache = Path(sys.prefix) / "prebuilt-suite"
    try:
        cache.mkdir(exist_ok=True)
    except OSError:  # an environment this user cannot write to: download for this session
        cache = tmp_path_factory.mktemp("prebuilt-suite")
    suite = cache / name
    if not (suite / "tests" / "conftest.py").is_file():
        # extracted beside its place and renamed into it, so an interrupted download
        # never leaves a half suite that a later session would take for a whole one
        staging = Path(tempfile.mkdtemp(dir=cache, prefix=f".{name}-"))
        try:
            _download_suite(version, staging)
            with contextlib.suppress(OSError):  # another session renamed its copy first
                os.replace(staging / name, suite)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    assert (suite / "tests" / "conftest.py").is_file(), f"no test suite in the sdist at {suite}"
    return suite


def _start(suite: Path, node: str, saver: str, out: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "PREBUILT_SUITE_NODE": node,
        "PREBUILT_SUITE_SAVER": saver,
        "PREBUILT_SUITE_REPORT": str(out / f"{node}.json"),
        # the suite's slow mode, which has the SQLite fixtures; the plugin deselects
        # its Postgres ones
        "LANGGRAPH_TEST_FAST": "0",
    }
    log = (out / f"{node}.log").open("wb")
    with log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "prebuilt_suite_plugin",
                "-p",
                "no:cacheprovider",
                "-q",
                "-o",
                "addopts=--strict-markers",
                "tests",
            ],
            cwd=suite,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _outcomes(out: Path, node: str, returncode: int) -> dict[str, dict[str, str]]:
    report = out / f"{node}.json"
    log = (out / f"{node}.log").read_text(errors="replace")
    # 0: all passed, 1: some failed; anything else means the suite did not run
    assert returncode in (0, 1) and report.is_file(), f"{node} suite did not run:\n{log[-6000:]}"
    outcomes: dict[str, dict[str, str]] = json.loads(report.read_text())
    return outcomes


@pytest.mark.parametrize("saver", SAVERS)
def test_every_test_tool_node_passes_passes_with_verified_tool_node(
    prebuilt_suite: Path, saver: str, tmp_path: Path
) -> None:
    runs = {
        node: _start(prebuilt_suite, node, saver, tmp_path)
        for node in ("ToolNode", "VerifiedToolNode")
    }
    codes = {node: run.wait(timeout=SUITE_TIMEOUT) for node, run in runs.items()}
    baseline = _outcomes(tmp_path, "ToolNode", codes["ToolNode"])
    verified = _outcomes(tmp_path, "VerifiedToolNode", codes["VerifiedToolNode"])

    passed = sorted(t for t, o in baseline.items() if o["outcome"] == "passed")
    # the whole suite ran: a setup that broke collection would compare nothing
    assert len(passed) >= 200, f"only {len(passed)} tests passed with ToolNode"
    assert verified.keys() == baseline.keys()

    unexpected, differing = [], []
    for test in passed:
        outcome = verified[test]
        difference = _differs(saver, test)
        if difference is None:
            if outcome["outcome"] != "passed":
                unexpected.append(f"{test}: {outcome.get('failure', outcome['outcome'])}")
        else:
            differing.append(test)
            assert outcome["outcome"] == "failed", f"{test} was expected to fail: {outcome}"
            assert difference.failure in outcome["failure"], outcome["failure"]
    assert not unexpected, "\n\n".join(unexpected)
    if saver == "verified":
        # each listed difference is there: it still pins what it is listed for
        assert len(differing) == len(EXPECTED_DIFFERENCES), differing
    else:
        # where nothing is recorded, VerifiedToolNode is ToolNode: no difference at all
        assert differing == []
        assert {t: o["outcome"] for t, o in verified.items()} == {
            t: o["outcome"] for t, o in baseline.items()
        }
