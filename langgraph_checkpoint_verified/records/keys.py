"""How user strings (thread ids, namespaces, checkpoint and task ids) become keys.

A key is a ``/``-joined list of segments; every segment that comes from a user
string goes through ``encode_segment``, so nothing a user passes can escape the
store, name a hidden file, or collide with another string after encoding:

* ``[a-z0-9_-]`` stand for themselves; every other byte of the UTF-8 form
  (upper-case letters included, so names stay distinct on case-insensitive
  file systems) becomes ``~`` and two lower-case hex digits.
* The empty string becomes ``~`` alone, which no other string encodes to.
* An encoding longer than ``MAX_SEGMENT`` characters is cut to a prefix and
  ended with ``~~`` and the SHA-256 of the original, so file names stay under
  every file system's limit; ``~~`` never occurs in a short encoding.

Example:
    >>> encode_segment("../../etc")
    '~2e~2e~2f~2e~2e~2fetc'
    >>> encode_segment("")
    '~'
    >>> decode_segment(encode_segment("Thread Ü"))
    'Thread Ü'
"""

from __future__ import annotations

import functools
import hashlib
import re

MAX_SEGMENT = 160
_HASHED_PREFIX = 80
_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPED = re.compile(r"(?:[a-z0-9_-]|~[0-9a-f]{2})+")
_PLAIN_SEGMENT = re.compile(r"[a-z0-9_-]+")

CHECKPOINT_SUFFIX = ".ckpt"
WRITES_SUFFIX = ".wr"
TEMP_PREFIX = ".tmp-"
NORMAL_WRITES_SLOT = "n"
"""Slot name of a task's regular writes; special writes use their negative index."""


def _utf8(value: str) -> bytes:
    # "surrogatepass" so that even a lone surrogate has one stable encoding
    return value.encode("utf-8", "surrogatepass")


def encode_segment(value: str) -> str:
    """Encode one user string as a safe, collision-free path segment."""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}: {value!r}")
    return _encoded_segment(value)


@functools.lru_cache(maxsize=4096)
def _encoded_segment(value: str) -> str:
    # every read names its thread, namespace and checkpoint several times over
    if value == "":
        return "~"
    if len(value) <= MAX_SEGMENT and _PLAIN_SEGMENT.fullmatch(value):
        return value  # every character stands for itself: the loop below changes nothing
    raw = _utf8(value)
    encoded = "".join(chr(b) if b in _PLAIN else f"~{b:02x}" for b in raw)
    if len(encoded) <= MAX_SEGMENT:
        return encoded
    cut = encoded[:_HASHED_PREFIX]
    # do not end inside a "~hh" escape
    tilde = cut.rfind("~", len(cut) - 2)
    if tilde != -1:
        cut = cut[:tilde]
    return f"{cut}~~{hashlib.sha256(raw).hexdigest()}"


