"""The value chain: how a channel value is stored once, and read back.

A channel value is stored in a checkpoint record in one of three encodings:

* ``VALUE_FULL``: the serialized value itself.
* ``VALUE_EXTEND``: a list that extends the value an earlier record holds. The
  record stores only the items appended, plus a base: the id of the checkpoint
  whose record holds the earlier value, that value's version and its length.
* ``VALUE_WINDOW``: the same, for a list that also lost its first items (a
  window of the latest messages, kept by ``trim_messages`` or by
  ``RemoveMessage`` of the oldest): the base, how many of its first items the
  value leaves out, and the items appended.

A chat's message list (``add_messages``) grows by a message or two per step:
stored whole, it is serialized, compressed and written again at every step,
and the store grows with the square of the chat's length. Stored as
``VALUE_EXTEND``, each message is serialized and compressed once.

A chain of extensions is bounded: after ``max_chain`` extensions the whole
value is stored again. That bounds what a read decodes (one full value and at
most ``max_chain`` extensions) and what one damaged record can make unusable
(the versions until the next full value). A chain with windows in it is
stored whole again after ``WINDOW_CHAIN`` extensions, or before the items it
left out outnumber the items it keeps, so a read never decodes more than twice
the items of the value it returns.

The writer knows a new value extends the previous one without serializing the
old items: it keeps, per thread, namespace and channel, the list it stored
last (the item objects themselves, not copies) and compares item identity.
LangGraph's reducers build a new list at each step but keep the item objects
of the old one, so identity is exact and cheap; anything else (another
process's records, a list rebuilt from a checkpoint, an item replaced) is
stored whole. An item changed in place after it was stored is not stored
again, as a new object would be.
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_verified.errors import RecordDamagedError
from langgraph_checkpoint_verified.records.kinds import (
    EMPTY_TYPE,
    VALUE_EXTEND,
    VALUE_FULL,
    VALUE_WINDOW,
    CheckpointRecord,
    StoredValue,
    Typed,
)

DEFAULT_MAX_CHAIN = 200
"""Extensions in a row before a value is stored whole again.

Whole copies every N versions cost the square of a chat's length divided by N
on disk; 200 keeps a 600-step chat's store within 2.5 times a 300-step one's
(``make bench``), and a read decodes at most one whole value and 200 small
extensions, most of them from a cache when the process wrote them."""

WINDOW_CHAIN = 4
"""Extensions in a row before a list that also lost items is stored whole again (a
store may ask for fewer: ``window_chain_limit``, 0 on an object store).

A window's chain saves at most the window's items per step, where a growing
list's saves the whole list so far: a short chain takes most of that saving (the
whole window serialized at one step in 5), and a reader new to the thread reads
at most 4 more records for it."""

_REMEMBERED_LISTS = 1024
"""Lists a put stored, by channel: the threads this process is writing."""
_READ_LISTS = 128
"""Lists read back and not yet extended by a put: a run reads its thread's newest
checkpoint and puts soon after, so only the runs in flight need theirs. A process that
reads many threads and writes none (a server answering ``get_state``, the command line)
keeps no more than this many lists of messages alive."""

ValueParts = list[tuple[Typed, "int | None", int]]
"""A value's serialized parts, oldest first, each with the item count of its base
(``None`` for the whole value the chain starts with) and how many of the base's
first items it leaves out (``start``, 0 unless the part is a ``VALUE_WINDOW``)."""


class ValueUnavailable(Exception):
    """A value's chain runs through a record that is missing or does not hold it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Stored:
    version: Any
    checkpoint_id: str
    items: list[Any]
    chain: int
    dropped: int
    """Items the chain's windows left out, all told."""


