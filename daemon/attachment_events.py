"""What the folder watcher's events tell the folder side of attachments (SPEC §3.14):
which paths a pass must look at (``on_fs_event``), when each change was first seen (the
git rule's date, ``ChangeTimes``, SPEC §3.16), and which files are still being written
(not taken in until closed, or ``UNCLOSED_WRITE_S`` without a close, as notes are: SPEC §3.2).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from stet.sync.ignore_rules import IgnoreRules
from stet.sync.note_paths import is_note_name

from .attachment_sources import ChangeTimes
from .folder_watcher import FsEvent

if TYPE_CHECKING:
    from .writer_folders import WriterFolders

logger = logging.getLogger(__name__)

# A file being written (modified, not closed yet) is read once closed, or after this
# without a close, as notes are (SPEC §3.2).
UNCLOSED_WRITE_S = 2.0


class PassWaker(Protocol):
    """What the events ask of the folder side's passes."""

    def wake(self) -> None:
        """A pass soon, with a walk of the folder."""
        ...

    def wake_for(self, paths: tuple[str | None, ...]) -> None:
        """A pass soon; these paths are looked at (a walk unless each holds what we wrote)."""
        ...

    def walk_next(self) -> None:
        """The next pass walks the folder (no pass of its own)."""
        ...


class FolderEvents:
    """One vault's events for attachments: wakes, change times, files still being written."""

    def __init__(self, root: Path, rules: Callable[[], IgnoreRules], extensions: tuple[str, ...],
                 folders: WriterFolders | None, waker: PassWaker) -> None:
        self.root = root
        self.rules = rules
        self.extensions = extensions
        self.folders = folders
        self.waker = waker
        self.times = ChangeTimes()
        self._writing: dict[str, float] = {}  # path -> when to read it anyway (monotonic): open for writing

    def on_fs_event(self, event: FsEvent) -> None:
        """From the folder watcher: wake for anything about a non-note, non-ignored path.
        A folder created or deleted brings the events of its files (watchdog reports the
        files of a folder moved in; ``rm -r`` deletes each file): only a folder moved (its
        files move without events of their own) and an overflow wake a pass by themselves,
        so a burst of notes in new folders costs no pass here."""
        if event.kind in ("overflow", "dir_moved"):
            self.times.saw(())
            self.waker.wake()
            return
        if event.kind in ("dir_created", "dir_deleted"):
            if not self._own_or_ignored_folder(event):
                self.waker.walk_next()  # the next pass walks (its files' events wake it)
            return
        try:
            rules = self.rules()
            paths = tuple(p for p in (event.path, event.dest)
                          if p and not is_note_name(p, self.extensions) and not rules.is_ignored(p))
            if paths:
                self.times.saw((event.path, event.dest))
                self._note_writing(event)
                self.waker.wake_for(paths)  # (a temp file of ours renamed to its path: that path)
        except Exception:
            logger.exception("attachment event %s", event)

    def _own_or_ignored_folder(self, event: FsEvent) -> bool:
        """A folder event that cannot hide an attachment: a folder the daemon made (for a
        blob's or a note's file: whatever lands in it has events of its own), or an ignored
        one made or removed (the notes' writer's temp folder, at each of its batches). A
        first sync walked the folder again for each new folder of its files (P9)."""
        path = event.path
        if not path:
            return False
        try:
            if self.rules().is_ignored(path, is_dir=True):
                return True
        except Exception:
            logger.exception("attachment event %s", event)
            return False
        return event.kind == "dir_created" and self.folders is not None and self.folders.created_dir(path)

    def _note_writing(self, event: FsEvent) -> None:
        """Which files someone is still writing: a half-written file is never taken in. A
        write shows as a modification, a new file as created empty; a file that only
        appears (moved in, renamed here) is whole at once."""
        path = event.path
        if path is None:
            return
        if event.kind == "modified" or (event.kind == "created" and self._empty(path)):
            # A new empty file is being written (its first write's event comes after the
            # write): a file moved or renamed in has its bytes already.
            self._writing[path] = time.monotonic() + UNCLOSED_WRITE_S
        elif event.kind in ("closed", "deleted", "moved"):
            self._writing.pop(path, None)
            if event.dest:
                self._writing.pop(event.dest, None)

    def _empty(self, path: str) -> bool:
        try:
            return os.lstat(self.root / path).st_size == 0
        except OSError:
            return False

    def still_writing(self) -> set[str]:
        """The files someone is still writing (not taken in yet)."""
        now = time.monotonic()
        self._writing = {p: t for p, t in self._writing.items() if t > now}
        return set(self._writing)
