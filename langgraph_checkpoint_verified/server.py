"""``VerifiedSaver`` behind the LangGraph server (``langgraph dev``).

The server loads a custom checkpointer from ``langgraph.json``::

    {
      "graphs": {"agent": "./agent.py:graph"},
      "checkpointer": {"path": "langgraph_checkpoint_verified.server.checkpointer"}
    }

and enters what ``path`` names as an async context manager: ``checkpointer``
below opens a ``VerifiedSaver`` on the store named by the environment and
closes it when the server stops. The server enters it once per thread of its
own that asks for a checkpointer, so one process may hold several savers on
the same store, which the store supports: records are immutable files written
atomically, and the operations that rewrite a thread take that thread's lock.

Environment:

* ``LANGGRAPH_VERIFIED_STORE``: the store directory, created if missing.
  Relative paths are relative to the server's working directory. Default:
  ``.langgraph_verified``. An ``s3://bucket/prefix`` URL names a bucket
  several servers share (the ``[s3]`` extra; endpoint and credentials from
  the ``AWS_*`` environment, see ``docs/s3.md``).
* ``LANGGRAPH_VERIFIED_KEY_FILE``: optional; a file holding the store's secret
  key (16 to 64 raw bytes, as ``langgraph-verified --key-file`` reads it).
  Records are then checked with keyed MACs and records written without the key
  are rejected.
* The server's own thread TTL: ``langgraph.json``'s ``"checkpointer": {"ttl":
  {...}}``, which ``langgraph dev`` hands to the server as
  ``LANGGRAPH_CHECKPOINTER``, or ``LANGGRAPH_THREAD_TTL`` (minutes, or the same
  object as JSON), which replaces it. With a ``default_ttl``, the saver sweeps
  the store in the background (``retention_from_env``): threads idle that many
  minutes are deleted (``"strategy": "delete"``, the default) or kept to their
  newest checkpoint (``"keep_latest"``), every ``sweep_interval_minutes``
  (default 5), at most ``sweep_limit`` threads a sweep (default 10,000).

See ``docs/server.md`` for the whole story (crashes, limitations).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from langgraph_checkpoint_verified.engine import RetentionPolicy
from langgraph_checkpoint_verified.engine.retention import Expiry
from langgraph_checkpoint_verified.errors import StoreKeyError
from langgraph_checkpoint_verified.saver import VerifiedSaver
from langgraph_checkpoint_verified.store import VerifiedStore

STORE_ENV = "LANGGRAPH_VERIFIED_STORE"
"""Environment variable naming the store directory."""

KEY_FILE_ENV = "LANGGRAPH_VERIFIED_KEY_FILE"
"""Environment variable naming a file that holds the store's secret key."""

STORE_CONFIG_ENV = "LANGGRAPH_STORE"
"""The ``store`` block of ``langgraph.json``, as JSON (set by ``langgraph dev``)."""

CHECKPOINTER_ENV = "LANGGRAPH_CHECKPOINTER"
"""The ``checkpointer`` block of ``langgraph.json``, as JSON (set by ``langgraph dev``)."""

THREAD_TTL_ENV = "LANGGRAPH_THREAD_TTL"
"""The server's thread TTL: minutes, or a JSON object; replaces the block's ``ttl``."""

DEFAULT_SWEEP_INTERVAL_MINUTES = 5.0
DEFAULT_SWEEP_LIMIT = 10_000
"""The LangGraph server's own defaults for a TTL that does not say."""

DEFAULT_STORE = ".langgraph_verified"
"""Store directory used when ``LANGGRAPH_VERIFIED_STORE`` is unset or empty."""

logger = logging.getLogger(__name__)

_LOADING_EMBEDDINGS = threading.Lock()
"""Held while a file ``index.embed`` names is loaded: the server opens stores on many threads."""


@dataclass(frozen=True)
class ThreadTTL:
    """The server's thread TTL as a retention policy and a schedule.

    Attributes:
        policy: Threads idle for ``default_ttl`` minutes expire (``strategy``).
        interval: Seconds between sweeps.
        limit: At most this many threads changed a sweep.
    """

    policy: RetentionPolicy
    interval: float
    limit: int | None


