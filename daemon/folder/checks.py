"""``resolve_inside`` for a batch of notes' files: each folder's components checked once
per batch, not once per file (issue 18 P4).

The writer proves every path it writes stays in the vault and follows no symlink
(``stet.sync.note_paths.resolve_inside``: an ``lstat`` per component). A first sync's
flush of 256 notes in a dozen folders asked the same folders 256 times: a tenth of the
receiving peer's loop. Here a folder's answer (a real directory, missing, or refused) is
kept for the life of one ``FolderChecks`` -- one slice of planning or renaming, as short as
the single check it replaces was from the rename that follows it -- and each file costs one
``lstat`` of its own, which also gives the stat the writer compares later.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from stet.sync.folder_scan import FileStat
from stet.sync.note_paths import InvalidPath, normalize_note_path


class FolderChecks:
    """Where a note's file is, proven inside ``root`` (no symlinks), with its stat."""

    def __init__(self, root: Path) -> None:
        if not root.is_absolute():
            raise ValueError(f"vault root must be an absolute, resolved path: {root!r}")
        self.root = root
        # folder ("" for the root) -> it exists (a real directory), it does not, or why refused
        self._folders: dict[str, bool | InvalidPath] = {}

    def target(self, rel: str) -> tuple[Path, FileStat | None]:
        """The file of note path ``rel`` and its stat (None: no file there); raises
        ``InvalidPath`` as ``resolve_inside`` does."""
        if normalize_note_path(rel) != rel:
            raise InvalidPath("path is not normalised (expected NFC)", rel)
        folder, _, _name = rel.rpartition("/")
        target = self.root.joinpath(*rel.split("/"))
        if not self._folder(folder, rel):
            return target, None
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return target, None
        except NotADirectoryError:  # pragma: no cover - a folder replaced by a file meanwhile
            raise InvalidPath("a parent of the path is not a directory", rel) from None
        if stat.S_ISLNK(st.st_mode):
            raise InvalidPath(f"{rel!r} is a symlink; symlinks are never followed", rel)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidPath(f"{rel!r} exists and is not a regular file", rel)
        return target, FileStat.of(st)

    def proven(self, rel: str) -> bool:
        """Whether the folders of note path ``rel`` exist as real directories; raises
        ``InvalidPath`` if one is refused (a symlink, a file). ``rel`` must be a path
        ``target`` took (normalised, checked): it is not checked again. The file itself
        is not looked at."""
        return self._folder(rel.rpartition("/")[0], rel)

    def _folder(self, folder: str, rel: str) -> bool:
        """Whether ``folder`` exists as a real directory (its parents checked first)."""
        known = self._folders.get(folder)
        if known is None:
            known = self._check(folder, rel)
            self._folders[folder] = known
        if isinstance(known, InvalidPath):
            raise InvalidPath(known.reason, rel)
        return known

    def _check(self, folder: str, rel: str) -> bool | InvalidPath:
        if folder:
            parent, _, _ = folder.rpartition("/")
            try:
                if not self._folder(parent, rel):
                    return False  # nothing below a missing folder exists either
            except InvalidPath as exc:
                return exc
            path = self.root.joinpath(*folder.split("/"))
            what = repr(folder)
        else:
            path, what = self.root, "vault root"
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not folder:
                return InvalidPath("vault root does not exist", str(self.root))
            return False
        except NotADirectoryError:
            return InvalidPath("a parent of the path is not a directory", rel)
        if stat.S_ISLNK(st.st_mode):
            if not folder:
                return InvalidPath("vault root is not a real directory", str(self.root))
            return InvalidPath(f"{what} is a symlink; symlinks are never followed", rel)
        if not stat.S_ISDIR(st.st_mode):
            if not folder:
                return InvalidPath("vault root is not a real directory", str(self.root))
            return InvalidPath(f"{what} is not a directory", rel)
        return True
