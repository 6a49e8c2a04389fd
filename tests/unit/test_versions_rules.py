"""The pure rules of SPEC §5 (stet.sync.versions, stet.sync.brake): no store, no clock."""

from __future__ import annotations

import pytest

from stet.sync.brake import DELETED, EMPTIED, OVERWRITTEN, BurstRule, destruction, is_destructive_write
from stet.sync.versions import (
    BEFORE_DELETION,
    BEFORE_LARGE_DELETION,
    DAY_S,
    IDLE,
    VersionMeta,
    VersionPolicy,
    chars_left,
    first_free_path,
    is_idle,
    is_large_deletion,
    preview,
    restore_path_candidates,
    versions_to_drop,
    versions_to_keep,
)

# -- large deletion (SPEC §5.1) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (1000, 200, True),  # exactly 20% left
        (1000, 210, False),  # 21% left
        (1000, 201, False),
        (1000, 0, True),
        (200, 40, True),  # the smallest note the rule covers, cut to exactly 20%
        (200, 41, False),
        (200, 0, True),
        (199, 0, False),  # too small a note to count
        (199, 39, False),
        (0, 0, False),
        (1000, 1000, False),
        (1000, 5000, False),
    ],
)
def test_large_deletion_boundaries(before: int, after: int, expected: bool) -> None:
    assert is_large_deletion(before, after) is expected


def test_ratio_is_compared_exactly_not_as_a_float() -> None:
    # 0.3 as a float is a hair below 3/10: the exact-30% case must still count.
    assert is_large_deletion(1000, 300, ratio=0.3)
    assert not is_large_deletion(1000, 301, ratio=0.3)
    assert is_large_deletion(300, 21, ratio=0.07, min_chars=300)
    assert not is_large_deletion(300, 22, ratio=0.07, min_chars=300)


def test_characters_are_code_points() -> None:
    policy = VersionPolicy()
    emoji = "😀" * 200  # 200 characters, 800 UTF-8 bytes
    assert policy.is_large_deletion(emoji, "😀" * 40)
    assert not policy.is_large_deletion(emoji, "😀" * 41)
    composed = "é" * 199  # 199 characters (U+00E9): below the minimum
    decomposed = "e\u0301" * 100  # 200 characters (e + combining accent)
    assert not policy.is_large_deletion(composed, "")
    assert policy.is_large_deletion(decomposed, "")


