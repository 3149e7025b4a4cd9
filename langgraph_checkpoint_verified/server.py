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

See ``docs/server.md`` for the whole story (crashes, limitations).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langgraph_checkpoint_verified.errors import StoreKeyError
from langgraph_checkpoint_verified.saver import VerifiedSaver

STORE_ENV = "LANGGRAPH_VERIFIED_STORE"
"""Environment variable naming the store directory."""

KEY_FILE_ENV = "LANGGRAPH_VERIFIED_KEY_FILE"
"""Environment variable naming a file that holds the store's secret key."""

DEFAULT_STORE = ".langgraph_verified"
"""Store directory used when ``LANGGRAPH_VERIFIED_STORE`` is unset or empty."""

logger = logging.getLogger(__name__)


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
    try:
        saver = VerifiedSaver(store, key=key, **options)
    except StoreKeyError as exc:
        # The saver's advice names its key= argument; here the key comes from the environment.
        if exc.store_is_keyed and key is None:
            advice = f"it was written with a key: set {KEY_FILE_ENV} to the file holding it"
        elif not exc.store_is_keyed:
            advice = f"it was written without a key: unset {KEY_FILE_ENV} (now {key_file})"
        else:
            advice = f"{KEY_FILE_ENV} names {key_file}, which does not hold this store's key"
        raise StoreKeyError(
            f"cannot open {store}: {advice}",
            store_is_keyed=exc.store_is_keyed,
            marker=exc.marker,
        ) from exc
    logger.info("VerifiedSaver store: %s (%s)", store, "keyed" if key else "no key")
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
