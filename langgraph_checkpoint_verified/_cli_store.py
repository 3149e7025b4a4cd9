"""The STORE argument of the command line: a directory or ``s3://bucket/prefix``, opened
only if it holds a store (a typo must not create one), and what to say when it fails.

An ``s3://`` STORE is configured by the ``AWS_*`` environment, as boto3 and the aws
CLI are. obstore's errors are a summary line and a debug dump of the Rust error;
``storage_failure`` turns them into one line a person can act on.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from langgraph_checkpoint_verified._marker import STORE_MARKER_KEY
from langgraph_checkpoint_verified._object_storage import ObjectStorage
from langgraph_checkpoint_verified._storage import QUARANTINE_PREFIX
from langgraph_checkpoint_verified.errors import (
    StoreKeyError,
    StoreUnavailableError,
    StoreWriteError,
)
from langgraph_checkpoint_verified.saver import VerifiedSaver

STORE_HELP = "the store: a directory, or s3://bucket/prefix (configured by AWS_* variables)"


class CommandError(Exception):
    """A command cannot run; the message is printed as one line and the exit code is 2."""


def first_line(error: object) -> str:
    """An error's message as one line: its first (a library's may hold a debug dump)."""
    lines = str(error).strip().splitlines()
    return lines[0].strip() if lines else repr(error)


# -- opening stores ------------------------------------------------------------


def read_key(key_file: str | None) -> bytes | None:
    if key_file is None:
        return None
    try:
        return Path(key_file).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read key file {key_file}: {exc.strerror or exc}") from None


def open_existing(args: argparse.Namespace, *, quarantine: bool) -> VerifiedSaver:
    """Open a store that must already exist: a typo must not create an empty store."""
    if is_object_store(args.store):
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
    path = Path(args.store)
    if not path.exists():
        raise CommandError(f"no store at {path}: the directory does not exist")
    if not path.is_dir():
        raise CommandError(f"{path} is not a store: a store is a directory")
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


def _open_saver(
    args: argparse.Namespace, where: Path | ObjectStorage, *, quarantine: bool
) -> VerifiedSaver:
    key = read_key(args.key_file)
    try:
        if isinstance(where, ObjectStorage):
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
    """A store to write into, created if missing (a bucket must exist: it is never made)."""
    key = read_key(key_file)
    if is_object_store(store):
        return VerifiedSaver(storage=object_storage(store), key=key)
    return VerifiedSaver(Path(store), key=key)


def store_exists(store: str) -> bool:
    """Whether ``store`` holds anything: a directory, or objects under an ``s3://`` prefix."""
    if is_object_store(store):
        return bool(object_storage(store).list(""))
    return Path(store).exists()


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
    return store.startswith(OBJECT_STORE_SCHEME)


def object_storage(store: str) -> ObjectStorage:
    """The bucket behind an ``s3://`` STORE, configured by the ``AWS_*`` environment
    as boto3 and the aws CLI are; no request is made yet."""
    try:
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
    """One line saying what went wrong with an object store and what to check."""
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