def retention_from_env(environ: Mapping[str, str] | None = None) -> ThreadTTL | None:
    """The thread TTL the LangGraph server was given, or ``None`` if it has none.

    ``LANGGRAPH_THREAD_TTL`` (minutes, or a JSON object) wins over the ``ttl``
    of ``LANGGRAPH_CHECKPOINTER`` (``langgraph.json``'s ``checkpointer`` block),
    as in the server. Both count minutes; fractions are allowed.

    Raises:
        ValueError: A variable does not parse, or names an unknown strategy.

    Example:
        >>> ttl = retention_from_env({"LANGGRAPH_THREAD_TTL": "90"})
        >>> ttl.policy.idle, ttl.policy.on_expiry, ttl.interval, ttl.limit
        (datetime.timedelta(seconds=5400), 'delete', 300.0, 10000)
        >>> retention_from_env({}) is None
        True
    """
    env = os.environ if environ is None else environ
    ttl: Any = None
    raw = (env.get(THREAD_TTL_ENV) or "").strip()
    if raw:
        ttl = _json(raw, THREAD_TTL_ENV) if raw.startswith("{") else {"default_ttl": raw}
    elif (block := (env.get(CHECKPOINTER_ENV) or "").strip()) and block.startswith("{"):
        config = _json(block, CHECKPOINTER_ENV)
        ttl = config.get("ttl") if isinstance(config, dict) else None
    if not isinstance(ttl, dict) or ttl.get("default_ttl") in (None, ""):
        return None
    strategy: Expiry
    if (named := ttl.get("strategy") or "delete") == "delete":
        strategy = "delete"
    elif named == "keep_latest":
        strategy = "keep_latest"
    else:
        raise ValueError(f"thread TTL strategy must be 'delete' or 'keep_latest', got {named!r}")
    minutes = _minutes(ttl["default_ttl"], "default_ttl")
    interval = _minutes(
        ttl.get("sweep_interval_minutes") or DEFAULT_SWEEP_INTERVAL_MINUTES,
        "sweep_interval_minutes",
    )
    limit = ttl.get("sweep_limit", DEFAULT_SWEEP_LIMIT)
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"thread TTL sweep_limit must be an int >= 0, got {limit!r}")
    return ThreadTTL(
        RetentionPolicy(idle=timedelta(minutes=minutes), on_expiry=strategy),
        interval * 60,
        limit,
    )


def _json(text: str, variable: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{variable} is not valid JSON ({exc.msg}): {text[:200]!r}") from None


def _minutes(value: Any, name: str) -> float:
    try:
        minutes = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"thread TTL {name} must be a number of minutes, got {value!r}") from None
    if not minutes > 0:
        raise ValueError(f"thread TTL {name} must be more than 0 minutes, got {value!r}")
    return minutes


def _location_and_key(env: Mapping[str, str]) -> tuple[str | Path, bytes | None, str | None]:
    """The store the environment names, its key (if any) and the key file it came from."""
    named = env.get(STORE_ENV) or DEFAULT_STORE
    store: str | Path = named if named.startswith("s3://") else Path(named).expanduser().resolve()
    key_file = env.get(KEY_FILE_ENV) or None
    key = None
    if key_file is not None:
        try:
            key = Path(key_file).expanduser().read_bytes()
        except OSError as exc:
            raise ValueError(
                f"cannot read the key file named by {KEY_FILE_ENV} ({key_file}): "
                f"{exc.strerror or exc}; fix the path or unset {KEY_FILE_ENV}"
            ) from None
    return store, key, key_file


def _key_advice(
    exc: StoreKeyError, store: str | Path, key: bytes | None, key_file: str | None
) -> StoreKeyError:
    # The saver's advice names its key= argument; here the key comes from the environment.
    if exc.store_is_keyed and key is None:
        advice = f"it was written with a key: set {KEY_FILE_ENV} to the file holding it"
    elif not exc.store_is_keyed:
        advice = f"it was written without a key: unset {KEY_FILE_ENV} (now {key_file})"
    else:
        advice = f"{KEY_FILE_ENV} names {key_file}, which does not hold this store's key"
    return StoreKeyError(
        f"cannot open {store}: {advice}",
        store_is_keyed=exc.store_is_keyed,
        marker=exc.marker,
    )


