"""SPEC §5.7: a version equal to a kept version of the note is not stored again; the kept
one's time is refreshed (issue 13: each checkout kept another identical copy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_versions_keeper import FORTY_LINES, Rig, _disk_rewrite, make_rig

OTHER = "".join(f"the other branch's line {i}\n" for i in range(40))


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return make_rig(tmp_path)


def test_a_note_deleted_and_recreated_five_times_keeps_one_before_deletion_version(rig: Rig) -> None:
    _disk_rewrite(rig, "n.md", FORTY_LINES)
    for _ in range(5):
        rig.clock.advance(60)
        rig.service.delete("n.md", "disk")
        rig.clock.advance(60)
        _disk_rewrite(rig, "n.md", FORTY_LINES)  # the same file comes back (a checkout back)
    (info,) = rig.versions("n.md")
    assert info.kind == "before-deletion"
    assert info.created_at == rig.clock.t - 60  # the time of the last deletion
    assert rig.version(info).text == FORTY_LINES


def test_overwrites_back_and_forth_keep_each_text_once(rig: Rig) -> None:
    _disk_rewrite(rig, "n.md", FORTY_LINES)
    for _ in range(4):  # checkouts between two branches
        rig.clock.advance(10)
        _disk_rewrite(rig, "n.md", OTHER)
        rig.clock.advance(10)
        _disk_rewrite(rig, "n.md", FORTY_LINES)
    kept = rig.versions("n.md")
    assert sorted(rig.version(v).text for v in kept) == sorted([FORTY_LINES, OTHER])
    assert {v.kind for v in kept} == {"before-large-deletion"}
    newest = kept[0]  # newest first: the text the last checkout replaced
    assert rig.version(newest).text == OTHER
    assert newest.created_at == rig.clock.t


def test_an_idle_version_equal_to_a_kept_one_is_not_stored_again(rig: Rig) -> None:
    _disk_rewrite(rig, "n.md", FORTY_LINES)
    _disk_rewrite(rig, "n.md", OTHER)  # before-large-deletion of FORTY_LINES
    _disk_rewrite(rig, "n.md", FORTY_LINES)  # and of OTHER
    assert rig.keeper.tick(rig.clock.advance(601)) == 1  # the idle text is FORTY_LINES: kept already
    kept = rig.versions("n.md")
    assert len(kept) == 2
    # A version kept before a deletion stays that kind (retention keeps those longest).
    assert {v.kind for v in kept} == {"before-large-deletion"}
