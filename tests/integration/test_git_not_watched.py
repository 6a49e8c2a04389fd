"""`.git/` is never watched (SPEC §3.16, issue 13: 230 of 260 inotify watches were `.git`
folders): the daemon's inotify watches, read from /proc/<pid>/fdinfo, are exactly the
vault's other folders, also for a repository made inside the vault while it runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, wait_until
from tests.integration.bridge_support import start_daemon

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's"),
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]


def _git(cwd: Path, *args: str) -> None:
    config = ("-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main")
    subprocess.run(["git", *config, *args], cwd=cwd, check=True, capture_output=True)


def watched_inodes(pid: int) -> set[int]:
    """The inodes of everything the process's inotify instances watch."""
    inodes: set[int] = set()
    fdinfo = Path(f"/proc/{pid}/fdinfo")
    for entry in fdinfo.iterdir():
        try:
            text = entry.read_text()
        except OSError:
            continue  # closed meanwhile
        for line in text.splitlines():
            if line.startswith("inotify wd:"):
                fields = dict(f.split(":", 1) for f in line.split()[1:] if ":" in f)
                inodes.add(int(fields["ino"], 16))
    return inodes


def folder_inodes(root: Path, *, skip_git: bool) -> dict[int, str]:
    out = {root.stat().st_ino: "."}
    for dirpath, dirnames, _ in os.walk(root):
        if skip_git:
            dirnames[:] = [d for d in dirnames if d != ".git"]
        for d in dirnames:
            p = Path(dirpath) / d
            out[p.stat().st_ino] = str(p.relative_to(root))
    return out


def test_git_folders_are_never_watched(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    for i in range(3):
        (vault / f"folder{i}" / "deeper").mkdir(parents=True)
        (vault / f"folder{i}" / "deeper" / f"n{i}.md").write_text(f"note {i}\n")
    _git(vault, "init", "-q")
    _git(vault, "add", "-A")
    _git(vault, "commit", "-qm", "notes")
    git_folders = set(folder_inodes(vault, skip_git=False)) - set(folder_inodes(vault, skip_git=True))
    assert len(git_folders) > 10  # objects/xx, refs/heads, logs/...: what used to be watched

    daemon = start_daemon(home, vault, daemon_factory)
    assert daemon.proc is not None
    pid = daemon.proc.pid
    wanted = folder_inodes(vault, skip_git=True)
    wait_until(lambda: watched_inodes(pid) == set(wanted), timeout=20,
               what="the vault's folders, and nothing else, to be watched")

    # Made while the daemon runs: a folder holding a repository of its own. Its folders
    # are watched (the watcher follows new folders), its .git is not.
    sub = vault / "later" / "project"
    sub.mkdir(parents=True)
    (sub / "readme.md").write_text("a nested project\n")
    _git(sub, "init", "-q")
    _git(sub, "add", "-A")
    _git(sub, "commit", "-qm", "nested")
    daemon.wait_content("later/project/readme.md", "a nested project\n", timeout=20)
    wanted = folder_inodes(vault, skip_git=True)
    assert any(name == "later/project" for name in wanted.values())
    wait_until(lambda: watched_inodes(pid) == set(wanted), timeout=20,
               what="the new folders watched, the nested .git not")
    assert not watched_inodes(pid) & (set(folder_inodes(vault, skip_git=False)) - set(wanted))
