"""``LANGGRAPH_STRICT_MSGPACK``: a graph on VerifiedSaver reads back what InMemorySaver does.

In strict mode LangGraph gives the saver an allowlist built from the graph's
state schema (``with_allowlist``) at every run and state call: messages and
the schema's own models come back as themselves, any other model as a plain
dict. The variable is read when LangGraph is imported, so the graph runs in a
child process (``strict_msgpack_child.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.errors import VerifiedSaverError

CHILD = Path(__file__).with_name("strict_msgpack_child.py")


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("backend", ["files", "memory"])
def test_a_strict_graph_reads_back_what_in_memory_saver_does(tmp_path, backend, mode):
    store = "memory" if backend == "memory" else str(tmp_path / "store")
    done = subprocess.run(
        [sys.executable, str(CHILD), store, mode],
        env={**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["strict"] is True
    assert found["ours"] == found["theirs"]
    last = found["ours"][-1]["state"]
    assert last["profile"] == ["Profile", {"name": "ann", "visits": 4}]
    assert last["extra"] == {"secret": ["str", "'s3'"]}  # blocked: a plain dict
    assert len(last["messages"]) == 8
    assert len(found["ours"][-1]["history"]) == 4 * 3
    # one clone for every run and state call: what it deserialized stays with it
    assert found["clones"] == 1


def allowlisting_saver(tmp_path) -> VerifiedSaver:
    serde = JsonPlusSerializer(allowed_msgpack_modules=[("a", "A")])
    return VerifiedSaver(tmp_path / "store", fsync=False, serde=serde)


def test_with_allowlist_makes_one_clone_per_allowlist(tmp_path):
    saver = allowlisting_saver(tmp_path)
    first = saver.with_allowlist({("b", "B")})
    assert first is not saver
    assert saver.with_allowlist({("b", "B")}) is first
    other = saver.with_allowlist({("c", "C")})
    assert other is not first
    assert first.serde is not saver.serde and other.serde is not first.serde
    # a clone's own clones extend its allowlist, not the original's
    assert first.with_allowlist({("c", "C")}) is not other
    assert saver.with_allowlist({("a", "A")}) is saver  # nothing to add


def test_closing_a_saver_closes_its_clones(tmp_path):
    saver = allowlisting_saver(tmp_path)
    clone = saver.with_allowlist({("b", "B")})
    saver.close()
    with pytest.raises(VerifiedSaverError):
        clone.get_tuple({"configurable": {"thread_id": "t"}})
