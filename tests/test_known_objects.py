"""What an object store keeps of what the store last said (``storage.objects.known``).

Pure: no server. The S3 tests (``test_s3_requests.py``) count the requests this saves.
"""

from __future__ import annotations

from langgraph_checkpoint_verified.storage.objects.known import KnownObjects


def test_an_object_is_fresh_for_its_time_then_known_but_stale():
    known = KnownObjects(fresh_for=0.0)
    known.remember("t/a", "e1", b"abc", 3)
    found, fresh = known.fresh("t/a")
    assert found is not None and found.data == b"abc" and not fresh
    known.confirm("t/a", "e1")  # the store says the same again: still known
    assert known.fresh("t/a")[0] is not None


def test_another_etag_or_none_forgets_the_object():
    known = KnownObjects(fresh_for=60.0)
    known.remember("t/a", "e1", b"abc", 3)
    known.confirm("t/a", "e2")
    assert known.fresh("t/a") == (None, False)
    known.remember("t/b", "e1", b"abc", 3)
    known.confirm("t/b", None)
    assert "t/b" not in known


def test_an_answer_without_an_etag_is_not_kept():
    known = KnownObjects(fresh_for=60.0)
    known.remember("t/a", "e1", b"abc", 3)
    known.remember("t/a", None, b"xyz", 3)  # nothing to revalidate against
    assert "t/a" not in known


def test_a_listing_forgets_what_it_no_longer_names_or_names_otherwise():
    known = KnownObjects(fresh_for=60.0)
    for name in ("a", "b", "c"):
        known.remember(f"t/{name}", "e1", name.encode(), 1)
    known.remember("t/sub/d", "e1", b"d", 1)  # not directly under t/: not this listing's
    known.remember("u/a", "e1", b"a", 1)
    known.saw_listed("t/", [{"path": "t/b", "e_tag": "e1"}, {"path": "t/c", "e_tag": "e9"}])
    assert ["t/a" in known, "t/b" in known, "t/c" in known] == [False, True, False]
    assert "t/sub/d" in known and "u/a" in known
    # a listing from an offset says nothing of the names before it
    known.remember("t/a", "e1", b"a", 1)
    known.saw_listed("t/", [], after="t/a")
    assert "t/a" in known and "t/b" not in known


def test_the_least_recently_used_go_first_past_the_bounds():
    known = KnownObjects(fresh_for=60.0, max_objects=3, max_bytes=10)
    for name in ("a", "b", "c"):
        known.remember(f"t/{name}", "e", b"xx", 2)
    known.fresh("t/a")  # used: now the most recent
    known.remember("t/d", "e", b"xx", 2)
    assert sorted(k for k in ("t/a", "t/b", "t/c", "t/d") if k in known) == ["t/a", "t/c", "t/d"]
    known.remember("t/e", "e", b"x" * 7, 7)  # 13 bytes with the others: two must go
    assert sorted(k for k in ("t/a", "t/c", "t/d", "t/e") if k in known) == ["t/d", "t/e"]
    known.remember("t/f", "e", None, 1_000)  # no bytes kept: its size does not count
    assert "t/f" in known and "t/e" in known


def test_keys_under_a_prefix_and_forgetting_them():
    known = KnownObjects(fresh_for=60.0)
    for key in ("t/1/a", "t/1/b", "t/10/a", "t/2/a"):
        known.remember(key, "e", b"", 0)
    assert sorted(known.keys_under("t/1")) == ["t/1/a", "t/1/b"]
    known.forget(known.keys_under("t/1"))
    assert known.keys_under("t/1") == [] and "t/10/a" in known