class ListMemory:
    """Remembers the last list stored per (thread, namespace, channel), to store only what it gains.

    Args:
        max_chain: Extensions in a row before the value is stored whole again.
        window_chain: The same, for a chain in which the list also lost items.

    Example:
        >>> from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
        >>> memory = ListMemory()
        >>> serde = JsonPlusSerializer()
        >>> first = ["a"]
        >>> memory.encode(("t", "", "messages"), "1", "c1", first, None, serde).encoding
        0
        >>> second = first + ["b"]
        >>> stored = memory.encode(("t", "", "messages"), "2", "c2", second, ("1", "c1"), serde)
        >>> stored.encoding, stored.base, serde.loads_typed(stored.typed)
        (1, ('c1', '1', 1), ['b'])
        >>> third = second[1:] + ["c"]
        >>> stored = memory.encode(("t", "", "messages"), "3", "c3", third, ("2", "c2"), serde)
        >>> stored.encoding, stored.base, stored.start, serde.loads_typed(stored.typed)
        (2, ('c2', '2', 2), 1, ['c'])
    """

    def __init__(
        self, max_chain: int = DEFAULT_MAX_CHAIN, window_chain: int = WINDOW_CHAIN
    ) -> None:
        self.max_chain = max_chain
        self.window_chain = window_chain
        self._lists: OrderedDict[tuple[str, str, str], _Stored] = OrderedDict()
        self._read: OrderedDict[tuple[str, str, str], _Stored] = OrderedDict()
        self._lock = threading.Lock()

    def encode(
        self,
        where: tuple[str, str, str],
        version: Any,
        checkpoint_id: str,
        value: Any,
        parent_ref: tuple[Any, str] | None,
        serde: SerializerProtocol,
    ) -> StoredValue:
        """How to store ``value`` at ``version`` in checkpoint ``checkpoint_id``.

        ``parent_ref`` is ``(version, holder checkpoint id)`` of the value the
        parent checkpoint has for this channel: an extension is only ever based
        on exactly that value.
        """
        if type(value) is not list:
            self.forget(where)
            return StoredValue(version, VALUE_FULL, serde.dumps_typed(value))
        with self._lock:
            # the list a run read back, else the one this process stored last: a caller
            # reading the thread between two puts (get_state) gets copies, not the run's
            candidates = (self._read.pop(where, None), self._lists.get(where))
        stored: StoredValue | None = None
        chain = dropped = 0
        for last in candidates:
            if (
                last is None
                or parent_ref is None
                # the parent's value is the one remembered: the same version in the same
                # record (two forks, or two machines, may each make a version number)
                or parent_ref != (last.version, last.checkpoint_id)
                or last.chain >= self.max_chain
            ):
                continue
            start = _window_start(last.items, value)
            if start is None:
                continue
            if last.dropped + start and (
                last.dropped + start > len(value) or last.chain >= self.window_chain
            ):
                break  # a window's chain long enough: stored whole
            count = len(last.items)
            chain, dropped = last.chain + 1, last.dropped + start
            stored = StoredValue(
                version,
                VALUE_WINDOW if start else VALUE_EXTEND,
                serde.dumps_typed(value[count - start :]),
                base=(parent_ref[1], last.version, count),
                start=start,
            )
            break
        if stored is None:
            stored = StoredValue(version, VALUE_FULL, serde.dumps_typed(value))
        with self._lock:
            # a shallow copy: the caller's list may be appended to in place later
            self._lists[where] = _Stored(version, checkpoint_id, list(value), chain, dropped)
            self._lists.move_to_end(where)
            while len(self._lists) > _REMEMBERED_LISTS:
                self._lists.popitem(last=False)
        return stored

    def remember(
        self,
        where: tuple[str, str, str],
        version: Any,
        holder_id: str,
        value: Any,
        parts: ValueParts,
    ) -> None:
        """Note a list just read back at ``version`` from ``holder_id``'s record, from
        ``parts``: a put based on it extends it.

        LangGraph starts every run from the checkpoint it reads, so the lists a
        run appends to are the ones ``get_tuple`` returned. The parts say how
        long the chain already is and what its windows left out, so chains stay
        bounded.
        """
        if type(value) is not list:
            return
        stored = _Stored(
            version, holder_id, list(value), len(parts) - 1, sum(start for *_, start in parts)
        )
        with self._lock:
            # even after our own put of this version: the run goes on with these objects
            # (kept apart from the lists puts stored until a put extends it: see _READ_LISTS)
            self._read[where] = stored
            self._read.move_to_end(where)
            while len(self._read) > _READ_LISTS:
                self._read.popitem(last=False)

    def forget(self, where: tuple[str, str, str]) -> None:
        with self._lock:
            self._lists.pop(where, None)
            self._read.pop(where, None)

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for lists in (self._lists, self._read):
                for where in [w for w in lists if w[0] == thread_id]:
                    del lists[where]


