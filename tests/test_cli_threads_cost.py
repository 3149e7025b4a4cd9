"""What ``langgraph-verified threads`` reads, counted: the cost of a summary must not grow
with the state a thread holds.

``threads`` verifies every checkpoint's own record (so its count is of records
that verify) but parses a record's content, resolves values and deserializes
only for the one checkpoint a thread resumes from. A thread ten times longer
verifies ten times more records, and parses, resolves or deserializes not one
more. Counted here, never timed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from echo_graph import build_graph
from test_cli import by_step, checkpoint_entry, flip_byte, history, run

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.cli.threads import thread_summaries
from langgraph_checkpoint_verified.engine import reads
from langgraph_checkpoint_verified.records.kinds import decode_checkpoint


class CountingSerde:
    """A serializer that counts what it deserializes, and hands the rest to ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.loads = 0

    def loads_typed(self, data: Any) -> Any:
        self.loads += 1
        return self.inner.loads_typed(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def chat(path: Path, thread_id: str, turns: int) -> None:
    graph = build_graph(VerifiedSaver(path))
    for turn in range(turns):
        graph.invoke(
            {"messages": [("user", f"turn {turn}")]}, {"configurable": {"thread_id": thread_id}}
        )


def summary_costs(path: Path) -> tuple[dict[str, Any], Counter[str]]:
    """``threads``' summary of a store's one thread, and what making it took: ``resolve``
    (value chains resolved), ``loads`` (values deserialized) and ``verified`` (checkpoint
    records verified on their own)."""
    saver = VerifiedSaver(path, quarantine=False)  # nothing cached: as a new process
    engine = saver.engine
    counts: Counter[str] = Counter()
    resolve, verifies = engine.reader.resolve, engine.reader.checkpoint_verifies

    def counted_resolve(*args: Any, **kwargs: Any) -> Any:
        counts["resolve"] += 1
        return resolve(*args, **kwargs)

    def counted_verifies(*args: Any, **kwargs: Any) -> Any:
        counts["verified"] += 1
        return verifies(*args, **kwargs)

    engine.reader.resolve = counted_resolve  # type: ignore[method-assign]
    engine.reader.checkpoint_verifies = counted_verifies  # type: ignore[method-assign]
    engine.serde = serde = CountingSerde(engine.serde)
    (summary,) = thread_summaries(saver)
    counts["loads"] = serde.loads
    return summary, counts


def test_value_chains_and_deserializations_do_not_grow_with_the_thread(tmp_path: Path) -> None:
    short, long = tmp_path / "short", tmp_path / "long"
    chat(short, "t", 2)
    chat(long, "t", 20)
    short_summary, short_costs = summary_costs(short)
    long_summary, long_costs = summary_costs(long)

    assert (short_summary["checkpoints"], long_summary["checkpoints"]) == (6, 60)
    assert (short_summary["last_step"], long_summary["last_step"]) == (4, 58)
    # the one checkpoint the thread resumes from: its channels, its metadata and state
    assert long_costs["resolve"] == short_costs["resolve"] > 0
    assert long_costs["loads"] == short_costs["loads"] > 0
    # every checkpoint's own record is verified, once
    assert (short_costs["verified"], long_costs["verified"]) == (6, 60)


def test_counting_a_thread_s_checkpoints_parses_and_keeps_no_record(tmp_path: Path) -> None:
    """The count verifies each record's frame, digests and identity, and parses none:
    only the checkpoint the thread resumes from (and the records holding its values)
    is parsed, and the reader's cache is left as it was."""
    chat(tmp_path, "t", 20)
    saver = VerifiedSaver(tmp_path, quarantine=False)
    parsed = 0

    def counted_decode(*args: Any, **kwargs: Any) -> Any:
        nonlocal parsed
        parsed += 1
        return decode_checkpoint(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reads, "decode_checkpoint", counted_decode)
        assert saver.engine.count_own_records("t", "") == (60, 0)
        assert (parsed, len(saver.engine.reader.records._whole)) == (0, 0)
        saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert parsed > 0
        # a record the cache holds is not verified again, and counts as verified
        assert saver.engine.count_own_records("t", "") == (60, 0)


def test_counted_records_verify_on_their_own_and_damage_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A byte flipped in the step-1 checkpoint: its record no longer verifies (``damaged``);
    steps 2 to 4 keep values in it, so their records verify but the thread resumes from
    step 0, and ``verify`` is named for the rest."""
    store = tmp_path / "store"
    chat(store, "alpha", 2)
    damaged = by_step(history(store, "alpha"), 1)
    log, entry = checkpoint_entry(store, damaged)
    flip_byte(log, entry)

    code, out, err = run(capsys, "threads", store, "--json")
    (thread,) = json.loads(out)["threads"]
    assert code == 0
    assert (thread["checkpoints"], thread["damaged"], thread["last_step"]) == (5, 1, 0)
    assert f"langgraph-verified verify {store}" in err

    code, out, err = run(capsys, "threads", store)
    assert code == 0 and "5 (1 damaged)" in out and "damaged record(s) found" in err
