"""Values deserialized before, handed out again as copies of their own.

Deserializing a chat's messages is most of what reading a checkpoint costs:
every message goes through msgpack and a pydantic constructor that validates
every field. The same values are read again and again (every ``invoke``
starts with ``get_tuple`` of the checkpoint the last one wrote, a server
polls ``get_state``), from the very same serialized bytes: the record cache
hands out the same decoded record while a record's bytes are unchanged.

A value whose serialized part is read a second time is kept, privately, and
from then on each read gets a deep copy of it instead of a new
deserialization. A part this process wrote is kept from its first read: it
is the newest of its thread, which the next ``invoke`` reads, and every one
after it (``written``). A copy is exactly what a new deserialization would return
(msgpack holds no shared references, so neither does the copy) and shares
nothing with the kept value or with another reader's copy. Only plain data is
copied: immutable scalars, lists, dicts, tuples and pydantic models with
pydantic's own deep copy (LangChain's messages). A value holding anything else
is deserialized at every read, as before. How a kept value is copied is decided
once, as it is kept (``copier``): which fields of each message hold something
mutable, which of its containers are empty. Each read then makes only the new
objects, for about half of what deciding it again at every copy costs.

A value stored as many parts (a chat's messages: one part per step that added
some) is read with one look at what is kept for all its parts, and the items of
the kept ones are copied together (``load``): the work of a read is then the
copies, not the parts.

Parts are kept by identity (the serialized part object itself, which the
record cache keeps while its bytes verify) and by serializer: a saver cloned
by ``with_allowlist`` deserializes with its own allowlist.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import functools
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from pydantic import BaseModel

from langgraph_checkpoint_verified.records.kinds import Typed
from langgraph_checkpoint_verified.records.values import ValueParts, join_parts

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
"""Serialized bytes of the parts whose values are kept (or noted as read once).

Deserialized objects take a few times their serialized size (a message of 500
characters: 0.7 KB serialized, 1.9 KB of Python objects, and 0.35 KB more for its
copier), so this is some 10 to 25 MB of memory at most, and keeps the messages of a
chat of a few thousand turns."""


class Uncopyable(Exception):
    """A value holds something ``plain_copy`` cannot copy for certain."""


_IMMUTABLE: frozenset[type] = frozenset(
    {
        str,
        int,
        float,
        complex,
        bool,
        type(None),
        bytes,
        datetime.datetime,
        datetime.date,
        datetime.time,
        datetime.timedelta,
        datetime.timezone,
        uuid.UUID,
        decimal.Decimal,
    }
)

_set_attribute = object.__setattr__
_copiers: dict[type, Callable[[Any], Any]] = {}


def plain_copy(value: Any) -> Any:
    """A deep copy of plain data, sharing nothing mutable with ``value``.

    Raises:
        Uncopyable: ``value`` holds an object of another kind.

    Example:
        >>> from langchain_core.messages import AIMessage
        >>> message = AIMessage("hi", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "1"}])
        >>> copied = plain_copy([message])
        >>> copied == [message], copied[0] is message
        (True, False)
        >>> copied[0].tool_calls[0]["args"] is message.tool_calls[0]["args"]
        False
    """
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    copier = _copiers.get(kind)
    if copier is None:
        copier = _copiers[kind] = _copier_for(kind)
    return copier(value)


def _same(value: Any) -> Any:
    return value


# Immutable items are tested inline: most of a message's fields are strings or None.


# An empty list or dict is copied without a comprehension: most of a message's
# containers are empty (``additional_kwargs``, ``tool_calls``, ...).


def _copy_list(value: list[Any]) -> list[Any]:
    if not value:
        return []
    return [item if type(item) in _IMMUTABLE else plain_copy(item) for item in value]


def _copy_tuple(value: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple([item if type(item) in _IMMUTABLE else plain_copy(item) for item in value])


def _copy_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    if not value:
        return {}
    return {
        key if type(key) in _IMMUTABLE else plain_copy(key): (
            item if type(item) in _IMMUTABLE else plain_copy(item)
        )
        for key, item in value.items()
    }


def _copy_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A model's ``__dict__``, copied: its keys are field names (strings), and most of
    its values immutable, so it is copied whole and only the others replaced."""
    copied = fields.copy()
    for name, item in fields.items():
        kind = type(item)
        if kind in _IMMUTABLE:
            continue
        if not item and (kind is dict or kind is list):
            # a message's ``additional_kwargs``, ``tool_calls``, ...: mostly empty
            copied[name] = {} if kind is dict else []
        else:
            copied[name] = plain_copy(item)
    return copied


