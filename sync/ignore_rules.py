"""Ignore rules: ``.stetignore`` in the vault root, gitignore syntax (SPEC §3.12).

The effective rules are :data:`DEFAULT_IGNORES` followed by the user's ``.stetignore`` lines,
compiled as one :class:`pathspec.GitIgnoreSpec`, so the usual gitignore rules hold: the last
matching pattern wins and a user's ``!pattern`` can re-include something a default ignores.

Two decisions beyond plain pattern matching:

* **Ignored directories hide their contents**, as in git: if any parent directory of a path
  is ignored, the path is ignored, even if a later ``!pattern`` names it (write ``dir/*``
  rather than ``dir/`` to be able to re-include files inside). This makes a per-path check
  (a watcher event) agree with a directory walk that prunes ignored directories.
* **Our own temp files (``.stet*``) are always ignored**: a user's negation cannot re-include
  them, otherwise the daemon would ingest its own half-written temp files.

Pure: no watchdog, no sockets; :meth:`IgnoreRules.load` only reads one small file.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from pathspec import GitIgnoreSpec
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

__all__ = ["DEFAULT_IGNORES", "STETIGNORE_NAME", "IgnoreRules"]

log = logging.getLogger(__name__)

STETIGNORE_NAME = ".stetignore"

_MAX_STETIGNORE_BYTES = 1024 * 1024

_PINNED_IGNORES: tuple[str, ...] = (".stet*",)
"""Patterns a user's ``.stetignore`` cannot override (the daemon's own temp files)."""

DEFAULT_IGNORES: tuple[str, ...] = (
    # Version control and the daemon's own temp files (".stet-<random>.tmp" and friends).
    ".git/",
    ".stet*",
    # Trash folders: Obsidian's vault trash, freedesktop trash on removable drives.
    ".trash/",
    ".Trash-*/",
    # macOS Finder metadata.
    ".DS_Store",
    # Vim swap files, and the probe file vim writes to test whether a directory is writable.
    "*.swp",
    "*.swo",
    "*.swx",
    "4913",
    # Backup files (vim, emacs, many others) and emacs lock / autosave files.
    "*~",
    ".#*",
    r"\#*#",  # '#' starts a comment in gitignore syntax: escape it.
    # Generic temp files; LibreOffice lock files.
    "*.tmp",
    ".~lock.*#",
    # Syncthing's versions folder (holds old copies of notes) and its temp files.
    ".stversions/",
    ".syncthing.*.tmp",
    "~syncthing~*.tmp",
    # Python bytecode caches (vaults that live inside code repositories).
    "__pycache__/",
)


def _valid_lines(lines: Iterable[str], origin: str) -> tuple[list[str], list[str]]:
    """Keep the lines pathspec can compile; describe the rest as problems."""
    good: list[str] = []
    problems: list[str] = []
    for number, line in enumerate(lines, start=1):
        try:
            GitIgnoreSpecPattern(line)
        except ValueError as exc:
            problems.append(f"{origin} line {number}: invalid pattern {line!r} ({exc})")
            continue
        good.append(line)
    return good, problems


class IgnoreRules:
    """Compiled ignore rules for one vault. Immutable; cheap to query repeatedly."""

    def __init__(self, user_lines: Iterable[str] = (), *, problems: Iterable[str] = ()) -> None:
        good, bad = _valid_lines(user_lines, STETIGNORE_NAME)
        self.user_patterns: tuple[str, ...] = tuple(good)
        # Human-readable descriptions of lines skipped or a file not read (for `stet status`).
        self.problems: tuple[str, ...] = (*problems, *bad)
        for problem in bad:
            log.warning("ignoring %s", problem)
        self._spec = GitIgnoreSpec.from_lines([*DEFAULT_IGNORES, *good])
        self._pinned = GitIgnoreSpec.from_lines(_PINNED_IGNORES)
        self._any = _any_pattern(self._pinned, self._spec)
        self._dir_ignored = functools.lru_cache(maxsize=4096)(self._match_dir)
        # A file's path is asked about once per event (an unzip: created, modified,
        # closed), ~18 us each with the default rules: ~0.5 s of the loop for 10,000 files.
        self._file_ignored = functools.lru_cache(maxsize=16384)(self._match)

    @classmethod
    def from_text(cls, stetignore_text: str | None) -> IgnoreRules:
        """Defaults plus the lines of a ``.stetignore`` (``None``: defaults only)."""
        if stetignore_text is None:
            return cls()
        text = stetignore_text.removeprefix("\ufeff")
        return cls(text.splitlines())

    @classmethod
    def load(cls, vault_root: Path) -> IgnoreRules:
        """Read ``<vault_root>/.stetignore`` if present.

        A missing file gives the defaults. A file that cannot be used (unreadable, not UTF-8,
        larger than 1 MiB, a symlink or not a regular file) is treated as absent: defaults
        only, with a warning logged and recorded in :attr:`problems`.
        """
        path = vault_root / STETIGNORE_NAME
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            return cls._unusable(path, f"cannot be read ({exc.strerror or exc})")
        if stat.S_ISLNK(st.st_mode):
            return cls._unusable(path, "is a symlink (symlinks are never followed)")
        if not stat.S_ISREG(st.st_mode):
            return cls._unusable(path, "is not a regular file")
        if st.st_size > _MAX_STETIGNORE_BYTES:
            return cls._unusable(path, f"is larger than {_MAX_STETIGNORE_BYTES} bytes")
        try:
            flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
            fd = os.open(path, flags)
            with open(fd, "rb") as f:
                data = f.read(_MAX_STETIGNORE_BYTES + 1)
        except OSError as exc:
            return cls._unusable(path, f"cannot be read ({exc.strerror or exc})")
        if len(data) > _MAX_STETIGNORE_BYTES:
            return cls._unusable(path, f"is larger than {_MAX_STETIGNORE_BYTES} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return cls._unusable(path, "is not valid UTF-8")
        return cls.from_text(text)

    @classmethod
    def _unusable(cls, path: Path, why: str) -> IgnoreRules:
        problem = f"{STETIGNORE_NAME} {why}; using the default ignore rules only"
        log.warning("%s: %s", path, problem)
        return cls(problems=[problem])

    def _match(self, candidate: str) -> bool:
        if self._any is not None and self._any.search(candidate) is None:
            return False  # no pattern matches it at all: neither ignored nor re-included
        if self._pinned.check_file(candidate).include:
            return True
        return bool(self._spec.check_file(candidate).include)

    def _match_dir(self, dir_path: str) -> bool:
        """Whether the directory ``dir_path`` (no trailing '/') or any of its parents is ignored."""
        parent, sep, _ = dir_path.rpartition("/")
        if sep and self._dir_ignored(parent):
            return True
        return self._match(dir_path + "/")

    def is_ignored(self, rel_path: str, *, is_dir: bool = False) -> bool:
        """Whether a vault-relative POSIX path is ignored.

        ``is_dir=True`` checks the path as a directory, so ``name/`` patterns apply to it;
        a trailing '/' on ``rel_path`` means the same. A path is also ignored when any of its
        parent directories is. The vault root (``""``) is never ignored.
        """
        if rel_path.endswith("/"):
            rel_path = rel_path.rstrip("/")
            is_dir = True
        if rel_path in ("", "."):
            return False
        if is_dir:
            return self._dir_ignored(rel_path)
        parent, sep, _ = rel_path.rpartition("/")
        if sep and self._dir_ignored(parent):
            return True
        return self._file_ignored(rel_path)

    def __repr__(self) -> str:
        return f"IgnoreRules(user_patterns={self.user_patterns!r})"


def _any_pattern(*specs: GitIgnoreSpec) -> re.Pattern[str] | None:
    """One regex that matches a path if any pattern of ``specs`` does (None: not built).

    Most paths match no pattern; ``check_file`` tries each pattern's regex in turn (~20 us
    a path with the defaults: an unzip's 10,000 new files are each asked once, and again
    after every reload of the rules). A path this regex does not match matches no pattern,
    so it is not ignored; one it matches is judged by ``check_file`` as before (the last
    matching pattern, negations, directory marks). The patterns' named groups are made
    plain (each pattern names its directory mark the same)."""
    parts = []
    for spec in specs:
        for pattern in spec.patterns:
            regex = getattr(pattern, "regex", None)
            if pattern.include is None or regex is None:
                continue
            if not isinstance(regex.pattern, str):
                return None
            parts.append("(?:" + _NAMED_GROUP.sub("(?:", regex.pattern) + ")")
    if not parts:
        return None
    try:
        return re.compile("|".join(parts))
    except re.error:
        return None


_NAMED_GROUP = re.compile(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>")

