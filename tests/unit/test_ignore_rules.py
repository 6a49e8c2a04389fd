"""Unit tests for stet.sync.ignore_rules (SPEC §3.12)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stet.sync.ignore_rules import DEFAULT_IGNORES, IgnoreRules


@pytest.fixture
def defaults() -> IgnoreRules:
    return IgnoreRules.from_text(None)


@pytest.mark.parametrize(
    ("path", "is_dir"),
    [
        (".git", True),
        (".git/config", False),
        (".git/objects/ab/cdef", False),
        ("sub/.git/HEAD", False),  # nested repository
        (".stet-1234.tmp", False),
        (".stet-abc.md", False),
        ("notes/.stet-write-9.md", False),
        (".stetignore", False),
        (".trash", True),
        (".trash/old.md", False),
        ("sub/.trash/old.md", False),
        (".DS_Store", False),
        ("sub/.DS_Store", False),
        ("note.md.swp", False),
        (".note.md.swp", False),
        (".note.md.swo", False),
        (".note.md.swx", False),
        ("note.md~", False),
        ("sub/note.md~", False),
        (".#note.md", False),  # emacs lock file (a symlink)
        ("#note.md#", False),  # emacs autosave
        ("sub/#note.md#", False),
        ("note.tmp", False),
        ("4913", False),  # vim's write probe
        ("sub/4913", False),
        (".~lock.report.odt#", False),
        ("__pycache__", True),
        ("pkg/__pycache__/m.cpython-311.pyc", False),
        (".stversions/note~20240101.md", False),
        (".Trash-1000/files/x.md", False),
    ],
)
def test_default_ignores(defaults: IgnoreRules, path: str, is_dir: bool) -> None:
    assert defaults.is_ignored(path, is_dir=is_dir)


@pytest.mark.parametrize(
    ("path", "is_dir"),
    [
        ("note.md", False),
        ("notes/daily/2024-01-01.md", False),
        ("notes", True),
        (".obsidian", True),  # left alone: not ours to ignore
        (".obsidian/workspace.json", False),
        ("git/readme.md", False),
        ("my.git.md", False),
        ("stet.md", False),
        ("a.stet.md", False),
        ("trash/x.md", False),
        ("14913", False),
        ("49130.md", False),
        ("#hashtag.md", False),
        ("c#.md", False),
        ("tilde~name.md", False),
    ],
)
def test_default_not_ignored(defaults: IgnoreRules, path: str, is_dir: bool) -> None:
    assert not defaults.is_ignored(path, is_dir=is_dir)


def test_vault_root_never_ignored() -> None:
    rules = IgnoreRules.from_text("*\n")
    assert not rules.is_ignored("")
    assert not rules.is_ignored("", is_dir=True)


def test_defaults_tuple_shape() -> None:
    assert ".git/" in DEFAULT_IGNORES
    assert ".stet*" in DEFAULT_IGNORES
    assert ".obsidian/" not in DEFAULT_IGNORES
    assert all(isinstance(p, str) and p for p in DEFAULT_IGNORES)


def test_user_pattern() -> None:
    rules = IgnoreRules.from_text("# comment\n\n*.draft.md\nprivate.md\n")
    assert rules.is_ignored("x.draft.md")
    assert rules.is_ignored("deep/down/x.draft.md")
    assert rules.is_ignored("private.md")
    assert rules.is_ignored("sub/private.md")  # no slash: matches at any depth
    assert not rules.is_ignored("public.md")
    assert rules.is_ignored(".git/config")  # defaults still apply
    assert rules.user_patterns == ("# comment", "", "*.draft.md", "private.md")


def test_anchored_pattern() -> None:
    rules = IgnoreRules.from_text("/top.md\nlogs/*.md\n")
    assert rules.is_ignored("top.md")
    assert not rules.is_ignored("sub/top.md")
    assert rules.is_ignored("logs/a.md")
    assert not rules.is_ignored("sub/logs/a.md")


def test_negation() -> None:
    rules = IgnoreRules.from_text("*.md\n!keep.md\n")
    assert rules.is_ignored("a.md")
    assert not rules.is_ignored("keep.md")
    assert not rules.is_ignored("sub/keep.md")
    assert rules.is_ignored("sub/other.md")


def test_negation_order_last_match_wins() -> None:
    rules = IgnoreRules.from_text("!keep.md\n*.md\n")
    assert rules.is_ignored("keep.md")


def test_user_can_unignore_a_default() -> None:
    rules = IgnoreRules.from_text("!*.tmp\n")
    assert not rules.is_ignored("data.tmp")
    assert not IgnoreRules.from_text(None).is_ignored("x.md")
    assert IgnoreRules.from_text(None).is_ignored("data.tmp")


def test_stet_temp_files_cannot_be_unignored() -> None:
    rules = IgnoreRules.from_text("!.stet*\n!.stet-1.md\n")
    assert rules.is_ignored(".stet-1.md")
    assert rules.is_ignored("sub/.stet-2.md")


def test_directory_patterns() -> None:
    rules = IgnoreRules.from_text("build/\narchive/2019/\n")
    assert rules.is_ignored("build", is_dir=True)
    assert rules.is_ignored("build/")  # trailing slash means a directory
    assert not rules.is_ignored("build")  # a *file* named build is not matched by 'build/'
    assert rules.is_ignored("build/x.md")
    assert rules.is_ignored("sub/build/x.md")
    assert rules.is_ignored("archive/2019", is_dir=True)
    assert rules.is_ignored("archive/2019/jan/a.md")
    assert not rules.is_ignored("archive/2020/a.md")
    assert not rules.is_ignored("archive", is_dir=True)


def test_ignored_directory_hides_contents_even_if_negated() -> None:
    # As in git: a file inside an excluded directory cannot be re-included ...
    rules = IgnoreRules.from_text("drafts/\n!drafts/keep.md\n")
    assert rules.is_ignored("drafts/keep.md")
    # ... but it can when only the directory's contents are excluded.
    rules = IgnoreRules.from_text("drafts/*\n!drafts/keep.md\n")
    assert not rules.is_ignored("drafts", is_dir=True)
    assert not rules.is_ignored("drafts/keep.md")
    assert rules.is_ignored("drafts/other.md")


def test_nested_paths() -> None:
    rules = IgnoreRules.from_text("secret/\n**/tmp/**\nprojects/**/out.md\n")
    assert rules.is_ignored("a/b/c/secret/d/e.md")
    assert rules.is_ignored("a/b/secret", is_dir=True)
    assert rules.is_ignored("x/tmp/y/z.md")
    assert rules.is_ignored("projects/out.md")
    assert rules.is_ignored("projects/a/b/out.md")
    assert not rules.is_ignored("other/a/out.md")
    # Directory status of a parent is inferred: 'secret/' matches the parent directory.
    assert rules.is_ignored("secret/x.md")
    assert not rules.is_ignored("secretary.md")


def test_windows_line_endings_and_bom() -> None:
    rules = IgnoreRules.from_text("\ufeffa.md\r\nb.md\r\n")
    assert rules.is_ignored("a.md")
    assert rules.is_ignored("b.md")


def test_invalid_lines_are_skipped_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        rules = IgnoreRules.from_text("!\nbad\\\nok.md\n")
    assert rules.is_ignored("ok.md")
    assert not rules.is_ignored("bad.md")
    assert len(rules.problems) == 2
    assert "line 1" in rules.problems[0]
    assert "line 2" in rules.problems[1]
    assert "invalid pattern" in caplog.text


# --------------------------------------------------------------------------- load


def test_load_missing_file_gives_defaults(tmp_path: Path) -> None:
    rules = IgnoreRules.load(tmp_path)
    assert rules.user_patterns == ()
    assert rules.problems == ()
    assert rules.is_ignored(".git/config")


def test_load_reads_stetignore(tmp_path: Path) -> None:
    (tmp_path / ".stetignore").write_text("private/\n!private/ok.md\n*.log.md\n", "utf-8")
    rules = IgnoreRules.load(tmp_path)
    assert rules.is_ignored("private", is_dir=True)
    assert rules.is_ignored("a.log.md")
    assert not rules.is_ignored("a.md")
    assert rules.problems == ()


def test_load_invalid_utf8_falls_back_to_defaults(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / ".stetignore").write_bytes(b"a.md\n\xff\xfe\x00bad\n")
    with caplog.at_level(logging.WARNING):
        rules = IgnoreRules.load(tmp_path)
    assert not rules.is_ignored("a.md")
    assert rules.is_ignored(".git/config")
    assert rules.user_patterns == ()
    assert any("UTF-8" in p for p in rules.problems)
    assert "UTF-8" in caplog.text


def test_load_directory_named_stetignore(tmp_path: Path) -> None:
    (tmp_path / ".stetignore").mkdir()
    rules = IgnoreRules.load(tmp_path)
    assert rules.user_patterns == ()
    assert rules.problems


def test_load_too_large(tmp_path: Path) -> None:
    (tmp_path / ".stetignore").write_bytes(b"a.md\n" * 300_000)
    rules = IgnoreRules.load(tmp_path)
    assert not rules.is_ignored("a.md")
    assert any("larger" in p for p in rules.problems)


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_load_does_not_follow_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("a.md\n", "utf-8")
    vault = tmp_path / "vault"
    vault.mkdir()
    os.symlink(outside, vault / ".stetignore")
    rules = IgnoreRules.load(vault)
    assert not rules.is_ignored("a.md")
    assert any("symlink" in p for p in rules.problems)


@pytest.mark.skipif(
    sys.platform == "win32" or (hasattr(os, "geteuid") and os.geteuid() == 0),
    reason="needs POSIX permissions and a non-root user",
)
def test_load_unreadable_falls_back(tmp_path: Path) -> None:
    f = tmp_path / ".stetignore"
    f.write_text("a.md\n", "utf-8")
    f.chmod(0)
    try:
        rules = IgnoreRules.load(tmp_path)
    finally:
        f.chmod(0o644)
    assert not rules.is_ignored("a.md")
    assert rules.problems


def test_a_files_answer_is_remembered_for_its_next_event() -> None:
    """An unzip asks about each new file once per event (created, modified, closed): the
    match is made once (the rules are immutable; a changed .stetignore makes new ones)."""
    rules = IgnoreRules.from_text("drafts/\n*.tmp.md\n")
    for _ in range(3):
        assert rules.is_ignored("notes/a.tmp.md")
        assert not rules.is_ignored("notes/a.md")
        assert rules.is_ignored("drafts/b.md")
    info = rules._file_ignored.cache_info()
    assert info.misses == 2  # notes/a.tmp.md and notes/a.md; drafts/ is its folder's answer
    assert info.hits == 4


# -- the prefilter (one regex for "does any pattern match?") changes no answer -----------

_SEGMENTS = ["notes", "a", ".git", "node_modules", "build", "x.md", "x.tmp", "#x#", ".#x", "x~",
             "keep.md", "sub", "4913", "n.swp", "__pycache__", ".stet-1.tmp", "b.log", "ß.md"]
_USER_LINES = ["build/", "*.log", "!keep.log", "notes/**/draft-*", "/top.md", "!notes/a/",
               "a/*.md", "!a/keep.md", "**/deep/", "[ab].md", r"\!bang.md", "sub/**"]


def _without_prefilter(rules: IgnoreRules) -> IgnoreRules:
    plain = IgnoreRules(rules.user_patterns)
    plain._any = None  # every path through check_file, as before the prefilter
    return plain


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.sampled_from(_USER_LINES), max_size=6),
       parts=st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=4), is_dir=st.booleans())
def test_the_prefilter_gives_the_same_answer_as_every_pattern(lines: list[str], parts: list[str],
                                                              is_dir: bool) -> None:
    rules = IgnoreRules(lines)
    assert rules._any is not None
    path = "/".join(parts)
    assert rules.is_ignored(path, is_dir=is_dir) == _without_prefilter(rules).is_ignored(path, is_dir=is_dir)


def test_the_prefilter_lets_through_what_it_cannot_rule_out() -> None:
    rules = IgnoreRules(["*.log", "!keep.log"])
    assert rules.is_ignored("a/b.log")
    assert not rules.is_ignored("a/keep.log")
    assert not rules.is_ignored("a/b.md")
    assert rules._any is not None
    assert rules._any.search("a/b.md") is None  # ruled out without check_file
    assert rules._any.search("a/keep.log") is not None  # a negation is judged by check_file