def _copy_model(value: BaseModel) -> BaseModel:
    # what pydantic's own BaseModel.__deepcopy__ does, with plain_copy for deepcopy
    extra = value.__pydantic_extra__
    private = getattr(value, "__pydantic_private__", None)
    return _new_model(
        type(value),
        _copy_fields(value.__dict__),
        None if extra is None else _copy_dict(extra),
        set(value.__pydantic_fields_set__),
        None if private is None else _copy_dict(private),
    )


def _new_model(
    kind: type[BaseModel],
    fields: dict[str, Any],
    extra: dict[str, Any] | None,
    fields_set: set[str],
    private: dict[str, Any] | None,
) -> BaseModel:
    """A model of ``kind`` made of these parts, as ``BaseModel.__deepcopy__`` makes one:
    no validation, each part its own (the caller copied them)."""
    copied = kind.__new__(kind)
    _set_attribute(copied, "__dict__", fields)
    _set_attribute(copied, "__pydantic_extra__", extra)
    _set_attribute(copied, "__pydantic_fields_set__", fields_set)
    _set_attribute(copied, "__pydantic_private__", private)
    return copied


def _below(kind: type, ancestor: type) -> tuple[type, ...]:
    return kind.__mro__[: kind.__mro__.index(ancestor)]


def _uncopyable(value: Any) -> Any:
    raise Uncopyable(type(value).__qualname__)


def _copier_for(kind: type) -> Callable[[Any], Any]:
    if kind in _IMMUTABLE or issubclass(kind, enum.Enum):
        return _same
    if kind is list:
        return _copy_list
    if kind is dict:
        return _copy_dict
    if kind is tuple:
        return _copy_tuple
    if (
        issubclass(kind, BaseModel)
        and kind.__deepcopy__ is BaseModel.__deepcopy__
        # a model with slots of its own would keep state plain_copy does not see
        and all("__slots__" not in vars(base) for base in _below(kind, BaseModel))
    ):
        return _copy_model
    return _uncopyable


def copier(value: Any) -> Callable[[], Any]:
    """A function that returns a new deep copy of ``value`` at each call, as ``plain_copy``
    does. What each copy takes is decided once, here: the fields of a model that hold
    something mutable (most of a message's are strings), the containers that are empty.
    A kept value is copied at every read of its part, its copier made once.

    ``value`` must never change afterwards (the copies share its immutable items), and
    must hold only what ``plain_copy`` copies (it was made by ``plain_copy``).

    Example:
        >>> from langchain_core.messages import AIMessage
        >>> kept = AIMessage("hi", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "1"}])
        >>> copy = copier([kept])
        >>> first, second = copy(), copy()
        >>> first == second == [kept], first[0] is second[0], first[0].tool_calls is kept.tool_calls
        (True, False, False)
    """
    kind = type(value)
    if kind in _IMMUTABLE:
        return functools.partial(_same, value)
    how = _copiers.get(kind)
    if how is None:
        how = _copiers[kind] = _copier_for(kind)
    if how is _same:
        return functools.partial(_same, value)
    if how is _copy_model:
        return _model_copier(value)
    if kind is list:
        if not value:
            return list
        return functools.partial(_call_each, [copier(item) for item in value])
    if kind is dict:
        if not value:
            return dict
        if all(type(key) in _IMMUTABLE for key in value):
            return _fields_copier(value)
    if how is _uncopyable:
        raise Uncopyable(kind.__qualname__)
    return functools.partial(how, value)


