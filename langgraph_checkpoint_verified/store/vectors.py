"""Vector search, pure: which fields of an item are embedded, and cosine scores.

numpy (the ``[vector]`` extra) scores many vectors at once; without it, the same
scores are computed in Python.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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
    matrix = np.asarray(vectors, dtype=float)
    query_array = np.asarray(query, dtype=float)
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query_array)
    dots = matrix @ query_array
    return [float(d / n) if n else 0.0 for d, n in zip(dots, norms, strict=False)]
