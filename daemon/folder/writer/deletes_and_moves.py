"""CRDT → disk for a note deleted or moved by an agent or a peer: its file removed, or
renamed to the note's new path (SPEC §3.3, §3.4), unless the file was edited since -- then
it is kept and read again. Composed into ``DiskWrites`` (daemon/folder/writer/disk_writes.py), whose
change stream hands it each delete and move; what it needs of the writer is
``MoveHost``.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from stet.daemon.base.atomic_files import fsync_dir, trash_unlink
from stet.daemon.base.emptied_folders import remove_emptied_folders
from stet.daemon.folder.rename_detection import stat_matches
from stet.daemon.notes.changes import Change
from stet.sync.folder_scan import FileChanged, FileStat, SkipFile, read_note_file
from stet.sync.note_doc import revision_of
from stet.sync.note_paths import InvalidPath, resolve_inside

if TYPE_CHECKING:
    from stet.daemon.folder.writer.ports import MoveHost

logger = logging.getLogger(__name__)


class DeletesAndMoves:
    """Removes or renames the files of notes deleted or moved elsewhere (CRDT → disk)."""

    def __init__(self, writer: MoveHost) -> None:
        self.writer = writer

    def remove_file(self, change: Change) -> None:
        """A note was deleted by an agent or a peer: remove its file unless edited since."""
        try:
            target = resolve_inside(self.writer.root, change.path)
            data, _ = read_note_file(self.writer.root, change.path, self.writer.max_bytes)
        except (FileNotFoundError, InvalidPath, SkipFile, FileChanged):
            return
        if revision_of(data) != change.revision_before:
            logger.warning("%s changed on disk; keeping the file (and the note)", change.path)
            self.writer.host.schedule(change.path, awaiting_close=False)
            return
        trash_unlink(target)
        remove_emptied_folders(self.writer.root, change.path)  # the folders this left empty

    def move_file(self, change: Change) -> None:
        assert change.old_path is not None
        try:
            src = resolve_inside(self.writer.root, change.old_path)
            dst = resolve_inside(self.writer.root, change.path)
        except InvalidPath as exc:
            logger.error("cannot move %s: %s", change.old_path, exc.reason)
            return
        if dst.exists():
            logger.warning("not moving %s over existing %s", change.old_path, change.path)
            self.writer.mark_dirty(change.note_id)
            return
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(src, dst)
            fsync_dir(dst.parent)
        except FileNotFoundError:
            self.writer.mark_dirty(change.note_id)  # renamed or deleted here meanwhile: see _plan_write
            return
        remove_emptied_folders(self.writer.root, change.old_path)  # the folders the move left empty
        row = self.writer.replica.store.note(change.note_id)
        disk = row.disk if row is not None else None
        if disk is not None and not stat_matches(disk, FileStat.of(os.lstat(dst))):
            # A rename keeps mtime, size and inode: the file holds an edit not read yet
            # (saved just before the move arrived). Read it at its new path; taking its
            # stat as ours would hide that edit for good.
            self.writer.host.schedule(change.path, awaiting_close=False)
