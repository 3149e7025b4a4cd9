"""MkDocs hook: a page includes a repository file with ``<!-- include PATH -->``.

The Benchmarks page shows the benchmark write-up and figures as they are in the
repository, so the site and the repository never disagree. An included file's relative
links point into the repository, not into the site: images are published next to the
page, and links to other files become their repository path, in code.

``<!-- include benchmarks/README.md from line 2 -->`` skips the file's first line (its
title, when the page has its own). A path is relative to the directory of mkdocs.yml; a
missing file fails the build.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

INCLUDE = re.compile(r"^<!-- include (?P<path>\S+)(?: from line (?P<start>\d+))? -->[ \t]*$", re.M)
LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
PUBLISHED = "_included"  # where included files' images go in the site


def _repository(config: Any) -> Path:
    return Path(config.config_file_path).resolve().parent


def _is_relative(target: str) -> bool:
    return not re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", target, re.I)


def _image_uri(included: str, target: str) -> str:
    """The site path of an image ``target`` linked from the repository file ``included``."""
    return posixpath.normpath(posixpath.join(PUBLISHED, posixpath.dirname(included), target))


def _included_text(repository: Path, match: re.Match[str]) -> str:
    path = repository / match["path"]
    if not path.is_file():
        raise FileNotFoundError(f"<!-- include {match['path']} -->: no such file {path}")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(lines[int(match["start"] or 1) - 1 :])


def rewrite_links(text: str, included: str, page_dir: str) -> str:
    """Make the relative links of ``included`` (a repository path) work on a page in ``page_dir``.

    Example:
        >>> rewrite_links("![plot](results/a.png) see [README.md](README.md), [x](https://x.org)",
        ...               "benchmarks/results.md", "")
        '![plot](_included/benchmarks/results/a.png) see `benchmarks/README.md`, [x](https://x.org)'
    """

    def replace(link: re.Match[str]) -> str:
        target = link["target"]
        if not _is_relative(target):
            return link[0]
        if link["bang"]:
            uri = posixpath.relpath(_image_uri(included, target), page_dir or ".")
            return f"![{link['text']}]({uri})"
        path = posixpath.normpath(posixpath.join(posixpath.dirname(included), target))
        if link["text"].strip("`") in (target, posixpath.basename(target)):
            return f"`{path}`"
        return f"{link['text']} (`{path}`)"

    return LINK.sub(replace, text)


def on_files(files: Files, config: Any) -> Files:
    """Publish the images that included files link to."""
    repository = _repository(config)
    for page in list(files.documentation_pages()):
        for match in INCLUDE.finditer(Path(page.abs_src_path).read_text(encoding="utf-8")):
            for link in LINK.finditer(_included_text(repository, match)):
                if link["bang"] and _is_relative(link["target"]):
                    image = repository / posixpath.dirname(match["path"]) / link["target"]
                    uri = _image_uri(match["path"], link["target"])
                    if files.get_file_from_path(uri) is None:
                        files.append(File.generated(config, uri, abs_src_path=str(image)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    repository = _repository(config)
    page_dir = posixpath.dirname(page.file.src_uri)

    def include(match: re.Match[str]) -> str:
        return rewrite_links(_included_text(repository, match), match["path"], page_dir)

    return INCLUDE.sub(include, markdown)
