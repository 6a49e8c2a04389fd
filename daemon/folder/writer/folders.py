"""The folders a batch of note writes needs (CRDT -> disk, ``DiskWrites``): a note's
missing folders made, and remembered as ours (their ``dir_created`` events are echoes,
not a stranger's folder to rescan); the vault's unwatched temp folder made, and removed
once a batch is done; each folder of a batch made ready once, not per file.

Asked from the writer threads (``ready``, ``make_parents``) and the loop (``created_dir``,
``forget_dirs``, a rename whose folder went: ``make_parents``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from stet.daemon.base.atomic_files import TEMP_DIR


class WriterFolders:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._own_dirs: set[str] = set()  # folders we created for a note's file (worker threads add)
        self._dirs_lock = threading.Lock()  # the writer threads' folder making, one at a time
        # Folders made ready for a temp file in this batch -> the temp folder to write in
        # (None: beside the note, another file system). Checked once per folder per batch,
        # not per file: for a small new note the checks cost more than writing it (P8 on
        # the peer, round 4: bench/history/rounds.md). Emptied after each batch (``tidy``).
        self._ready: dict[Path, Path | None] = {}

    def ready(self, folder: Path) -> Path | None:
        """Make ``folder`` ready for a note's temp file -- once a batch: its missing folders
        made, the temp folder made if it is on the vault's file system. Returns the temp
        folder to write in (None: beside the note)."""
        try:
            return self._ready[folder]
        except KeyError:
            pass
        self.make_parents(folder)
        temp_dir = self._ready[folder] = self.temp_dir_for(folder)
        return temp_dir

    def forget(self, folder: Path) -> None:
        """``folder`` (or its temp folder) was found gone: make it ready again."""
        self._ready.pop(folder, None)

    def make_parents(self, folder: Path) -> None:
        """Create the missing folders of a note's file, remembering them: their
        ``dir_created`` events are our own, no reason to rescan the vault (a first sync
        of a vault with 200 folders rescanned it once per folder)."""
        missing: list[Path] = []
        while folder != self.root and self.root in folder.parents and not folder.is_dir():
            missing.append(folder)
            folder = folder.parent
        if not missing:
            return
        # One writer thread at a time: two making the same folder (notes of one new folder
        # are dealt to different threads) each took the other's mkdir for a stranger's and
        # forgot the folder -- its event then rescanned the receiving peer's vault.
        with self._dirs_lock:
            for path in reversed(missing):
                # Ours before it exists: its dir_created event may be handled on the loop
                # before this thread gets the interpreter back (the receiving peer rescanned
                # the vault twice during P8's intake).
                rel = path.relative_to(self.root).as_posix()
                added = rel not in self._own_dirs
                self._own_dirs.add(rel)
                try:
                    path.mkdir()
                except OSError as exc:
                    if added:  # (made by someone else: not ours)
                        self._own_dirs.discard(rel)
                    if isinstance(exc, FileExistsError):
                        continue
                    raise

    def temp_dir_for(self, folder: Path) -> Path | None:
        """The vault's unwatched temp folder, if ``folder`` is on its file system (a rename
        cannot cross one: a folder mounted inside the vault gets its temp files beside)."""
        temp_dir = self.root / TEMP_DIR
        try:
            if os.stat(folder).st_dev != os.stat(self.root).st_dev:
                return None
        except OSError:
            return None
        if not temp_dir.is_dir():
            with contextlib.suppress(FileExistsError):
                temp_dir.mkdir()
                self._own_dirs.add(TEMP_DIR)  # its dir_created event is ours too
        return temp_dir

    def tidy(self) -> None:
        """Remove the temp folder once empty (after a batch): the vault holds it only while
        a write is in flight, as it held temp files beside the notes before."""
        self._ready.clear()  # the next batch checks its folders again
        with contextlib.suppress(OSError):
            (self.root / TEMP_DIR).rmdir()

    def created_dir(self, path: str) -> bool:
        """``path`` is a folder we created for a note's file. Remembered until it goes
        (``forget_dirs``), not forgotten once asked: the watcher may report a new folder
        twice -- inotify's own event and the one watchdog makes up when it walks the
        parent it has just begun to watch -- and the second one, taken for a stranger's
        folder, rescanned the receiving peer's whole vault during P8's bulk."""
        return path in self._own_dirs

    def forget_dirs(self, path: str | None = None) -> None:
        """The folder ``path`` and those inside it went (deleted or moved away: a folder
        made there again is not ours); all of them if None (events were lost)."""
        if path is None:
            self._own_dirs.clear()
            return
        prefix = path + "/"
        gone = [d for d in list(self._own_dirs) if d == path or d.startswith(prefix)]  # (threads add)
        self._own_dirs.difference_update(gone)
