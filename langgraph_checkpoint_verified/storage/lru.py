"""Tables of open files kept in least recently used order, bounded by closing the oldest.

A store keeps a thread's log (``FileStorage``) and a directory's lock file
(``DirectoryLocks``) open between calls, in an ``OrderedDict`` whose first entries
are the ones used least recently. Past a bound, the oldest idle ones are closed;
one in use (a block holds its lock, an append or a read is under way, a thread
waits to lock it) is passed over and stays open, not waited for, so the bound
can be exceeded while more than that many are in use at once, and never stops a
call.

Room is made *before* a new entry goes in: the entry being opened is then never
the one closed, however many of the others are in use.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def close_least_recent(
    table: OrderedDict[K, V], limit: int, close_if_idle: Callable[[K, V], bool]
) -> None:
    """Close the least recently used entries of ``table`` until at most ``limit`` remain.

    ``close_if_idle(key, value)`` closes an idle entry and takes it out of ``table``
    (``True``), or leaves one in use where it is (``False``). Only as many entries
    are looked at as must be closed, and those in use before them: opening one
    more file past the bound costs one look, not one per open file.

    Example:
        >>> table = OrderedDict((n, f"file {n}") for n in range(1000))
        >>> looked = []
        >>> def close(key, value):
        ...     looked.append(key)
        ...     if key == 1:
        ...         return False  # in use
        ...     del table[key]
        ...     return True
        >>> close_least_recent(table, 999, close)
        >>> looked, len(table)
        ([0], 999)
        >>> close_least_recent(table, 997, close)  # 1 is in use: 2 and 3 go
        >>> looked, len(table), next(iter(table))
        ([0, 1, 2, 3], 997, 1)
    """
    passed = 0  # entries in use at the table's start, left open
    while len(table) > limit:
        batch = list(itertools.islice(table.items(), passed, passed + len(table) - limit))
        if not batch:
            return  # every entry left is in use
        for key, value in batch:
            if not close_if_idle(key, value):
                passed += 1
