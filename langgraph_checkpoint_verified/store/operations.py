"""What a store's ``batch`` is asked, checked before anything runs.

``checked_ops`` refuses what no ``BaseStore`` method would pass (an unknown op, a
label that is empty or holds a period or a NUL byte, a key or a label that is not
text, a value that is not a dict, a TTL that is not a number); ``last_puts`` is
the put of each item that wins in one batch; ``ttl_config`` checks the store's
``ttl`` argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    Op,
    PutOp,
    SearchOp,
    TTLConfig,
)

from langgraph_checkpoint_verified.records import keys
from langgraph_checkpoint_verified.store.filters import is_number


def checked_ops(ops: Iterable[Op]) -> list[Op]:
    """``ops`` as a list, each checked as ``BaseStore``'s methods would (ops may come to
    ``batch`` directly): its type, its labels, its key, its value and its TTL.

    Example:
        >>> checked_ops([GetOp(("users", "42"), "profile")])
        [GetOp(namespace=('users', '42'), key='profile', refresh_ttl=True)]
        >>> checked_ops([PutOp(("users",), "profile", ["not", "a", "dict"])])
        Traceback (most recent call last):
        ...
        TypeError: a store value is a dict, got list: ['not', 'a', 'dict']
    """
    ops = list(ops)
    for op in ops:
        if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
            raise TypeError(f"unknown store operation: {type(op).__name__}")
        # BaseStore's methods check labels, but ops may come to batch directly
        validate_op_labels(op)
        if isinstance(op, (GetOp, PutOp)):
            namespace_of(op.namespace)
            keys.require_text(op.key, "store key")
        if isinstance(op, PutOp) and op.value is not None:
            if not isinstance(op.value, Mapping):
                raise TypeError(
                    f"a store value is a dict, got {type(op.value).__name__}: {op.value!r:.100}"
                )
            if op.ttl is not None and not is_number(op.ttl):
                raise TypeError(f"ttl must be a number of minutes or None, got {op.ttl!r}")
    return ops


def validate_op_labels(op: Op) -> None:
    """The labels an op carries, checked as the newest ``BaseStore`` checks them.

    Done here rather than by ``langgraph.store.base.validate_op_namespace``,
    which refuses a NUL byte in a label only from some langgraph 1.x release on;
    every version this package supports gets the same answer.
    """
    if isinstance(op, (GetOp, PutOp)):
        paths = [op.namespace]
    elif isinstance(op, SearchOp):
        paths = [op.namespace_prefix]
    else:
        paths = [condition.path for condition in op.match_conditions or ()]
    for path in paths:
        for label in path:
            if not isinstance(label, str):
                raise InvalidNamespaceError(
                    f"namespace labels must be strings, got {type(label).__name__} in {path!r}"
                )
            if not label or "." in label or "\0" in label:
                raise InvalidNamespaceError(
                    f"invalid namespace label {label!r} in {path!r}: labels are non-empty "
                    f"and hold no period ('.') and no NUL byte"
                )


def namespace_of(namespace: Any) -> tuple[str, ...]:
    """A store namespace as a tuple of labels; ``TypeError`` if it is not one."""
    return keys.require_labels(namespace, "store namespace")


def last_puts(ops: list[Op]) -> dict[int, PutOp]:
    """The last put of each item, by its position in ``ops``, in order.

    Example:
        >>> first, last = PutOp(("a",), "k", {"v": 1}), PutOp(("a",), "k", None)
        >>> last_puts([first, GetOp(("a",), "k"), last]) == {2: last}
        True
    """
    last: dict[tuple[tuple[str, ...], str], int] = {}
    for i, op in enumerate(ops):
        if isinstance(op, PutOp):
            last[(tuple(op.namespace), op.key)] = i
    return {i: ops[i] for i in sorted(last.values())}  # type: ignore[misc]


def ttl_config(ttl: TTLConfig | None) -> TTLConfig | None:
    """The store's ``ttl`` argument, checked: a ``TTLConfig`` dict whose ``default_ttl``,
    if any, is minutes >= 0.

    Example:
        >>> ttl_config({"default_ttl": 60})
        {'default_ttl': 60}
        >>> ttl_config({"default_ttl": -1})
        Traceback (most recent call last):
        ...
        ValueError: ttl default_ttl must be minutes >= 0 or None, got -1
    """
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise TypeError(f"ttl must be a TTLConfig dict, got {type(ttl).__name__}")
    default = ttl.get("default_ttl")
    if default is not None and (not is_number(default) or default < 0):
        raise ValueError(f"ttl default_ttl must be minutes >= 0 or None, got {default!r}")
    return TTLConfig(**ttl)  # type: ignore[typeddict-item]
