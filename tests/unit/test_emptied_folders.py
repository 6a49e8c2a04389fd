"""The rule for folders Stet emptied (daemon/base/emptied_folders.py), on real folders: removed
deepest first while each is left empty; never the root, a folder still holding anything,
``.git``/``.stet*`` or an ignored folder."""

from __future__ import annotations

from pathlib import Path

from stet.daemon.base.emptied_folders import folders_above, remove_emptied_folders
from stet.sync.ignore_rules import IgnoreRules


def test_folders_above_leave_out_the_root_git_and_our_own() -> None:
    assert folders_above("a/b/c.png") == ["a/b", "a"]
    assert folders_above("c.png") == []
    assert folders_above(".git/objects/x") == []
    assert folders_above("sub/.git/x") == []
    assert folders_above(".stet-tmp/x") == []


def test_only_folders_left_empty_go_and_never_the_root(tmp_path: Path) -> None:
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "other.png").write_bytes(b"x")
    assert remove_emptied_folders(tmp_path, "a/b/c/gone.png") == ["a/b/c", "a/b"]
    assert (tmp_path / "a" / "other.png").is_file()
    (tmp_path / "a" / "other.png").unlink()
    assert remove_emptied_folders(tmp_path, "a/other.png") == ["a"]
    assert tmp_path.is_dir()
    assert remove_emptied_folders(tmp_path, "top.png") == []


def test_a_folder_holding_an_ignored_file_or_ignored_itself_stays(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / ".DS_Store").write_bytes(b"")
    assert remove_emptied_folders(tmp_path, "x/gone.png") == []
    (tmp_path / "build" / "out").mkdir(parents=True)
    rules = IgnoreRules.from_text("out/\n")
    assert remove_emptied_folders(tmp_path, "build/out/gone.png", rules.is_ignored) == []
    assert (tmp_path / "build" / "out").is_dir()
