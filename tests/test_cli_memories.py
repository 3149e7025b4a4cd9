"""``memories``: the namespaces and items of a ``VerifiedStore``, as the command line shows them.

The store is written with ``VerifiedStore`` (items in two namespaces, ``users.ada``
and ``menu``); the command only looks: damage is named, never moved, and no byte of
the store changes.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from logtools import lose_parity, view_log
from test_cli_s3 import bucket  # noqa: F401 (a fixture)

from langgraph_checkpoint_verified import VerifiedStore
from langgraph_checkpoint_verified.cli import main
from langgraph_checkpoint_verified.records.keys import batch_key

MENU = {
    "tea": {"kind": "drink", "price": 3, "text": "hot tea"},
    "cake": {"kind": "food", "price": 5, "text": "chocolate cake"},
    "juice": {"kind": "drink", "price": 4.5, "text": "orange juice"},
}
WORDS = ["tea", "cake", "juice"]


def embed(texts: list[str]) -> list[list[float]]:
    return [[float(text.count(word)) for word in WORDS] for text in texts]


def fill(store: VerifiedStore) -> None:
    store.put(("users", "ada"), "prefs", {"theme": "dark"})
    store.put(("users", "ada"), "facts", {"likes": "tea"})
    for key, value in MENU.items():
        store.put(("menu",), key, value)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    fill(VerifiedStore(directory, fsync=False))
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def ok_json(capsys: pytest.CaptureFixture[str], *argv: Any) -> dict[str, Any]:
    code, printed, errors = run(capsys, *argv, "--json")
    assert code == 0, errors
    return json.loads(printed)


def digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_without_a_namespace_it_lists_the_namespaces_with_their_counts(store_dir, capsys):
    code, printed, errors = run(capsys, "memories", store_dir)
    assert code == 0, errors
    assert "menu" in printed and "users.ada" in printed
    listed = ok_json(capsys, "memories", store_dir)["namespaces"]
    assert listed == [
        {"namespace": ["menu"], "items": 3},
        {"namespace": ["users", "ada"], "items": 2},
    ]


def test_a_namespace_lists_its_items_as_labels_or_dotted(store_dir, capsys):
    code, printed, errors = run(capsys, "memories", store_dir, "users", "ada")
    assert code == 0, errors
    assert "prefs" in printed and '"theme": "dark"' in printed and "cake" not in printed
    as_labels = ok_json(capsys, "memories", store_dir, "users", "ada")
    dotted = ok_json(capsys, "memories", store_dir, "users.ada")
    assert as_labels == dotted
    assert sorted(i["key"] for i in dotted["items"]) == ["facts", "prefs"]
    prefix = ok_json(capsys, "memories", store_dir, "users")
    assert {i["key"] for i in prefix["items"]} == {"facts", "prefs"}
    assert all(i["namespace"] == ["users", "ada"] for i in prefix["items"])


def test_json_gives_the_values_and_times(store_dir, capsys):
    found = ok_json(capsys, "memories", store_dir, "menu")
    assert {i["key"]: i["value"] for i in found["items"]} == MENU
    item = found["items"][0]
    assert set(item) == {"namespace", "key", "value", "created_at", "updated_at", "score"}
    assert found["more"] is False and found["damaged"] == []


def test_limit_cuts_the_list_and_says_so(store_dir, capsys):
    found = ok_json(capsys, "memories", store_dir, "menu", "--limit", "2")
    assert len(found["items"]) == 2 and found["more"] is True
    code, printed, _ = run(capsys, "memories", store_dir, "menu", "--limit", "2")
    assert code == 0 and "raise --limit" in printed


def test_filter_is_passed_to_search(store_dir, capsys):
    found = ok_json(capsys, "memories", store_dir, "menu", "--filter", '{"price": {"$gte": 4}}')
    assert sorted(i["key"] for i in found["items"]) == ["cake", "juice"]
    # with no namespace, a filter searches the whole store
    found = ok_json(capsys, "memories", store_dir, "--filter", '{"theme": "dark"}')
    assert [i["key"] for i in found["items"]] == ["prefs"]


@pytest.mark.parametrize(
    ("value", "says"),
    [("{price: 4", "--filter is not JSON"), ("[1, 2]", "--filter must be a JSON object")],
)
def test_a_bad_filter_is_one_line_and_exit_2(store_dir, capsys, value, says):
    code, printed, errors = run(capsys, "memories", store_dir, "menu", "--filter", value)
    assert code == 2
    assert printed == ""
    assert len(errors.strip().splitlines()) == 1 and says in errors


def test_query_without_an_index_is_one_line_and_exit_2(store_dir, capsys):
    code, _, errors = run(capsys, "memories", store_dir, "menu", "--query", "tea")
    assert code == 2
    assert len(errors.strip().splitlines()) == 1 and "--query needs" in errors


def test_query_with_the_stores_embedding_ranks_items(tmp_path, capsys, monkeypatch):
    (tmp_path / "menu_embedding.py").write_text(
        textwrap.dedent(
            f"""
            WORDS = {WORDS!r}

            def embed(texts):
                return [[float(t.count(w)) for w in WORDS] for t in texts]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    directory = tmp_path / "indexed"
    fill(VerifiedStore(directory, fsync=False, index={"dims": 3, "embed": embed}))
    found = ok_json(
        capsys, "memories", directory, "menu", "--query", "cake", "--embed", "menu_embedding:embed"
    )
    assert found["items"][0]["key"] == "cake" and found["items"][0]["score"] == pytest.approx(1)
    code, printed, _ = run(
        capsys, "memories", directory, "menu", "--query", "cake", "--embed", "menu_embedding:embed"
    )
    assert code == 0 and "SCORE" in printed


