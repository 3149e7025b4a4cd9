"""Griffe extension for the API reference: read ``Example:`` as an examples section.

The package's docstrings head their runnable examples ``Example:``, which
Napoleon and the Google style accept. Griffe's Google parser knows only
``Examples:`` and would render ``Example:`` as an admonition of Markdown text,
where ``>>>`` lines become nested block quotes. This extension renames the
heading before the docstring is parsed, so the examples render as code.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_EXAMPLE_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)


def as_examples_section(docstring: str) -> str:
    """Rename every ``Example:`` section heading to ``Examples:``.

    Example:
        >>> as_examples_section("Do it.\\n\\nExample:\\n    >>> 1 + 1\\n    2\\n")
        'Do it.\\n\\nExamples:\\n    >>> 1 + 1\\n    2\\n'
    """
    return _EXAMPLE_HEADING.sub(r"\1Examples:", docstring)


class ExampleSections(Extension):
    """Applies ``as_examples_section`` to every docstring griffe loads."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_examples_section(obj.docstring.value)