def _fields_copier(fields: dict[Any, Any]) -> Callable[[], dict[Any, Any]]:
    """A copier of a dict whose keys are immutable: copied whole, then the values that
    are not immutable replaced by copies, keys in their order."""
    return functools.partial(_copy_fields_by_plan, fields, _changing(fields))


def _changing(fields: dict[Any, Any]) -> tuple[tuple[Any, Callable[[], Any]], ...]:
    """``(key, copier)`` of each value of ``fields`` that is not immutable."""
    return tuple(
        (name, copier(item)) for name, item in fields.items() if type(item) not in _IMMUTABLE
    )


def _copy_fields_by_plan(
    fields: dict[Any, Any], changing: tuple[tuple[Any, Callable[[], Any]], ...]
) -> dict[Any, Any]:
    copied = fields.copy()
    for name, copy in changing:
        copied[name] = copy()
    return copied


_SHARED_PLAN_PARTS = 1024
_shared_parts: dict[Any, Any] = {}
"""Parts of model copiers that many messages have alike (the set of fields given, the
empty containers to make new), kept once: a copier is then a few hundred bytes, not
the kilobyte and a half each would take. Bounded: field names come from the models'
classes, and past the bound a part is simply not shared."""


def _shared(part: Any) -> Any:
    found = _shared_parts.get(part)
    if found is not None:
        return found
    if len(_shared_parts) < _SHARED_PLAN_PARTS:
        _shared_parts[part] = part
    return part


def _model_copier(value: BaseModel) -> Callable[[], BaseModel]:
    """``_copy_model`` of ``value``, decided once."""
    fields = value.__dict__
    changing = _changing(fields)
    if all(copy is dict or copy is list for _, copy in changing):
        changing = _shared(changing)  # only empty containers: alike in many messages
    extra = value.__pydantic_extra__
    private = getattr(value, "__pydantic_private__", None)
    plan = (
        type(value),
        fields,
        changing,
        None if extra is None else copier(extra),
        _shared(frozenset(value.__pydantic_fields_set__)),
        None if private is None else copier(private),
    )
    return functools.partial(_copy_model_by_plan, plan)


def _copy_model_by_plan(plan: tuple[Any, ...]) -> BaseModel:
    kind, fields, changing, copy_extra, fields_set, copy_private = plan
    return _new_model(
        kind,
        _copy_fields_by_plan(fields, changing),
        None if copy_extra is None else copy_extra(),
        set(fields_set),
        None if copy_private is None else copy_private(),
    )


def _call_each(copiers: list[Callable[[], Any]]) -> list[Any]:
    return [copy() for copy in copiers]


class _Kept:
    """A value deserialized from a part read before, never handed out itself: what
    copies it, and what copies each of its items if it is a list (a chat's messages,
    joined with other parts' into one value)."""

    __slots__ = ("copy", "items")

    def __init__(self, value: Any) -> None:
        self.items: list[Callable[[], Any]] | None = None
        if type(value) is list:
            self.items = [copier(item) for item in value]
            self.copy: Callable[[], Any] = functools.partial(_call_each, self.items)
        else:
            self.copy = copier(value)


_READ_ONCE = object()
_NOT_COPYABLE = object()


