"""Values read again are copied from a kept decode, never shared, never stale.

A saver keeps the value a serialized part deserialized to once that part has
been read twice, and hands out deep copies of it. Counted here:
deserializations per read (none from the third read of unchanged bytes on), and
the looks a read of a value of many parts takes at what is kept (one for them
all).
Checked: a copy equals a new deserialization and shares no mutable object with
it or with another read; what a caller does to its copy is never seen by the
next read; a value holding anything that cannot be copied for certain is
deserialized every time; damage and rewrites are still seen; each serializer
(a ``with_allowlist`` clone's, an encrypting one) deserializes for itself.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import itertools
import random
import threading
import tracemalloc
import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.engine.decoded_values import (
    DecodedValues,
    Uncopyable,
    copier,
    plain_copy,
)
from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.records.values import join_parts

THREAD = {"configurable": {"thread_id": "t"}}


class Color(enum.Enum):
    RED = "red"


class Inner(BaseModel):
    tags: list[str]
    scores: dict[str, float]


class Outer(BaseModel):
    inner: Inner
    when: datetime.datetime
    color: Color
    pair: tuple[int, str]


@dataclasses.dataclass
class Point:
    x: int


class Tagged(str):
    pass


class OwnCopy(BaseModel):
    x: int

    def __deepcopy__(self, memo: Any = None) -> OwnCopy:
        return self


def messages() -> list[Any]:
    return [
        HumanMessage([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": "u"}]),
        AIMessage(
            "calling",
            tool_calls=[{"name": "search", "args": {"q": ["a", "b"]}, "id": "c1"}],
            usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
            response_metadata={"model": "m", "nested": {"k": [1, 2]}},
        ),
        ToolMessage("found", tool_call_id="c1", artifact={"rows": [[1, 2]]}),
    ]


def mutable_ids(value: Any) -> set[int]:
    """The ids of every mutable object inside ``value``, the value itself included."""
    found: set[int] = set()

    def walk(item: Any) -> None:
        if isinstance(item, (list, dict, set, BaseModel)):
            found.add(id(item))
        if isinstance(item, BaseModel):
            found.add(id(item.__dict__))
            walk(item.__dict__)
            if item.__pydantic_extra__ is not None:
                walk(item.__pydantic_extra__)
            found.add(id(item.__pydantic_fields_set__))
        elif isinstance(item, dict):
            for key, inner in item.items():
                walk(key)
                walk(inner)
        elif isinstance(item, (list, tuple)):
            for inner in item:
                walk(inner)

    walk(value)
    return found


# -- plain_copy ---------------------------------------------------------------------------


def test_a_copy_of_messages_equals_them_and_shares_nothing_mutable():
    original = messages()
    copied = plain_copy(original)
    assert copied == original
    assert [type(m) for m in copied] == [type(m) for m in original]
    assert [m.model_fields_set for m in copied] == [m.model_fields_set for m in original]
    assert not mutable_ids(copied) & mutable_ids(original)


def test_a_copy_equals_a_new_deserialization():
    serde = JsonPlusSerializer()
    part = serde.dumps_typed(messages())
    decoded = serde.loads_typed(part)
    copied = plain_copy(decoded)
    again = serde.loads_typed(part)
    assert copied == again
    assert [m.__dict__ for m in copied] == [m.__dict__ for m in again]
    assert [m.__pydantic_extra__ for m in copied] == [m.__pydantic_extra__ for m in again]


def nested_value() -> dict[Any, Any]:
    return {
        "outer": Outer(
            inner=Inner(tags=["a"], scores={"x": 1.5}),
            when=datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc),
            color=Color.RED,
            pair=(1, "one"),
        ),
        "id": uuid.uuid4(),
        (1, "key"): [None, True, b"raw"],
        "empty": [[], {}],
        "messages": messages(),
    }


def test_nested_models_enums_dates_and_tuples_are_copied():
    value = nested_value()
    copied = plain_copy(value)
    assert copied == value
    assert copied["outer"].inner is not value["outer"].inner
    assert copied["outer"].inner.tags is not value["outer"].inner.tags
    assert copied["outer"].color is Color.RED
    assert not mutable_ids(copied) & mutable_ids(value)


# -- copier ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [messages, nested_value], ids=["messages", "nested"])
def test_a_copier_gives_a_new_copy_at_each_call_equal_to_what_it_copies(make):
    kept = plain_copy(make())
    copy = copier(kept)
    first, second = copy(), copy()
    assert first == second == kept
    assert plain_copy(kept) == first
    assert not mutable_ids(first) & mutable_ids(second)
    assert not mutable_ids(first) & mutable_ids(kept)


def test_a_copier_s_copies_keep_each_model_s_fields_set_order_and_extras():
    kept = plain_copy(messages())
    copied = copier(kept)()
    assert [m.model_fields_set for m in copied] == [m.model_fields_set for m in kept]
    assert [list(m.__dict__) for m in copied] == [list(m.__dict__) for m in kept]
    assert [m.__pydantic_extra__ for m in copied] == [m.__pydantic_extra__ for m in kept]
    assert [type(m) for m in copied] == [type(m) for m in kept]


def test_what_a_caller_does_to_a_copier_s_copy_is_not_seen_by_the_next():
    kept = plain_copy(messages())
    copy = copier(kept)
    for _ in range(3):
        read = copy()
        assert read == messages()
        read[1].tool_calls[0]["args"]["q"].append("mine")
        read[1].additional_kwargs["mine"] = True
        read[1].name = "mine"  # pydantic adds it to the copy's fields set
        read[0].content.append({"type": "text", "text": "mine"})
        read[2].artifact["rows"].clear()
    assert kept == messages()
    assert copy()[1].model_fields_set == messages()[1].model_fields_set


def test_the_copiers_of_a_chat_s_messages_share_what_they_have_alike():
    # each kept message has a copier for as long as it is kept: the parts messages have
    # alike (the fields given, the empty containers) are held once, so a copier costs
    # less than the message it copies (here 0.3 KB against 0.8 KB; copiers made of
    # closures took 1.2 KB)
    chat = [HumanMessage(f"q {n}") if n % 2 else AIMessage(f"a {n}") for n in range(400)]
    kept = plain_copy(chat)
    copier(kept[:2])  # what is shared, made before measuring
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        copies = copier(kept)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown / len(chat) < 600
    assert copies() == chat


@pytest.mark.parametrize(
    "value",
    [
        Point(1),
        [1, {"p": Point(2)}],
        {1, 2},
        bytearray(b"x"),
        Tagged("s"),
        OwnCopy(x=1),
        (lambda: None),
    ],
    ids=["dataclass", "nested", "set", "bytearray", "str-subclass", "own-deepcopy", "function"],
)
@pytest.mark.parametrize("copy", [plain_copy, copier])
def test_anything_else_is_refused(value, copy):
    with pytest.raises(Uncopyable):
        copy(value)


# -- DecodedValues -------------------------------------------------------------------------


class CountingSerializer(JsonPlusSerializer):
    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        self.loads += 1
        return super().loads_typed(data)


def test_a_part_is_deserialized_twice_then_copied():
    serde = CountingSerializer()
    part = serde.dumps_typed(messages())
    values = DecodedValues()
    reads = [values.loads(serde, part) for _ in range(5)]
    assert serde.loads == 2
    assert all(read == messages() for read in reads)
    for one, other in zip(reads, reads[1:], strict=False):
        assert not mutable_ids(one) & mutable_ids(other)


def test_what_a_caller_does_to_its_copy_is_not_seen_by_the_next_read():
    serde = CountingSerializer()
    part = serde.dumps_typed(messages())
    values = DecodedValues()
    for _ in range(4):
        read = values.loads(serde, part)
        assert read == messages()
        read[1].tool_calls[0]["args"]["q"].append("mine")
        read[0].content.append({"type": "text", "text": "mine"})
        read[2].artifact["rows"].clear()
        read.append(HumanMessage("mine"))


def test_a_value_that_cannot_be_copied_is_deserialized_every_time():
    serde = CountingSerializer()
    part = serde.dumps_typed([HumanMessage("hi"), {1, 2}])
    values = DecodedValues()
    reads = [values.loads(serde, part) for _ in range(4)]
    assert serde.loads == 4
    assert reads[0] == reads[3]


def test_each_serializer_deserializes_for_itself():
    first, second = CountingSerializer(), CountingSerializer()
    part = first.dumps_typed(["a"])
    values = DecodedValues()
    for _ in range(3):
        values.loads(first, part)
        values.loads(second, part)
    assert (first.loads, second.loads) == (2, 2)


def test_the_kept_values_stay_within_their_byte_bound():
    serde = CountingSerializer()
    parts = [serde.dumps_typed(["x" * 1000, n]) for n in range(10)]
    values = DecodedValues(max_bytes=3 * len(parts[0][1]))
    for part in parts:
        for _ in range(3):
            values.loads(serde, part)
    assert values._bytes <= values.max_bytes
    assert len(values._entries) == 3
    before = serde.loads
    values.loads(serde, parts[-1])  # kept
    values.loads(serde, parts[0])  # dropped long ago: deserialized again
    assert serde.loads == before + 1


class Copied:
    """What the test's copy makes of an item: it says which item it came from."""

    def __init__(self, item: Any) -> None:
        self.item = item

    def __eq__(self, other: object) -> bool:
        return (other.item if isinstance(other, Copied) else other) == self.item

    __hash__ = None  # type: ignore[assignment]


