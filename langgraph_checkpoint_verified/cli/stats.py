"""``stats``: what a store holds and what it takes: threads, records, bytes, quarantine.

Registered by ``app`` as the command of the same name; it opens the store with
``quarantine=False`` and runs under ``store.run_guarded``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langgraph_checkpoint_verified.cli import output
from langgraph_checkpoint_verified.cli.output import EXIT_OK, out, print_json, progress, table
from langgraph_checkpoint_verified.cli.params import AsJson, KeyFile, Store
from langgraph_checkpoint_verified.cli.store import open_store, quarantined_count, run_guarded
from langgraph_checkpoint_verified.records import keys as record_keys

if TYPE_CHECKING:
    from langgraph_checkpoint_verified.storage import Storage

MEMORIES, CACHE = record_keys.MEMORIES_PREFIX, record_keys.CACHE_PREFIX
"""Where ``VerifiedStore`` keeps its memories (batches of items) and ``VerifiedCache`` its
entries."""


def stats(store: Store, as_json: AsJson = False, key_file: KeyFile = None) -> int:
    """Threads, checkpoints, bytes, compression ratio, memory items, cache entries, quarantine.

    ``records``, ``bytes`` and the compression ratio are those of the threads;
    ``store_batches`` counts the records of ``VerifiedStore`` (batches of item
    changes, until its logs are compacted) and ``cache_entries`` those of
    ``VerifiedCache`` (expired ones until they are swept); ``store_bytes`` (the
    memories' logs, parity included) and ``cache_bytes`` what they take.
    """

    def body() -> int:
        from langgraph_checkpoint_verified.records.format import Codec

        saver = open_store(store, key_file)
        storage = saver.storage
        stored = raw = records = 0
        keys = list(saver.storage.walk("threads"))
        with progress("measuring") as bar:
            task = bar.add_task("measuring", total=len(keys))
            for key in keys:
                data = saver.storage.read(key) or b""
                records += 1
                stored += len(data)
                raw += Codec.decompressed_size(data) or len(data)
                bar.advance(task)
        checkpoints = sum(1 for k in keys if k.endswith(".ckpt"))
        summary = {
            "store": saver.storage.location(""),
            "threads": len(saver.engine.thread_ids()),
            "checkpoints": checkpoints,
            "records": records,
            "bytes": stored,
            "uncompressed_bytes": raw,
            "compression_ratio": round(raw / stored, 3) if stored else None,
            "store_batches": _count(storage, MEMORIES, record_keys.BATCH_SUFFIX),
            "store_bytes": storage.usage(MEMORIES),
            "cache_entries": _count(storage, CACHE, record_keys.CACHE_ENTRY_SUFFIX),
            "cache_bytes": storage.usage(CACHE),
            "quarantined_records": quarantined_count(saver),
        }
        if as_json:
            print_json(summary)
            return EXIT_OK
        grid = table("", "")
        grid.show_header = False
        for name, value in summary.items():
            grid.add_row(name.replace("_", " "), output.text(value))
        out().print(grid)
        return EXIT_OK

    return run_guarded(body, store=store)


def _count(storage: Storage, prefix: str, suffix: str) -> int:
    """How many records under ``prefix`` end in ``suffix`` (names only, nothing read)."""
    return sum(1 for key in storage.walk(prefix) if key.endswith(suffix))
