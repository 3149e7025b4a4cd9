"""Reading a store's quarantine the way a person would: each copy with the reason for it.

A record moved aside on its own has ``<base>.record`` and ``<base>.reason``; several
moved together have one ``<base>.reasons`` naming, for each, where its bytes went:
``<base>.records`` (those of a thread's log, back to back, at the offset and length
its reason gives) or ``<base>-<n>.record`` (a store that renames records).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from langgraph_checkpoint_verified.records.format import Codec, RecordKind


def quarantine_contents(
    files: Mapping[str, bytes], codec: Codec
) -> dict[str, tuple[bytes, dict[str, Any]]]:
    """Original key -> (the bytes moved aside, the reason for them), from the quarantine's
    files (name -> bytes, names with or without ``quarantine/``). Every copy must have
    its reason, and every reason its copy."""
    found: dict[str, tuple[bytes, dict[str, Any]]] = {}
    explained: set[str] = set()
    for name, data in files.items():
        directory, _, base = name.rpartition("/")
        prefix = f"{directory}/" if directory else ""
        if name.endswith(".reason"):
            reason = json.loads(codec.decode(data, RecordKind.QUARANTINE_REASON, None))
            copies = [(f"{name[: -len('.reason')]}.record", reason)]
        elif name.endswith(".reasons"):
            reasons = json.loads(
                codec.decode(
                    data,
                    RecordKind.QUARANTINE_REASONS,
                    {"quarantine_move": base[: -len(".reasons")]},
                )
            )
            copies = [(f"{prefix}{reason['record']}", reason) for reason in reasons]
        else:
            continue
        for copy, reason in copies:
            data = files[copy]
            if copy.endswith(".records"):
                data = data[reason["offset"] : reason["offset"] + reason["length"]]
            else:
                assert "offset" not in reason or (reason["offset"], reason["length"]) == (
                    0,
                    len(data),
                )
            found[reason["original_key"]] = (data, reason)
            explained.add(copy)
    copies = {name for name in files if name.endswith((".record", ".records"))}
    assert copies == explained, f"every quarantined record has a reason: {sorted(files)}"
    return found
