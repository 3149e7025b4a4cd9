"""``run_with_recovery`` / ``arun_with_recovery``: resume after failures, restart when
nothing usable is left, continue unfinished runs, hooks, limits and damage.

Every test runs on files and in memory, through the sync and the async twin.
"""

from __future__ import annotations

import asyncio
import operator
from collections import Counter
from typing import Annotated

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_checkpoint_verified import (
    STOP_RETRYING,
    RecoveryFailedError,
    StateUpdate,
    ToolOutcomeUnknownError,
    VerifiedSaver,
    arun_with_recovery,
    run_with_recovery,
)


class State(TypedDict):
    log: Annotated[list[str], operator.add]
    hint: str


@pytest.fixture(params=["files", "memory"])
def saver(request, tmp_path):
    if request.param == "files":
        return VerifiedSaver(tmp_path / "store")
    return VerifiedSaver.in_memory()


@pytest.fixture(params=["sync", "async"])
def mode(request):
    return request.param


def recover(graph, graph_input, config, mode, **kwargs):
    if mode == "sync":
        return run_with_recovery(graph, graph_input, config, **kwargs)
    return asyncio.run(arun_with_recovery(graph, graph_input, config, **kwargs))


CONFIG = {"configurable": {"thread_id": "t"}}
START_INPUT = {"log": ["input"], "hint": ""}


class Pipeline:
    """START -> one -> two -> three -> END; ``failures[node]`` makes a node raise that often."""

    def __init__(self, saver, **failures: int) -> None:
        self.runs: Counter[str] = Counter()
        self.failures = Counter(failures)
        self.before_failing = None  # called just before a planned failure
        builder = StateGraph(State)
        for name in ("one", "two", "three"):
            builder.add_node(name, self._node(name))
        builder.add_edge(START, "one")
        builder.add_edge("one", "two")
        builder.add_edge("two", "three")
        builder.add_edge("three", END)
        self.graph = builder.compile(checkpointer=saver)

    def _node(self, name):
        def node(state: State) -> dict:
            self.runs[name] += 1
            if self.failures[name] > 0:
                self.failures[name] -= 1
                if self.before_failing is not None:
                    self.before_failing()
                raise ConnectionError(f"{name} failed")
            return {"log": [f"{name}{state['hint']}"]}

        return node


def test_success_needs_no_recovery(saver, mode):
    pipeline = Pipeline(saver)
    result = recover(pipeline.graph, START_INPUT, CONFIG, mode)
    assert result["output"]["log"] == ["input", "one", "two", "three"]
    assert result["attempts"] == 1
    assert result["recovered_from_step"] is None
    assert result["restarted_from_scratch"] is False
    assert result["skipped_checkpoints"] == [] and result["errors"] == []


def test_failure_resumes_from_the_newest_checkpoint(saver, mode):
    pipeline = Pipeline(saver, three=2)
    result = recover(pipeline.graph, START_INPUT, CONFIG, mode)
    assert pipeline.runs == Counter(one=1, two=1, three=3)
    assert result["output"]["log"] == ["input", "one", "two", "three"]
    assert result["attempts"] == 3
    assert result["recovered_from_step"] == 2  # the checkpoint after "two"
    assert [str(e) for e in result["errors"]] == ["three failed", "three failed"]


def test_attempts_run_out(saver, mode):
    pipeline = Pipeline(saver, two=5)
    with pytest.raises(RecoveryFailedError) as raised:
        recover(pipeline.graph, START_INPUT, CONFIG, mode, max_attempts=2)
    assert raised.value.attempts == 2 and raised.value.stopped is False
    assert isinstance(raised.value.__cause__, ConnectionError)
    assert pipeline.runs == Counter(one=1, two=2)
    # the thread keeps its progress: a later call continues it
    pipeline.failures.clear()
    result = recover(pipeline.graph, {"log": ["ignored"], "hint": ""}, CONFIG, mode)
    assert result["output"]["log"] == ["input", "one", "two", "three"]
    assert result["attempts"] == 1 and result["recovered_from_step"] == 1
    assert pipeline.runs == Counter(one=1, two=3, three=1)


