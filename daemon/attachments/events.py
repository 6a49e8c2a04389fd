"""What the folder watcher's events tell the folder side of attachments (SPEC §3.14):
which paths a pass must look at (``on_fs_event``), when each change was first seen (the
git rule's date, ``ChangeTimes``, SPEC §3.16), and which files may still be being written
(``unsettled``: not taken in until closed, or ``UNCLOSED_WRITE_S`` without a close, as
notes are: SPEC §3.2).

A file is settled once its writer closed it or it was renamed into place (a ``closed`` or
``moved`` event). Until then it is read only once neither its last event nor its mtime is
younger than ``UNCLOSED_WRITE_S``:

- a created file waits for its close, however many bytes it holds when its event is
  handled: one ``write`` of 20 MB grows the file for as long as the kernel takes (and a
  writer throttled by the page cache pauses mid-write), and inotify reports the write
  only once it returns. The mixed R1 run caught the daemon taking in the first 10 MiB of
  a 20 MiB file this way (the file was not empty when its "created" event was handled);
- a file no event vouches for, found by a walk while the daemon runs (after an overflow,
  by the periodic pass; one whose writes make no event here, as through a hard link made
  while it was being written) and modified in the last ``quiet_s`` is left for its events
  or a later pass, as the notes' rescan does (``FileBridge._compare``, ``wait_recent``).
  The first pass, at start, reads what it finds, as the notes' start does: no event of
  the time before could say otherwise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from stet.daemon.attachments.sources import ChangeTimes
from stet.daemon.folder.watcher import FsEvent
from stet.sync.attachment_plan import OnDisk
from stet.sync.ignore_rules import IgnoreRules
from stet.sync.note_paths import is_note_name

if TYPE_CHECKING:
    from stet.daemon.folder.writer.folders import WriterFolders

logger = logging.getLogger(__name__)

# A file being written (modified, not closed yet) is read once closed, or after this
# without a close, as notes are (SPEC §3.2).
UNCLOSED_WRITE_S = 2.0
# An mtime this far ahead of the clock or more is not a write under way (see ``unsettled``).
FUTURE_SLACK_S = 1.0


class Unsettled(Protocol):
    """(a path, its stat, the wall time the stat was taken at or after) -> not to be read yet."""

    def __call__(self, path: str, d: OnDisk, at: float | None = None, /) -> bool: ...


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
                 folders: WriterFolders | None, waker: PassWaker, *,
                 quiet_s: float = UNCLOSED_WRITE_S) -> None:
        self.root = root
        self.rules = rules
        self.extensions = extensions
        self.folders = folders
        self.waker = waker
        self.quiet_s = quiet_s  # a file found by a walk is read once unmodified this long
        self.times = ChangeTimes()
        self._writing: dict[str, float] = {}  # path -> when to read it anyway (monotonic): open for writing
        self._settled: dict[str, float] = {}  # path -> when (monotonic) its close or rename was seen

    def on_fs_event(self, event: FsEvent) -> None:
        """From the folder watcher: wake for anything about a non-note, non-ignored path.
        A folder created or deleted brings the events of its files (watchdog reports the
        files of a folder moved in; ``rm -r`` deletes each file): only a folder moved (its
        files move without events of their own) and an overflow wake a pass by themselves,
        so a burst of notes in new folders costs no pass here."""
        if event.kind in ("overflow", "dir_moved"):
            if event.kind == "overflow":
                self._settled.clear()  # events were lost: a close seen before says nothing now
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
        """Which files someone may still be writing: a half-written file is never taken in.
        A write shows as a modification (reported once each ``write`` returns), a new file as
        created -- with whatever bytes its first write has put there so far; a close or a
        rename into place settles it."""
        path = event.path
        if path is None:
            return
        now = time.monotonic()
        if event.kind in ("modified", "created"):
            self._writing[path] = now + UNCLOSED_WRITE_S
            self._settled.pop(path, None)
        elif event.kind in ("closed", "deleted", "moved"):
            self._writing.pop(path, None)
            if event.kind == "closed":
                self._settled[path] = now
            else:
                self._settled.pop(path, None)
            if event.dest:
                self._writing.pop(event.dest, None)
                self._settled[event.dest] = now  # renamed into place: its bytes are there

    def unsettled(self, *, at_start: bool = False) -> Unsettled:
        """For this pass: whether the file at a path (its stat ``OnDisk``, taken no earlier
        than ``at``, a wall time: the pass's start if not given) may still be being
        written, and is not to be read yet (see the module's docstring). ``at_start``: the
        first pass (a file's mtime alone does not hold it back). A stat older than the
        pass (a walk's cached one) makes a busy file look quiet: the intake judges again
        on the stat it reads by (``ingest``'s ``still_writing``)."""
        mono, wall = time.monotonic(), time.time()
        self._writing = {p: t for p, t in self._writing.items() if t > mono}
        # A close seen longer ago than the quiet time vouches for nothing the mtime does not.
        keep_s = max(self.quiet_s, UNCLOSED_WRITE_S)
        self._settled = {p: t for p, t in self._settled.items() if t > mono - keep_s}
        writing, settled = set(self._writing), set(self._settled)
        quiet_s = 0.0 if at_start else self.quiet_s

        def unsettled(path: str, d: OnDisk, at: float | None = None, /) -> bool:
            if path in writing:
                return True
            if path in settled or quiet_s <= 0:
                return False
            age = (wall if at is None else at) - d.mtime_ns / 1e9
            # A future mtime (a clock set back, an archive's dates) is no sign of a writer.
            return -FUTURE_SLACK_S < age < quiet_s

        return unsettled
