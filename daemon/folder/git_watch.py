"""Tells the file bridge whether a file change was git's (SPEC §3.16).

It looks at the ``.git`` of the note's folder and of every folder above it, inside the
vault and at or above its root, by ``stat`` only: the mtimes of ``index`` and ``HEAD``,
and whether ``index.lock`` / ``HEAD.lock`` exist (the rule: ``stet.sync.git_activity``).
``.git`` folders are never watched (``observer_without_git``): a few stats per changed
file cost less than the hundreds of inotify watches a repository's folders would take.

Which folders hold a ``.git`` is remembered for ``CACHE_S`` seconds, so a checkout of
thousands of files costs a few stats per file.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from stet.sync.brake import GIT
from stet.sync.change_kinds import Source
from stet.sync.git_activity import RepoMarks, folders_above, gitdir_from_file, made_by_git

logger = logging.getLogger(__name__)

DISK = Source.DISK
CACHE_S = 2.0


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def repo_marks(gitdir: Path) -> RepoMarks:
    return RepoMarks(
        index_mtime=_mtime(gitdir / "index"),
        head_mtime=_mtime(gitdir / "HEAD"),
        locked=os.path.lexists(gitdir / "index.lock") or os.path.lexists(gitdir / "HEAD.lock"),
    )


def _gitdir_of(folder: Path) -> Path | None:
    """The repository whose working tree ``folder`` is the top of, if any."""
    dot = folder / ".git"
    try:
        if dot.is_dir():
            return dot
        if dot.is_file():
            target = gitdir_from_file(dot.read_text(encoding="utf-8", errors="replace")[:4096])
            if target is not None:
                found = (folder / target) if not os.path.isabs(target) else Path(target)
                return found if found.is_dir() else None
    except OSError:
        return None
    return None


class GitWatch:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[str, tuple[float, Path | None]] = {}
        self._above: tuple[float, list[Path]] = (-1.0, [])

    def _cached_gitdir(self, rel_folder: str, now: float) -> Path | None:
        hit = self._cache.get(rel_folder)
        if hit is not None and now - hit[0] < CACHE_S:
            return hit[1]
        gitdir = _gitdir_of(self.root / rel_folder if rel_folder else self.root)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[rel_folder] = (now, gitdir)
        return gitdir

    def _repos_above_root(self, now: float) -> list[Path]:
        at, repos = self._above
        if now - at < CACHE_S:
            return repos
        repos = []
        folder = self.root.parent
        while True:
            gitdir = _gitdir_of(folder)
            if gitdir is not None:
                repos.append(gitdir)
            if folder.parent == folder:
                break
            folder = folder.parent
        self._above = (now, repos)
        return repos

    def repos_for(self, note_path: str) -> list[Path]:
        """The ``.git`` folders of the repositories that may hold ``note_path``."""
        now = time.monotonic()
        repos = [g for f in folders_above(note_path) if (g := self._cached_gitdir(f, now)) is not None]
        return repos + self._repos_above_root(now)

    def source_for(self, note_path: str, seen_at: float) -> str:
        """``"git"`` if git made the change to ``note_path`` seen at ``seen_at`` (wall
        clock), else ``"disk"``."""
        repos = self.repos_for(note_path)
        if repos and made_by_git(seen_at, [repo_marks(g) for g in repos]):
            return GIT
        return DISK
