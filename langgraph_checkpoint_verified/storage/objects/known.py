"""What the store last said of each object: its ETag and size, its bytes if kept.

A ``PUT``'s answer carries the new ETag, a ``GET`` the ETag with the bytes, and
each ``LIST`` the ETag of every object it names. ``KnownObjects`` keeps what
they said, so that reading back a record this process just wrote, or just saw
listed unchanged, costs no request while the store said so less than
``fresh_for`` seconds ago; later, one conditional request revalidates it. A
``LIST`` that names another ETag, or no longer names the object, forgets it at
once: an object rewritten or damaged behind this process is read again, and
verified, by the next read that lists it.

Bounded: the least recently used are forgotten first, past ``max_objects``
objects or ``max_bytes`` bytes kept.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_OBJECTS = 4096
MAX_BYTES = 32 * 1024 * 1024


@dataclass
class Known:
    """What the store last said an object is: its ETag and size, its bytes if kept."""

    etag: str
    size: int
    data: bytes | None
    checked: float
    """``time.monotonic()`` when the store last answered for it (a PUT, GET, HEAD or LIST)."""


class KnownObjects:
    """Key -> ``Known``, least recently used first; safe to share between threads.

    Example:
        >>> known = KnownObjects(fresh_for=60.0)
        >>> known.remember("a/1", "etag-1", b"bytes", 5)
        >>> found, fresh = known.fresh("a/1")
        >>> found.data, fresh
        (b'bytes', True)
        >>> known.saw_listed("a/", [{"path": "a/1", "e_tag": "etag-2"}])  # rewritten
        >>> known.fresh("a/1")
        (None, False)
    """

    def __init__(
        self, fresh_for: float, *, max_objects: int = MAX_OBJECTS, max_bytes: int = MAX_BYTES
    ) -> None:
        self.fresh_for = float(fresh_for)
        self.max_objects = max_objects
        self.max_bytes = max_bytes
        self._known: OrderedDict[str, Known] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._known

    def remember(self, key: str, etag: str | None, data: bytes | None, size: int) -> None:
        """The store just said ``key`` holds ``data`` (or ``size`` bytes) under ``etag``."""
        with self._lock:
            self._drop(key)
            if not etag:
                return  # nothing to revalidate against: ask the store each time
            self._known[key] = Known(etag, size, data, time.monotonic())
            self._bytes += len(data) if data is not None else 0
            while len(self._known) > self.max_objects or self._bytes > self.max_bytes:
                self._drop(next(iter(self._known)))

    def forget(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                self._drop(key)

    def fresh(self, key: str) -> tuple[Known | None, bool]:
        """What is known of ``key``, and whether the store said so within ``fresh_for``."""
        with self._lock:
            known = self._known.get(key)
            if known is None:
                return None, False
            self._known.move_to_end(key)
            return known, time.monotonic() - known.checked < self.fresh_for

    def confirm(self, key: str, etag: str | None) -> None:
        """The store says ``key`` has ``etag`` now: known and the same, it is fresh again;
        known and different (rewritten, damaged, replaced), it is forgotten."""
        with self._lock:
            known = self._known.get(key)
            if known is None:
                return
            if etag and etag == known.etag:
                known.checked = time.monotonic()
            else:
                self._drop(key)

    def saw_listed(self, start: str, listed: Sequence[Any], after: str = "") -> None:
        """A LIST of the keys directly under ``start`` (greater than ``after``) returned
        ``listed``: confirm or forget each key of it this process knows."""
        etags = {meta["path"]: meta.get("e_tag") for meta in listed}
        with self._lock:
            mine = [
                key
                for key in self._known
                if key.startswith(start) and key > after and "/" not in key[len(start) :]
            ]
        for key in mine:
            self.confirm(key, etags.get(key))

    def keys_under(self, prefix: str) -> builtins.list[str]:
        """The keys known below ``prefix`` (``prefix/...``)."""
        with self._lock:
            return [key for key in self._known if key.startswith(f"{prefix}/")]

    def _drop(self, key: str) -> None:
        """Forget ``key`` (the caller holds ``_lock``)."""
        known = self._known.pop(key, None)
        if known is not None and known.data is not None:
            self._bytes -= len(known.data)