def open_from_env(environ: Mapping[str, str] | None = None, **options: Any) -> VerifiedSaver:
    """Open the ``VerifiedSaver`` that the environment names (blocking).

    Reads ``LANGGRAPH_VERIFIED_STORE`` (default ``.langgraph_verified``,
    relative to the working directory) and ``LANGGRAPH_VERIFIED_KEY_FILE``
    (optional). This touches the disk: call it from a worker thread inside an
    event loop, as ``checkpointer`` does.

    Args:
        environ: Where to read the variables; ``os.environ`` by default.
        **options: Passed on to ``VerifiedSaver`` (``fsync=``,
            ``on_corruption=``, ``serde=``, ...), for a factory of one's own.

    Returns:
        An open saver on the store, which is created if missing.

    Raises:
        ValueError: The key file cannot be read, or holds a key of the wrong
            length.
        StoreKeyError: The key does not match the store (a keyed store without
            a key file, a store written without a key with one, or another key);
            the message says which variable to change.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     saver = open_from_env({"LANGGRAPH_VERIFIED_STORE": tmp + "/store"})
        ...     saver.list({"configurable": {"thread_id": "t"}}).__next__()
        Traceback (most recent call last):
        ...
        StopIteration
    """
    env = os.environ if environ is None else environ
    store, key, key_file = _location_and_key(env)
    ttl = retention_from_env(env)
    if ttl is not None and "retention" not in options:
        # one sweeper per store, however many savers the server opens on it
        options.update(retention=ttl.policy, sweep_interval=ttl.interval, sweep_limit=ttl.limit)
    try:
        saver = VerifiedSaver(store, key=key, **options)
    except StoreKeyError as exc:
        raise _key_advice(exc, store, key, key_file) from exc
    logger.info("VerifiedSaver store: %s (%s)", store, "keyed" if key else "no key")
    if ttl is not None:
        logger.info(
            "thread TTL: threads idle %s are swept (%s) every %.0f s",
            ttl.policy.idle,
            ttl.policy.on_expiry,
            ttl.interval,
        )
    return saver


@asynccontextmanager
async def checkpointer() -> AsyncIterator[VerifiedSaver]:
    """A ``VerifiedSaver`` for the LangGraph server, configured by the environment.

    Point ``langgraph.json`` at it: ``"checkpointer": {"path":
    "langgraph_checkpoint_verified.server.checkpointer"}`` (a dotted path: the
    server looks the name up after the last dot).

    Opening happens on a worker thread: the server refuses blocking calls on
    its event loop, and opening a store reads its marker record. The saver is
    closed when the server leaves the context.

    Yields:
        The open ``VerifiedSaver`` (see ``open_from_env`` for the variables).

    Example:
        >>> import asyncio, os, tempfile
        >>> async def main(store):
        ...     os.environ["LANGGRAPH_VERIFIED_STORE"] = store
        ...     try:
        ...         async with checkpointer() as saver:
        ...             return type(saver).__name__, os.path.isdir(store)
        ...     finally:
        ...         del os.environ["LANGGRAPH_VERIFIED_STORE"]
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     asyncio.run(main(tmp + "/store"))
        ('VerifiedSaver', True)
    """
    saver = await asyncio.to_thread(open_from_env)
    try:
        yield saver
    finally:
        saver.close()


def embeddings_from_config(embed: Any) -> Any:
    """What ``index.embed`` of the ``store`` block names, loaded as the server loads it.

    The LangGraph server documents two forms of the string: a path to a Python
    file and a name in it, ``"./path/to/file.py:name"`` (relative to the
    directory the server runs in), and a LangChain model id such as
    ``"openai:text-embedding-3-small"``. The server loads the first itself for
    its own store, but hands a custom store the block as it is written, so this
    does the same for ``VerifiedStore``. A model id, an ``Embeddings`` or a
    function is returned as it is: ``VerifiedStore`` resolves a model id with
    LangChain's ``init_embeddings``.

    Args:
        embed: The ``embed`` value of the block.

    Returns:
        The function or ``Embeddings`` the file defines under that name, or ``embed``.

    Raises:
        ValueError: The file does not exist or does not define the name.

    Example:
        >>> embeddings_from_config("openai:text-embedding-3-small")
        'openai:text-embedding-3-small'
    """
    if not isinstance(embed, str) or ".py:" not in embed:
        return embed
    path_text, _, name = embed.rpartition(":")
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise ValueError(
            f"{STORE_CONFIG_ENV} index.embed names {path_text}, which is not a file "
            f"({path}); a relative path is relative to the directory the server runs in"
        )
    # one module per file, however many stores the server opens
    module_name = "_langgraph_verified_embed_" + hashlib.sha256(bytes(path)).hexdigest()[:16]
    with _LOADING_EMBEDDINGS:
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise ValueError(f"{STORE_CONFIG_ENV} index.embed: cannot load {path} as Python")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[module_name]
                raise
    try:
        return getattr(module, name)
    except AttributeError:
        raise ValueError(f"{STORE_CONFIG_ENV} index.embed: {path} defines no {name!r}") from None


