"""A pytest plugin for langgraph-prebuilt's own test suite, run by ``test_prebuilt_suite.py``.

It is loaded with ``-p prebuilt_suite_plugin`` in a pytest subprocess started in
the extracted sdist, and reads two environment variables:

* ``PREBUILT_SUITE_NODE``: ``ToolNode`` runs the suite as it ships (the
  baseline); ``VerifiedToolNode`` puts ``VerifiedToolNode`` in every place the
  suite and ``create_react_agent`` take ``ToolNode`` from.
* ``PREBUILT_SUITE_SAVER``: what the suite's ``sync_checkpointer`` and
  ``async_checkpointer`` fixtures give: ``none``, ``memory`` (the suite's own
  ``MemorySaverAssertImmutable``, an ``InMemorySaver``), ``sqlite``
  (``SqliteSaver`` / ``AsyncSqliteSaver`` on ``:memory:``) or ``verified``
  (``VerifiedSaver.in_memory()``).

The outcome of every test (and, for a failure, the end of its traceback) is
written as JSON to ``PREBUILT_SUITE_REPORT``.

The suite's ``conftest.py`` imports its Postgres fixtures (psycopg,
langgraph-checkpoint-postgres) at the top, for setups this run never uses; this
plugin gives it modules of the same names with the in-memory and SQLite fixtures
only, so none of that has to be installed. Nothing here runs on import: the main
test session imports this module for its doctests.
"""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

SAVERS = ("none", "memory", "sqlite", "verified")
NODES = ("ToolNode", "VerifiedToolNode")
# Which of the suite's fixture parameters gives each setup its checkpointer (the
# suite runs with LANGGRAPH_TEST_FAST=0, so that the SQLite ones exist).
_SYNC_PARAM = {"none": "memory", "memory": "memory", "sqlite": "sqlite", "verified": "memory"}
_ASYNC_PARAM = {"none": "memory", "memory": "memory", "sqlite": "sqlite_aio", "verified": "memory"}
_STORE_PARAMS = {"in_memory"}

_outcomes: dict[str, dict[str, str]] = {}  # test id -> its outcome and, if failed, why


def _setup() -> tuple[str, str]:
    node = os.environ.get("PREBUILT_SUITE_NODE", "VerifiedToolNode")
    saver = os.environ.get("PREBUILT_SUITE_SAVER", "verified")
    if node not in NODES or saver not in SAVERS:
        raise pytest.UsageError(f"PREBUILT_SUITE_NODE={node!r} PREBUILT_SUITE_SAVER={saver!r}")
    return node, saver


def _not_here(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("Postgres setups are not run with VerifiedToolNode")


def _checkpointer_module(saver: str) -> types.ModuleType:
    """``tests.conftest_checkpointer`` with the memory and SQLite fixtures only."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from langgraph_checkpoint_verified import VerifiedSaver

    @contextmanager
    def _checkpointer_memory() -> Iterator[Any]:
        if saver == "none":
            yield None
        elif saver == "verified":
            yield VerifiedSaver.in_memory()
        else:
            from tests.memory_assert import MemorySaverAssertImmutable

            yield MemorySaverAssertImmutable()

    @contextmanager
    def _checkpointer_sqlite() -> Iterator[Any]:
        with SqliteSaver.from_conn_string(":memory:") as checkpointer:
            yield checkpointer

    @asynccontextmanager
    async def _checkpointer_sqlite_aio() -> AsyncIterator[Any]:
        async with AsyncSqliteSaver.from_conn_string(":memory:") as checkpointer:
            yield checkpointer

    module = types.ModuleType("tests.conftest_checkpointer")
    module.__dict__.update(
        _checkpointer_memory=_checkpointer_memory,
        _checkpointer_sqlite=_checkpointer_sqlite,
        _checkpointer_sqlite_aio=_checkpointer_sqlite_aio,
    )
    for name in ("postgres", "postgres_pipe", "postgres_pool"):
        setattr(module, f"_checkpointer_{name}", _not_here)
    for name in ("postgres_aio", "postgres_aio_pipe", "postgres_aio_pool"):
        setattr(module, f"_checkpointer_{name}", _not_here)
    return module


def _store_module() -> types.ModuleType:
    """``tests.conftest_store`` with the in-memory store only."""
    from langgraph.store.memory import InMemoryStore

    @contextmanager
    def _store_memory() -> Iterator[Any]:
        yield InMemoryStore()

    module = types.ModuleType("tests.conftest_store")
    module._store_memory = _store_memory  # type: ignore[attr-defined]
    for name in ("postgres", "postgres_pipe", "postgres_pool"):
        setattr(module, f"_store_{name}", _not_here)
    for name in ("postgres_aio", "postgres_aio_pipe", "postgres_aio_pool"):
        setattr(module, f"_store_{name}", _not_here)
    return module


def _substitute_verified_tool_node() -> None:
    """Every name the suite and ``create_react_agent`` take ``ToolNode`` by."""
    import langgraph.prebuilt
    import langgraph.prebuilt.chat_agent_executor
    import langgraph.prebuilt.tool_node

    from langgraph_checkpoint_verified import VerifiedToolNode

    for module in (
        langgraph.prebuilt,
        langgraph.prebuilt.tool_node,
        langgraph.prebuilt.chat_agent_executor,
    ):
        module.ToolNode = VerifiedToolNode  # type: ignore[attr-defined,misc]


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: Any) -> None:
    node, saver = _setup()
    # before the suite's conftest imports them
    sys.modules["tests.conftest_checkpointer"] = _checkpointer_module(saver)
    sys.modules["tests.conftest_store"] = _store_module()
    if node == "VerifiedToolNode":
        _substitute_verified_tool_node()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep, of each parametrized test, the checkpointer and store of this setup."""
    _, saver = _setup()
    wanted = {
        "sync_checkpointer": {_SYNC_PARAM[saver]},
        "async_checkpointer": {_ASYNC_PARAM[saver]},
        "sync_store": _STORE_PARAMS,
        "async_store": _STORE_PARAMS,
    }
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if all(params[name] in values for name, values in wanted.items() if name in params):
            kept.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" and report.outcome == "passed":
        return  # a setup or teardown that passed says nothing of the test
    outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
    if _outcomes.get(report.nodeid, {}).get("outcome") == "failed":
        return  # a failed setup or call stays failed whatever its teardown does
    _outcomes[report.nodeid] = {"outcome": outcome}
    if report.failed:
        _outcomes[report.nodeid]["failure"] = report.longreprtext[-4000:]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("PREBUILT_SUITE_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as report:
            json.dump(_outcomes, report, indent=1, sort_keys=True)