def _window_start(base: list[Any], value: Any) -> int | None:
    """How many of ``base``'s first items ``value`` leaves out, if ``value`` is the rest
    of ``base`` (the same objects) followed by new items; ``None`` otherwise."""
    if type(value) is not list:
        return None
    if len(value) >= len(base) and all(map(operator.is_, value, base)):
        return 0  # grew only: the usual case, checked first
    if not base or not value:
        return len(base) if not value else None
    first = value[0]
    for start in range(1, len(base)):
        if base[start] is first:
            kept = len(base) - start
            if len(value) >= kept and all(map(operator.is_, value[1:kept], base[start + 1 :])):
                return start
            return None
    # none of base is kept: a window that moved past all of it is stored whole
    return None


class PartsCache:
    """The verified parts of recently stored or read list values, by channel, the
    checkpoint whose record holds the value, and its version.

    Reading a thread's newest checkpoint would otherwise read every record of
    its value's chain again at each step of a run. A version number alone does
    not name a value: two forks of a thread (on two machines, say) may each
    make the same one; the record holding it does.

    Listing a thread, newest first, would also walk each older checkpoint's chain
    again: each is the start of the newer one's. A walk keeps the parts of the bases
    it passes (``keep_bases``) apart from the values read and written, with a bound
    of their own, so that one long chain's walk never pushes out the newest values
    of the threads a process is running.
    """

    def __init__(self, size: int = 256, bases: int = 512) -> None:
        self._parts: OrderedDict[tuple[str, str, str, str, Any], ValueParts] = OrderedDict()
        self._bases: OrderedDict[tuple[str, str, str, str, Any], ValueParts] = OrderedDict()
        self._size = size
        self._bases_size = bases
        self._lock = threading.Lock()

    def get(self, where: tuple[str, str, str], holder_id: str, version: Any) -> ValueParts | None:
        key = (*where, holder_id, version)
        with self._lock:
            found = self._parts.get(key)
            return self._bases.get(key) if found is None else found

    def put(
        self, where: tuple[str, str, str], holder_id: str, version: Any, parts: ValueParts
    ) -> None:
        key = (*where, holder_id, version)
        with self._lock:
            self._parts[key] = parts
            self._parts.move_to_end(key)
            while len(self._parts) > self._size:
                self._parts.popitem(last=False)

    def keep_bases(
        self, where: tuple[str, str, str], found: list[tuple[str, Any, ValueParts]]
    ) -> None:
        """Keep the parts of the bases a walk went through (``(holder_id, version,
        parts)``, the last the most recent), evicting only older bases."""
        with self._lock:
            for holder_id, version, parts in found:
                key = (*where, holder_id, version)
                self._bases[key] = parts
                self._bases.move_to_end(key)
            while len(self._bases) > self._bases_size:
                self._bases.popitem(last=False)

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for kept in (self._parts, self._bases):
                for key in [k for k in kept if k[0] == thread_id]:
                    del kept[key]


