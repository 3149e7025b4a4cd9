"""Vector search, pure: which fields of an item are embedded, and cosine scores.

numpy (the ``[vector]`` extra) scores many vectors at once; without it, the same
scores are computed in Python.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Hashable, Iterable
from typing import Any, Protocol

from langgraph.store.base import tokenize_path


def tokenized_fields(fields: Iterable[str]) -> list[tuple[str, list[str] | str]]:
    return [(path, path if path == "$" else tokenize_path(path)) for path in fields]


def cosine_scores(query: list[float], vectors: list[list[float]]) -> list[float]:
    """Cosine similarity of ``query`` with each vector (0 for a zero vector); numpy if present."""
    try:
        import numpy as np
    except ImportError:
        query_norm = math.sqrt(sum(x * x for x in query))
        scores = []
        for vector in vectors:
            norm = math.sqrt(sum(x * x for x in vector))
            dot = sum(a * b for a, b in zip(query, vector, strict=False))
            scores.append(dot / (query_norm * norm) if query_norm and norm else 0.0)
        return scores
    if not vectors:
        return []
    if any(len(vector) != len(query) for vector in vectors):
        return [
            cosine_scores(query, [vector])[0] if len(vector) == len(query) and vector else 0.0
            for vector in vectors
        ]
    matrix = np.asarray(vectors, dtype=float)
    query_array = np.asarray(query, dtype=float)
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query_array)
    dots = matrix @ query_array
    return [float(d / n) if n else 0.0 for d, n in zip(dots, norms, strict=False)]


class _HasVectors(Protocol):
    namespace: tuple[str, ...]
    key: str
    vectors: dict[str, bytes]


class VectorTable:
    """Every vector of some items in one matrix, for scoring them all against a query.

    Built once per state of a label's items (the store keeps it until they
    change): a query then costs one matrix product with numpy, instead of a
    Python loop over every vector. Vectors are float64 bytes (``store.batches``).

    Example:
        >>> from types import SimpleNamespace as Item
        >>> f64 = lambda *xs: struct.pack(f"<{len(xs)}d", *xs)
        >>> items = [Item(namespace=("a",), key="x", vectors={"$": f64(1.0, 0.0)}),
        ...          Item(namespace=("a",), key="y", vectors={"t.0": f64(0.0, 1.0),
        ...                                                  "t.1": f64(1.0, 1.0)})]
        >>> scores = VectorTable(items).best_scores([1.0, 0.0])
        >>> scores[(("a",), "x")], round(scores[(("a",), "y")], 3)
        (1.0, 0.707)
    """

    def __init__(self, items: Iterable[_HasVectors]) -> None:
        self.places: list[Hashable] = []
        self.starts: list[int] = []
        rows: list[bytes] = []
        for item in items:
            if not item.vectors:
                continue
            self.places.append((item.namespace, item.key))
            self.starts.append(len(rows))
            rows.extend(item.vectors.values())
        self.rows = rows
        self.matrix: Any = None
        self.norms: Any = None
        sizes = {len(row) for row in rows}
        try:
            import numpy as np
        except ImportError:
            return
        if len(sizes) == 1:
            width = sizes.pop() // 8
            self.matrix = np.frombuffer(b"".join(rows), dtype="<f8").reshape(-1, width)
            self.norms = np.linalg.norm(self.matrix, axis=1)

    def best_scores(self, query: list[float]) -> dict[Hashable, float]:
        """Each item's best cosine similarity with ``query`` over its vectors (0 for a zero
        vector, or one whose size differs from the query's)."""
        if not self.places:
            return {}
        if self.matrix is not None and self.matrix.shape[1] == len(query):
            import numpy as np

            query_array = np.asarray(query, dtype=float)
            norms = self.norms * np.linalg.norm(query_array)
            dots = self.matrix @ query_array
            with np.errstate(divide="ignore", invalid="ignore"):
                scores = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)
            best = np.maximum.reduceat(scores, np.asarray(self.starts))
            return dict(zip(self.places, best.tolist(), strict=True))
        vectors = [list(struct.unpack(f"<{len(r) // 8}d", r)) for r in self.rows]
        flat = cosine_scores(query, [v if len(v) == len(query) else [] for v in vectors])
        ends = [*self.starts[1:], len(self.rows)]
        return {
            place: max(flat[start:end])
            for place, start, end in zip(self.places, self.starts, ends, strict=True)
        }