def test_what_is_left_of_the_text_counts_not_the_new_length() -> None:
    policy = VersionPolicy()
    old = "".join(f"line {i}\n" for i in range(40))
    assert chars_left(old, old + "more\n") == len(old)
    assert chars_left(old, "") == 0
    assert chars_left("a" * 300, "b" * 300) == 0
    assert policy.is_large_deletion("a" * 300, "b" * 300)  # overwritten: nothing of it left
    assert policy.is_large_deletion(old, old[:40] + "x" * 1000)
    assert not policy.is_large_deletion(old, old[: len(old) // 2] + "x" * 1000)


def test_idle_rule() -> None:
    assert not is_idle(1000.0, 1000.0 + 599.9, 10)
    assert is_idle(1000.0, 1000.0 + 600, 10)
    assert is_idle(1000.0, 1000.0 + 30, 0.5)


# -- retention (SPEC §5.2, §5.3) --------------------------------------------------------------


def _metas(kinds_and_times: list[tuple[str, float]]) -> list[VersionMeta]:
    return [VersionMeta(i + 1, k, t) for i, (k, t) in enumerate(kinds_and_times)]


def test_retention_keeps_fifty_newest_and_ten_newest_shrink_versions_for_thirty_days() -> None:
    policy = VersionPolicy()
    t0 = 1_000_000.0
    shrink = [(BEFORE_LARGE_DELETION if i % 2 else BEFORE_DELETION, t0 + i) for i in range(12)]
    idle = [(IDLE, t0 + 1000 + 600 * i) for i in range(60)]
    versions = _metas(shrink + idle)
    now = t0 + 1000 + 600 * 60
    kept = versions_to_keep(versions, now, policy)
    assert len(kept) == 60
    assert {v.id for v in versions[-50:]} <= kept  # the 50 newest (idle)
    assert {v.id for v in versions[2:12]} <= kept  # the 10 newest shrink versions
    assert versions_to_drop(versions, now, policy) == [1, 2, *range(13, 23)]
    # 30 days after they were saved the shrink versions beyond the 50 go.
    later = t0 + 11 + 30 * DAY_S + 1
    assert versions_to_keep(versions, later, policy) == {v.id for v in versions[-50:]}


def test_shrink_versions_among_the_newest_fifty_stay_however_old() -> None:
    policy = VersionPolicy()
    versions = _metas([(BEFORE_DELETION, 0.0), (IDLE, 1.0)])
    assert versions_to_drop(versions, 400 * DAY_S, policy) == []


def test_protected_versions_are_never_dropped() -> None:
    policy = VersionPolicy(keep=1, keep_shrink=0)
    versions = _metas([(BEFORE_DELETION, 0.0), (IDLE, 1.0), (IDLE, 2.0)])
    assert versions_to_drop(versions, 10.0, policy, protected={1}) == [2]


# -- where a restored note goes ------------------------------------------------------------------


def test_restore_path_candidates() -> None:
    assert list(restore_path_candidates("a/b.md", 3)) == [
        "a/b (restored).md", "a/b (restored 2).md", "a/b (restored 3).md"]
    assert next(restore_path_candidates("notes.txt")) == "notes (restored).txt"
    assert next(restore_path_candidates("dir.v2/.hidden")) == "dir.v2/.hidden (restored)"
    taken = {"x.md", "x (restored).md"}
    assert first_free_path("x.md", taken.__contains__) == "x (restored 2).md"
    assert first_free_path("y.md", taken.__contains__) == "y.md"
    assert first_free_path("x.md", lambda p: True, limit=5) is None


def test_preview() -> None:
    assert preview("\n\n  # Title  \nbody") == "# Title"
    assert preview("x" * 100, 10) == "x" * 9 + "…"
    assert preview(" \n ") == ""


# -- the burst brake rule (SPEC §5.6) ------------------------------------------------------------


def test_destruction() -> None:
    assert destruction("text", None) == DELETED
    assert destruction("text", "") == EMPTIED
    assert destruction("text", " \n\t") == EMPTIED
    assert destruction("text", "t") is None
    assert destruction("", None) is None  # not populated
    assert destruction(" \n", "") is None
    assert destruction("a" * 300, "b" * 300) is None  # without a versions rule: not counted
    assert destruction("a" * 300, "b" * 300, VersionPolicy()) == OVERWRITTEN
    assert destruction("a" * 100, "b" * 100, VersionPolicy()) is None  # under 200 characters
    policy = VersionPolicy()
    assert is_destructive_write("x" * 300, "x", policy)  # a large deletion
    assert not is_destructive_write("x" * 300, "x" * 200, policy)
    assert not is_destructive_write("short", "s", policy)


def test_burst_rule_trips_on_the_tenth_note_within_the_window() -> None:
    rule: BurstRule[str] = BurstRule(notes=10, window_s=60)
    for i in range(9):
        assert rule.observe("disk", f"n{i}", 100.0 + i, f"item{i}") == []
    assert rule.pending("disk") == 9
    assert rule.observe("agent:x", "n9", 109.0, "other source") == []
    tripped = rule.observe("disk", "n9", 109.0, "item9")
    assert tripped == [f"item{i}" for i in range(10)]
    assert rule.pending("disk") == 0  # engaged now: the daemon holds what follows


def test_burst_rule_counts_notes_not_changes_and_forgets_the_old() -> None:
    rule: BurstRule[int] = BurstRule(notes=3, window_s=60)
    assert rule.observe("s", "a", 0.0, 1) == []
    assert rule.observe("s", "a", 1.0, 2) == []  # the same note again
    assert rule.observe("s", "b", 2.0, 3) == []
    assert rule.observe("s", "c", 61.5, 4) == []  # "a" (t=1) has left the window, "b" (t=2) not
    assert rule.pending("s") == 2
    rule.prune(200.0)
    assert rule.pending("s") == 0


def test_burst_rule_can_be_turned_off() -> None:
    rule: BurstRule[int] = BurstRule(notes=0, window_s=60)
    assert all(rule.observe("s", str(i), float(i), i) == [] for i in range(50))
