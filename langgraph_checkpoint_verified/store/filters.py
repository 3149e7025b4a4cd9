"""The store's search filters and namespace conditions, pure: values compared as JSON.

Exact match on nested fields, ``$eq $ne $gt $gte $lt $lte`` (numbers compared as
numbers, never as text; a number and a string never match), and ``$and`` /
``$or`` of clauses, which the LangGraph server composes when an auth handler
adds a filter. ``namespace_matches`` is ``list_namespaces``'s prefix/suffix
condition with ``*`` wildcards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.store.base import MatchCondition

_COMPARISONS = ("$gt", "$gte", "$lt", "$lte")


def is_number(value: Any) -> bool:
    """A JSON number: an int or a float, never a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """InMemoryStore's namespace matching: a prefix or suffix, ``"*"`` matching any label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"unknown namespace match type: {condition.match_type!r}")
    return all(wanted == "*" or label == wanted for label, wanted in pairs)


def matches_filter(value: dict[str, Any], filter: Mapping[str, Any]) -> bool:
    """Whether ``value`` passes ``filter``: every field, ``$and`` and ``$or`` hold.

    Example:
        >>> matches_filter({"n": 3, "tag": {"a": 1}}, {"n": {"$gte": 2, "$lt": 5}, "tag": {"a": 1}})
        True
        >>> matches_filter({"n": 3}, {"$or": [{"n": 1}, {"n": {"$gt": 10}}]})
        False
    """
    for name, wanted in filter.items():
        if name == "$and":
            if not all(matches_filter(value, part) for part in _clauses(wanted, name)):
                return False
        elif name == "$or":
            if not any(matches_filter(value, part) for part in _clauses(wanted, name)):
                return False
        elif not _compare(value.get(name), wanted):
            return False
    return True


def _clauses(parts: Any, name: str) -> list[Mapping[str, Any]]:
    if not isinstance(parts, (list, tuple)) or not all(isinstance(p, Mapping) for p in parts):
        raise ValueError(f"{name} takes a list of filters, got {parts!r:.100}")
    return list(parts)


def _compare(found: Any, wanted: Any) -> bool:
    """InMemoryStore's comparison, with JSON's types: ``True`` is not ``1``."""
    if isinstance(wanted, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_operator(found, op, operand) for op, operand in wanted.items())
        return isinstance(found, Mapping) and all(
            _compare(found.get(k), v) for k, v in wanted.items()
        )
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(found, (list, tuple))
            and len(found) == len(wanted)
            and all(_compare(f, w) for f, w in zip(found, wanted, strict=False))
        )
    return _json_equal(found, wanted)


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if is_number(a) and is_number(b):
        return bool(a == b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def _operator(found: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return _json_equal(found, operand)
    if operator == "$ne":
        return not _json_equal(found, operand)
    if operator not in _COMPARISONS:
        raise ValueError(f"unknown filter operator {operator!r}; use $eq $ne $gt $gte $lt $lte")
    # numbers compare as numbers and strings as strings; anything else never matches,
    # where InMemoryStore would raise from float()
    if is_number(found) and is_number(operand):
        pass
    elif not (isinstance(found, str) and isinstance(operand, str)):
        return False
    if operator == "$gt":
        return bool(found > operand)
    if operator == "$gte":
        return bool(found >= operand)
    if operator == "$lt":
        return bool(found < operand)
    return bool(found <= operand)
