"""Records as objects in an S3-compatible bucket: a store several machines share.

One object per record, under the same keys as on disk (``threads/<T>/ns/<NS>/
checkpoints/<id>.ckpt``, ``.../writes/<id>/<task>.<slot>.wr``, ``quarantine/...``),
below the store's prefix in the bucket. The bytes are the same verified records
as in a thread's log: the saver checks every one it reads, whoever wrote it.

Writes are conditional, so machines never overwrite each other blindly:

* A record is created with ``If-None-Match: *``: the first writer wins. A
  record that must not be replaced (a task's first writes) reports that it
  exists; one that may be (a checkpoint put again, a record maintenance rewrites)
  is compared first: the same bytes are a no-op, other bytes replace exactly
  the version that was read (``If-Match: <etag>``), retried if a third writer
  came in between.
* Finding the newest checkpoint of a namespace does not list the namespace: a
  small head object (``heads/<T>/<NS>.head``, outside every thread) names a
  recent checkpoint, and one ``LIST`` starting at that name returns it and every
  newer one. The head is moved forward by compare and swap (``If-Match``),
  never backwards, when a namespace's first checkpoint is written and then
  every ``HEAD_EVERY`` checkpoints this process writes, so a ``put`` costs one
  ``PUT`` most of the time.

What this process wrote, and what it read, it keeps with the ETag the store gave
it (``objects.known``), and does not ask for again while the store last said so
less than ``fresh_for`` seconds ago: a ``PUT``'s answer carries the new ETag, and
each ``LIST`` carries the ETag of every object it names, so reading back a
record this process just wrote, or just listed unchanged, costs no request.
Later, the object is revalidated: a ``HEAD``, or a ``GET`` with
``If-None-Match`` that answers ``304 Not Modified`` without the bytes when
nothing changed. A ``LIST`` that names another ETag, or no longer names the
object, forgets it at once, so an object rewritten or damaged behind this
process is read again, and verified, by the next read that lists it (every
``get_tuple`` of a namespace's newest checkpoint does).

An acknowledged write is durable when S3 acknowledges it. Requests
(``objects.bucket``) are retried by obstore (a 5xx, a dropped connection, with
backoff); when the store cannot be reached after that, reads and writes raise
``StoreUnavailableError``: an unreachable store is never taken for a damaged or
missing record, so a thread never falls back to an older checkpoint because the
network failed.

Called from the saver's async twins, the core runs on the store's own event loop
thread and every request goes through obstore's async API, awaited there
(``storage.async_bridge``): many calls are in flight at once without a thread
each, and none of their serializing, hashing or compressing runs on the caller's
event loop. Locks are this process's (and give the event loop
back while they wait): machines sharing a bucket are kept apart by the
conditional writes above, not by locks (see ``docs/s3.md`` for what that means
for maintenance).
"""

from __future__ import annotations

import bisect
import builtins
import contextlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from langgraph_checkpoint_verified.errors import StoreWriteError
from langgraph_checkpoint_verified.records.keys import MEMORIES_PREFIX
from langgraph_checkpoint_verified.storage import async_bridge
from langgraph_checkpoint_verified.storage.async_bridge import SharedExclusiveLock
from langgraph_checkpoint_verified.storage.base import OneRecordPerWrite
from langgraph_checkpoint_verified.storage.objects.bucket import (
    UNCHANGED,
    Bucket,
    WriteConflict,
    open_store,
    require_obstore,
)
from langgraph_checkpoint_verified.storage.objects.known import KnownObjects

LIST_CHAIN_LIMIT = 16
"""A list stored as what it gained is stored whole again after this many versions: a
machine reading it for the first time makes one request per version of the chain."""
WINDOW_CHAIN_LIMIT = 0
"""A list that also loses items (a window of the latest messages) is stored whole at each
version: what a window saves is bounded by the window, and each version of its chain
would be one more request, one after the other, for a machine reading it first."""

HEAD_EVERY = 64
"""A process moves a namespace's head forward once per this many checkpoints it writes."""
HEADS_PREFIX = "heads"
_CHECKPOINTS = "/checkpoints"
_MEMORIES = f"{MEMORIES_PREFIX}/"
_CAS_ATTEMPTS = 32
FRESH_FOR = 60.0
"""Seconds during which what the store last said of an object (its ETag, its bytes) is
taken as still true, without a request: longer than a step of a run, and far shorter
than the idle time after which maintenance may touch a thread (``docs/s3.md``)."""
_LISTINGS = 256
_LISTED_NAMES = 4 * LIST_CHAIN_LIMIT


