"""A held change whose note came back leaves `held` by itself, and `revert` never
overwrites a note recreated or edited after the hold (SPEC §5.6; issue 13: `revert --all`
removed an edit made after git brought the files back; a `cp -r` restore made
`(restored)` copies)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_versions_keeper import Rig, _disk_rewrite, make_rig


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return make_rig(tmp_path)


def _notes(n: int) -> dict[str, str]:
    return {f"d{i:02d}.md": f"# note {i}\n" + f"what note {i} says\n" * 5 for i in range(n)}


def _rm_all(rig: Rig, texts: dict[str, str]) -> None:
    for path in texts:
        (rig.root / path).unlink()
        rig.bridge.ingest_path(path)
    assert len(rig.brake.changes()) == len(texts)


def test_a_held_deletion_whose_file_reappears_leaves_held_by_itself(rig: Rig) -> None:
    texts = _notes(12)
    for path, text in texts.items():
        _disk_rewrite(rig, path, text)
    _rm_all(rig, texts)
    assert rig.brake.is_engaged("disk")
    _disk_rewrite(rig, "d00.md", texts["d00.md"])  # the same file back
    held = rig.brake.changes()
    assert len(held) == 11
    assert "d00.md" not in {h.path for h in held}
    (back,) = [h for h in rig.brake.changes(include_resolved=True) if h.path == "d00.md"]
    assert back.state == "came-back"
    assert not rig.brake.is_held(back.note_id)
    for path, text in list(texts.items())[1:]:
        _disk_rewrite(rig, path, text)
    assert rig.brake.changes() == []
    assert not rig.brake.is_engaged("disk")  # nothing of the disk's burst is held any more


def test_a_held_emptying_written_again_leaves_held(rig: Rig) -> None:
    texts = _notes(10)
    for path, text in texts.items():
        _disk_rewrite(rig, path, text)
    for path in texts:
        _disk_rewrite(rig, path, "")
    assert len(rig.brake.changes()) == 10
    _disk_rewrite(rig, "d03.md", "written again by a person\n")
    assert "d03.md" not in {h.path for h in rig.brake.changes()}
    rig.brake.revert(None)
    rig.bridge.flush_writes()
    assert (rig.root / "d03.md").read_text() == "written again by a person\n"
    assert (rig.root / "d04.md").read_text() == texts["d04.md"]


def test_revert_skips_notes_that_came_back_and_says_which(rig: Rig) -> None:
    texts = _notes(12)
    for path, text in texts.items():
        _disk_rewrite(rig, path, text)
    _rm_all(rig, texts)
    ids = {h.path: h.id for h in rig.brake.changes()}
    _disk_rewrite(rig, "d01.md", texts["d01.md"])  # back (git checkout -- d01.md)
    _disk_rewrite(rig, "d01.md", texts["d01.md"] + "EDIT\n")  # and edited afterwards
    reverted, skipped = rig.brake.revert_or_skip(None)
    assert len(reverted) == 11
    assert [(s["id"], s["path"]) for s in skipped] == [(ids["d01.md"], "d01.md")]
    assert "back" in skipped[0]["reason"]
    rig.bridge.flush_writes()
    assert (rig.root / "d01.md").read_text() == texts["d01.md"] + "EDIT\n"
    assert sorted(p.name for p in rig.root.iterdir()) == sorted(texts)  # no "(restored)" copy
    # Asked by id, a change that came back is reported skipped, not an error.
    again, skipped = rig.brake.revert_or_skip([ids["d01.md"]])
    assert again == []
    assert [s["path"] for s in skipped] == ["d01.md"]


def test_a_cp_restore_of_edited_notes_makes_no_restored_copies(rig: Rig) -> None:
    """Notes edited since their first import come back from a copy as new notes at the
    same paths (a note's id derives from its first text): their held deletions leave
    held, and a revert makes no `NAME (restored).md` beside them."""
    texts = _notes(12)
    for path, text in texts.items():
        _disk_rewrite(rig, path, "first draft\n")
        _disk_rewrite(rig, path, text)
    _rm_all(rig, texts)
    for path, text in texts.items():  # cp -r backup/. vault/
        _disk_rewrite(rig, path, text)
    assert rig.brake.changes() == []
    reverted, skipped = rig.brake.revert_or_skip(None)
    assert reverted == []
    assert sorted(s["path"] for s in skipped) == sorted(texts)
    rig.bridge.flush_writes()
    assert sorted(p.name for p in rig.root.iterdir()) == sorted(texts)
    for path, text in texts.items():
        assert (rig.root / path).read_text() == text


def test_a_note_held_twice_still_reverts_to_the_text_before_the_first(rig: Rig) -> None:
    """The check "written again since the hold" looks at the note's last held change,
    not at the revert's own restore of the newer one."""
    t0, t1, t2 = ("A" * 300, "B" * 300, "C" * 300)
    rig.service.write_text("a.md", t0, "cli")
    for path, text in _notes(10).items():
        rig.service.write_text(path, text, "cli")
        rig.service.write_text(path, "", "disk")
    rig.service.write_text("a.md", t1, "disk")
    rig.service.write_text("a.md", t2, "disk")
    reverted, skipped = rig.brake.revert_or_skip(None)
    assert skipped == []
    assert rig.text("a.md") == t0
