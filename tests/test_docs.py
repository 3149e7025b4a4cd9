"""The documentation site builds cleanly, covers the public API, and its examples run.

``mkdocs build --strict`` turns every warning (a broken link, a page missing from the
nav, a docstring the API reference cannot render) into a failure.

Every ```python block of every page runs as a script of its own, in a fresh working
directory, so each one works when copied alone. Comment lines right below a top-level
``print(...)`` show what it prints, and must match. Blocks written as doctests (``>>>``)
are left to pytest's ``--doctest-glob='*.md'``, which runs each page's doctests in one
namespace. A block that cannot run here opts out with ``<!-- not-run: reason -->`` on
the line right above its fence (on the fence line itself the comment would break the
Markdown fence).
"""

from __future__ import annotations

import logging
import os
import re
import runpy
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import langgraph_checkpoint_verified

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_NOT_RUN = re.compile(r"^[ \t]*<!--[ \t]*not-run:(?P<reason>.*?)-->[ \t]*$")


@dataclass(frozen=True)
class CodeBlock:
    page: str  # relative to docs/
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    not_run: str | None  # the reason given in a not-run marker, if any

    @property
    def is_doctest(self) -> bool:
        return self.code.lstrip().startswith(">>>")

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def code_blocks(path: Path, page: str | None = None) -> list[CodeBlock]:
    """Every fenced code block of a Markdown page, with the marker line above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[CodeBlock] = []
    index = 0
    while index < len(lines):
        opening = _FENCE_OPEN.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = index + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = [
            line[len(indent) :] if line.startswith(indent) else line
            for line in lines[index + 1 : end]
        ]
        marker = _NOT_RUN.match(lines[index - 1]) if index > 0 else None
        blocks.append(
            CodeBlock(
                page=page or path.relative_to(DOCS).as_posix(),
                line=index + 1,
                language=(opening["info"].split() or [""])[0].lower(),
                code="\n".join(body) + "\n",
                not_run=marker["reason"].strip() if marker else None,
            )
        )
        index = end + 1
    return blocks


# Pages whose ```python blocks are still fragments (they use names defined nowhere on the
# page). Such a block may fail with NameError only, and is reported as an expected
# failure; any other error fails the test. Remove a page from here once its blocks run.
FRAGMENT_PAGES: dict[str, str] = {}

PAGES = sorted(DOCS.rglob("*.md"))
PYTHON_BLOCKS = [
    block for page in PAGES for block in code_blocks(page) if block.language in ("python", "py")
]
RUNNABLE = [block for block in PYTHON_BLOCKS if not block.is_doctest and block.not_run is None]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict`` succeeds, into a temporary directory (never the repository)."""
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    reference = (tmp_path / "site" / "reference" / "saver" / "index.html").read_text()
    assert 'id="langgraph_checkpoint_verified.VerifiedSaver"' in reference
    # docstring examples render as code, not as Markdown text (see docs/hooks/)
    assert '<span class="gp">&gt;&gt;&gt; </span>' in reference


def test_api_reference_names_every_public_name() -> None:
    documented = []
    for page in sorted((DOCS / "reference").glob("*.md")):
        documented += re.findall(
            r"^::: langgraph_checkpoint_verified\.(\w+)$", page.read_text(), re.M
        )
    assert sorted(documented) == sorted(langgraph_checkpoint_verified.__all__)


def test_code_blocks_are_found() -> None:
    """The extraction sees the blocks it should: a parser that found none would pass vacuously."""
    pages = {block.page for block in RUNNABLE}
    assert {"index.md", "quickstart.md", "migrating.md"} <= pages


def test_code_block_extraction(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n"
        "* a list item:\n\n"
        "  ```python\n  x = 1\n  if x:\n      y = 2\n  ```\n\n"
        "<!-- not-run: needs a LangGraph server -->\n"
        '```python title="agent.py"\nserve()\n```\n\n'
        "````markdown\n```python\nnot a block of its own\n```\n````\n\n"
        "```python\n>>> 1 + 1\n2\n```\n"
    )
    blocks = code_blocks(page, "page.md")
    assert [(b.line, b.language, b.not_run, b.is_doctest) for b in blocks] == [
        (5, "python", None, False),
        (12, "python", "needs a LangGraph server", False),
        (16, "markdown", None, False),
        (22, "python", None, True),
    ]
    assert blocks[0].code == "x = 1\nif x:\n    y = 2\n"


def test_every_opt_out_says_why() -> None:
    for block in PYTHON_BLOCKS:
        if block.not_run is not None:
            assert len(block.not_run) >= 10, f"{block.id}: say why the block cannot run"


@pytest.mark.parametrize("block", RUNNABLE, ids=[block.id for block in RUNNABLE])
def test_python_block_runs(
    block: CodeBlock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    # damage the examples provoke on purpose is logged as warnings; keep the output clean
    monkeypatch.setattr(logging.getLogger("langgraph_checkpoint_verified"), "disabled", True)
    # run as a script, the way a reader would run a copy of it; blank lines in front
    # make a traceback's line numbers those of the page
    script = tmp_path / f"{Path(block.page).stem}_line_{block.line}.py"
    script.write_text("\n" * block.line + block.code, encoding="utf-8")
    try:
        runpy.run_path(str(script), run_name="__main__")
    except NameError as error:
        if block.page not in FRAGMENT_PAGES:
            raise
        pytest.xfail(f"docs/{block.id} is a fragment ({error}): {FRAGMENT_PAGES[block.page]}")
    printed = capsys.readouterr().out.splitlines()
    expected = _expected_output(block.code)
    # what a block shows as its output is what it prints, in that order
    remaining = iter(printed)
    for line in expected:
        assert any(line == out for out in remaining), (
            f"docs/{block.id} shows {line!r} as output, but printed:\n" + "\n".join(printed)
        )


def _expected_output(code: str) -> list[str]:
    """The lines a block says it prints: the ``# text`` comments right after a ``print(...)``.

    Pages show what a top-level ``print`` prints as comment lines right below it.
    """
    expected: list[str] = []
    lines = code.splitlines()
    for index, line in enumerate(lines):
        if not line.startswith("print("):
            continue
        # the statement may span lines; its output comments follow its last line
        end = index
        depth = line.count("(") - line.count(")")
        while depth > 0 and end + 1 < len(lines):
            end += 1
            depth += lines[end].count("(") - lines[end].count(")")
        for comment in lines[end + 1 :]:
            if not comment.startswith("# "):
                break
            expected.append(comment[2:])
    return expected