def open_store_from_env(environ: Mapping[str, str] | None = None, **options: Any) -> VerifiedStore:
    """Open the ``VerifiedStore`` that the environment names (blocking).

    The same directory (or bucket) and key as ``open_from_env``: items live under
    ``memories/`` beside the saver's ``threads/``. ``langgraph.json``'s ``store``
    block, which ``langgraph dev`` hands over as ``LANGGRAPH_STORE``, may carry
    ``"ttl"`` (LangGraph's ``TTLConfig``) and ``"index"`` (its ``IndexConfig``).
    The index's ``embed`` may name a function in a file,
    ``"./embeddings.py:embed"``, relative to the working directory, as the
    server's own store takes it (``embeddings_from_config``); a model id such as
    ``"openai:text-embedding-3-small"`` needs LangChain's ``init_embeddings``.

    Args:
        environ: Where to read the variables; ``os.environ`` by default.
        **options: Passed on to ``VerifiedStore`` (they win over the block's).

    Raises:
        ValueError: The key file cannot be read, ``LANGGRAPH_STORE`` is not JSON,
            or its ``index.embed`` names a file that is missing or lacks the name.
        StoreKeyError: The key does not match the store; the message says which
            variable to change.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     store = open_store_from_env({
        ...         "LANGGRAPH_VERIFIED_STORE": tmp + "/store",
        ...         "LANGGRAPH_STORE": '{"ttl": {"default_ttl": 60}}',
        ...     })
        ...     store.ttl_config
        {'default_ttl': 60}
    """
    env = os.environ if environ is None else environ
    store, key, key_file = _location_and_key(env)
    block = (env.get(STORE_CONFIG_ENV) or "").strip()
    config = _json(block, STORE_CONFIG_ENV) if block.startswith("{") else {}
    for name in ("ttl", "index"):
        if isinstance(config, dict) and config.get(name) and name not in options:
            options[name] = config[name]
    if isinstance(options.get("index"), Mapping) and "embed" in options["index"]:
        options["index"] = {
            **options["index"],
            "embed": embeddings_from_config(options["index"]["embed"]),
        }
    try:
        opened = VerifiedStore(store, key=key, **options)
    except StoreKeyError as exc:
        raise _key_advice(exc, store, key, key_file) from exc
    logger.info("VerifiedStore store: %s (%s)", store, "keyed" if key else "no key")
    return opened


@asynccontextmanager
async def store() -> AsyncIterator[VerifiedStore]:
    """A ``VerifiedStore`` for the LangGraph server, configured by the environment.

    Point ``langgraph.json`` at it: ``"store": {"path":
    "langgraph_checkpoint_verified.server.store"}``. It opens the store directory
    the checkpointer uses (``open_store_from_env``), on a worker thread, and
    closes it when the server leaves the context. A ``ttl`` with
    ``sweep_interval_minutes`` starts the store's TTL sweeper on the server's
    event loop.

    Yields:
        The open ``VerifiedStore``.

    Example:
        >>> import asyncio, os, tempfile
        >>> async def main(directory):
        ...     os.environ["LANGGRAPH_VERIFIED_STORE"] = directory
        ...     try:
        ...         async with store() as opened:
        ...             await opened.aput(("users", "ada"), "prefs", {"theme": "dark"})
        ...             return (await opened.aget(("users", "ada"), "prefs")).value
        ...     finally:
        ...         del os.environ["LANGGRAPH_VERIFIED_STORE"]
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     asyncio.run(main(tmp + "/store"))
        {'theme': 'dark'}
    """
    opened = await asyncio.to_thread(open_store_from_env)
    try:
        if opened.ttl_config and opened.ttl_config.get("sweep_interval_minutes"):
            opened.start_ttl_sweeper()
            logger.info(
                "store TTL: expired items are swept every %s minutes",
                opened.ttl_config["sweep_interval_minutes"],
            )
        yield opened
    finally:
        opened.close()
