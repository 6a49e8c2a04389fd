"""Who made an attachment change found by a pass (SPEC §3.14, §3.16): ``git`` or ``disk``.

Attachments follow the notes' rule (``stet.sync.git_activity``, asked through ``GitWatch``):
a change is git's when a repository around the file is being changed by git or had its
``index``/``HEAD`` written at or after the moment the change was first seen, less the
slack. A pass runs a debounce after the events, so the moment a change was *seen* is the
time of the first folder event about its path since the last pass (``ChangeTimes``); a
change with no event of its own (a file of a folder moved in, one found by the periodic
or starting scan) is dated by the pass's first event, else by the pass itself.

Git's changes are not counted by the brake while ``[brake] trust_git`` (``Brake.count_other``
asks the policy); every deleted or overwritten file still keeps its version, with source
``git``, and ``stet log`` names them ``git``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from stet.daemon.folder.git_watch import DISK, GitWatch, repo_marks
from stet.sync.attachment_plan import IntakeAction, RecordMove
from stet.sync.brake import GIT
from stet.sync.git_activity import RepoMarks, made_by_git

logger = logging.getLogger(__name__)

MAX_PATHS = 100_000  # a burst larger than this is dated by its first event


class ChangeTimes:
    """The first time (wall clock) each path was seen changing since the last ``take``."""

    def __init__(self) -> None:
        self._at: dict[str, float] = {}
        self._first: float | None = None

    def saw(self, paths: Iterable[str | None], at: float | None = None) -> None:
        now = time.time() if at is None else at
        if self._first is None:
            self._first = now
        if len(self._at) < MAX_PATHS:
            for path in paths:
                if path:
                    self._at.setdefault(path, now)

    def take(self) -> tuple[dict[str, float], float | None]:
        """What was seen since the last call (per path; the first of all), and forget it."""
        at, first = self._at, self._first
        self._at, self._first = {}, None
        return at, first


def _paths(a: IntakeAction) -> tuple[str, ...]:
    return (a.old_path, a.new_path) if isinstance(a, RecordMove) else (a.path,)


def sources_of(git: GitWatch, actions: Sequence[IntakeAction], times: dict[str, float],
               first: float | None, now: float) -> list[str]:
    """Blocking (stats; run it in a thread): each action's source. Each repository's marks
    are looked at once per call (a checkout of thousands of files costs a few stats)."""
    fallback = first if first is not None else now
    marks: dict[Path, RepoMarks] = {}

    def marks_of(gitdir: Path) -> RepoMarks:
        if gitdir not in marks:
            marks[gitdir] = repo_marks(gitdir)
        return marks[gitdir]

    out: list[str] = []
    for a in actions:
        paths = _paths(a)
        seen_at = min((times[p] for p in paths if p in times), default=fallback)
        source: str = DISK
        for path in paths:
            repos = git.repos_for(path)
            if repos and made_by_git(seen_at, [marks_of(g) for g in repos]):
                source = GIT
                break
        out.append(source)
    return out


def by_source(actions: Sequence[IntakeAction], sources: Sequence[str]) -> dict[str, list[IntakeAction]]:
    """The actions grouped by source, each group in the actions' order."""
    groups: dict[str, list[IntakeAction]] = {}
    for a, source in zip(actions, sources, strict=True):
        groups.setdefault(source, []).append(a)
    return groups