def test_exceptions_outside_retry_on_propagate_at_once(saver, mode):
    pipeline = Pipeline(saver, two=1)
    with pytest.raises(ConnectionError):
        recover(pipeline.graph, START_INPUT, CONFIG, mode, retry_on=(ValueError,))
    assert pipeline.runs == Counter(one=1, two=1)


def test_unknown_tool_outcome_is_never_retried(saver, mode):
    calls = Counter()

    def node(state: State) -> dict:
        calls["node"] += 1
        raise ToolOutcomeUnknownError("charge", "call_1", "key")

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    graph = builder.compile(checkpointer=saver)
    with pytest.raises(ToolOutcomeUnknownError):
        recover(graph, START_INPUT, CONFIG, mode)
    assert calls["node"] == 1


def test_on_failure_hint_is_applied_before_the_next_attempt(saver, mode):
    pipeline = Pipeline(saver, two=1)
    seen = []

    def on_failure(error, state):
        seen.append((str(error), state.next, state.values["log"]))
        return StateUpdate({"hint": "+hint"}, as_node="one")

    result = recover(pipeline.graph, START_INPUT, CONFIG, mode, on_failure=on_failure)
    assert seen == [("two failed", ("two",), ["input", "one"])]
    assert result["output"]["log"] == ["input", "one", "two+hint", "three+hint"]
    assert result["recovered_from_step"] == 1
    assert pipeline.runs == Counter(one=1, two=2, three=1)


def test_on_failure_may_return_a_plain_dict_or_be_async(saver, mode):
    pipeline = Pipeline(saver, three=1)

    async def async_hook(error, state):
        return {"hint": "!"}

    def sync_hook(error, state):
        return {"hint": "!"}

    hook = async_hook if mode == "async" else sync_hook
    result = recover(pipeline.graph, START_INPUT, CONFIG, mode, on_failure=hook)
    assert result["output"]["log"] == ["input", "one", "two", "three!"]


def test_on_failure_can_stop_the_retries(saver, mode):
    pipeline = Pipeline(saver, two=3)
    with pytest.raises(RecoveryFailedError) as raised:
        recover(pipeline.graph, START_INPUT, CONFIG, mode, on_failure=lambda e, s: STOP_RETRYING)
    assert raised.value.stopped is True and raised.value.attempts == 1
    assert pipeline.runs == Counter(one=1, two=1)


def test_backoff_is_asked_for_each_new_attempt(saver, mode):
    pipeline = Pipeline(saver, three=2)
    asked = []

    def backoff(failed_attempts):
        asked.append(failed_attempts)
        return 0

    recover(pipeline.graph, START_INPUT, CONFIG, mode, backoff=backoff)
    assert asked == [1, 2]


def test_interrupt_is_not_a_failure(saver, mode):
    def ask(state: State) -> dict:
        answer = interrupt("continue?")
        return {"log": [f"answer {answer}"]}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    graph = builder.compile(checkpointer=saver)

    paused = recover(graph, START_INPUT, CONFIG, mode)
    assert paused["attempts"] == 1 and paused["errors"] == []
    assert [i.value for i in paused["output"]["__interrupt__"]] == ["continue?"]
    done = recover(graph, Command(resume="yes"), CONFIG, mode)
    assert done["output"]["log"] == ["input", "answer yes"]


def test_an_unfinished_run_is_continued_not_restarted(saver, mode):
    pipeline = Pipeline(saver, three=1)
    with pytest.raises(ConnectionError):  # a run that stopped, as after a crash
        pipeline.graph.invoke(START_INPUT, CONFIG)
    result = recover(pipeline.graph, {"log": ["new input"], "hint": ""}, CONFIG, mode)
    assert result["output"]["log"] == ["input", "one", "two", "three"]
    assert result["attempts"] == 1
    assert result["recovered_from_step"] == 2
    assert pipeline.runs == Counter(one=1, two=1, three=2)


