"""What ``import langgraph_checkpoint_verified`` loads: only what the saver uses.

The faces that need more (``VerifiedToolNode`` and ``run_with_recovery`` pull in
LangGraph's prebuilt agents and tracers, ``VerifiedCache`` LangGraph's cache,
``ObjectStorage`` obstore and greenlet) are imported the first time one of their
names is used. Counted in a fresh interpreter: which modules are loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

NOT_FOR_A_SAVER = (
    "obstore",
    "greenlet",
    "rich",
    "typer",
    "click",
    "langgraph.prebuilt",
    "langgraph.cache.base",
    "langgraph_checkpoint_verified.tools",
    "langgraph_checkpoint_verified.retry",
    "langgraph_checkpoint_verified.cache",
    "langgraph_checkpoint_verified.cli",
    "langgraph_checkpoint_verified.storage.objects",
)


def loaded_after(code: str) -> set[str]:
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_a_saver_user_loads_only_what_the_saver_uses(tmp_path):
    loaded = loaded_after(
        "from langgraph_checkpoint_verified import VerifiedSaver\n"
        f"VerifiedSaver({str(tmp_path / 'store')!r}).get_tuple("
        "{'configurable': {'thread_id': 't'}})"
    )
    assert "langgraph_checkpoint_verified.saver" in loaded
    assert sorted(set(NOT_FOR_A_SAVER) & loaded) == []


def test_every_public_name_is_there_when_asked_for():
    loaded = loaded_after(
        "import langgraph_checkpoint_verified as package\n"
        "missing = [name for name in package.__all__ if getattr(package, name, None) is None]\n"
        "assert not missing, missing\n"
        "assert callable(package.migrate)\n"
        "assert package.VerifiedToolNode.__name__ == 'VerifiedToolNode'"
    )
    assert "langgraph_checkpoint_verified.tools" in loaded
    assert "langgraph_checkpoint_verified.storage.objects" in loaded
