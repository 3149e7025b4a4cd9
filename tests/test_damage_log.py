"""What the ``langgraph_checkpoint_verified`` logger says about damage: a record found
damaged alone, a warning of its own; records found damaged together (a read falling
back past several), one warning for them all, each one still logged at DEBUG and
passed to ``on_corruption``."""

from __future__ import annotations

import logging

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_config
from test_saver_api import put_chain

from langgraph_checkpoint_verified import VerifiedSaver
from langgraph_checkpoint_verified.records.keys import checkpoint_key

LOGGER = "langgraph_checkpoint_verified"


def damage(saver: VerifiedSaver, config: dict) -> str:
    """Flip a byte in the middle of a checkpoint's record; its key."""
    key = checkpoint_key("t", "", config["configurable"]["checkpoint_id"])
    data = bytearray(saver.storage.read(key))
    data[len(data) // 2] ^= 0xFF
    saver.storage.write(key, bytes(data))
    return key


def open_saver(backend: str, tmp_path, **options) -> VerifiedSaver:
    if backend == "memory":
        return VerifiedSaver.in_memory(**options)
    return VerifiedSaver(tmp_path / "store", fsync=False, **options)


def damage_lines(caplog, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == level and "damaged" in r.getMessage()
    ]


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_a_read_falling_back_past_several_damaged_checkpoints_warns_once_for_them_all(
    tmp_path, caplog, backend
):
    seen = []
    saver = open_saver(backend, tmp_path, on_corruption=seen.append)
    configs = put_chain(saver, "t", 6)
    damaged = [damage(saver, config) for config in reversed(configs[-4:])]  # newest first

    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        found = saver.get_tuple(generate_config("t"))

    assert found is not None and found.config == configs[-5]
    (warning,) = damage_lines(caplog, logging.WARNING)
    first, last = seen[0].location, seen[-1].location
    assert warning.startswith(
        f"4 damaged checkpoint records, {first} to {last}: record checksum mismatch; "
        "quarantined to "
    ), warning
    assert warning.endswith(" (each one logged at DEBUG)")
    # each one, as a record found alone would be, at DEBUG; each one to the callback
    assert [d.key for d in seen] == damaged
    assert all(d.quarantined_to is not None for d in seen)
    assert damage_lines(caplog, logging.DEBUG) == [
        f"damaged checkpoint record {d.location}: record checksum mismatch "
        f"(quarantined to {d.quarantined_to})"
        for d in seen
    ]
    assert saver.stats.damaged_records == saver.stats.quarantined_records == 4


@pytest.mark.parametrize("backend", ["files", "memory"])
def test_a_single_damaged_checkpoint_gets_a_warning_of_its_own(tmp_path, caplog, backend):
    seen = []
    saver = open_saver(backend, tmp_path, on_corruption=seen.append)
    configs = put_chain(saver, "t", 3)
    damage(saver, configs[-1])

    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert saver.get_tuple(generate_config("t")).config == configs[-2]

    (only,) = seen
    assert damage_lines(caplog, logging.WARNING) == [
        f"damaged checkpoint record {only.location}: record checksum mismatch "
        f"(quarantined to {only.quarantined_to})"
    ]
    assert damage_lines(caplog, logging.DEBUG) == []


def test_records_left_in_place_are_said_to_be_not_moved(tmp_path, caplog):
    seen = []
    saver = VerifiedSaver(tmp_path / "store", fsync=False, quarantine=False)
    configs = put_chain(saver, "t", 4)
    for config in configs[-2:]:
        damage(saver, config)
    reader = VerifiedSaver(
        tmp_path / "store", fsync=False, quarantine=False, on_corruption=seen.append
    )

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert reader.get_tuple(generate_config("t")).config == configs[-3]

    (warning,) = damage_lines(caplog, logging.WARNING)
    assert warning == (
        f"2 damaged checkpoint records, {seen[0].location} to {seen[1].location}: "
        "record checksum mismatch; not moved (each one logged at DEBUG)"
    )
    assert reader.stats.quarantined_records == 0
