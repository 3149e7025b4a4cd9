"""How far brute-force vector search goes: ``VectorTable`` at growing sizes.

``VerifiedStore`` scores a query against every vector of the first label it
searches, as one numpy matrix product (``store.vectors.VectorTable``); the
table is built once per state of the label's items and kept until they change.
This prints, for each size, the time to build the table, the median time to
score one query (five queries), and the matrix's memory, so that the point where
an approximate index would pay can be read off::

    python benchmarks/vector_scaling.py [--dims 384] [--sizes 1000,10000,50000,100000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import numpy as np

from langgraph_checkpoint_verified.store.vectors import VectorTable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--sizes", default="1000,10000,50000,100000")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    print("| vectors | build the table | score one query (median of 5) | matrix |")
    print("|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        items = [
            SimpleNamespace(
                namespace=("bench",),
                key=f"item-{n}",
                vectors={"text": rng.standard_normal(args.dims).astype("<f8").tobytes()},
            )
            for n in range(size)
        ]
        started = time.perf_counter()
        table = VectorTable(items)
        built = time.perf_counter() - started
        query = list(rng.standard_normal(args.dims))
        scored = []
        for _ in range(5):
            started = time.perf_counter()
            table.best_scores(query)
            scored.append(time.perf_counter() - started)
        print(
            f"| {size:,} | {built * 1e3:.1f} ms | {statistics.median(scored) * 1e3:.1f} ms "
            f"| {table.matrix.nbytes / 1e6:.0f} MB |"
        )


if __name__ == "__main__":
    main()
