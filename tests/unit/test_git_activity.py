"""Telling git's changes from a person's (SPEC §3.16): the pure rule, and `GitWatch` on
real git repositories (a repository at the vault's root, one above it, one in a
subfolder, a linked worktree whose `.git` is a file)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from stet.daemon.folder.git_watch import GitWatch
from stet.sync.git_activity import RepoMarks, folders_above, gitdir_from_file, made_by_git

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(cwd: Path, *args: str) -> None:
    config = ("-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main")
    subprocess.run(["git", *config, *args], cwd=cwd, check=True, capture_output=True)


def test_folders_above() -> None:
    assert folders_above("a/b/c.md") == ["a/b", "a", ""]
    assert folders_above("c.md") == [""]


@pytest.mark.parametrize(
    ("marks", "expected"),
    [
        (RepoMarks(None, None, True), True),  # git is changing the tree now
        (RepoMarks(99.0, 50.0, False), True),  # index written after the change was seen
        (RepoMarks(50.0, 96.0, False), True),  # HEAD within the slack before it
        (RepoMarks(94.0, 94.0, False), False),  # both older than the slack: a person's change
        (RepoMarks(None, None, False), False),
    ],
)
def test_the_rule(marks: RepoMarks, expected: bool) -> None:
    assert made_by_git(100.0, [marks], slack_s=5.0) is expected


def test_no_repository_no_git() -> None:
    assert made_by_git(100.0, []) is False


def test_gitdir_file() -> None:
    assert gitdir_from_file("gitdir: /x/.git/worktrees/w\n") == "/x/.git/worktrees/w"
    assert gitdir_from_file("something else") is None
    assert gitdir_from_file("") is None


def _set_mtime(path: Path, at: float) -> None:
    os.utime(path, (at, at))


@needs_git
def test_a_checkout_at_the_root_is_git_and_a_later_edit_is_not(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    (vault / "sub").mkdir(parents=True)
    (vault / "sub" / "n.md").write_text("one\n")
    git(vault, "init", "-q")
    git(vault, "add", "-A")
    git(vault, "commit", "-qm", "one")
    old = time.time() - 3600
    for name in ("index", "HEAD"):
        _set_mtime(vault / ".git" / name, old)
    watch = GitWatch(vault)
    assert watch.source_for("sub/n.md", time.time()) == "disk"  # git has been quiet for an hour
    seen = time.time()
    git(vault, "checkout", "-qb", "other")  # writes HEAD
    assert watch.source_for("sub/n.md", seen) == "git"
    assert watch.source_for("sub/n.md", seen + 60) == "disk"  # a change seen a minute later
    (vault / ".git" / "index.lock").write_text("")  # git at work
    assert watch.source_for("sub/n.md", seen + 60) == "git"


@needs_git
def test_repositories_above_the_vault_and_in_a_subfolder(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    vault = repo / "notes"
    (vault / "project").mkdir(parents=True)
    git(repo, "init", "-q")
    git(vault / "project", "init", "-q")
    watch = GitWatch(vault)
    assert watch.repos_for("a.md") == [repo / ".git"]
    assert watch.repos_for("project/deep/b.md") == [vault / "project" / ".git", repo / ".git"]


@needs_git
def test_a_linked_worktree_whose_git_is_a_file(tmp_path: Path) -> None:
    main = tmp_path / "main"
    main.mkdir()
    (main / "n.md").write_text("n\n")
    git(main, "init", "-q")
    git(main, "add", "-A")
    git(main, "commit", "-qm", "n")
    git(main, "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "wt")
    assert (tmp_path / "wt" / ".git").is_file()
    (gitdir,) = GitWatch(tmp_path / "wt").repos_for("n.md")
    assert (gitdir / "HEAD").is_file()
    assert gitdir.resolve() == (main / ".git" / "worktrees" / "wt").resolve()


def test_trust_git_in_the_config_and_the_brake_policy() -> None:
    from stet.sync.brake import BrakePolicy
    from stet.sync.config import ConfigError, parse_config

    assert parse_config({}).brake.trust_git is True
    off = parse_config({"brake": {"trust_git": False}})
    assert BrakePolicy.from_config(off.brake).counts("git") is True
    trusting = BrakePolicy.from_config(parse_config({}).brake)
    assert not trusting.counts("git")
    assert not trusting.counts("git on DEVICE")  # a peer's git
    assert trusting.counts("disk")
    assert trusting.counts("agent:git")
    with pytest.raises(ConfigError):
        parse_config({"brake": {"trust_git": "yes"}})