def random_chain(rng, length: int) -> tuple[list[list[str]], list[tuple[Any, Any, int]]]:
    """Pieces and parts of a chain: a whole list, then extensions, some of them windows;
    every item a string of its own."""
    names = (f"i{n}" for n in itertools.count())
    pieces = [[next(names) for _ in range(rng.randrange(0, 4))]]
    parts: list[tuple[Any, Any, int]] = [(("msgpack", b""), None, 0)]
    count = len(pieces[0])
    for _ in range(length - 1):
        start = rng.randrange(0, count + 1) if rng.random() < 0.3 else 0
        pieces.append([next(names) for _ in range(rng.randrange(0, 4))])
        parts.append((("msgpack", b""), count, start))
        count = count - start + len(pieces[-1])
    return pieces, parts


def test_kept_pieces_join_as_copies_into_the_same_value_as_fresh_ones():
    rng = random.Random(7)
    for _ in range(400):
        pieces, parts = random_chain(rng, rng.randrange(1, 12))
        shared = [rng.random() < 0.6 for _ in pieces]
        copies: list[int] = []

        def copy_items(items: list[Any], copies: list[int] = copies) -> list[Any]:
            copies.append(len(items))
            return [Copied(item) for item in items]

        expected = join_parts([list(p) for p in pieces], parts)
        joined = join_parts([list(p) for p in pieces], parts, shared, copy_items)
        assert joined == expected
        if len(pieces) == 1:
            continue
        # an item is copied exactly when it came from a shared piece, each run of shared
        # pieces copied at once
        runs = sum(1 for i, kept in enumerate(shared) if kept and (i == 0 or not shared[i - 1]))
        assert len(copies) <= runs
        fresh = {
            item for piece, kept in zip(pieces, shared, strict=True) if not kept for item in piece
        }
        for item in joined:
            assert (item.item not in fresh) if isinstance(item, Copied) else (item in fresh)


