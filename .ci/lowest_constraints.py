"""Print a pip constraints file that pins each direct dependency to its declared lower bound.

Usage: ``python .ci/lowest_constraints.py DIST [EXTRA[,EXTRA...]] > constraints.txt``

Reads the Requires-Dist metadata of the installed distribution DIST (``pip install
--no-deps -e .`` is enough), so it sees exactly the requirements pip sees, on any
Python the project supports. The requirements of DIST itself and of each EXTRA
are pinned (``name==lower``); installing with these constraints then either gets
every declared lower bound at once or fails, which is the point: a bound that
cannot be installed, or with which the tests fail, is not a true bound. A
requirement without a ``>=`` bound is an error, because nothing would test its floor.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import requires

REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;]*)(?:;(?P<marker>.*))?$"
)
LOWER_BOUND = re.compile(r">=\s*(?P<version>[^,\s]+)")
EXTRA = re.compile(r"""extra\s*==\s*["'](?P<extra>[^"']+)["']""")


def lowest_constraints(dist: str, extras: set[str]) -> list[str]:
    """``name==lower`` for each requirement of ``dist`` and of ``extras``, sorted by name.

    Raises:
        SystemExit: A requirement has no ``>=`` lower bound.
    """
    pins: dict[str, str] = {}
    for requirement in requires(dist) or []:
        match = REQUIREMENT.match(requirement)
        if match is None:
            raise SystemExit(f"cannot read the requirement {requirement!r} of {dist}")
        extra = EXTRA.search(match["marker"] or "")
        if extra is not None and extra["extra"] not in extras:
            continue
        lower = LOWER_BOUND.search(match["spec"])
        if lower is None:
            raise SystemExit(
                f"{requirement!r} of {dist} has no lower bound (>=): declare the lowest "
                "version the tests pass with"
            )
        pins[match["name"].lower()] = lower["version"]
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    dist, *extras = argv
    wanted = {extra for argument in extras for extra in argument.split(",") if extra}
    print("\n".join(lowest_constraints(dist, wanted)))


if __name__ == "__main__":
    main(sys.argv[1:])
