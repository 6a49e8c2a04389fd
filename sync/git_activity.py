"""Was a file change made by git? The rule of SPEC §3.16, pure: no clock, no I/O.

A change in the vault is git's when a repository around the note — a ``.git`` in the
note's folder, in a folder above it inside the vault, or at or above the vault's root —
is being changed by git right now (git holds ``index.lock`` or ``HEAD.lock`` while it
rewrites the working tree), or had its ``index`` or ``HEAD`` written at or after the
moment the change was seen, less ``slack_s``.

Why that works: git takes the index lock before it touches the working tree and writes
the new index (then ``HEAD``) after the files, so every file a checkout, stash, rebase,
merge or pull writes or deletes is followed by an index or HEAD write, and while the
files are being written the lock is there. ``slack_s`` covers the time between git's
write and the moment the daemon saw the event (inotify, watchdog's pairing of moves).

What it cannot tell: a person's edit made within ``slack_s`` after a git command that
wrote the index (or while an editor's background ``git status`` holds the lock) is
taken for git's too. ``[brake] trust_git = false`` keeps git's bursts under the brake.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SLACK_S = 5.0


@dataclass(frozen=True, slots=True)
class RepoMarks:
    """What one ``.git`` showed when looked at."""

    index_mtime: float | None  # seconds (the file's mtime); None: no index
    head_mtime: float | None
    locked: bool  # git holds index.lock or HEAD.lock: it is changing the working tree now


def folders_above(note_path: str) -> list[str]:
    """The vault folders that hold ``note_path``, deepest first (``""`` is the root).

    ``"a/b/c.md"`` → ``["a/b", "a", ""]``.
    """
    parts = note_path.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def made_by_git(seen_at: float, repos: Iterable[RepoMarks], slack_s: float = SLACK_S) -> bool:
    """Whether a change seen at ``seen_at`` was git's, given the repositories around it."""
    since = seen_at - slack_s
    for marks in repos:
        if marks.locked:
            return True
        for mtime in (marks.index_mtime, marks.head_mtime):
            if mtime is not None and mtime >= since:
                return True
    return False


def gitdir_from_file(text: str) -> str | None:
    """The repository a ``.git`` *file* points at (a linked worktree, a submodule):
    ``gitdir: PATH``; None if it says anything else."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    if not first.startswith("gitdir:"):
        return None
    target = first[len("gitdir:"):].strip()
    return target or None