def test_a_chain_that_does_not_fit_is_damage_whether_its_pieces_are_kept_or_not():
    parts = [(("msgpack", b""), None, 0), (("msgpack", b""), 3, 0)]
    for shared in ([False, False], [True, True], [True, False], [False, True]):
        with pytest.raises(RecordDamagedError, match="expects 3 items before it, found 2"):
            join_parts([["a", "b"], ["c"]], parts, shared, list)
        with pytest.raises(RecordDamagedError, match="holds a dict"):
            join_parts([["a", "b", "c"], {"c": 1}], parts, shared, list)
        with pytest.raises(RecordDamagedError, match="base is a str"):
            join_parts(["abc", ["d"]], parts, shared, list)


# -- through the saver -----------------------------------------------------------------------


def make_saver(backend: str, tmp_path, **kwargs: Any) -> VerifiedSaver:
    if backend == "memory":
        return VerifiedSaver.in_memory(**kwargs)
    return VerifiedSaver(tmp_path / "store", fsync=False, **kwargs)


def put_chat(saver: VerifiedSaver, steps: int) -> list[dict]:
    config: dict = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    configs = []
    chat: list[Any] = []
    for step in range(1, steps + 1):
        chat = [*chat, HumanMessage(f"m{step}", id=f"id{step}")]
        config = saver.put(
            config,
            generate_checkpoint(
                channel_values={"messages": chat}, channel_versions={"messages": step}
            ),
            generate_metadata(step=step),
            {"messages": step},
        )
        configs.append(config)
    return configs


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_get_tuple_of_an_unchanged_checkpoint_stops_deserializing_its_values(tmp_path, backend):
    serde = CountingSerializer()
    saver = make_saver(backend, tmp_path, serde=serde)
    put_chat(saver, 3)
    reads = []
    counts = []
    for _ in range(5):
        before = serde.loads
        reads.append(saver.get_tuple(THREAD).checkpoint["channel_values"]["messages"])
        counts.append(serde.loads - before)
    # each read deserializes the checkpoint and the metadata; the messages (three
    # parts: the first list, then two extensions), written here, on the first read only
    assert counts == [counts[0], counts[0] - 3, counts[0] - 3, counts[0] - 3, counts[0] - 3]
    assert saver.engine.decoded.deserialized == 3
    assert [m.content for m in reads[-1]] == ["m1", "m2", "m3"]
    reads[3].append(HumanMessage("mine"))
    reads[3][0].content = "changed"
    again = saver.get_tuple(THREAD).checkpoint["channel_values"]["messages"]
    assert [m.content for m in again] == ["m1", "m2", "m3"]


def test_values_another_saver_wrote_are_kept_from_their_second_read(tmp_path):
    # what a saver did not write itself may be read once and never again (a server
    # looking at many threads): it keeps the values it reads a second time
    put_chat(make_saver("files", tmp_path), 3)
    serde = CountingSerializer()
    reader = VerifiedSaver(tmp_path / "store", fsync=False, serde=serde)
    counts = []
    for _ in range(3):
        before = serde.loads
        reader.get_tuple(THREAD)
        counts.append(serde.loads - before)
    assert counts == [counts[0], counts[0], counts[0] - 3]
    assert reader.engine.decoded.deserialized == 6


