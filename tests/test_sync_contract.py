"""The checkpointer contract through the sync methods, for both backends.

LangGraph's conformance suite (``test_conformance.py``) only calls the async
methods. These tests make the same assertions through ``put`` / ``get_tuple``
/ ``list`` / ``put_writes`` / ``delete_thread`` / ``delete_for_runs`` /
``copy_thread`` / ``prune``, and compare with LangGraph's ``InMemorySaver``
where its behaviour is the reference.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME

from langgraph_checkpoint_verified import FileStorage, VerifiedSaver
from langgraph_checkpoint_verified.records import keys


@pytest.fixture(params=["files", "memory"])
def saver(request, tmp_path):
    if request.param == "files":
        with VerifiedSaver(tmp_path / "store", fsync=False) as opened:
            yield opened
    else:
        with VerifiedSaver.in_memory() as opened:
            yield opened


def put_chain(
    saver: BaseCheckpointSaver,
    thread_id: str,
    n: int,
    *,
    checkpoint_ns: str = "",
    metadata: list[dict[str, Any]] | None = None,
) -> list[dict]:
    """``n`` checkpoints on one thread, each the child of the previous; their configs."""
    stored: list[dict] = []
    for i in range(n):
        config = generate_config(thread_id, checkpoint_ns=checkpoint_ns)
        if stored:
            config["configurable"]["checkpoint_id"] = stored[-1]["configurable"]["checkpoint_id"]
        checkpoint = generate_checkpoint(
            channel_values={"step": i}, channel_versions={"step": i + 1}
        )
        md = metadata[i] if metadata else generate_metadata(step=i)
        stored.append(saver.put(config, checkpoint, md, {"step": i + 1}))
    return stored


def ids_of(tuples) -> list[str]:
    return [t.checkpoint["id"] for t in tuples]


def checkpoint_id(config: dict) -> str:
    return config["configurable"]["checkpoint_id"]


# -- put / get_tuple ---------------------------------------------------------


def test_put_returns_config_naming_the_checkpoint(saver):
    checkpoint = generate_checkpoint()
    stored = saver.put(generate_config("t"), checkpoint, generate_metadata(), {})
    assert stored["configurable"] == {
        "thread_id": "t",
        "checkpoint_ns": "",
        "checkpoint_id": checkpoint["id"],
    }


def test_put_get_round_trip_keeps_every_field(saver):
    checkpoint = generate_checkpoint(
        channel_values={"msg": "hello", "n": 3, "nested": {"a": [1, 2]}},
        channel_versions={"msg": 1, "n": 1, "nested": 2},
        versions_seen={"node": {"msg": 1}},
    )
    metadata = generate_metadata(source="input", step=-1, custom_key="custom", run_id="r1")
    stored = saver.put(generate_config("t"), checkpoint, metadata, {"msg": 1, "n": 1, "nested": 2})

    found = saver.get_tuple(stored)
    assert found.checkpoint["id"] == checkpoint["id"]
    assert found.checkpoint["v"] == 1
    assert found.checkpoint["ts"] == checkpoint["ts"]
    assert found.checkpoint["channel_values"] == {"msg": "hello", "n": 3, "nested": {"a": [1, 2]}}
    assert found.checkpoint["channel_versions"] == {"msg": 1, "n": 1, "nested": 2}
    assert found.checkpoint["versions_seen"] == {"node": {"msg": 1}}
    assert found.metadata["source"] == "input"
    assert found.metadata["step"] == -1
    assert found.metadata["custom_key"] == "custom"
    assert found.metadata["run_id"] == "r1"
    assert found.parent_config is None
    assert found.pending_writes == []


def test_get_tuple_missing_thread_or_checkpoint_is_none(saver):
    assert saver.get_tuple(generate_config("nobody")) is None
    stored = put_chain(saver, "t", 1)
    assert saver.get_tuple(generate_config("t", checkpoint_id="not-an-id")) is None
    assert saver.get_tuple(stored[0]) is not None


def test_get_tuple_without_id_is_latest_and_with_id_is_exact(saver):
    stored = put_chain(saver, "t", 3)
    latest = saver.get_tuple(generate_config("t"))
    assert latest.checkpoint["id"] == checkpoint_id(stored[-1])
    assert latest.metadata["step"] == 2
    assert latest.parent_config["configurable"]["checkpoint_id"] == checkpoint_id(stored[1])
    first = saver.get_tuple(stored[0])
    assert first.checkpoint["id"] == checkpoint_id(stored[0])
    assert first.checkpoint["channel_values"] == {"step": 0}
    assert first.parent_config is None


def test_incremental_versions_rebuild_full_values(saver):
    stored1 = saver.put(
        generate_config("t"),
        generate_checkpoint(
            channel_values={"a": "v1", "b": "v2"}, channel_versions={"a": 1, "b": 1}
        ),
        generate_metadata(step=0),
        {"a": 1, "b": 1},
    )
    # 'a' changes, 'b' is unchanged, 'c' appears
    stored2 = saver.put(
        stored1,
        generate_checkpoint(
            channel_values={"a": "v1b", "b": "v2", "c": "new"},
            channel_versions={"a": 2, "b": 1, "c": 1},
        ),
        generate_metadata(step=1),
        {"a": 2, "c": 1},
    )
    # 'b' is dropped from channel_versions
    stored3 = saver.put(
        stored2,
        generate_checkpoint(
            channel_values={"a": "v1c", "c": "new"}, channel_versions={"a": 3, "c": 1}
        ),
        generate_metadata(step=2),
        {"a": 3},
    )
    assert saver.get_tuple(stored1).checkpoint["channel_values"] == {"a": "v1", "b": "v2"}
    assert saver.get_tuple(stored2).checkpoint["channel_values"] == {
        "a": "v1b",
        "b": "v2",
        "c": "new",
    }
    assert saver.get_tuple(stored3).checkpoint["channel_values"] == {"a": "v1c", "c": "new"}


def test_threads_and_namespaces_are_isolated(saver):
    for thread_id in ("t1", "t2"):
        for ns in ("", "child:1"):
            saver.put(
                generate_config(thread_id, checkpoint_ns=ns),
                generate_checkpoint(
                    channel_values={"x": f"{thread_id}/{ns}"}, channel_versions={"x": 1}
                ),
                generate_metadata(),
                {"x": 1},
            )
    for thread_id in ("t1", "t2"):
        for ns in ("", "child:1"):
            found = saver.get_tuple(generate_config(thread_id, checkpoint_ns=ns))
            assert found.checkpoint["channel_values"] == {"x": f"{thread_id}/{ns}"}
            assert found.config["configurable"]["checkpoint_ns"] == ns
    # a config without checkpoint_ns means the root namespace
    found = saver.get_tuple({"configurable": {"thread_id": "t1"}})
    assert found.checkpoint["channel_values"] == {"x": "t1/"}


# -- list ----------------------------------------------------------------------


def test_list_newest_first_with_limit_and_before(saver):
    stored = put_chain(saver, "t", 4)
    ids = [checkpoint_id(c) for c in stored]
    assert ids_of(saver.list(generate_config("t"))) == ids[::-1]
    assert ids_of(saver.list(generate_config("t"), limit=1)) == [ids[3]]
    assert ids_of(saver.list(generate_config("t"), limit=2)) == [ids[3], ids[2]]
    assert ids_of(saver.list(generate_config("t"), limit=0)) == []
    before = generate_config("t", checkpoint_id=ids[2])
    assert ids_of(saver.list(generate_config("t"), before=before)) == [ids[1], ids[0]]
    before = generate_config("t", checkpoint_id=ids[3])
    assert ids_of(saver.list(generate_config("t"), before=before, limit=1)) == [ids[2]]
    assert ids_of(saver.list(generate_config("nobody"))) == []


def test_list_metadata_filter(saver):
    metadata = [
        generate_metadata(source="input", step=-1),
        generate_metadata(source="loop", step=0, score=42, run_id="run-abc"),
        generate_metadata(source="loop", step=1),
        generate_metadata(source="input", step=2),
    ]
    stored = put_chain(saver, "t", 4, metadata=metadata)
    put_chain(saver, "other", 2, metadata=metadata[:2])
    config = generate_config("t")
    found = list(saver.list(config, filter={"source": "input"}))
    assert ids_of(found) == [checkpoint_id(stored[3]), checkpoint_id(stored[0])]
    assert [t.metadata["step"] for t in saver.list(config, filter={"step": 1})] == [1]
    both = list(saver.list(config, filter={"source": "input", "step": 2}))
    assert ids_of(both) == [checkpoint_id(stored[3])]
    assert list(saver.list(config, filter={"source": "update"})) == []
    custom = list(saver.list(config, filter={"score": 42}))
    assert [(t.metadata["score"], t.metadata["run_id"]) for t in custom] == [(42, "run-abc")]
    # filter applies before limit: the one match is found even with limit=1
    assert ids_of(saver.list(config, filter={"step": -1}, limit=1)) == [checkpoint_id(stored[0])]
    # no thread: every thread
    assert len(list(saver.list(None, filter={"source": "input"}))) == 3


def test_list_namespaces(saver):
    root = put_chain(saver, "t", 2, checkpoint_ns="")
    child = put_chain(saver, "t", 1, checkpoint_ns="child:1")
    assert ids_of(saver.list(generate_config("t", checkpoint_ns=""))) == [
        checkpoint_id(c) for c in reversed(root)
    ]
    assert ids_of(saver.list(generate_config("t", checkpoint_ns="child:1"))) == [
        checkpoint_id(child[0])
    ]
    every_ns = list(saver.list({"configurable": {"thread_id": "t"}}))
    assert sorted(ids_of(every_ns)) == sorted(checkpoint_id(c) for c in root + child)
    assert {t.config["configurable"]["checkpoint_ns"] for t in every_ns} == {"", "child:1"}


def test_list_none_covers_every_thread_and_checkpoint_id_narrows(saver):
    a = put_chain(saver, "a", 2)
    b = put_chain(saver, "b", 1)
    assert sorted(ids_of(saver.list(None))) == sorted(checkpoint_id(c) for c in a + b)
    assert ids_of(saver.list(a[0])) == [checkpoint_id(a[0])]


def test_list_includes_pending_writes(saver):
    stored = put_chain(saver, "t", 1)
    saver.put_writes(stored[0], [("ch", "val")], "task")
    (found,) = saver.list(generate_config("t"))
    assert found.pending_writes == [("task", "ch", "val")]


# -- put_writes ------------------------------------------------------------------


def test_put_writes_round_trip_across_tasks_and_namespaces(saver):
    root = put_chain(saver, "t", 1)[0]
    child = put_chain(saver, "t", 1, checkpoint_ns="child:1")[0]
    saver.put_writes(root, [("ch1", "v1"), ("ch2", {"data": 123})], "t1")
    saver.put_writes(root, [("ch1", "from_t2")], "t2", task_path="a:b:c")
    saver.put_writes(child, [("ch1", "child")], "t1")
    assert sorted(saver.get_tuple(root).pending_writes) == sorted(
        [("t1", "ch1", "v1"), ("t1", "ch2", {"data": 123}), ("t2", "ch1", "from_t2")]
    )
    assert saver.get_tuple(child).pending_writes == [("t1", "ch1", "child")]


def test_put_writes_needs_a_checkpoint_id(saver):
    with pytest.raises(ValueError, match="checkpoint_id"):
        saver.put_writes(generate_config("t"), [("ch", 1)], "task")


def test_regular_writes_are_idempotent(saver):
    stored = put_chain(saver, "t", 1)[0]
    saver.put_writes(stored, [("ch", "first"), ("other", 1)], "task")
    saver.put_writes(stored, [("ch", "second")], "task")
    saver.put_writes(stored, [("ch", "first"), ("other", 1)], "task")
    assert saver.get_tuple(stored).pending_writes == [("task", "ch", "first"), ("task", "other", 1)]


def test_special_writes_replace_the_previous_one(saver):
    stored = put_chain(saver, "t", 1)[0]
    saver.put_writes(stored, [(ERROR, "first error"), (INTERRUPT, {"reason": "a"})], "task")
    saver.put_writes(stored, [(ERROR, "second error")], "task")
    saver.put_writes(stored, [(INTERRUPT, {"reason": "b"})], "task")
    saver.put_writes(stored, [(ERROR, "other task")], "task2")
    writes = saver.get_tuple(stored).pending_writes
    assert sorted(writes, key=repr) == sorted(
        [
            ("task", ERROR, "second error"),
            ("task", INTERRUPT, {"reason": "b"}),
            ("task2", ERROR, "other task"),
        ],
        key=repr,
    )


def test_pending_writes_are_ordered_by_writes_sort_key_like_in_memory_saver(saver):
    reference = InMemorySaver()
    calls = [
        ([("b1", 1), ("b2", 2)], "task-b", "~1"),
        ([("a1", 1), ("a2", 2), ("a3", 3)], "task-a", "~2"),
        ([(ERROR, "boom")], "task-c", "~0"),
        ([("c1", 1), (RESUME, "yes")], "task-c", "~0"),
        ([("z1", 1)], "task-0", "~2"),
    ]
    results = []
    for target in (saver, reference):
        stored = target.put(
            generate_config("t"), generate_checkpoint(checkpoint_id="cp"), generate_metadata(), {}
        )
        for writes, task_id, task_path in calls:
            target.put_writes(stored, writes, task_id, task_path)
        results.append(target.get_tuple(stored).pending_writes)
    ours, theirs = results
    assert ours == theirs
    # the order really is by (task_path, task_id, idx), not insertion order
    assert [w[1] for w in ours] == [RESUME, ERROR, "c1", "b1", "b2", "z1", "a1", "a2", "a3"]


def test_a_new_checkpoint_starts_without_pending_writes(saver):
    first = put_chain(saver, "t", 1)[0]
    saver.put_writes(first, [("ch", "old")], "task")
    second = saver.put(first, generate_checkpoint(), generate_metadata(step=1), {})
    assert saver.get_tuple(second).pending_writes == []
    assert saver.get_tuple(first).pending_writes == [("task", "ch", "old")]


# -- delete_thread ------------------------------------------------------------------


def test_delete_thread_removes_everything_of_that_thread_only(saver):
    doomed = put_chain(saver, "doomed", 3)
    put_chain(saver, "doomed", 1, checkpoint_ns="child:1")
    saver.put_writes(doomed[-1], [("ch", "val")], "task")
    kept = put_chain(saver, "kept", 2)
    saver.put_writes(kept[-1], [("ch", "kept")], "task")

    saver.delete_thread("doomed")

    assert saver.get_tuple(generate_config("doomed")) is None
    assert saver.get_tuple(doomed[-1]) is None
    assert list(saver.list({"configurable": {"thread_id": "doomed"}})) == []
    assert ids_of(saver.list(generate_config("kept"))) == [checkpoint_id(c) for c in kept[::-1]]
    assert saver.get_tuple(kept[-1]).pending_writes == [("task", "ch", "kept")]
    saver.delete_thread("never-existed")
    # the thread can be used again from scratch
    again = put_chain(saver, "doomed", 1)
    assert ids_of(saver.list(generate_config("doomed"))) == [checkpoint_id(again[0])]


# -- delete_for_runs ------------------------------------------------------------------


def put_runs(saver, thread_id, run_ids, *, checkpoint_ns=""):
    return put_chain(
        saver,
        thread_id,
        len(run_ids),
        checkpoint_ns=checkpoint_ns,
        metadata=[generate_metadata(step=i, run_id=r) for i, r in enumerate(run_ids)],
    )


def test_delete_for_runs_removes_runs_and_their_writes(saver):
    stored = put_runs(saver, "t", ["run1", "run2", "run3"])
    put_runs(saver, "t", ["run1"], checkpoint_ns="child:1")
    saver.put_writes(stored[0], [("ch", "val")], "task")
    saver.put_writes(stored[2], [("ch", "kept")], "task")

    saver.delete_for_runs(["run1", "run2"])

    assert [t.metadata["run_id"] for t in saver.list({"configurable": {"thread_id": "t"}})] == [
        "run3"
    ]
    assert saver.get_tuple(stored[0]) is None
    assert saver.get_tuple(stored[2]).pending_writes == [("task", "ch", "kept")]
    assert saver.verify().ok
    saver.delete_for_runs([])
    saver.delete_for_runs(["no-such-run"])
    assert len(list(saver.list(None))) == 1


def test_delete_for_runs_keeps_values_stored_in_deleted_records(saver):
    # run1 stores 'big' once; every later checkpoint only refers to it
    first = saver.put(
        generate_config("t"),
        generate_checkpoint(
            channel_values={"big": "stored once", "n": 0}, channel_versions={"big": 1, "n": 1}
        ),
        generate_metadata(step=0, run_id="run1"),
        {"big": 1, "n": 1},
    )
    parent = first
    later = []
    for step, run_id in ((1, "run1"), (2, "run2"), (3, "run2")):
        parent = saver.put(
            parent,
            generate_checkpoint(
                channel_values={"big": "stored once", "n": step},
                channel_versions={"big": 1, "n": step + 1},
            ),
            generate_metadata(step=step, run_id=run_id),
            {"n": step + 1},
        )
        later.append(parent)

    saver.delete_for_runs(["run1"])

    remaining = list(saver.list(generate_config("t")))
    assert ids_of(remaining) == [checkpoint_id(later[2]), checkpoint_id(later[1])]
    for found in remaining:
        assert found.checkpoint["channel_values"]["big"] == "stored once"
    assert saver.get_tuple(later[1]).checkpoint["channel_values"] == {"big": "stored once", "n": 2}
    assert saver.verify().ok
    # a new checkpoint after the deletion still inherits the value
    after = saver.put(
        later[2],
        generate_checkpoint(
            channel_values={"big": "stored once", "n": 4}, channel_versions={"big": 1, "n": 5}
        ),
        generate_metadata(step=4, run_id="run3"),
        {"n": 5},
    )
    assert saver.get_tuple(after).checkpoint["channel_values"] == {"big": "stored once", "n": 4}
    # and reopened on the same store (files), nothing depends on a cache
    if isinstance(saver.storage, FileStorage):
        reopened = VerifiedSaver(saver.storage.root)
        for config in (later[1], later[2], after):
            assert reopened.get_tuple(config).checkpoint["channel_values"]["big"] == "stored once"


# -- copy_thread ------------------------------------------------------------------------


def test_copy_thread_copies_checkpoints_writes_and_namespaces(saver):
    source = put_chain(saver, "src", 3)
    put_chain(saver, "src", 1, checkpoint_ns="child:1")
    saver.put_writes(source[-1], [("ch", "write_val")], "task")
    before = [(t.checkpoint, t.metadata) for t in saver.list(generate_config("src"))]

    saver.copy_thread("src", "dst")

    copied = list(saver.list(generate_config("dst")))
    original = list(saver.list(generate_config("src")))
    assert ids_of(copied) == ids_of(original) == [checkpoint_id(c) for c in source[::-1]]
    for c, o in zip(copied, original, strict=True):
        assert c.checkpoint == o.checkpoint
        assert c.metadata == o.metadata
        assert c.config["configurable"]["thread_id"] == "dst"
        if o.parent_config:
            assert c.parent_config["configurable"] == {
                **o.parent_config["configurable"],
                "thread_id": "dst",
            }
    assert copied[0].pending_writes == [("task", "ch", "write_val")]
    assert len(list(saver.list(generate_config("dst", checkpoint_ns="child:1")))) == 1
    assert [(t.checkpoint, t.metadata) for t in original] == before
    # the copy is independent of the source
    saver.delete_thread("src")
    assert saver.get_tuple(generate_config("dst")).checkpoint["channel_values"] == {"step": 2}
    assert saver.verify().ok


def test_copy_thread_copies_no_record_found_where_it_does_not_belong(saver):
    """A record under the source thread that names another thread (a file copied there
    by hand, a store restored badly) is damage: reported, and never copied, where it
    would become a checkpoint of the target that its source never had."""
    source = put_chain(saver, "src", 2)
    stranger = put_chain(saver, "other", 1)[0]
    stranger_id = checkpoint_id(stranger)
    saver.storage.write(
        keys.checkpoint_key("src", "", checkpoint_id(source[0])),
        saver.storage.read(keys.checkpoint_key("other", "", stranger_id)),
    )
    saver.copy_thread("src", "dst")
    assert ids_of(saver.list(generate_config("dst"))) == [checkpoint_id(source[1])]
    assert saver.stats.damaged_records == 1
    assert saver.get_tuple(generate_config("dst", checkpoint_id=stranger_id)) is None
    assert saver.get_tuple(generate_config("other")).config["configurable"]["thread_id"] == "other"


def test_copy_thread_of_missing_source_creates_nothing(saver):
    saver.copy_thread("nobody", "dst")
    assert list(saver.list({"configurable": {"thread_id": "dst"}})) == []


# -- prune --------------------------------------------------------------------------------


def test_prune_keep_latest_per_namespace_keeps_its_writes(saver):
    root = put_chain(saver, "t", 4)
    child = put_chain(saver, "t", 2, checkpoint_ns="child:1")
    other = put_chain(saver, "other", 3)
    saver.put_writes(root[-1], [("ch", "val")], "task")
    saver.put_writes(root[0], [("ch", "old")], "task")

    saver.prune(["t"], strategy="keep_latest")

    assert ids_of(saver.list(generate_config("t", checkpoint_ns=""))) == [checkpoint_id(root[-1])]
    assert ids_of(saver.list(generate_config("t", checkpoint_ns="child:1"))) == [
        checkpoint_id(child[-1])
    ]
    assert saver.get_tuple(root[-1]).pending_writes == [("task", "ch", "val")]
    assert saver.get_tuple(root[0]) is None
    assert ids_of(saver.list(generate_config("other"))) == [checkpoint_id(c) for c in other[::-1]]
    saver.prune([])
    saver.prune(["never-existed"])


def test_prune_delete_removes_every_checkpoint(saver):
    put_chain(saver, "t", 3)
    kept = put_chain(saver, "other", 1)
    saver.prune(["t"], strategy="delete")
    assert list(saver.list({"configurable": {"thread_id": "t"}})) == []
    assert ids_of(saver.list(None)) == [checkpoint_id(kept[0])]


def test_prune_rejects_unknown_strategy(saver):
    with pytest.raises(ValueError, match="keep_latest"):
        saver.prune(["t"], strategy="keep_oldest")


def test_prune_keeps_values_stored_only_in_pruned_records(saver):
    parent = saver.put(
        generate_config("t"),
        generate_checkpoint(
            channel_values={"a": "from step 0", "b": 0}, channel_versions={"a": 1, "b": 1}
        ),
        generate_metadata(step=0),
        {"a": 1, "b": 1},
    )
    for step in range(1, 4):
        parent = saver.put(
            parent,
            generate_checkpoint(
                channel_values={"a": "from step 0", "b": step},
                channel_versions={"a": 1, "b": step + 1},
            ),
            generate_metadata(step=step),
            {"b": step + 1},
        )

    saver.prune(["t"])

    (only,) = saver.list(generate_config("t"))
    assert only.checkpoint["channel_values"] == {"a": "from step 0", "b": 3}
    assert saver.verify().ok
    if isinstance(saver.storage, FileStorage):
        reopened = VerifiedSaver(saver.storage.root)
        assert reopened.get_tuple(generate_config("t")).checkpoint["channel_values"] == {
            "a": "from step 0",
            "b": 3,
        }


# -- against the reference ---------------------------------------------------------------


def test_same_operations_give_the_same_answers_as_in_memory_saver(saver):
    reference = InMemorySaver()
    checkpoints = [
        generate_checkpoint(
            channel_values={"a": "constant", "b": [step]},
            channel_versions={"a": 1, "b": step + 1},
        )
        for step in range(5)
    ]
    answers = []
    for target in (saver, reference):
        parent = None
        for step, checkpoint in enumerate(checkpoints):
            config = generate_config("t")
            if parent:
                config["configurable"]["checkpoint_id"] = checkpoint_id(parent)
            versions = {"a": 1, "b": step + 1}
            parent = target.put(
                config,
                checkpoint,
                generate_metadata(step=step, source="loop" if step else "input"),
                versions if step == 0 else {"b": step + 1},
            )
            target.put_writes(parent, [("x", step), ("y", str(step))], f"task{step}")
        answers.append(
            [
                (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
                for t in target.list(generate_config("t"))
            ]
        )
    ours, theirs = answers
    assert ours == theirs


def test_sync_and_async_twins_agree(saver):
    stored = put_chain(saver, "t", 3)
    saver.put_writes(stored[-1], [("ch", 1)], "task")

    async def read_async():
        return (
            await saver.aget_tuple(generate_config("t")),
            [t async for t in saver.alist(generate_config("t"))],
        )

    latest, listed = asyncio.run(read_async())
    assert latest == saver.get_tuple(generate_config("t"))
    assert listed == list(saver.list(generate_config("t")))


def test_unique_thread_ids_do_not_share_state(saver):
    thread_ids = [str(uuid4()) for _ in range(3)]
    for i, thread_id in enumerate(thread_ids):
        put_chain(saver, thread_id, i + 1)
    for i, thread_id in enumerate(thread_ids):
        assert len(list(saver.list(generate_config(thread_id)))) == i + 1
