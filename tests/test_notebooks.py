"""Every notebook in ``notebooks/`` runs top to bottom in a fresh kernel of this environment.

Notebooks are stored with the outputs of one top-to-bottom run, so they read on a
repository page without being run. Refresh those outputs after changing a notebook:

    .venv/bin/python tests/test_notebooks.py                  # every notebook
    .venv/bin/python tests/test_notebooks.py recovery.ipynb   # one
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

NOTEBOOK_DIR = Path(__file__).parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))

# Lines each notebook must print; a notebook not listed only has to run.
EXPECTED_OUTPUT = {
    "memory.ipynb": [
        # thread 2 reads what thread 1 wrote, through the store
        "[tuesday] agent: what I know about ada: I prefer green tea; my cat is called Miso",
        "users.ada      {'text': 'I prefer green tea', 'kind': 'preference'}",
        "users.grace    {'text': 'I like espresso', 'kind': 'preference'}",
        # the same input again: answered by VerifiedCache, the node not run
        "{'understand': {'intent': 'answer'}, '__metadata__': {'cached': True}}",
        "understand runs during this call: 0",
        # the memories are batches in one log per first label, with its parity
        "memories/users/log",
        "memories/users/log.parity",
        # a memory updated: its second version in a later batch
        "now: {'text': 'my cat is called Miso; she is three', 'kind': 'fact'}",
        # one bit flipped in that batch on disk: rebuilt from parity, written back
        "get: {'text': 'my cat is called Miso; she is three', 'kind': 'fact'}",
        "rebuilt from parity, written back: [True]",
        "the log is byte for byte as written: True",
        # damage beyond parity: the earlier version, reported and moved aside
        "get: {'text': 'my cat is called Miso', 'kind': 'fact'}",
        # (the store that rebuilt its block before left a hint that covers it: the batch
        # is read where the hint places it, and its own checksum fails)
        "reason:         record checksum mismatch",
        "kind:           store_batch",
        "still in the log: False",
        "RecoveryStats(damaged_records=1, unreadable_records=0, quarantined_records=1, "
        "fallbacks=0, restarts_from_scratch=0, healed_blocks=0)",
        "get again: {'text': 'my cat is called Miso', 'kind': 'fact'} | reports: 1",
        "[thursday] agent: what I know about ada: I prefer green tea; my cat is called Miso",
        # langgraph-verified memories
        "│ users.ada   │ 2     │",
        "│ users.grace │ 1     │",
        "[exit 0]",
    ],
    "quickstart.ipynb": [
        "turns: 2 | node runs: 2",
        '"reason": "record checksum mismatch",',
        "step: 3  turns: 2",
        "RecoveryStats(damaged_records=1, unreadable_records=0, quarantined_records=1, "
        "fallbacks=1, restarts_from_scratch=0, healed_blocks=0)",
        "store verifies: True",
        "node runs during the replay: 0",
        "turns: 3",
        "ai: echo: still there?",
        "threads: 1  checkpoints: 9  quarantined records: 1",
    ],
    "recovery.ipynb": [
        "node runs: 6",
        # one bit flipped: rebuilt from the log's parity, served, reported, written back
        "alpha reads at step 7 with 3 turns",
        "reported: damaged block rebuilt from the log's parity; the thread's next append "
        "writes it back (or repair) | healed: True",
        "RecoveryStats(damaged_records=0, unreadable_records=0, quarantined_records=0, "
        "fallbacks=0, restarts_from_scratch=0, healed_blocks=1)",
        "written back: [True]",
        "the log is byte for byte as written: True",
        "alpha is back at step 6 with 3 turns",
        "its 'reply' task had finished; its result is stored: echo: tell me a joke",
        "reason:         record checksum mismatch",
        "RecoveryStats(damaged_records=1, unreadable_records=0, quarantined_records=1, "
        "fallbacks=1, restarts_from_scratch=0, healed_blocks=0)",
        '"thread_id": "alpha"',
        "alpha's .record is the damaged record, byte for byte: True",
        "quarantined records: 3",
        "store verifies: True",
        "node runs during the replays: 0",
        "alpha: 4 turns",
        "ok: every record verifies",
        "exit code: 0",
    ],
    "tool_side_effects.ipynb": [
        # ToolNode: the resume sends the email again
        "emails sent: 2",
        # VerifiedToolNode: the finished calls were recorded, the resume answers from them
        "call_email.result",
        "call_lookup.result",
        "issue_refund: refunded 49.00 EUR on A-1001",
        "emails sent: 1",
        "same key on both attempts: True",
        # at-most-once after a real SIGKILL inside the tool: not run again
        "the child process was killed by SIGKILL: True",
        "tool message, status 'error':",
        "outbox: ['to bob@example.com: Welcome']",
    ],
}

_PROBE = "import sys; print('KERNEL-PYTHON=' + sys.executable)"


def kernel_manager_for(kernels_dir: Path) -> KernelManager:
    """A ``python3`` kernel started with this interpreter, whatever the user's kernelspecs say.

    Kernelspecs in the user's home take precedence over the environment's, so
    this brings its own: one directory, one spec, argv[0] = sys.executable.
    """
    spec_dir = kernels_dir / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3",
                "language": "python",
            }
        )
    )
    specs = KernelSpecManager(kernel_dirs=[str(kernels_dir)])
    return KernelManager(kernel_name="python3", kernel_spec_manager=specs)


def execute(notebook: nbformat.NotebookNode, workdir: Path) -> None:
    """Run every cell in a fresh kernel started in ``workdir``; a cell that raises fails."""
    client = NotebookClient(
        notebook,
        km=kernel_manager_for(workdir / "kernels"),
        timeout=120,
        allow_errors=False,  # a cell that raises stops the run with its traceback
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()


def printed_lines(notebook: nbformat.NotebookNode) -> list[str]:
    """What the code cells printed to stdout or returned, one stripped line each."""
    printed = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            if output.output_type == "stream" and output.name == "stdout":
                printed.append(output.text)
            elif output.output_type == "execute_result":
                printed.append(output.data.get("text/plain", "") + "\n")
    return [line.strip() for line in "".join(printed).splitlines()]


def test_every_expected_notebook_exists() -> None:
    assert set(EXPECTED_OUTPUT) <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_with_its_outputs(path: Path) -> None:
    """The stored outputs come from one clean top-to-bottom run, and say what they should."""
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    counts = [cell.execution_count for cell in code_cells]
    assert counts == list(range(1, len(code_cells) + 1)), (
        f"{path.name} was not saved from one run; run `python tests/test_notebooks.py`"
    )
    for cell in code_cells:
        for output in cell.outputs:
            assert output.output_type != "error", (cell.source[:60], output)
    lines = printed_lines(notebook)
    for expected in EXPECTED_OUTPUT.get(path.name, []):
        assert expected.strip() in lines, f"the stored {path.name} does not show {expected!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.insert(0, new_code_cell(_PROBE))
    execute(notebook, tmp_path)

    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output.output_type != "error", output
    lines = printed_lines(notebook)
    assert lines[0] == f"KERNEL-PYTHON={sys.executable}"
    for expected in EXPECTED_OUTPUT.get(path.name, []):
        assert expected.strip() in lines, f"{path.name} did not print {expected!r}"


def refresh_outputs(paths: list[Path]) -> None:
    """Run each notebook and save it with its new outputs."""
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        with tempfile.TemporaryDirectory(prefix="notebook-run-") as workdir:
            execute(notebook, Path(workdir))
        nbformat.write(notebook, path)
        print(f"ran and saved {path}")


if __name__ == "__main__":
    names = sys.argv[1:]
    refresh_outputs([NOTEBOOK_DIR / name for name in names] if names else NOTEBOOKS)
