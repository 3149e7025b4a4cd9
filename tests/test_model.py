"""Model-based test: ``VerifiedSaver`` against LangGraph's ``InMemorySaver``.

Hypothesis drives a ``VerifiedSaver`` (on files, reopened at random, and in
memory) and a reference saver with the same random sequence of ``put``,
``put_writes``, ``delete_thread``, ``copy_thread``, ``prune`` and
``delete_for_runs``, and after every step checks that both return the same
checkpoints, channel values, metadata, parents and pending writes.

The reference is LangGraph's ``InMemorySaver``, which implements the base five
operations; ``ReferenceSaver`` adds the other three on its dictionaries, as
``BaseCheckpointSaver`` and the conformance specs describe them. Two places
where ``InMemorySaver`` is not a faithful model are compared differently (see
``expected_list``): it lists a thread namespace by namespace in insertion
order, where ``SqliteSaver`` and ``PostgresSaver`` (and ``VerifiedSaver``)
list a thread newest first across its namespaces; and with ``config=None`` the
order of threads is unspecified, so that listing is compared as a set.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_checkpoint_verified import VerifiedSaver

# Thread ids a path scheme can get wrong: empty, traversal, non-ASCII (composed and
# decomposed), case variants, and one long enough to be stored under a hashed name.
THREADS = ["t", "T", "", "../x", "Ü", "U\u0308", "L" * 70]
NAMESPACES = ["", "child:1"]
CHANNELS = ["count", "messages", "branch:to:node"]
RUNS = ["run-1", "run-2", "run-3"]
TASKS = ["task-a", "TASK-A", "", "00000000-0000-0000-0000-000000000000", "t/../x"]
# a task keeps its path from call to call, as in LangGraph
TASK_PATHS = {task_id: ("~__pregel_pull, node" if i % 2 else "") for i, task_id in enumerate(TASKS)}
WRITE_CHANNELS = ["count", "messages", "__error__", "__interrupt__", "__resume__"]

values = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.text(alphabet="aÜ/\x00", max_size=3),
    st.lists(st.integers(0, 3), max_size=2),
)
write_lists = st.lists(st.tuples(st.sampled_from(WRITE_CHANNELS), values), max_size=3)


class ReferenceSaver(InMemorySaver):
    """``InMemorySaver`` with the three operations it leaves unimplemented.

    Blobs are keyed by channel version, not by checkpoint, so a checkpoint
    that survives a prune or a delete still loads every channel value: the
    behaviour ``VerifiedSaver`` has to match.
    """

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        doomed_runs = set(run_ids)
        for thread_id, namespaces in self.storage.items():
            for checkpoint_ns, checkpoints in namespaces.items():
                for checkpoint_id, (_, metadata, _) in list(checkpoints.items()):
                    if self.serde.loads_typed(metadata).get("run_id") in doomed_runs:
                        del checkpoints[checkpoint_id]
                        self.writes.pop((thread_id, checkpoint_ns, checkpoint_id), None)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id in thread_ids:
            if thread_id not in self.storage:
                continue
            for checkpoint_ns, checkpoints in self.storage[thread_id].items():
                keep = max(checkpoints) if strategy == "keep_latest" and checkpoints else None
                for checkpoint_id in [cid for cid in checkpoints if cid != keep]:
                    del checkpoints[checkpoint_id]
                    self.writes.pop((thread_id, checkpoint_ns, checkpoint_id), None)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        if source_thread_id == target_thread_id or source_thread_id not in self.storage:
            return
        for checkpoint_ns, checkpoints in self.storage[source_thread_id].items():
            self.storage[target_thread_id][checkpoint_ns].update(checkpoints)
        for (thread_id, checkpoint_ns, checkpoint_id), writes in list(self.writes.items()):
            if thread_id == source_thread_id:
                self.writes[(target_thread_id, checkpoint_ns, checkpoint_id)].update(writes)
        for (thread_id, checkpoint_ns, channel, version), blob in list(self.blobs.items()):
            if thread_id == source_thread_id:
                self.blobs[(target_thread_id, checkpoint_ns, channel, version)] = blob


def config_of(thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None) -> dict:
    configurable = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def normalized(found: CheckpointTuple | None) -> Any:
    """What a user can observe of a tuple, as plain comparable data."""
    if found is None:
        return None
    configurable = found.config["configurable"]
    parent = found.parent_config["configurable"] if found.parent_config else None
    return {
        "at": (
            configurable["thread_id"],
            configurable.get("checkpoint_ns", ""),
            configurable["checkpoint_id"],
        ),
        "checkpoint": found.checkpoint,
        "metadata": found.metadata,
        "parent": (
            (parent["thread_id"], parent["checkpoint_ns"], parent["checkpoint_id"])
            if parent
            else None
        ),
        "pending_writes": [tuple(write) for write in found.pending_writes or []],
    }


class SaverComparison(RuleBasedStateMachine):
    """One ``VerifiedSaver`` and one ``ReferenceSaver`` fed the same operations."""

    def __init__(self) -> None:
        super().__init__()
        self.reference = ReferenceSaver()
        self.saver = self.open_saver()
        self.counter = 0
        # the writes of each put_writes call, to repeat or extend them later
        self.sent_writes: dict[tuple, list[tuple[str, Any]]] = {}

    def open_saver(self) -> VerifiedSaver:
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------

    def existing(self, thread_id: str, checkpoint_ns: str) -> list[str]:
        """Checkpoint ids of a thread's namespace, from the reference, oldest first."""
        namespaces = self.reference.storage.get(thread_id, {})
        return sorted(namespaces.get(checkpoint_ns, {}))

    def all_checkpoints(self) -> list[tuple[str, str, str]]:
        return [
            (thread_id, checkpoint_ns, checkpoint_id)
            for thread_id in THREADS
            for checkpoint_ns in NAMESPACES
            for checkpoint_id in self.existing(thread_id, checkpoint_ns)
        ]

    def next_checkpoint_id(self) -> str:
        # ordered like LangGraph's uuid6 ids: later ones sort higher
        self.counter += 1
        return f"1f0{self.counter:05x}-0000-6000-8000-{self.counter:012x}"

    # -- operations --------------------------------------------------------

    @rule(
        data=st.data(),
        thread_id=st.sampled_from(THREADS),
        checkpoint_ns=st.sampled_from(NAMESPACES),
        run_id=st.sampled_from(RUNS),
        source=st.sampled_from(["input", "loop", "update"]),
    )
    def put(
        self, data: st.DataObject, thread_id: str, checkpoint_ns: str, run_id: str, source: str
    ) -> None:
        # mostly the latest (a run going on), sometimes none (a new run) or an older one (a fork)
        older = self.existing(thread_id, checkpoint_ns)
        parent_id = data.draw(st.sampled_from([*older[-1:], None, *older[:-1]]), label="parent")
        if parent_id is None:
            parent_versions: dict[str, Any] = {}
            parent_values: dict[str, Any] = {}
            step = -1
        else:
            parent = self.reference.get_tuple(config_of(thread_id, checkpoint_ns, parent_id))
            assert parent is not None
            parent_versions = dict(parent.checkpoint["channel_versions"])
            parent_values = dict(parent.checkpoint["channel_values"])
            step = parent.metadata["step"]
        # As LangGraph's loop does: the checkpoint carries every channel's version
        # forward; the ones that changed get the saver's next version and are the
        # only ones in new_versions. A cleared channel keeps a version but no value.
        versions = dict(parent_versions)
        channel_values = dict(parent_values)
        new_versions: dict[str, Any] = {}
        for channel in CHANNELS:
            change = data.draw(st.sampled_from(["keep", "keep", "set", "clear"]), label=channel)
            if change == "keep" or (change == "clear" and channel not in versions):
                continue
            versions[channel] = self.saver.get_next_version(versions.get(channel), None)
            new_versions[channel] = versions[channel]
            if change == "set":
                channel_values[channel] = data.draw(values, label=f"{channel} value")
            else:
                channel_values.pop(channel, None)
        checkpoint_id = self.next_checkpoint_id()
        checkpoint = {
            "v": 4,
            "id": checkpoint_id,
            "ts": f"2025-01-01T00:00:{self.counter:02d}+00:00",
            "channel_values": channel_values,
            "channel_versions": versions,
            "versions_seen": {"node": {ch: v for ch, v in versions.items() if ch != "messages"}},
            "updated_channels": sorted(new_versions),
        }
        metadata = {"source": source, "step": step + 1, "run_id": run_id, "parents": {}}
        config = config_of(thread_id, checkpoint_ns, parent_id)
        stored = self.saver.put(config, checkpoint, metadata, new_versions)
        expected = self.reference.put(config, checkpoint, metadata, new_versions)
        assert stored == expected
        # then, as in a graph step, tasks save their writes on the new checkpoint
        for task_id in data.draw(st.lists(st.sampled_from(TASKS), max_size=2), label="tasks"):
            writes = data.draw(write_lists, label=f"writes of {task_id!r}")
            self.send_writes((thread_id, checkpoint_ns, checkpoint_id, task_id), writes)

    @precondition(lambda self: self.all_checkpoints())
    @rule(
        data=st.data(),
        task_id=st.sampled_from(TASKS),
        how=st.sampled_from(["new", "new", "repeat", "extend"]),
        fresh=write_lists,
    )
    def put_writes(
        self,
        data: st.DataObject,
        task_id: str,
        how: str,
        fresh: list[tuple[str, Any]],
    ) -> None:
        checkpoints = set(self.all_checkpoints())
        # "repeat" and "extend" go back to an earlier call, on a checkpoint still there
        earlier = [key for key in self.sent_writes if key[:3] in checkpoints]
        if how != "new" and earlier:
            key = data.draw(st.sampled_from(earlier), label="earlier call")
        else:
            at = data.draw(st.sampled_from(sorted(checkpoints)), label="checkpoint")
            key = (*at, task_id)
        previous = self.sent_writes.get(key, [])
        # "repeat" is a retried call; "extend" is how LangGraph saves the null
        # task's writes: the earlier ones again, then the new ones
        self.send_writes(key, {"new": fresh, "repeat": previous, "extend": previous + fresh}[how])

    def send_writes(self, key: tuple[str, str, str, str], writes: list[tuple[str, Any]]) -> None:
        thread_id, checkpoint_ns, checkpoint_id, task_id = key
        self.sent_writes[key] = writes
        config = config_of(thread_id, checkpoint_ns, checkpoint_id)
        self.saver.put_writes(config, writes, task_id, TASK_PATHS[task_id])
        self.reference.put_writes(config, writes, task_id, TASK_PATHS[task_id])

    # The operations that remove or copy run only on a store that holds checkpoints,
    # so that most sequences have something for them to get wrong.
    @precondition(lambda self: len(self.all_checkpoints()) >= 3)
    @rule(thread_id=st.sampled_from(THREADS))
    def delete_thread(self, thread_id: str) -> None:
        self.saver.delete_thread(thread_id)
        self.reference.delete_thread(thread_id)

    @precondition(lambda self: self.all_checkpoints())
    @rule(source=st.sampled_from(THREADS), destination=st.sampled_from(THREADS))
    def copy_thread(self, source: str, destination: str) -> None:
        self.saver.copy_thread(source, destination)
        self.reference.copy_thread(source, destination)

    @precondition(lambda self: len(self.all_checkpoints()) >= 3)
    @rule(
        thread_ids=st.lists(st.sampled_from(THREADS), max_size=3, unique=True),
        strategy=st.sampled_from(["keep_latest", "delete"]),
    )
    def prune(self, thread_ids: list[str], strategy: str) -> None:
        self.saver.prune(thread_ids, strategy=strategy)
        self.reference.prune(thread_ids, strategy=strategy)

    @precondition(lambda self: len(self.all_checkpoints()) >= 3)
    @rule(run_ids=st.lists(st.sampled_from(RUNS), max_size=2, unique=True))
    def delete_for_runs(self, run_ids: list[str]) -> None:
        self.saver.delete_for_runs(run_ids)
        self.reference.delete_for_runs(run_ids)

    # -- what both must agree on ---------------------------------------------

    def expected_list(self, thread_id: str, checkpoint_ns: str | None, **kwargs: Any) -> list:
        """``reference.list`` ordered newest first across namespaces, as SqliteSaver does."""
        limit = kwargs.pop("limit", None)
        config = {"configurable": {"thread_id": thread_id}}
        if checkpoint_ns is not None:
            config["configurable"]["checkpoint_ns"] = checkpoint_ns
        found = [normalized(t) for t in self.reference.list(config, **kwargs)]
        found.sort(key=lambda item: item["at"][2], reverse=True)
        return found[:limit] if limit is not None else found

    def actual_list(self, thread_id: str, checkpoint_ns: str | None, **kwargs: Any) -> list:
        config = {"configurable": {"thread_id": thread_id}}
        if checkpoint_ns is not None:
            config["configurable"]["checkpoint_ns"] = checkpoint_ns
        return [normalized(t) for t in self.saver.list(config, **kwargs)]

    @invariant()
    def same_checkpoints(self) -> None:
        for thread_id in THREADS:
            for checkpoint_ns in NAMESPACES:
                config = config_of(thread_id, checkpoint_ns)
                assert normalized(self.saver.get_tuple(config)) == normalized(
                    self.reference.get_tuple(config)
                ), f"latest of {thread_id!r} {checkpoint_ns!r}"
                ids = self.existing(thread_id, checkpoint_ns)
                for checkpoint_id in ids:
                    # every remaining checkpoint loads in full (values included),
                    # whatever prune or delete_for_runs removed around it
                    config = config_of(thread_id, checkpoint_ns, checkpoint_id)
                    assert normalized(self.saver.get_tuple(config)) == normalized(
                        self.reference.get_tuple(config)
                    ), f"checkpoint {checkpoint_id} of {thread_id!r} {checkpoint_ns!r}"
                assert self.saver.get_tuple(config_of(thread_id, checkpoint_ns, "1f0-none")) is None
                for ns in (checkpoint_ns, None):
                    assert self.actual_list(thread_id, ns) == self.expected_list(thread_id, ns)
                    assert self.actual_list(thread_id, ns, limit=2) == self.expected_list(
                        thread_id, ns, limit=2
                    )
                if ids:
                    middle = {"configurable": {"checkpoint_id": ids[len(ids) // 2]}}
                    assert self.actual_list(
                        thread_id, checkpoint_ns, before=middle, limit=1
                    ) == self.expected_list(thread_id, checkpoint_ns, before=middle, limit=1)
            for query in ({"run_id": "run-2"}, {"source": "loop", "step": 1}):
                assert self.actual_list(thread_id, None, filter=query) == self.expected_list(
                    thread_id, None, filter=query
                )

        def everything(saver: Any) -> list:
            return sorted(
                (normalized(t) for t in saver.list(None)), key=lambda item: repr(item["at"])
            )

        assert everything(self.saver) == everything(self.reference)

    @invariant()
    def store_verifies(self) -> None:
        report = self.saver.verify()
        assert report.ok, report


class FileSaverComparison(SaverComparison):
    def open_saver(self) -> VerifiedSaver:
        self.directory = tempfile.mkdtemp(prefix="verified-model-")
        return VerifiedSaver(self.directory, fsync=False)

    @precondition(lambda self: self.all_checkpoints())
    @rule()
    def reopen(self) -> None:
        # nothing may live only in the old saver's memory (its parent-refs cache)
        self.saver.close()
        self.saver = VerifiedSaver(self.directory, fsync=False)

    def teardown(self) -> None:
        self.saver.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class MemorySaverComparison(SaverComparison):
    def open_saver(self) -> VerifiedSaver:
        return VerifiedSaver.in_memory()


MODEL_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.parametrize(
    "machine", [FileSaverComparison, MemorySaverComparison], ids=["files", "memory"]
)
def test_verified_saver_agrees_with_the_reference(machine: type[SaverComparison]) -> None:
    machine.TestCase.settings = MODEL_SETTINGS
    machine.TestCase().runTest()


# -- disagreements the model found, kept as plain tests ------------------------


@pytest.fixture(params=["files", "memory"])
def saver(request: pytest.FixtureRequest, tmp_path: Any) -> VerifiedSaver:
    if request.param == "files":
        return VerifiedSaver(tmp_path, fsync=False)
    return VerifiedSaver.in_memory()


def pending_writes_after(saver: Any, calls: list[list[tuple[str, Any]]]) -> list:
    stored = saver.put(config_of("t", ""), empty_checkpoint(), {}, {})
    for writes in calls:
        saver.put_writes(stored, writes, "task")
    return saver.get_tuple(stored).pending_writes


def test_a_repeated_put_writes_adds_only_the_writes_at_new_indices(saver: VerifiedSaver) -> None:
    # LangGraph saves the null task's writes again with the new ones appended;
    # a write is kept once per (task_id, index), the first one stored winning
    calls = [[("a", 1)], [("a", 1), ("b", 2)], [("a", "other"), ("b", 2)], [("a", 1)]]
    expected = [("task", "a", 1), ("task", "b", 2)]
    assert pending_writes_after(InMemorySaver(), calls) == expected
    assert pending_writes_after(saver, calls) == expected


def test_special_writes_of_one_kind_keep_the_last(saver: VerifiedSaver) -> None:
    calls = [[("__error__", "first"), ("x", 1), ("__error__", "second")], [("__resume__", 1)]]
    expected = [("task", "__resume__", 1), ("task", "__error__", "second"), ("task", "x", 1)]
    assert pending_writes_after(InMemorySaver(), calls) == expected
    assert pending_writes_after(saver, calls) == expected