def test_a_damaged_item_is_not_shown_but_reported_and_not_moved(store_dir, capsys):
    """Cake's batch (each put is one) damaged on disk, beyond what the parity rebuilds."""
    version = VerifiedStore(store_dir).logs.current("menu").items[(("menu",), "cake")].version
    cake = batch_key("menu", version.rsplit("/", 1)[0])
    log = store_dir / "memories" / "menu" / "log"
    view = view_log(log.read_bytes(), "memories/menu")
    assert not view.is_last(cake)  # juice was put after it
    entry = view.entry(cake)
    lose_parity(log)
    damaged = bytearray(log.read_bytes())
    damaged[entry.data_offset + entry.data_size - 1] ^= 0xFF
    log.write_bytes(damaged)
    before = digest(store_dir)

    code, printed, errors = run(capsys, "memories", store_dir, "menu")
    assert code == 0
    assert "tea" in printed and "juice" in printed and "cake" not in printed
    assert len(errors.strip().splitlines()) == 1
    assert "1 damaged record(s)" in errors and cake in errors

    found = ok_json(capsys, "memories", store_dir)
    assert {"namespace": ["menu"], "items": 2} in found["namespaces"]
    assert found["damaged"] == [cake]
    assert digest(store_dir) == before  # a look moves nothing, refreshes nothing
    assert not (store_dir / "quarantine").exists()


def test_a_look_writes_no_touch_record_on_a_store_with_ttl(tmp_path, capsys):
    directory = tmp_path / "ttl"
    store = VerifiedStore(directory, fsync=False, ttl={"default_ttl": 60})
    store.put(("sessions",), "draft", {"text": "half a thought"})
    before = digest(directory)
    assert ok_json(capsys, "memories", directory, "sessions")["items"][0]["key"] == "draft"
    assert digest(directory) == before


def test_an_empty_store_and_a_missing_one(tmp_path, capsys):
    from langgraph_checkpoint_verified import VerifiedSaver

    VerifiedSaver(tmp_path / "saver")
    code, printed, _ = run(capsys, "memories", tmp_path / "saver")
    assert code == 0 and "no memory items" in printed
    code, _, errors = run(capsys, "memories", tmp_path / "nowhere")
    assert code == 2 and "no store at" in errors and len(errors.strip().splitlines()) == 1
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("hello")
    code, _, errors = run(capsys, "memories", tmp_path / "other")
    assert code == 2 and "is not a store" in errors


def test_a_keyed_store_needs_its_key_file(tmp_path, capsys):
    key = b"k" * 32
    directory = tmp_path / "keyed"
    fill(VerifiedStore(directory, fsync=False, key=key))
    code, _, errors = run(capsys, "memories", directory)
    assert code == 2 and "--key-file" in errors and len(errors.strip().splitlines()) == 1
    (tmp_path / "key").write_bytes(key)
    found = ok_json(capsys, "memories", directory, "--key-file", tmp_path / "key")
    assert {"namespace": ["menu"], "items": 3} in found["namespaces"]


def test_a_label_with_a_dot_among_several_is_refused(store_dir, capsys):
    code, _, errors = run(capsys, "memories", store_dir, "users", "a.da")
    assert code == 2 and "cannot hold a '.'" in errors


def test_an_s3_store(bucket, capsys):  # noqa: F811 (the fixture)
    pytest.importorskip("obstore")
    url = f"s3://{bucket[1]}/memory"
    fill(VerifiedStore(url))
    listed = ok_json(capsys, "memories", url)["namespaces"]
    assert {"namespace": ["users", "ada"], "items": 2} in listed
    found = ok_json(capsys, "memories", url, "menu", "--filter", '{"kind": "food"}')
    assert [i["key"] for i in found["items"]] == ["cake"]
