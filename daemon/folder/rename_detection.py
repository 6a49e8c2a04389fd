"""How the file bridge tells a rename from a delete (SPEC §3.8).

Events do not always say "renamed": a rename into a folder made a moment before
arrives as a delete and a create, a busy moment can split a rename's events, and a
rename may race a peer's move of the same note. These helpers recognise the note's
file by identity (same inode, size and mtime as last seen) or by its exact text, so
the note keeps its identity and history instead of becoming a delete plus a new note.
Composed into ``FileBridge``: what it needs of the bridge is ``RenameHost``; it moves and
deletes notes through the folder replica (which keeps the file's base with the note).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

from stet.daemon.folder.replica import FolderReplica
from stet.sync.change_kinds import Source
from stet.sync.errors import StetError
from stet.sync.folder_scan import FileStat, read_note_file
from stet.sync.note_doc import revision_of
from stet.sync.note_paths import casefold_key
from stet.sync.note_rows import DiskState, NoteRow
from stet.sync.store_schema import NON_ASCII_LIVE

logger = logging.getLogger(__name__)

DISK = Source.DISK


def stat_matches(disk: DiskState | None, st: FileStat) -> bool:
    """The file looks exactly as when the daemon last read or wrote it."""
    return disk is not None and (disk.mtime_ns, disk.size, disk.ino) == (st.mtime_ns, st.size, st.ino)


def _entry_inodes_match(entries: list[os.DirEntry[str]], sample: int = 8) -> bool | None:
    """Do these directory entries' inode numbers equal their files' ``st_ino``? (None: no
    entry to tell by.)"""
    told = None
    for entry in entries[:sample]:
        try:
            if entry.inode() != entry.stat(follow_symlinks=False).st_ino:
                return False
        except OSError:
            continue
        told = True
    return told


class RenameHost(Protocol):
    """What rename detection needs of the file bridge: which paths are notes, where a
    vanished note's file may have gone (paths with events pending, new files a rescan
    found), and the pending read of a path taken over by a rename."""

    def is_candidate(self, rel: str) -> bool: ...

    def is_contained(self, rel: str) -> bool: ...

    def move_candidates(self, size: int, disk: DiskState | None) -> list[tuple[str, bool]]: ...

    def cancel(self, path: str) -> None: ...

    def mark_dirty(self, note_id: str) -> None: ...


class RenameDetection:
    def __init__(self, root: Path, max_bytes: int, replica: FolderReplica, host: RenameHost) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.replica = replica
        self.host = host
        # Whether a directory entry's inode number is the file's (ext4, xfs, btrfs, tmpfs);
        # some file systems (overlayfs without xino) give others: then every entry is stat-ed.
        self._entry_inodes_hold: bool | None = None

    def moved_or_deleted(self, row: NoteRow, source: str = DISK) -> bool:
        """The file of ``row`` is gone: follow it if it was renamed, else delete the note.

        A rename into a folder made just before arrives in two halves (the folder was not
        watched yet): the old name is deleted, and the new one is reported as created
        (and waits for a close that never comes); a busy moment can split a rename's
        events too. A path with an event pending that holds the very file we last saw
        (same inode, size and mtime), or a file created since that holds exactly the
        note's text, is where the note went. Returns True if it was moved.
        """
        store = self.replica.store
        for path, created in self.host.move_candidates(row.size, row.disk):
            if not self.host.is_candidate(path) or not self.host.is_contained(path):
                continue
            try:
                st = FileStat.of(os.lstat(self.root / path))
                same_file = stat_matches(row.disk, st)
                candidate = same_file or (created and st.size == row.size)
                if not candidate or store.note_at(path) is not None:
                    continue
                data, fst = read_note_file(self.root, path, self.max_bytes)
            except (OSError, StetError):
                continue
            if not same_file and revision_of(data) != row.revision:
                continue
            if self.case_clash(path) not in (None, row.path):
                continue
            self.host.cancel(path)
            # The very file keeps its recorded state (its base for a merge); the note may
            # hold changes it lacks, which are written out.
            disk = None if same_file else DiskState(row.revision, fst.mtime_ns, fst.size, fst.ino)
            self.replica.moved(row, path, source, file=disk)
            if same_file:
                self.host.mark_dirty(row.id)
            logger.info("%s moved on disk to %s", row.path, path)
            return True
        renamed = self._same_file_in_folder(row)
        if renamed is not None:  # renamed in a folder not watched yet (just made): no events
            self.host.cancel(renamed)
            self.replica.moved(row, renamed, source)
            self.host.mark_dirty(row.id)
            logger.info("%s moved on disk to %s", row.path, renamed)
            return True
        self.replica.deleted(row, source)
        logger.info("%s deleted on disk", row.path)
        return False

    def known_file_moved(self, path: str, st: FileStat) -> bool:
        """A new path holding exactly a note's last-seen file (same inode, size and
        mtime) whose old path is empty is that note, renamed -- even when a peer moved the
        note elsewhere before this rename was read: then the later move wins, as with any
        two moves, instead of the file becoming a second note."""
        for row in self.replica.notes_with_file(st.ino):
            if row.path == path or not stat_matches(row.disk, st):
                continue
            if os.path.lexists(self.root / row.path) or not self.host.is_contained(path):
                continue  # still there too (a hard link): not a rename
            self.replica.moved(row, path, DISK)
            logger.info("%s moved on disk to %s", row.path, path)
            self.host.mark_dirty(row.id)  # changes not written to the file yet, if any
            return True
        return False

    def _same_file_in_folder(self, row: NoteRow) -> str | None:
        """Another name, in the note's folder, of the very file we last saw there."""
        if row.disk is None:
            return None
        try:
            entries = list(os.scandir((self.root / row.path).parent))
        except OSError:
            return None
        ino = row.disk.ino
        if self._entry_inodes_hold is None:
            self._entry_inodes_hold = _entry_inodes_match(entries)
        for entry in entries:
            # The directory entry's own inode number first (no stat): a git checkout that
            # deletes 500 notes of one folder asked this 500 times of the whole folder.
            if self._entry_inodes_hold and entry.inode() != ino:
                continue
            try:
                st = FileStat.of(entry.stat(follow_symlinks=False))
            except OSError:
                continue
            rel = Path(entry.path).relative_to(self.root).as_posix()
            if (stat_matches(row.disk, st) and self.host.is_candidate(rel) and self.host.is_contained(rel)
                    and self.replica.store.note_at(rel) is None):
                return rel
        return None

    def case_clash(self, path: str) -> str | None:
        """Another live note's path that differs from ``path`` only by case, if any."""
        key = casefold_key(path)
        parent = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
        # By index, not by listing the folder (a bulk intake asks this for every new
        # file): an ASCII path can only clash with a path equal to it but for ASCII case,
        # or with one holding other characters (``NON_ASCII_LIVE``: few); any other path
        # is compared with every live path of its folder.
        db = self.replica.store.db
        if path.isascii():
            rows = db.execute("SELECT path FROM notes WHERE deleted = 0 AND lower(path) = lower(?) "
                              "AND path >= ? AND path < ?", (path, parent, parent + "\U0010ffff")).fetchall()
            rows += db.execute(f"SELECT path FROM notes WHERE {NON_ASCII_LIVE} AND path >= ? AND path < ?",
                               (parent, parent + "\U0010ffff")).fetchall()
        else:
            rows = db.execute("SELECT path FROM notes WHERE deleted = 0 AND path >= ? AND path < ? "
                              "AND path != ?", (parent, parent + "\U0010ffff", path)).fetchall()
        for (other,) in rows:
            if other != path and casefold_key(other) == key:
                return str(other)
        return None
