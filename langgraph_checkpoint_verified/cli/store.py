"""The STORE argument of the command line, and what to say when it fails.

A STORE is a directory or ``s3://bucket/prefix``, opened only if it holds a store
(a typo must not create one).

It also owns finding what the other arguments name (a thread, a checkpoint id or a
prefix of one) and running a command so that whatever stops it is one line on
stderr and exit code 2 (``run_guarded``).

An ``s3://`` STORE is configured by the ``AWS_*`` environment, as boto3 and the aws
CLI are. obstore's errors are a summary line and a debug dump of the Rust error;
``storage_failure`` turns them into one line a person can act on.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from langgraph_checkpoint_verified.cli.output import EXIT_ERROR, EXIT_OK, PROG, ns_label
from langgraph_checkpoint_verified.errors import (
    StoreKeyError,
    StoreUnavailableError,
    StoreWriteError,
    VerifiedSaverError,
)

if TYPE_CHECKING:
    # The saver, the engine and storage (and obstore, the [s3] extra, behind
    # ObjectStorage) are imported when a store is opened, not when the command line
    # is built: `--help` and `--version` must not pay for them.
    from langgraph.checkpoint.base import CheckpointTuple

    from langgraph_checkpoint_verified.saver import VerifiedSaver
    from langgraph_checkpoint_verified.storage.objects import ObjectStorage

STORE_HELP = "the store: a directory, or s3://bucket/prefix (configured by AWS_* variables)"
"""The help of every STORE argument."""


class CommandError(Exception):
    """A command cannot run; the message is printed as one line and the exit code is 2."""


def first_line(error: object) -> str:
    """An error's message as one line: its first (a library's may hold a debug dump).

    Args:
        error: An exception, or any object with a message.

    Returns:
        The first non-empty line of ``str(error)``, else its ``repr``.
    """
    lines = str(error).strip().splitlines()
    return lines[0].strip() if lines else repr(error)


# -- opening stores ------------------------------------------------------------


def read_key(key_file: str | None) -> bytes | None:
    """The secret key in ``key_file`` (raw bytes).

    Args:
        key_file: The --key-file argument; ``None`` when not given.

    Returns:
        The key, or ``None`` without a key file.

    Raises:
        CommandError: The file cannot be read.
    """
    if key_file is None:
        return None
    try:
        return Path(key_file).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read key file {key_file}: {exc.strerror or exc}") from None


def open_existing(args: argparse.Namespace, *, quarantine: bool) -> VerifiedSaver:
    """Open a store that must already exist: a typo must not create an empty store.

    Args:
        args: ``store`` (the STORE argument) and ``key_file``.
        quarantine: Whether the saver may move damage aside as it reads.

    Returns:
        The opened saver.

    Raises:
        CommandError: No store is there, or it needs a key that was not given.
    """
    if is_object_store(args.store):
        return _open_existing_objects(args, quarantine=quarantine)
    path = Path(args.store)
    if not path.exists():
        raise CommandError(f"no store at {path}: the directory does not exist")
    if not path.is_dir():
        raise CommandError(f"{path} is not a store: a store is a directory")
    # imported once the path is known to be there: a typo is told before LangGraph
    # and the engine are loaded
    from langgraph_checkpoint_verified.engine.marker import STORE_MARKER_KEY
    from langgraph_checkpoint_verified.storage.base import QUARANTINE_PREFIX

    looks_like_store = (
        (path / "threads").is_dir()
        or (path / QUARANTINE_PREFIX).is_dir()
        or (path / STORE_MARKER_KEY).is_file()
    )
    if not looks_like_store and any(path.iterdir()):
        raise CommandError(
            f"{path} is not a store: it has neither threads/ nor {QUARANTINE_PREFIX}/"
        )
    return _open_saver(args, path, quarantine=quarantine)


def _open_existing_objects(args: argparse.Namespace, *, quarantine: bool) -> VerifiedSaver:
    """``open_existing`` for an object store (``s3://...``)."""
    from langgraph_checkpoint_verified.engine.marker import STORE_MARKER_KEY
    from langgraph_checkpoint_verified.storage.base import QUARANTINE_PREFIX

    storage = object_storage(args.store)
    # one LIST, before the saver reads or writes anything: a bucket that does not
    # exist fails here, and a mistyped prefix is not taken for an empty store
    names = set(storage.list(""))
    if not names:
        raise CommandError(f"no store at {args.store}: nothing is stored under that prefix")
    if not names & {"threads", QUARANTINE_PREFIX, STORE_MARKER_KEY}:
        raise CommandError(
            f"{args.store} is not a store: it has neither threads/ nor {QUARANTINE_PREFIX}/"
        )
    return _open_saver(args, storage, quarantine=quarantine)


def _open_saver(
    args: argparse.Namespace, where: Path | ObjectStorage, *, quarantine: bool
) -> VerifiedSaver:
    from langgraph_checkpoint_verified.saver import VerifiedSaver

    key = read_key(args.key_file)
    try:
        if not isinstance(where, Path):
            return VerifiedSaver(storage=where, key=key, quarantine=quarantine)
        return VerifiedSaver(where, key=key, quarantine=quarantine)
    except StoreKeyError as exc:
        if exc.store_is_keyed and args.key_file is None:
            raise CommandError(
                f"{args.store} was written with a secret key; pass --key-file FILE "
                f"(nothing was read or moved)"
            ) from None
        raise


def create_or_open(store: str, key_file: str | None) -> VerifiedSaver:
    """A store to write into, created if missing (a bucket must exist: it is never made).

    Args:
        store: The STORE argument.
        key_file: The --key-file argument, or ``None``.

    Returns:
        The opened saver.
    """
    from langgraph_checkpoint_verified.saver import VerifiedSaver

    key = read_key(key_file)
    if is_object_store(store):
        return VerifiedSaver(storage=object_storage(store), key=key)
    return VerifiedSaver(Path(store), key=key)


def store_exists(store: str) -> bool:
    """Whether ``store`` holds anything: a directory, or objects under an ``s3://`` prefix.

    Args:
        store: The STORE argument.

    Returns:
        ``True`` if something is there.
    """
    if is_object_store(store):
        return bool(object_storage(store).list(""))
    return Path(store).exists()


def open_store(store: str, key_file: str | None, *, quarantine: bool = False) -> VerifiedSaver:
    """An existing store; a missing path, a file or a non-store is a one-line error.

    Args:
        store: The STORE argument.
        key_file: The --key-file argument, or ``None``.
        quarantine: Whether the saver may move damage aside as it reads.

    Returns:
        The opened saver.

    Raises:
        CommandError: No store is there (a SQLite database is named as such).
    """
    if not is_object_store(store):
        with contextlib.suppress(OSError), open(store, "rb") as maybe_sqlite:
            if maybe_sqlite.read(16) == b"SQLite format 3\x00":
                raise CommandError(
                    f"{store} is a SQLite database, not a store; "
                    f"`{PROG} migrate {store} STORE` copies a SqliteSaver database into one"
                )
    return open_existing(argparse.Namespace(store=store, key_file=key_file), quarantine=quarantine)


def quarantined_count(saver: VerifiedSaver) -> int:
    """How many records the store's quarantine holds.

    Args:
        saver: The opened store.

    Returns:
        The records under ``quarantine/``: one per ``.record`` file, and those each
        ``.records`` file holds (several moved aside together).
    """
    return saver.reporter.quarantined_count()


# -- what the other arguments name -----------------------------------------------


def thread_or_fail(saver: VerifiedSaver, thread_id: str | None, store: str) -> str | None:
    """``thread_id`` if the store has that thread (or ``None`` if none was asked for).

    Names only, no record is read: a thread whose every record is damaged still
    exists, and verify/repair must be able to name it.

    Args:
        saver: The opened store.
        thread_id: The thread asked for, or ``None``.
        store: The STORE argument, for the message.

    Returns:
        ``thread_id``.

    Raises:
        CommandError: The store has no such thread.
    """
    if thread_id is not None and thread_id not in saver.engine.thread_ids():
        raise CommandError(
            f"no thread {thread_id!r} in {store}; `{PROG} threads {store}` lists them"
        )
    return thread_id


def need_thread(saver: VerifiedSaver, thread_id: str, store: str) -> str:
    """``thread_id``, which the store must have.

    Args:
        saver: The opened store.
        thread_id: The thread asked for.
        store: The STORE argument, for the message.

    Returns:
        ``thread_id``.

    Raises:
        CommandError: The store has no such thread.
    """
    found = thread_or_fail(saver, thread_id, store)
    assert found is not None
    return found


def resolve_id(found: Mapping[str, CheckpointTuple], wanted: str, thread_id: str, ns: str) -> str:
    """The checkpoint id ``wanted`` names: itself, or the one id it is the start of.

    Args:
        found: The verified checkpoints of a thread's namespace, by id.
        wanted: An id or a unique prefix of one.
        thread_id: The thread, for the message.
        ns: The namespace, for the message.

    Returns:
        A key of ``found``.

    Raises:
        CommandError: ``wanted`` names no checkpoint, or starts several ids.
    """
    if wanted in found:
        return wanted
    matches = [checkpoint_id for checkpoint_id in found if checkpoint_id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise CommandError(
            f"{wanted!r} is the start of {len(matches)} checkpoint ids; give more of it"
        )
    raise CommandError(
        f"no verified checkpoint {wanted!r} in thread {thread_id!r} namespace {ns_label(ns)}; "
        f"`{PROG} history STORE {thread_id}` lists them"
    )


# -- running a command -------------------------------------------------------------


def run_guarded(body: Callable[[], int], *, store: str | None = None) -> int:
    """Run a command: one line on stderr and exit 2 when it cannot run, never a traceback.

    Args:
        body: The command; returns its exit code.
        store: The STORE argument, named by the error when an object store fails.

    Returns:
        ``body``'s exit code; ``2`` when it could not run, ``130`` when interrupted,
        ``0`` when the reader of stdout went away.
    """
    library_logger = logging.getLogger("langgraph_checkpoint_verified")
    previous_level = library_logger.level
    # Damage is reported by the commands themselves, once and in order; the
    # library's per-record warnings would repeat it on stderr.
    library_logger.setLevel(logging.ERROR)
    try:
        return int(body())
    except BrokenPipeError:
        # the reader went away (`export ... | head`): not an error, and Python
        # must not complain again when it flushes stdout at exit
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (StoreUnavailableError, StoreWriteError) as exc:
        print(f"{PROG}: error: {storage_failure(exc, store)}", file=sys.stderr)
        return EXIT_ERROR
    except (CommandError, VerifiedSaverError, OSError, ValueError) as exc:
        # ValueError: e.g. a key file of the wrong length, refused by the saver
        print(f"{PROG}: error: {first_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    finally:
        library_logger.setLevel(previous_level)


# -- object stores -------------------------------------------------------------

OBJECT_STORE_SCHEME = "s3://"
_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
"""Where the endpoint is read from, the first set one winning (as obstore reads them)."""
CREDENTIALS_ADVICE = "check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and the bucket's policy"

# obstore's errors are one summary line, then a debug dump of the Rust error; what a
# person acts on is scattered in them: the S3 error code of the answer, its status,
# the retries, and for a request that got no answer, the socket's own words
_S3_ERROR_CODE = re.compile(r"<Code>(\w+)</Code>")
_HTTP_STATUS = re.compile(r"status code: (\d{3})")
_RETRIES = re.compile(r"after (\d+) retries")
_SOCKET_ERROR = re.compile(r'(?:message|error): "([^"]+)"')


def is_object_store(store: str) -> bool:
    """Whether a STORE argument names object storage (``s3://...``) rather than a directory.

    Args:
        store: The STORE argument.

    Returns:
        ``True`` for ``s3://bucket/prefix``.
    """
    return store.startswith(OBJECT_STORE_SCHEME)


def object_storage(store: str) -> ObjectStorage:
    """The bucket behind an ``s3://`` STORE; no request is made yet.

    It is configured by the ``AWS_*`` environment, as boto3 and the aws CLI are.

    Args:
        store: The STORE argument, ``s3://bucket/prefix``.

    Returns:
        The ``ObjectStorage``.

    Raises:
        CommandError: obstore is not installed, or the URL or an ``AWS_*`` value is refused.
    """
    try:
        # obstore is the [s3] extra: imported only for an s3:// STORE
        from langgraph_checkpoint_verified.storage.objects import ObjectStorage

        return ObjectStorage(store)
    except ImportError:
        raise CommandError(
            f"{store} is in S3-compatible object storage, which needs obstore: "
            "pip install 'langgraph-checkpoint-verified[s3]'"
        ) from None
    except Exception as exc:  # a malformed URL, or obstore refusing an AWS_* value
        raise CommandError(f"cannot open {store}: {first_line(exc)}") from None


def _endpoint() -> str | None:
    return next((os.environ[v] for v in _ENDPOINT_VARIABLES if os.environ.get(v)), None)


def storage_failure(exc: StoreUnavailableError | StoreWriteError, store: str | None) -> str:
    """One line saying what went wrong with an object store and what to check.

    Args:
        exc: What the saver raised.
        store: The STORE argument, if the command has one.

    Returns:
        The line to print after ``error:``.
    """
    cause = str(exc.__cause__ or "")
    if not exc.location.startswith(OBJECT_STORE_SCHEME):
        return first_line(exc)  # a file store's write error already says what to do
    store = store if store and exc.location.startswith(store) else exc.location
    key = exc.location[len(store) :].lstrip("/")
    code = _S3_ERROR_CODE.search(cause)
    status = _HTTP_STATUS.search(cause)
    retries = _RETRIES.search(cause)
    endpoint = _endpoint()
    at = f" at {endpoint}" if endpoint else ""
    answer = " ".join(m.group(1) for m in (status, code) if m)
    # a write error may be a refused PUT or a refused DELETE
    operation = "change" if isinstance(exc, StoreWriteError) else exc.operation
    request = f"{operation} {key}" if key else operation
    after = f", after {retries.group(1)} retries" if retries else ""
    if code and code.group(1) == "NoSuchBucket":
        bucket = store[len(OBJECT_STORE_SCHEME) :].split("/", 1)[0]
        return (
            f"no bucket {bucket!r}{at} (store {store}): check the bucket's name, "
            f"AWS_ENDPOINT_URL and AWS_REGION, or create the bucket"
        )
    if isinstance(exc, StoreWriteError) or (status and status.group(1) in ("401", "403")):
        refusal = f" ({answer})" if answer else ""
        return f"{store}{at} refused to {request}{refusal}: {CREDENTIALS_ADVICE}"
    if endpoint and endpoint.startswith("http://") and "BadScheme" in cause:
        return (
            f"cannot reach {store}: {endpoint} is plain http, which is refused unless "
            f"AWS_ALLOW_HTTP=true"
        )
    if answer:  # answered, with an error every retry: the server's own trouble
        return (
            f"{store}{at} answered {answer} ({request}{after}): the store is failing or "
            f"overloaded; retry later"
        )
    words = _SOCKET_ERROR.findall(cause)
    reason = words[-1] if words else first_line(cause).rsplit(" - ", 1)[-1]
    return (
        f"cannot reach {store}{at} ({reason}{after}): check AWS_ENDPOINT_URL, the network "
        f"and the credentials, then retry"
    )
