"""Two savers on one store: what one rewrites, the other must not trust from memory."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config

from langgraph_checkpoint_verified import MemoryStorage, VerifiedSaver


@pytest.fixture(params=["files", "memory"])
def two_savers(request, tmp_path):
    if request.param == "files":
        return VerifiedSaver(tmp_path / "store"), VerifiedSaver(tmp_path / "store")
    storage = MemoryStorage()
    return VerifiedSaver(storage=storage), VerifiedSaver(storage=storage)


def checkpoint(n: int):
    return generate_checkpoint(
        channel_values={"big": "unchanged", "n": n}, channel_versions={"big": 1, "n": n}
    )


@pytest.mark.parametrize("maintenance", ["delete_for_runs", "prune"])
def test_put_after_another_saver_rewrote_the_parent(two_savers, maintenance):
    """`big` lives in the first checkpoint's record; the other saver deletes that record
    (moving `big` into the survivor). The next put must not point at the deleted record."""
    writer, maintainer = two_savers
    first = writer.put(generate_config("t"), checkpoint(1), {"run_id": "r1"}, {"big": 1, "n": 1})
    second = writer.put(first, checkpoint(2), {"run_id": "r2"}, {"n": 2})
    if maintenance == "delete_for_runs":
        maintainer.delete_for_runs(["r1"])
    else:
        maintainer.prune(["t"], strategy="keep_latest")

    third = writer.put(second, checkpoint(3), {"run_id": "r2"}, {"n": 3})

    loaded = writer.get_tuple(third)
    assert loaded.config["configurable"]["checkpoint_id"] == third["configurable"]["checkpoint_id"]
    assert loaded.checkpoint["channel_values"] == {"big": "unchanged", "n": 3}
    assert maintainer.get_tuple(generate_config("t")).checkpoint["channel_values"]["n"] == 3
    assert writer.verify().ok
    assert writer.stats.fallbacks == 0