class DecodedValues:
    """Deserializes serialized parts, keeping the values of those read again or written here.

    Example:
        >>> from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
        >>> serde = JsonPlusSerializer()
        >>> part = serde.dumps_typed([{"role": "user"}])
        >>> values = DecodedValues()
        >>> first, second, third = (values.loads(serde, part) for _ in range(3))
        >>> first == second == third, third is second, third[0] is second[0]
        (True, False, False)
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        # (id(part), id(serde)) -> (part, serde, state): holding both keeps the ids unique
        self._entries: OrderedDict[tuple[int, int], tuple[Typed, SerializerProtocol, Any]] = (
            OrderedDict()
        )
        self._bytes = 0
        self._lock = threading.Lock()
        self.deserialized = 0
        """How many parts were deserialized, not copied (counted, not timed: tests pin
        it down; threads reading at once may miss a count)."""

    def loads(self, serde: SerializerProtocol, part: Typed) -> Any:
        """``serde.loads_typed(part)``, or a copy of the value it gave before."""
        key = (id(part), id(serde))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is part and entry[1] is serde:
                self._entries.move_to_end(key)
                state = entry[2]
            else:
                state = None
        if type(state) is _Kept:
            return state.copy()
        self.deserialized += 1
        value = serde.loads_typed(part)
        if state is None:
            self._keep(key, part, serde, _READ_ONCE)
        elif state is _READ_ONCE:
            try:
                kept: Any = _Kept(plain_copy(value))
            except Uncopyable:
                kept = _NOT_COPYABLE
            self._keep(key, part, serde, kept)
        return value

    def written(self, serde: SerializerProtocol, part: Typed) -> None:
        """Note ``part``, just serialized with ``serde`` and stored: its first read keeps
        its value, as if it were its second (the read that follows a write is not the
        last: each ``invoke`` of its thread starts by reading it again).

        Example:
            >>> from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
            >>> serde = JsonPlusSerializer()
            >>> part = serde.dumps_typed([{"role": "user"}])
            >>> values = DecodedValues()
            >>> values.written(serde, part)
            >>> first, second = (values.loads(serde, part) for _ in range(2))
            >>> first == second, values.deserialized
            (True, 1)
        """
        self._keep((id(part), id(serde)), part, serde, _READ_ONCE)

    def load(self, serde: SerializerProtocol, parts: ValueParts) -> Any:
        """The value of ``parts`` (``records.values.value_parts``): what ``loads`` gives
        for each, joined; the items of the parts kept are copied together, not part by
        part (a chat's messages are a part each, most of them kept).

        Example:
            >>> from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
            >>> serde = JsonPlusSerializer()
            >>> parts = [(serde.dumps_typed(["a"]), None, 0), (serde.dumps_typed(["b"]), 1, 0)]
            >>> values = DecodedValues()
            >>> [values.load(serde, parts) for _ in range(3)]
            [['a', 'b'], ['a', 'b'], ['a', 'b']]
        """
        if len(parts) == 1:
            return self.loads(serde, parts[0][0])
        kept = self._kept(serde, parts)
        pieces = [
            found.items if found is not None else self.loads(serde, typed)
            for found, (typed, _, _) in zip(kept, parts, strict=True)
        ]
        return join_parts(pieces, parts, [found is not None for found in kept], _call_each)

    def _kept(self, serde: SerializerProtocol, parts: ValueParts) -> list[_Kept | None]:
        """The kept value of each part that has one and is a list, as every part of a value
        of many parts is (one look, under the lock, for all); a part kept as anything
        else is deserialized, to be found damaged as it would be if it were not kept."""
        serde_id = id(serde)
        found: list[_Kept | None] = []
        with self._lock:
            for part, _, _ in parts:
                key = (id(part), serde_id)
                entry = self._entries.get(key)
                if (
                    entry is not None
                    and entry[0] is part
                    and entry[1] is serde
                    and type(entry[2]) is _Kept
                    and entry[2].items is not None
                ):
                    self._entries.move_to_end(key)
                    found.append(entry[2])
                else:
                    found.append(None)
        return found

    def _keep(
        self, key: tuple[int, int], part: Typed, serde: SerializerProtocol, state: Any
    ) -> None:
        size = len(part[1])
        if size > self.max_bytes:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= len(previous[0][1])
            self._entries[key] = (part, serde, state)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (dropped, _, _) = self._entries.popitem(last=False)
                self._bytes -= len(dropped[1])

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