class ObjectStorage(OneRecordPerWrite):
    """Records as objects of an S3-compatible bucket (``Storage``); needs the ``[s3]`` extra.

    Args:
        url: ``s3://bucket`` or ``s3://bucket/prefix``.
        endpoint: The S3 endpoint (MinIO, Ceph, R2, a local server); AWS if not
            given. Credentials, region and endpoint are also read from the usual
            ``AWS_*`` environment variables.
        region: The bucket's region.
        store: An obstore ``S3Store`` made by the caller, instead of ``url``.
        fresh_for: Seconds during which an object this process wrote, read or saw
            listed is not asked for again (its bytes and ETag are taken from memory);
            ``0`` revalidates each one at every use.
        **options: More ``S3Store`` options (``client_options``,
            ``retry_config``, ``access_key_id``, ...).

    ``VerifiedSaver("s3://agents/checkpoints")`` makes one from the environment;
    ``VerifiedSaver(storage=ObjectStorage("s3://agents/checkpoints",
    endpoint="http://minio:9000"))`` names the endpoint (see ``docs/s3.md``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        store: Any = None,
        fresh_for: float = FRESH_FOR,
        **options: Any,
    ) -> None:
        require_obstore()
        if (url is None) == (store is None):
            raise TypeError("pass exactly one of url='s3://bucket/prefix' or store=S3Store(...)")
        if store is None:
            assert url is not None
            store = open_store(url, endpoint=endpoint, region=region, options=options)
            url = url.rstrip("/")
        else:
            url = f"s3://{getattr(store, 'config', {}).get('bucket', '?')}"
            if getattr(store, "prefix", None):
                url += f"/{store.prefix}"
        self.url = url
        self.store = store
        self.bucket = Bucket(store, url, fetchers=LIST_CHAIN_LIMIT)
        """The requests (``objects.bucket``)."""
        self.known = KnownObjects(fresh_for)
        """What the store last said of each object (``objects.known``)."""
        self.list_chain_limit = LIST_CHAIN_LIMIT
        self.window_chain_limit = WINDOW_CHAIN_LIMIT
        self.awaits_io = async_bridge.AVAILABLE
        """The saver's async twins run its core on the store's event loop thread,
        requests awaited through obstore's async API (see ``storage.async_bridge``)."""
        self._locks: dict[str, SharedExclusiveLock] = {}
        self._heads: dict[str, tuple[str | None, str]] = {}
        """checkpoints prefix -> (etag of its head object as last seen, the name it holds)."""
        self._newest: dict[str, str] = {}
        """checkpoints prefix -> the newest checkpoint name this process knows of."""
        self._since_head: dict[str, int] = {}
        self._listed: OrderedDict[str, builtins.list[str]] = OrderedDict()
        """checkpoints prefix -> the names its last LIST from the head returned, sorted."""
        self._ahead: dict[str, tuple[str, int, int]] = {}
        """checkpoints prefix -> (the oldest name its last read ahead fetched, how many,
        how many since the walk began or began again)."""
        self._state_lock = threading.Lock()

    @property
    def fresh_for(self) -> float:
        """Seconds during which what the store last said of an object is taken as true."""
        return self.known.fresh_for

    # -- Storage -------------------------------------------------------------

    def compact(self, prefix: str, *, changes: Mapping[str, bytes | None] | None = None) -> None:
        """``changes``: each write one conditional PUT, then every deletion in one batched
        DELETE request (a thousand keys a request). Not atomic: writes go first, so a
        crash in between leaves every remaining record readable."""
        changes = changes or {}
        for key, data in changes.items():
            if data is not None:
                self.write(key, data)
        doomed = [key for key, data in changes.items() if data is None]
        if doomed:
            self.known.forget(doomed)
            self.bucket.delete(doomed, prefix)

    def usage(self, prefix: str) -> int:
        """Bytes of the objects at ``prefix`` or under it: the LIST's sizes, no GET."""
        return self.bucket.usage(prefix)

    def write(self, key: str, data: bytes, *, replace: bool = True, durable: bool = True) -> bool:
        """Create ``key`` (``If-None-Match``); see the module docstring for an existing one."""
        data = bytes(data)
        for _ in range(_CAS_ATTEMPTS):
            try:
                etag = self.bucket.put(key, data, "create")
                break
            except WriteConflict:
                if not replace:
                    return False
            found = self.bucket.get(key)
            if found is None or found is UNCHANGED:
                continue  # deleted in between: create it again
            stored, etag = found
            if stored == data:
                break  # the same record, written twice: nothing to do
            try:
                etag = self.bucket.put(key, data, {"e_tag": etag})
                break
            except WriteConflict:
                continue  # replaced in between: compare again
        else:
            raise self.bucket.unavailable("write", key, TimeoutError("too many concurrent writers"))
        # the answer carries the ETag: reading these bytes back, or their stamp, asks nothing
        self.known.remember(key, etag, data, len(data))
        self._note_written(key)
        return True

    def write_many(
        self, items: Sequence[tuple[str, bytes]], *, replace: bool = True, durable: bool = True
    ) -> builtins.list[bool]:
        """``write`` each; then each namespace's head names the newest checkpoint written
        (a copied thread's head would otherwise name its oldest one)."""
        written = [self.write(key, data, replace=replace, durable=durable) for key, data in items]
        newest: dict[str, str] = {}
        for key, _ in items:
            prefix, _, name = key.rpartition("/")
            if prefix.startswith("threads/") and prefix.endswith(_CHECKPOINTS):
                newest[prefix] = max(name, newest.get(prefix, name))
        for prefix, name in newest.items():
            self._advance_head(prefix, name)
        return written

    def read(self, key: str) -> bytes | None:
        """The object's bytes: from memory while fresh (``fresh_for``), then revalidated
        by a conditional GET that sends no bytes when they did not change."""
        known, fresh = self.known.fresh(key)
        if known is not None and known.data is not None:
            if fresh:
                return known.data
            found = self.bucket.get(key, unless_etag=known.etag)
            if found is UNCHANGED:
                self.known.confirm(key, known.etag)
                return known.data
        else:
            found = self._get_with_chain(key)
        if found is None:
            self.known.forget([key])
            return None
        data, etag = found
        self.known.remember(key, etag, data, len(data))
        return data  # type: ignore[no-any-return]

    def _get_with_chain(self, key: str) -> Any:
        """``bucket.get(key)``; and when ``key`` is an older checkpoint of a namespace just
        listed (a first read walking the records a list value extends, one after the
        other), the GETs of checkpoints listed just before it too, in flight together.

        Read ahead as a file system does: one more record at first, and each time the
        walk goes on below what the last read ahead fetched, twice as many, until the
        walk has fetched ``list_chain_limit`` records (a list's chain is never longer),
        then again from two. A chain of 16 records costs four round trips instead of
        sixteen, and a single older record (a value that changed long ago) costs one
        more GET, not sixteen.
        """
        prefix, _, name = key.rpartition("/")
        with self._state_lock:
            listed = self._listed.get(prefix)
            older: builtins.list[str] = []
            if listed and name in listed and name != listed[-1]:
                lowest, window, fetched = self._ahead.get(prefix, ("", 1, 0))
                room = self.list_chain_limit - fetched
                if name < lowest and room > 0:
                    window = min(2 * window, room)  # the walk goes on: read further ahead
                else:
                    window, fetched = 2, 0  # a new walk, or a chain's worth fetched already
                at = bisect.bisect_left(listed, name)
                for candidate in reversed(listed[max(0, at - window + 1) : at]):
                    if f"{prefix}/{candidate}" not in self.known:
                        older.append(f"{prefix}/{candidate}")
                self._ahead[prefix] = (listed[max(0, at - window + 1)], window, fetched + window)
        if not older:
            return self.bucket.get(key)
        found, *more = self.bucket.get_many([key, *older])
        for other, result in zip(older, more, strict=True):
            if isinstance(result, tuple):
                self.known.remember(other, result[1], result[0], len(result[0]))
        return found

    def list(self, prefix: str) -> builtins.list[str]:
        start = f"{prefix}/" if prefix else ""
        result = self.bucket.list_level(start)
        self.known.saw_listed(start, result["objects"])
        names = [p[len(start) :].rstrip("/") for p in result["common_prefixes"]]
        names += [o["path"][len(start) :] for o in result["objects"]]
        if not prefix:
            names = [n for n in names if n != HEADS_PREFIX]
        return names

    def walk(self, prefix: str) -> Iterator[str]:
        heads = f"{HEADS_PREFIX}/"
        keys = self.bucket.list_keys(f"{prefix}/" if prefix else None)
        yield from sorted(k for k in keys if not k.startswith(heads))

    def delete(self, key: str) -> None:
        self.known.forget([key])
        self.bucket.delete([key], key)

    def delete_tree(self, prefix: str) -> None:
        keys = builtins.list(self.walk(prefix)) + self._heads_under(prefix)
        keys += self.known.keys_under(prefix)
        self.known.forget(keys)
        if keys:
            self.bucket.delete(sorted(set(keys)), prefix)
        with self._state_lock:
            for known in (self._heads, self._newest, self._since_head):
                for checkpoints in [p for p in known if p.startswith(f"{prefix}/")]:
                    del known[checkpoints]

    def move_aside(self, key: str, new_key: str, *, replace: bool = True) -> bool:
        """Copy ``key`` to ``new_key``, then delete it (S3 has no rename).

        Raises ``PermissionError`` (as a file system would) when the store refuses;
        a copy whose original cannot be deleted is deleted again.
        """
        self.known.forget([key])  # the bytes in the store, as they are, not as remembered
        found = self.bucket.get(key)
        if found is None:
            return False
        try:
            if not self.write(new_key, found[0], replace=replace):
                return False
            try:
                self.delete(key)
            except StoreWriteError:
                with contextlib.suppress(StoreWriteError):
                    self.delete(new_key)
                raise
        except StoreWriteError as exc:
            raise PermissionError(exc.errno, str(exc)) from exc
        return True

    def location(self, key: str) -> str:
        return self.bucket.location(key)

    def stamp(self, key: str) -> Hashable | None:
        """The object's ETag and size: from memory while fresh (``fresh_for``), else one
        ``HEAD`` (another machine may have rewritten it since)."""
        known, fresh = self.known.fresh(key)
        if known is not None and fresh:
            return (known.etag, known.size)
        meta = self.bucket.head(key)
        if meta is None:
            self.known.forget([key])
            return None
        self.known.confirm(key, meta.get("e_tag"))
        return (meta.get("e_tag"), meta.get("size"))

    def written_stamp(self, key: str) -> Hashable | None:
        """The ETag the store gave the bytes this process just wrote: no request."""
        known, _ = self.known.fresh(key)
        if known is not None:
            return (known.etag, known.size)
        return self.stamp(key)

    @contextmanager
    def lock(self, prefix: str, *, exclusive: bool) -> Iterator[None]:
        with self._state_lock:
            lock = self._locks.setdefault(prefix, SharedExclusiveLock())
        with lock.hold(exclusive=exclusive):
            yield

    # -- the newest checkpoint -------------------------------------------------

    def greatest_name(self, prefix: str) -> str | None:
        """The greatest name under ``prefix``; for checkpoints, from the head object and
        one ``LIST`` that starts at the name it holds."""
        if prefix.startswith(_MEMORIES):
            return self._greatest_batch(prefix)
        if not prefix.endswith(_CHECKPOINTS):
            return max(self.list(prefix), default=None)
        with self._state_lock:
            known = self._newest.get(prefix)
        if known is None:
            known = self._read_head(prefix)
        names = self._names_from(prefix, known) if known is not None else None
        listed_from = known or ""
        if not names:
            names = self.list(prefix)  # no head yet, or what it names was deleted
            listed_from = ""
        newest = max(names, default=None)
        with self._state_lock:
            # the names listed before `listed_from` are still those of the last LIST
            before = [n for n in self._listed.get(prefix, []) if n < listed_from]
            listed = before + sorted(n for n in names if n.endswith(".ckpt"))
            self._listed[prefix] = listed[-_LISTED_NAMES:]
            self._listed.move_to_end(prefix)
            self._ahead.pop(prefix, None)
            while len(self._listed) > _LISTINGS:
                self._ahead.pop(self._listed.popitem(last=False)[0], None)
            if newest is None:
                self._newest.pop(prefix, None)
            else:
                self._newest[prefix] = newest
        return newest

    def _greatest_batch(self, prefix: str) -> str | None:
        """The greatest batch name of a memory log: one ``LIST`` from the greatest this
        process saw there (writers name each batch after every name they saw), and a
        whole listing only when that one is gone (compacted)."""
        with self._state_lock:
            known = self._newest.get(prefix)
        names = self._names_from(prefix, known) if known is not None else None
        if not names:
            names = self.list(prefix)
        newest = max(names, default=None)
        with self._state_lock:
            if newest is None:
                self._newest.pop(prefix, None)
            else:
                self._newest[prefix] = newest
        return newest

    def _names_from(self, prefix: str, name: str) -> builtins.list[str]:
        """Names under ``prefix`` from ``name`` on (``name`` itself included if it exists)."""
        start = f"{prefix}/"
        # LIST returns keys after its offset: a key just short of `name` includes it
        offset = f"{start}{name[:-1]}"
        listed = self.bucket.list_meta(start, offset=offset)
        self.known.saw_listed(start, listed, after=offset)
        names = [meta["path"][len(start) :] for meta in listed]
        return [n for n in names if "/" not in n and n >= name]

    def _heads_under(self, prefix: str) -> builtins.list[str]:
        """The head objects of the namespaces a ``delete_tree(prefix)`` removes entirely."""
        parts = prefix.split("/")
        if prefix in ("", "threads"):
            return self.bucket.list_keys(f"{HEADS_PREFIX}/")
        if parts[0] != "threads" or len(parts) < 2:
            return []
        if len(parts) == 2 or parts[2:] == ["ns"]:  # a thread, or all its namespaces
            return self.bucket.list_keys(f"{HEADS_PREFIX}/{parts[1]}/")
        if len(parts) == 4 or parts[4:] == ["checkpoints"]:  # one namespace, or its checkpoints
            return [self._head_key("/".join([*parts[:4], "checkpoints"]))]
        return []  # writes or tool records: no head goes with them

    @staticmethod
    def _head_key(checkpoints_prefix: str) -> str:
        # threads/<T>/ns/<NS>/checkpoints -> heads/<T>/<NS>.head
        parts = checkpoints_prefix.split("/")
        return f"{HEADS_PREFIX}/{parts[1]}/{parts[3]}.head"

    def _read_head(self, prefix: str) -> str | None:
        found = self.bucket.get(self._head_key(prefix))
        if found is None or found is UNCHANGED:
            return None
        data, etag = found
        name = data.decode("utf-8", "replace").strip()
        with self._state_lock:
            self._heads[prefix] = (etag, name)
        return name or None

    def _note_written(self, key: str) -> None:
        """After a checkpoint record is written: move its namespace's head forward, at
        the namespace's first checkpoint and then every ``HEAD_EVERY``. After a memory
        log's batch: remember it as the greatest name seen there."""
        prefix, _, name = key.rpartition("/")
        if prefix.startswith(_MEMORIES):
            # a batch of a memory log: the next look for newer ones lists from it
            with self._state_lock:
                if name > self._newest.get(prefix, ""):
                    self._newest[prefix] = name
            return
        if not prefix.endswith(_CHECKPOINTS) or not prefix.startswith("threads/"):
            return
        with self._state_lock:
            if name > self._newest.get(prefix, ""):
                self._newest[prefix] = name
            count = self._since_head.get(prefix, 0) + 1
            first = prefix not in self._heads
            self._since_head[prefix] = count
            if not first and count < HEAD_EVERY:
                return
            self._since_head[prefix] = 0
        self._advance_head(prefix, name)

    def _advance_head(self, prefix: str, name: str) -> None:
        head_key = self._head_key(prefix)
        with self._state_lock:
            etag, held = self._heads.get(prefix, (None, ""))
        for _ in range(_CAS_ATTEMPTS):
            if held >= name:
                return  # never backwards
            try:
                new_etag = self.bucket.put(
                    head_key, name.encode(), {"e_tag": etag} if etag else "create"
                )
            except WriteConflict:
                found = self.bucket.get(head_key)  # moved by another writer: look again
                etag, held = (None, "") if found is None else (found[1], found[0].decode())
                continue
            with self._state_lock:
                self._heads[prefix] = (new_etag, name)
            return
        # many writers moving it at once: the head only saves a longer LIST, never matters
        # for what is read, so leave it to the next checkpoint

    def __repr__(self) -> str:
        return f"ObjectStorage({self.url!r})"