def test_a_put_marks_only_the_parts_it_stored_as_its_own(tmp_path):
    saver = make_saver("files", tmp_path)
    put_chat(saver, 3)
    saver.get_tuple(THREAD)
    # a new list part per put (the first list, then two extensions): no part twice
    assert saver.engine.decoded.deserialized == 3
    saver.engine.decoded.clear()  # forgotten (as when the cache is full): as any reader
    saver.get_tuple(THREAD)
    saver.get_tuple(THREAD)
    assert saver.engine.decoded.deserialized == 9


def test_damage_after_values_are_kept_is_still_found(tmp_path):
    saver = make_saver("memory", tmp_path)
    configs = put_chat(saver, 3)
    for _ in range(3):
        assert saver.get_tuple(THREAD).config == configs[-1]
    newest = keys.checkpoint_key("t", "", configs[-1]["configurable"]["checkpoint_id"])
    damaged = bytearray(saver.storage.records[newest])
    damaged[len(damaged) // 2] ^= 0x01
    saver.storage.records[newest] = bytes(damaged)
    found = saver.get_tuple(THREAD)
    assert found.config == configs[-2]
    assert [m.content for m in found.checkpoint["channel_values"]["messages"]] == ["m1", "m2"]
    assert saver.stats.damaged_records == 1


def test_a_rewrite_by_another_saver_is_read_as_written(tmp_path):
    reader = make_saver("files", tmp_path)
    configs = put_chat(reader, 2)
    for _ in range(3):
        reader.get_tuple(THREAD)
    writer = VerifiedSaver(tmp_path / "store", fsync=False)
    newest = configs[-1]
    writer.put(
        configs[0],
        {
            **generate_checkpoint(
                channel_values={"messages": [HumanMessage("rewritten")]},
                channel_versions={"messages": 2},
            ),
            "id": newest["configurable"]["checkpoint_id"],
        },
        generate_metadata(step=2),
        {"messages": 2},
    )
    messages = reader.get_tuple(THREAD).checkpoint["channel_values"]["messages"]
    assert [m.content for m in messages] == ["rewritten"]


def test_an_encrypting_serializer_reads_its_kept_values_back(tmp_path):
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16)
    saver = make_saver("files", tmp_path, serde=serde)
    put_chat(saver, 3)
    reads = [saver.get_tuple(THREAD).checkpoint["channel_values"]["messages"] for _ in range(4)]
    assert all([m.content for m in read] == ["m1", "m2", "m3"] for read in reads)
    assert not mutable_ids(reads[2]) & mutable_ids(reads[3])


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_threads_reading_and_changing_their_copies_at_once_each_get_the_stored_value(
    tmp_path, backend
):
    saver = make_saver(backend, tmp_path)
    put_chat(saver, 5)
    expected = [f"m{n}" for n in range(1, 6)]
    start = threading.Barrier(8)
    wrong: list[Any] = []

    def reader() -> None:
        start.wait()
        for _ in range(40):
            messages = saver.get_tuple(THREAD).checkpoint["channel_values"]["messages"]
            if [m.content for m in messages] != expected:
                wrong.append([m.content for m in messages])
            messages[0].content = "changed"
            messages[1].additional_kwargs["mine"] = [1]
            messages.append(HumanMessage("mine"))

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    last = saver.get_tuple(THREAD).checkpoint["channel_values"]["messages"]
    assert [m.content for m in last] == expected
    assert all(m.additional_kwargs == {} for m in last)


class CountingLock:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.taken = 0

    def __enter__(self) -> None:
        self._lock.acquire()
        self.taken += 1

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_a_value_of_many_kept_parts_is_looked_up_once_and_copied_together(tmp_path, backend):
    serde = CountingSerializer()
    saver = make_saver(backend, tmp_path, serde=serde)
    put_chat(saver, 30)  # the messages: a whole list, then 29 extensions of one message
    first = saver.get_tuple(THREAD).checkpoint["channel_values"]["messages"]
    second = saver.get_tuple(THREAD).checkpoint["channel_values"]["messages"]
    lock = saver.engine.decoded._lock = CountingLock()
    before = serde.loads
    third = saver.get_tuple(THREAD).checkpoint["channel_values"]["messages"]
    # the 30 parts, all kept by now: one look for them all, none deserialized again (the
    # checkpoint and its metadata are: 2)
    assert (lock.taken, serde.loads - before) == (1, 2)
    assert [m.content for m in third] == [f"m{n}" for n in range(1, 31)]
    assert first == second == third
    assert not mutable_ids(second) & mutable_ids(third)
