"""The benchmark script runs end to end in its quick form (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"


def test_quick_benchmark_produces_every_section(tmp_path: Path) -> None:
    output = tmp_path / "latest.json"
    done = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(output.read_text())
    for section in ("chat_sync", "chat_async", "put", "reads", "size", "recovery"):
        assert section in results, section
    assert set(results["recovery"]["cases"]) == {"0", "1", "10", "100"}
    assert results["size"]["SqliteSaver"]["apparent_bytes"] > 0
    for title in ("graph.invoke", "graph.ainvoke", "### put", "get_tuple", "Size", "Recovery"):
        assert title in done.stdout, title
