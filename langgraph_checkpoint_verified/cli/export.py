"""``export`` and ``import``: a portable, versioned JSON-lines copy of threads and memories.

The first line is the header ``{"format": "langgraph-verified-export", "version": 2}``.
Every other line is one object with a ``"type"`` (``checkpoint``; ``writes``, one
task's batch of pending writes; ``tool_record``; ``store_item``, one memory of
``VerifiedStore``) and a ``"sha256"``: the hex digest of the line's canonical JSON
(sorted keys, no spaces) without that field. Values are the saver's serde output
(``{"type": ..., "data": base64}``), so an import restores them exactly; pending
writes keep their ``task_path`` and indices, memories their times, TTL, expiry and
vectors. Version 1 (no ``store_item`` lines) is read too.

Node cache entries are not exported: a cache holds what its graph can compute
again, and a missing entry costs one node run, never a wrong answer.

``import`` refuses a store that already has one of the export's threads (two
histories would mix in it), or one of its memories, unless ``--replace``: each such
thread is then deleted first, and the export's is imported in its place; each such
memory is replaced.

Typer commands, registered by ``app``: ``export`` and ``import_`` (the ``import``
command) are the commands, their parameters the commands' arguments and options.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from langgraph_checkpoint_verified.cli import output
from langgraph_checkpoint_verified.cli.output import EXIT_OK, progress
from langgraph_checkpoint_verified.cli.params import KeyFile, Store
from langgraph_checkpoint_verified.cli.store import (
    CommandError,
    create_or_open,
    need_thread,
    open_store,
    run_guarded,
    store_exists,
)
from langgraph_checkpoint_verified.records import keys as record_keys

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.saver import VerifiedSaver
    from langgraph_checkpoint_verified.store import StoredItem, VerifiedStore

FORMAT = "langgraph-verified-export"
"""The ``format`` of an export's header line."""
VERSION = 2
"""The version of the export format this module writes: 2 added ``store_item`` lines."""
READABLE_VERSIONS = (1, 2)
"""The versions this module reads: a version 1 export holds threads only."""
HEADER = {"format": FORMAT, "version": VERSION}
"""An export's first line."""