def value_parts(
    record: CheckpointRecord,
    channel: str,
    stored: StoredValue,
    holder_values: Callable[[str], dict[str, StoredValue]],
    cached: Callable[[str, Any], ValueParts | None] = lambda holder_id, version: None,
    remember: Callable[[list[tuple[str, Any, ValueParts]]], None] | None = None,
) -> ValueParts:
    """The serialized parts whose concatenation is a stored value, oldest first.

    Each part comes with the item count its base must have had (``None`` for
    the full value at the start of the chain), so a reader can check that the
    chain fits together. ``holder_values(checkpoint_id)`` returns the values a
    record holds, or raises. ``cached(holder_id, version)`` gives the parts of a
    base found before, ending the walk there; ``remember`` is handed the parts of
    every base the walk went through (``(holder_id, version, parts)``, oldest first):
    each is the start of this value's, so a listing that reads the chain's
    checkpoints next, newest first, walks no chain again.

    Raises:
        ValueUnavailable: A base is missing or holds another version.
    """
    parts: ValueParts = []  # newest first, until reversed
    bases: list[tuple[str, Any, int]] = []  # each base walked through, and where its part is
    known: ValueParts = []
    current = stored
    seen: set[str] = set()
    while True:
        if current.encoding == VALUE_FULL:
            parts.append((current.typed, None, 0))
            break
        assert current.base is not None  # decode_checkpoint guarantees it
        base_id, base_version, base_count = current.base
        parts.append((current.typed, base_count, current.start))
        found = cached(base_id, base_version)
        if found is not None:
            known = found
            break
        if base_id in seen:
            raise ValueUnavailable(f"value of channel {channel!r} refers to itself in a loop")
        seen.add(base_id)
        base = holder_values(base_id).get(channel)
        if base is None or base.version != base_version:
            raise ValueUnavailable(
                f"value of channel {channel!r} extends version {base_version!r} in "
                f"checkpoint {base_id}, which does not hold it"
            )
        bases.append((base_id, base_version, len(parts)))
        current = base
    parts.reverse()
    whole = [*known, *parts] if known else parts
    if remember is not None and bases:
        # the base whose part was the i-th appended (newest first) ends ``whole`` i parts
        # early; oldest first, so that the newest, which a listing reads next, is the
        # most recent
        remember(
            [(base_id, version, whole[: len(whole) - i]) for base_id, version, i in bases[::-1]]
        )
    return whole


def load_value(loads: Callable[[Typed], Any], parts: ValueParts) -> Any:
    """Deserialize a value from its parts (see ``value_parts``) with ``loads`` (a
    serializer's ``loads_typed``)."""
    return join_parts([loads(typed) for typed, _, _ in parts], parts)


def join_parts(
    pieces: list[Any],
    parts: ValueParts,
    shared: Sequence[bool] = (),
    copy_items: Callable[[list[Any]], list[Any]] = list,
) -> Any:
    """The value ``parts`` (see ``value_parts``) make, from what each deserialized to.

    ``shared[i]`` true: piece ``i`` is not the caller's to hand out (a value kept from
    an earlier read): its items go into the value as ``copy_items`` copies them, given
    the items of a run of such pieces at once.

    Example:
        >>> typed = ("msgpack", b"")
        >>> parts = [(typed, None, 0), (typed, 2, 0), (typed, 3, 1)]  # a window drops "a"
        >>> join_parts([["a", "b"], ["c"], ["d"]], parts)
        ['b', 'c', 'd']
        >>> join_parts([["a", "b"], ["c"]], parts[:2], shared=[True, False], copy_items=list)
        ['a', 'b', 'c']
    """
    first = pieces[0]
    if len(pieces) == 1:
        return copy_items([first])[0] if shared and shared[0] else first
    if type(first) is not list:
        raise RecordDamagedError(f"an extended value's base is a {type(first).__name__}")
    value: list[Any] = []
    run: list[Any] = []  # the items of shared pieces, not copied yet: they follow ``value``
    for i, (piece, (_, base_count, start)) in enumerate(zip(pieces, parts, strict=True)):
        if i:
            if len(value) + len(run) != base_count:
                raise RecordDamagedError(
                    f"an extension expects {base_count} items before it, "
                    f"found {len(value) + len(run)}"
                )
            if type(piece) is not list:
                raise RecordDamagedError(f"an extension holds a {type(piece).__name__}")
            if start:
                cut = min(start, len(value))
                del value[:cut]
                del run[: start - cut]
        if i < len(shared) and shared[i]:
            run.extend(piece)
            continue
        if run:
            value.extend(copy_items(run))
            run = []
        value.extend(piece)
    if run:
        value.extend(copy_items(run))
    return value


def is_empty(parts: ValueParts) -> bool:
    """Whether the value is a channel with a version but no value."""
    return len(parts) == 1 and parts[0][0][0] == EMPTY_TYPE


def materialize(serde: SerializerProtocol, parts: ValueParts, version: Any) -> StoredValue:
    """The same value stored whole: for a record whose chain's older records go away."""
    if len(parts) == 1:
        return StoredValue(version, VALUE_FULL, parts[0][0])
    return StoredValue(version, VALUE_FULL, serde.dumps_typed(load_value(serde.loads_typed, parts)))
