"""LangGraph's official conformance suite, every capability, for both backends."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from langgraph_checkpoint_verified import VerifiedSaver


@pytest.mark.parametrize("backend", ["files", "memory"])
async def test_conformance_all_capabilities(backend, tmp_path):
    @checkpointer_test(name=f"VerifiedSaver[{backend}]")
    async def factory():
        if backend == "files":
            async with VerifiedSaver.from_conn_string(str(tmp_path / "store")) as saver:
                yield saver
        else:
            async with VerifiedSaver.from_conn_string(":memory:") as saver:
                yield saver

    report = await validate(factory)
    failures = {
        name: result.failures for name, result in report.results.items() if not result.passed
    }
    assert not failures, failures
    assert {name for name, r in report.results.items() if r.detected} == {
        c.value for c in ALL_CAPABILITIES
    }
    assert all(r.tests_passed > 0 for r in report.results.values())
