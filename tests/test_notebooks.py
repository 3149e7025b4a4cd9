"""Every notebook in ``notebooks/`` runs top to bottom in a fresh kernel of this environment."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))

# Lines each notebook must print; a notebook not listed only has to run.
EXPECTED_OUTPUT = {
    "quickstart.ipynb": [
        "turns: 2 | node runs: 2",
        '"reason": "record checksum mismatch",',
        "step: 3  turns: 2",
        "RecoveryStats(damaged_records=1, unreadable_records=0, quarantined_records=1, "
        "fallbacks=1, restarts_from_scratch=0)",
        "store verifies: True",
        "node runs during the replay: 0",
        "turns: 3",
        "ai: echo: still there?",
        "threads: 1  checkpoints: 9  quarantined records: 1",
    ],
}

_PROBE = "import sys; print('KERNEL-PYTHON=' + sys.executable)"


@pytest.fixture
def kernel_manager(tmp_path: Path) -> KernelManager:
    """A ``python3`` kernel started with this interpreter, whatever the user's kernelspecs say.

    Kernelspecs in the user's home take precedence over the environment's, so
    the test brings its own: one directory, one spec, argv[0] = sys.executable.
    """
    spec_dir = tmp_path / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (tests)",
                "language": "python",
            }
        )
    )
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    return KernelManager(kernel_name="python3", kernel_spec_manager=specs)


def test_every_expected_notebook_exists() -> None:
    assert set(EXPECTED_OUTPUT) <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path, kernel_manager: KernelManager) -> None:
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.insert(0, new_code_cell(_PROBE))
    client = NotebookClient(
        notebook,
        km=kernel_manager,
        timeout=120,
        allow_errors=False,  # a cell that raises fails the test with its traceback
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()

    printed = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            assert output.output_type != "error", output
            if output.output_type == "stream" and output.name == "stdout":
                printed.append(output.text)
            elif output.output_type == "execute_result":
                printed.append(output.data.get("text/plain", "") + "\n")
    lines = [line.strip() for line in "".join(printed).splitlines()]
    assert lines[0] == f"KERNEL-PYTHON={sys.executable}"
    for expected in EXPECTED_OUTPUT.get(path.name, []):
        assert expected.strip() in lines, f"{path.name} did not print {expected!r}"