def decode_segment(segment: str) -> str | None:
    """Inverse of ``encode_segment``; ``None`` for hashed (long) or foreign names."""
    if segment == "~":
        return ""
    if "~~" in segment or not _ESCAPED.fullmatch(segment):
        return None
    if "~" not in segment:
        # plain segments (every checkpoint id LangGraph makes) decode to themselves;
        # skipping the byte loop keeps listing a 10,000-checkpoint thread fast
        return segment
    out = bytearray()
    i = 0
    while i < len(segment):
        if segment[i] == "~":
            out.append(int(segment[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(segment[i]))
            i += 1
    try:
        return out.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def require_text(value: object, name: str) -> str:
    """``value`` if it is a str that can be stored: valid Unicode (no lone surrogates)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}: {value!r:.100}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{name} {value!r:.100} is not valid Unicode text (it holds a lone surrogate); "
            f"decode it with errors='replace' or pick another id"
        ) from None
    return value


def require_labels(value: object, name: str) -> tuple[str, ...]:
    """``value``, a tuple or list of storable strings (``require_text``), as a tuple.

    ``name`` is what the value is, for the error: ``"store namespace"``.

    Example:
        >>> require_labels(["users", "42"], "store namespace")
        ('users', '42')
    """
    if not isinstance(value, (tuple, list)):
        raise TypeError(
            f"a {name} is a tuple of strings, got {type(value).__name__}: {value!r:.100}"
        )
    return tuple(require_text(label, f"{name} label") for label in value)


def as_thread_id(value: object) -> str:
    """Thread ids may be given as ints (as LangGraph allows); stored as strings."""
    if isinstance(value, str):
        return require_text(value, "thread_id")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise TypeError(
        f"thread_id must be a str (or int), got {type(value).__name__}: {value!r}. "
        f'Pass config={{"configurable": {{"thread_id": "..."}}}}.'
    )


def thread_prefix(thread_id: str) -> str:
    return f"threads/{encode_segment(thread_id)}"


def namespaces_prefix(thread_id: str) -> str:
    return f"{thread_prefix(thread_id)}/ns"


def checkpoints_prefix(thread_id: str, checkpoint_ns: str) -> str:
    return f"{namespaces_prefix(thread_id)}/{encode_segment(checkpoint_ns)}/checkpoints"


def checkpoint_key(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    return (
        f"{checkpoints_prefix(thread_id, checkpoint_ns)}/"
        f"{encode_segment(checkpoint_id)}{CHECKPOINT_SUFFIX}"
    )


def is_checkpoint_key(key: str) -> bool:
    """Whether ``key`` names a checkpoint record (``threads/<T>/ns/<NS>/checkpoints/<id>.ckpt``).

    Example:
        >>> is_checkpoint_key(checkpoint_key("t", "", "1")), is_checkpoint_key("threads/t/log")
        (True, False)
    """
    parts = key.split("/")
    return (
        len(parts) == 6
        and parts[0] == "threads"
        and parts[2] == "ns"
        and parts[4] == "checkpoints"
        and parts[5].endswith(CHECKPOINT_SUFFIX)
    )


def writes_prefix(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    return (
        f"{namespaces_prefix(thread_id)}/{encode_segment(checkpoint_ns)}/writes/"
        f"{encode_segment(checkpoint_id)}"
    )


def writes_key(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str, slot: str
) -> str:
    return (
        f"{writes_prefix(thread_id, checkpoint_ns, checkpoint_id)}/"
        f"{encode_segment(task_id)}.{encode_segment(slot)}{WRITES_SUFFIX}"
    )


def tools_prefix(thread_id: str) -> str:
    return f"{thread_prefix(thread_id)}/tools"


def tool_record_key(thread_id: str, checkpoint_ns: str, tool_call_id: str, kind: str) -> str:
    return (
        f"{tools_prefix(thread_id)}/{encode_segment(checkpoint_ns)}/"
        f"{encode_segment(tool_call_id)}.{kind}"
    )


CACHE_PREFIX = "cache"
"""Where ``VerifiedCache`` keeps its entries, beside ``threads/`` and outside every log."""
CACHE_ENTRY_SUFFIX = ".entry"


def cache_namespace_prefix(namespace: tuple[str, ...]) -> str:
    """The directory of a cache namespace: ``cache/`` and one segment per part.

    Example:
        >>> cache_namespace_prefix(("__pregel_ns_writes", "My node"))
        'cache/__pregel_ns_writes/~4dy~20node'
        >>> cache_namespace_prefix(())
        'cache'
    """
    return "/".join([CACHE_PREFIX, *(encode_segment(part) for part in namespace)])


def cache_entry_key(namespace: tuple[str, ...], key: str) -> str:
    """Where the cache entry ``key`` of ``namespace`` lives.

    The entry's name ends in ``.entry``, which no encoded segment can: the
    entry ``k`` of namespace ``("a",)`` and the namespace ``("a", "k")`` never
    share a name, as a file and a directory could not.

    Example:
        >>> cache_entry_key(("ns",), "../x")
        'cache/ns/~2e~2e~2fx.entry'
    """
    return f"{cache_namespace_prefix(namespace)}/{encode_segment(key)}{CACHE_ENTRY_SUFFIX}"


STORE_PREFIX = "store"
"""Where ``VerifiedStore`` kept its items one record each before ``memories/``; a store
opened on such a directory moves them into its logs (``store.legacy``)."""
STORE_ITEM_SUFFIX = ".item"
STORE_TOUCH_SUFFIX = ".touch"


def store_namespace_prefix(namespace: tuple[str, ...]) -> str:
    """The directory of a store namespace: ``store/`` and one segment per label.

    Example:
        >>> store_namespace_prefix(("users", "Ada Lovelace"))
        'store/users/~41da~20~4covelace'
        >>> store_namespace_prefix(())
        'store'
    """
    return "/".join([STORE_PREFIX, *(encode_segment(part) for part in namespace)])


def store_item_key(namespace: tuple[str, ...], key: str) -> str:
    """Where the item ``key`` of ``namespace`` lives.

    The name ends in ``.item``, which no encoded segment can: the item ``k`` of
    ``("a",)`` and the namespace ``("a", "k")`` never share a name.

    Example:
        >>> store_item_key(("users", "1"), "../prefs")
        'store/users/1/~2e~2e~2fprefs.item'
    """
    return f"{store_namespace_prefix(namespace)}/{encode_segment(key)}{STORE_ITEM_SUFFIX}"


def store_touch_key(namespace: tuple[str, ...], key: str) -> str:
    """Where the TTL refresh of the item ``key`` of ``namespace`` lives.

    Example:
        >>> store_touch_key(("users",), "prefs")
        'store/users/prefs.touch'
    """
    return f"{store_namespace_prefix(namespace)}/{encode_segment(key)}{STORE_TOUCH_SUFFIX}"


MEMORIES_PREFIX = "memories"
"""Where ``VerifiedStore`` keeps its items: one log of batches per first namespace label."""
BATCH_SUFFIX = ".batch"


def memories_prefix(label: str) -> str:
    """The log of the namespaces whose first label is ``label``.

    Example:
        >>> memories_prefix("users")
        'memories/users'
    """
    return f"{MEMORIES_PREFIX}/{encode_segment(label)}"


def batch_key(label: str, name: str) -> str:
    """Where the batch ``name`` of the namespaces under ``label`` lives.

    Example:
        >>> batch_key("users", "1764000000000000000-3f2a1c")
        'memories/users/1764000000000000000-3f2a1c.batch'
    """
    return f"{memories_prefix(label)}/{name}{BATCH_SUFFIX}"


def checkpoint_id_of(name: str) -> str | None:
    """The checkpoint id a ``*.ckpt`` file name stands for, if it can be decoded."""
    if not name.endswith(CHECKPOINT_SUFFIX) or name.startswith(TEMP_PREFIX):
        return None
    return decode_segment(name[: -len(CHECKPOINT_SUFFIX)])


# One line per name; a name holding a newline is never matched as plain (see below).
_PLAIN_CHECKPOINT_NAME = re.compile(r"^([a-z0-9_-]+)\.ckpt$", re.MULTILINE)
_OTHER_NAME = re.compile(r"^(?![a-z0-9_-]+\.ckpt$)(.*)$", re.MULTILINE)
_ALL_PLAIN_CHECKPOINT_LINES = re.compile(r"(?:[a-z0-9_-]+\.ckpt\n)*")


def split_checkpoint_names(names: list[str]) -> tuple[list[str], list[str]]:
    """``(ids of plain *.ckpt names, every other name)`` in one regex pass when every name is plain.

    A thread's directory can hold 10,000 names and every ``get_tuple`` lists
    it; decoding them one by one in Python cost more than reading the record.
    Plain names are their own id (see ``decode_segment``); the other names
    are left for ``checkpoint_id_of`` and may still be checkpoints.

    Example:
        >>> split_checkpoint_names(["1f0-a.ckpt", "~41.ckpt", ".tmp-1-ab", "1f0-b.wr"])
        (['1f0-a'], ['~41.ckpt', '.tmp-1-ab', '1f0-b.wr'])
    """
    if not names:
        return [], []
    # Fast path, the usual case: every name is a plain "<id>.ckpt". One regex pass
    # proves it and one split yields the ids; a name holding a newline would make
    # more lines than names, which the length check catches.
    lines = "\n".join(names) + "\n"
    if _ALL_PLAIN_CHECKPOINT_LINES.fullmatch(lines):
        ids = lines.split(".ckpt\n")
        if len(ids) == len(names) + 1:
            ids.pop()
            return ids, []
    joined = lines[:-1]
    if joined.count("\n") != len(names) - 1:
        return [], list(names)  # a name with a newline in it: take the slow path for all
    return _PLAIN_CHECKPOINT_NAME.findall(joined), _OTHER_NAME.findall(joined)