def _digest(line: dict[str, Any]) -> str:
    body = {k: v for k, v in line.items() if k != "sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _sealed(line: dict[str, Any]) -> str:
    return json.dumps({**line, "sha256": _digest(line)}, ensure_ascii=False) + "\n"


def _typed(saver: VerifiedSaver, value: Any) -> dict[str, str]:
    type_, data = saver.serde.dumps_typed(value)
    return {"type": type_, "data": base64.b64encode(data).decode("ascii")}


def _untyped(saver: VerifiedSaver, typed: dict[str, str]) -> Any:
    return saver.serde.loads_typed((typed["type"], base64.b64decode(typed["data"])))


def export_lines(saver: VerifiedSaver, thread_ids: list[str]) -> list[dict[str, Any]]:
    """Every line of an export of ``thread_ids``, before it is sealed with its sha256.

    Args:
        saver: The opened store.
        thread_ids: The threads to export, in order.

    Returns:
        Per thread: its checkpoints oldest first, each followed by its writes
        records, then its tool records.
    """
    lines: list[dict[str, Any]] = []
    with progress("exporting") as bar:
        task = bar.add_task("exporting", total=len(thread_ids))
        for thread_id in thread_ids:
            found = sorted(saver.list(output.thread_config(thread_id)), key=output.checkpoint_id)
            for item in found:  # oldest first: parents before children
                where = {
                    "thread_id": thread_id,
                    "checkpoint_ns": output.namespace(item),
                    "checkpoint_id": output.checkpoint_id(item),
                }
                lines.append(
                    {
                        "type": "checkpoint",
                        **where,
                        "parent_checkpoint_id": output.parent_id(item),
                        "checkpoint": _typed(saver, item.checkpoint),
                        "metadata": _typed(saver, item.metadata),
                        "channel_versions": dict(item.checkpoint["channel_versions"]),
                    }
                )
                lines.extend(_writes_lines(saver, where))
            lines.extend(_tool_lines(saver, thread_id))
            bar.advance(task)
    return lines


def _writes_lines(saver: VerifiedSaver, where: dict[str, str]) -> list[dict[str, Any]]:
    """One line per stored writes record (one task's batch), with its task_path and indices."""
    thread_id, checkpoint_ns, checkpoint_id = (
        where["thread_id"],
        where["checkpoint_ns"],
        where["checkpoint_id"],
    )
    prefix = record_keys.writes_prefix(thread_id, checkpoint_ns, checkpoint_id)
    lines = []
    for name in sorted(saver.storage.list(prefix)):
        record = saver.engine.reader.read_writes(
            f"{prefix}/{name}", thread_id, checkpoint_ns, checkpoint_id
        )
        if record is None:
            continue  # damaged: verify reports it; an export holds what verifies
        lines.append(
            {
                "type": "writes",
                **where,
                "task_id": record.task_id,
                "task_path": record.task_path,
                "writes": [
                    {
                        "idx": idx,
                        "channel": channel,
                        "value": {
                            "type": type_,
                            "data": base64.b64encode(data).decode("ascii"),
                        },
                    }
                    for idx, channel, (type_, data) in sorted(record.writes, key=lambda w: w[0])
                ],
            }
        )
    return lines


def _tool_lines(saver: VerifiedSaver, thread_id: str) -> list[dict[str, Any]]:
    lines = []
    for key in sorted(saver.storage.walk(record_keys.tools_prefix(thread_id))):
        kind = key.rsplit(".", 1)[-1]
        data = saver.storage.read(key)
        if data is None or kind not in ("intent", "result"):
            continue
        try:
            identity = saver.codec.read_header(data).identity
        except Exception:
            continue  # damaged: verify reports it; an export holds what verifies
        record = saver.get_tool_record(
            thread_id, identity["checkpoint_ns"], identity["tool_call_id"], kind
        )
        if record is None:
            continue
        fingerprint, value = record
        lines.append(
            {
                "type": "tool_record",
                "thread_id": thread_id,
                "checkpoint_ns": identity["checkpoint_ns"],
                "tool_call_id": identity["tool_call_id"],
                "kind": kind,
                "fingerprint": fingerprint,
                "value": _typed(saver, value),
            }
        )
    return lines


def memory_of(saver: VerifiedSaver, *, quarantine: bool = False) -> VerifiedStore:
    """The ``VerifiedStore`` on the same records as ``saver``: same storage, same key.

    Args:
        saver: The opened store.
        quarantine: Whether damage found while reading is moved aside.

    Returns:
        The store, reading and writing ``memories/`` beside the saver's ``threads/``.
    """
    from langgraph_checkpoint_verified.store import VerifiedStore

    return VerifiedStore(storage=saver.storage, key=saver.codec.key, quarantine=quarantine)


def memory_lines(saver: VerifiedSaver, memory: VerifiedStore) -> list[dict[str, Any]]:
    """One line per live memory item, by namespace then key, before it is sealed.

    Args:
        saver: The opened store; its serde writes the values.
        memory: Its memory (``memory_of``).

    Returns:
        ``store_item`` lines: ``namespace``, ``key``, ``value``, ``created_at`` and
        ``updated_at`` (ISO 8601), ``ttl`` (minutes), ``expires_at`` (seconds since
        the epoch, a refresh included) and ``vectors``. Damaged and expired items
        are left out, as reads leave them out.
    """
    return [
        {
            "type": "store_item",
            "namespace": list(item.namespace),
            "key": item.key,
            "value": _typed(saver, item.value),
            "created_at": item.created_at.isoformat(),
            "updated_at": item.updated_at.isoformat(),
            "ttl": item.ttl,
            "expires_at": item.expires_at,
            "vectors": item.vectors,
        }
        for item in memory.stored_items()
    ]


def stored_item(line: dict[str, Any]) -> StoredItem:
    """The memory a ``store_item`` line holds (its value already decoded by ``read_export``).

    Args:
        line: The line.

    Returns:
        The item, as ``VerifiedStore.restore_items`` writes it.

    Raises:
        CommandError: A field is missing or of the wrong type.
    """
    from langgraph_checkpoint_verified.store import StoredItem

    try:
        return StoredItem(
            namespace=tuple(line["namespace"]),
            key=line["key"],
            value=line["value"],
            created_at=datetime.fromisoformat(line["created_at"]),
            updated_at=datetime.fromisoformat(line["updated_at"]),
            ttl=line.get("ttl"),
            expires_at=line.get("expires_at"),
            vectors=dict(line.get("vectors") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CommandError(
            f"a store_item line is not one ({exc!r}); nothing was imported"
        ) from None


def export(
    store: Store,
    file: Annotated[str, typer.Argument(metavar="FILE", help="where to write ('-': stdout)")],
    thread: Annotated[
        str | None, typer.Option("--thread", metavar="T", help="only this thread")
    ] = None,
    key_file: KeyFile = None,
) -> int:
    """Write threads (checkpoints, pending writes, tool records) and memories as JSON lines.

    With ``--thread``, that thread alone (no memories). Cache entries are never
    exported: they are what the graph computes again.
    """

    def body() -> int:
        saver = open_store(store, key_file)
        thread_ids = (
            [need_thread(saver, thread, store)] if thread else sorted(saver.engine.thread_ids())
        )
        memories = [] if thread else memory_lines(saver, memory_of(saver))
        lines = [
            json.dumps(HEADER) + "\n",
            *(_sealed(line) for line in [*export_lines(saver, thread_ids), *memories]),
        ]
        if file == "-":
            import sys

            sys.stdout.writelines(lines)
            return EXIT_OK
        with open(file, "w", encoding="utf-8") as out:
            out.writelines(lines)
        checkpoints = sum(1 for line in lines if '"type": "checkpoint"' in line)
        items = f" and {len(memories)} memory item(s)" if memories else ""
        typer.echo(
            f"exported {len(thread_ids)} thread(s), {checkpoints} checkpoint(s){items} to {file}",
            err=True,
        )
        return EXIT_OK

    return run_guarded(body, store=store)


def read_export(saver: VerifiedSaver, file: str) -> list[dict[str, Any]]:
    """Every line of an export, checked and decoded; raises CommandError on the first bad one.

    Args:
        saver: The saver whose serde decodes the values.
        file: The export's path.

    Returns:
        The lines after the header, values decoded.

    Raises:
        CommandError: The file is not an export, of another version, or a line is
            damaged or holds a value that cannot be read.
    """
    with open(file, encoding="utf-8") as source:
        text = source.read().splitlines()
    if not text:
        raise CommandError(f"{file} is empty: not a {FORMAT} file")
    try:
        header = json.loads(text[0])
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CommandError(f"{file} is not a {FORMAT} file (line 1 is not its header)")
    if header.get("version") not in READABLE_VERSIONS:
        readable = " and ".join(str(version) for version in READABLE_VERSIONS)
        raise CommandError(
            f"{file} is version {header.get('version')!r}; this version reads {readable}"
        )
    lines = []
    for number, raw in enumerate(text[1:], start=2):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            ok = isinstance(line, dict) and line.get("sha256") == _digest(line)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise CommandError(
                f"{file} line {number} is damaged (its sha256 does not match); nothing was imported"
            )
        try:
            for field in ("checkpoint", "metadata", "value"):
                if field in line:
                    line[field] = _untyped(saver, line[field])
            for write in line.get("writes", ()):
                write["value"] = _untyped(saver, write["value"])
        except Exception as exc:
            raise CommandError(
                f"{file} line {number} holds a value that cannot be read ({exc}); "
                f"nothing was imported"
            ) from None
        lines.append(line)
    return lines


def import_(
    store: Store,
    file: Annotated[str, typer.Argument(metavar="FILE")],
    replace: Annotated[
        bool,
        typer.Option(
            "--replace", help="delete the store's threads the export also has, then import them"
        ),
    ] = False,
    key_file: KeyFile = None,
) -> int:
    """Restore an export into a store (created if missing); every line is checked first.

    A thread or memory the store already has is refused (nothing is imported),
    unless ``--replace`` is given: then each such thread is deleted (its
    checkpoints, pending writes and tool records) before the export's is
    imported, and each such memory is overwritten by the export's.
    """

    def body() -> int:
        if store_exists(store):
            saver = open_store(store, key_file, quarantine=True)
            lines = read_export(saver, file)
            items = [stored_item(line) for line in lines if line["type"] == "store_item"]
            memory = memory_of(saver, quarantine=True)
            clashing = sorted(
                {line["thread_id"] for line in lines if "thread_id" in line}
                & set(saver.engine.thread_ids())
            )
            taken = [
                item
                for item in items
                if memory.get(item.namespace, item.key, refresh_ttl=False) is not None
            ]
            if (clashing or taken) and not replace:
                # importing into a thread that exists would mix two histories in it, and
                # a memory the store has may be newer than the export's
                found = []
                if clashing:
                    found.append("thread(s) " + ", ".join(repr(t) for t in clashing))
                if taken:
                    named = ", ".join(repr(f"{'.'.join(i.namespace)}/{i.key}") for i in taken[:3])
                    more = f" and {len(taken) - 3} more" if len(taken) > 3 else ""
                    found.append(f"memory item(s) {named}{more}")
                raise CommandError(
                    f"{store} already has {' and '.join(found)}; pass --replace to replace "
                    f"them with the imported ones (nothing was imported)"
                )
            for thread_id in clashing:
                saver.delete_thread(thread_id)
        else:
            from langgraph_checkpoint_verified.saver import VerifiedSaver

            # every line is checked before the store is made: a refused import leaves nothing
            lines = read_export(VerifiedSaver.in_memory(), file)
            items = [stored_item(line) for line in lines if line["type"] == "store_item"]
            saver = create_or_open(store, key_file)
            memory = memory_of(saver, quarantine=True)
        stored: dict[tuple[str, str, str], Any] = {}
        counts = {"checkpoint": 0, "writes": 0, "tool_record": 0}
        with progress("importing") as bar:
            task = bar.add_task("importing", total=len(lines))
            for line in lines:
                kind = line["type"]
                if kind == "checkpoint":
                    config = output.thread_config(line["thread_id"], line["checkpoint_ns"])
                    if line["parent_checkpoint_id"]:
                        config["configurable"]["checkpoint_id"] = line["parent_checkpoint_id"]
                    where = (line["thread_id"], line["checkpoint_ns"], line["checkpoint_id"])
                    stored[where] = saver.put(
                        config, line["checkpoint"], line["metadata"], line["channel_versions"]
                    )
                elif kind == "writes":
                    where = (line["thread_id"], line["checkpoint_ns"], line["checkpoint_id"])
                    _put_writes(saver, stored[where], line)
                elif kind == "tool_record":
                    saver.put_tool_record(
                        line["thread_id"],
                        line["checkpoint_ns"],
                        line["tool_call_id"],
                        line["kind"],
                        fingerprint=line["fingerprint"],
                        value=line["value"],
                    )
                counts[kind] = counts.get(kind, 0) + 1
                bar.advance(task)
        memory.restore_items(items)  # one batch: memories stand alone, no order among them
        done = [
            f"{counts['checkpoint']} checkpoint(s)",
            f"{counts['writes']} pending write batch(es)",
            f"{counts['tool_record']} tool record(s)",
            *([f"{len(items)} memory item(s)"] if items else []),
        ]
        print(f"imported {', '.join(done[:-1])} and {done[-1]} into {store}")
        return EXIT_OK

    return run_guarded(body, store=store)


def _put_writes(saver: VerifiedSaver, config: Any, line: dict[str, Any]) -> None:
    """Store one task's batch as the run did.

    ``put_writes`` numbers regular writes by their position in one call, special ones
    (errors, interrupts) by their kind.
    """
    from langgraph.checkpoint.base import WRITES_IDX_MAP

    writes = sorted(line["writes"], key=lambda write: write["idx"])
    regular = [(w["channel"], w["value"]) for w in writes if w["channel"] not in WRITES_IDX_MAP]
    if regular:
        saver.put_writes(config, regular, line["task_id"], line["task_path"])
    for w in writes:
        if w["channel"] in WRITES_IDX_MAP:
            saver.put_writes(
                config, [(w["channel"], w["value"])], line["task_id"], line["task_path"]
            )