def test_a_finished_thread_starts_a_new_run(saver, mode):
    pipeline = Pipeline(saver)
    recover(pipeline.graph, START_INPUT, CONFIG, mode)
    result = recover(pipeline.graph, {"log": ["again"], "hint": ""}, CONFIG, mode)
    assert result["output"]["log"][-4:] == ["again", "one", "two", "three"]
    assert pipeline.runs == Counter(one=2, two=2, three=2)


def damage(store, key):
    data = bytearray(store.storage.read(key))
    data[len(data) // 2] ^= 0xFF
    store.storage.write(key, bytes(data))


def checkpoint_keys(store):
    return sorted(k for k in store.storage.walk("threads") if k.endswith(".ckpt"))


def test_damaged_newest_checkpoints_are_passed_over(saver, mode):
    pipeline = Pipeline(saver, three=1)
    damaged = []

    def damage_the_newest_two():
        keys = checkpoint_keys(saver)[-2:]  # after "two", after "one"
        damaged.extend(keys)
        for key in keys:
            damage(saver, key)

    pipeline.before_failing = damage_the_newest_two
    # durability="sync": every checkpoint is on disk before the next step starts
    result = recover(pipeline.graph, START_INPUT, CONFIG, mode, durability="sync")
    assert result["output"]["log"] == ["input", "one", "two", "three"]
    assert result["recovered_from_step"] == 0
    assert len(result["skipped_checkpoints"]) == 2
    assert all(cid in " ".join(damaged) for cid in result["skipped_checkpoints"])
    # "one" finished on the step-0 checkpoint: its saved writes are applied, not rerun
    assert pipeline.runs == Counter(one=1, two=2, three=2)
    assert saver.stats.quarantined_records == 2


def test_no_valid_checkpoint_restarts_from_the_input(saver, mode):
    pipeline = Pipeline(saver, three=1)

    def damage_all():
        for key in checkpoint_keys(saver):
            damage(saver, key)

    pipeline.before_failing = damage_all
    result = recover(pipeline.graph, START_INPUT, CONFIG, mode, durability="sync")
    assert result["restarted_from_scratch"] is True
    assert result["recovered_from_step"] is None
    assert len(result["skipped_checkpoints"]) == 4  # steps -1, 0, 1, 2
    assert result["output"]["log"] == ["input", "one", "two", "three"]
    assert pipeline.runs == Counter(one=2, two=2, three=2)


def test_any_checkpointer_can_be_recovered_with(mode):
    pipeline = Pipeline(InMemorySaver(), two=1)
    result = recover(pipeline.graph, START_INPUT, CONFIG, mode)
    assert result["attempts"] == 2 and result["recovered_from_step"] == 1
    assert result["skipped_checkpoints"] == []


def test_misuse_is_explained(mode):
    with pytest.raises(TypeError, match="checkpointer=VerifiedSaver"):
        recover(Pipeline(None).graph, START_INPUT, CONFIG, mode)
    with pytest.raises(ValueError, match="thread_id"):
        recover(Pipeline(InMemorySaver()).graph, START_INPUT, {}, mode)
    with pytest.raises(ValueError, match="max_attempts"):
        recover(Pipeline(InMemorySaver()).graph, START_INPUT, CONFIG, mode, max_attempts=0)
    with pytest.raises(TypeError, match="on_failure must return"):
        recover(
            Pipeline(InMemorySaver(), one=1).graph,
            START_INPUT,
            CONFIG,
            mode,
            on_failure=lambda e, s: "hint",
        )


def test_side_effects_demo_sends_the_email_once(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "examples" / "side_effects_demo.py"
    spec = importlib.util.spec_from_file_location("side_effects_demo", path)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)

    demo.run_side_effects_demo(str(tmp_path))
    out = capsys.readouterr().out
    assert "phase 2 failed: order ORD-7781 is not in the state" in out
    assert "finished after 2 attempts, resumed from step 2" in out
    assert "the customer was emailed 1 time(s)" in out
    assert (tmp_path / "emails_sent.log").read_text().splitlines() == ["email about ORD-1001"]
