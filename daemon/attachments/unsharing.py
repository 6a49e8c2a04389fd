"""Files that share an inode, left by an older Stet, get one each at start (issue 37).

An older Stet landed a received blob at its path as a hard link of the blob store's file
(its bytes written once on the way in), then gave the store a copy of its own. Identical
files at several paths ("twins": the help vault's 1,899 favicons and logos) stayed one
inode: editing one changed the others, on this machine and, through the changes it then
read, on every peer; and they shared one mode, read back as chmods nobody made. Every
file Stet writes is now a file of its own (``disk.clone_or_copy``: a reflink or a copy).
What an older Stet left is repaired once:

- ``StoreUnsharing`` (the home's, once its lock is held): a store file with other names
  gets a copy of its own, hashed (bytes written through a vault's file are not kept under
  the blob's name);
- ``repair_shared_inodes`` (each vault's first pass, before it reads the folder): every
  file the seen state holds whose inode is also another seen path's, or its blob's, gets
  its own: copied to a temp file in its folder, fsynced, renamed over it, its mtime kept,
  its executable bit as the index says. A file hard-linked by the person to something
  that is not Stet's is left alone.

Gone with the links: the copy after each landing and its wait while blobs arrive (there is
nothing to copy after a landing any more).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stet.daemon.attachments.disk import NEW_FILE_MODE, clone_or_copy, with_executable
from stet.daemon.base.atomic_files import fsync_dir
from stet.sync.attachment_plan import OnDisk, SeenFile
from stet.sync.attachment_scan import on_disk
from stet.sync.blob_store import BlobError, BlobStore
from stet.sync.note_paths import InvalidPath, resolve_inside

logger = logging.getLogger(__name__)


class StoreUnsharing:
    """Once per home, in a task: every store file with other names gets its own copy."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self._task: asyncio.Task[None] | None = None
        self.done = 0  # blobs given their own copy
        self.dropped = 0  # blobs written to through a vault's file: not kept

    def start(self) -> None:
        """With the home's lock held (in the daemon's loop); again: nothing."""
        if self._task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not in the daemon's loop (a test): at the next call in it
            return
        self._task = loop.create_task(self._run(), name="blob-unsharing")

    async def wait_idle(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        for sha in await asyncio.to_thread(self.blobs.shared):
            try:
                if await asyncio.to_thread(self.blobs.unshare, sha):
                    self.done += 1
                else:
                    self.dropped += 1
            except OSError as exc:
                logger.warning("blob %s: the store's own copy not made: %s (tried again at start)",
                               sha[:12], exc)
        if self.done or self.dropped:
            logger.info("the blob store took its own copy of %d blob(s) an older Stet shared with vault "
                        "files (%d dropped: changed through a vault's file)", self.done, self.dropped)


@dataclass(frozen=True, slots=True)
class Repaired:
    path: str
    written: OnDisk
    held_seen: bool  # the file held what was seen (its seen state may take the new stat)


def repair_shared_inodes(root: Path, blobs: BlobStore, seen: Mapping[str, SeenFile],
                         executable: Mapping[str, bool],
                         unseen: Mapping[str, str] | None = None) -> list[Repaired]:
    """Give each seen file that shares its inode with another seen file, or with its blob,
    an inode of its own; ``executable``: the bit each path gets (the index's). ``unseen``:
    paths the index holds that the seen state does not, with their sha256 -- a ``kill -9``
    between a landing's write and its record leaves such a file, and it may share its
    blob's inode all the same (their ``executable`` bit must be given). Blocking."""
    sha_of = {**(unseen or {}), **{p: s.sha256 for p, s in seen.items()}}
    stats: dict[str, os.stat_result] = {}
    by_inode: dict[tuple[int, int], list[str]] = {}
    for path in sorted(sha_of):
        try:
            st = os.lstat(resolve_inside(root, path))
        except (OSError, InvalidPath):
            continue
        if stat.S_ISREG(st.st_mode) and (st.st_nlink > 1 or (st.st_dev, st.st_ino) in blobs.unshared_inodes):
            stats[path] = st
            by_inode.setdefault((st.st_dev, st.st_ino), []).append(path)
    out: list[Repaired] = []
    for inode, paths in by_inode.items():
        linked_blobs = {sha_of[p] for p in paths if _inode_of_blob(blobs, sha_of[p]) == inode}
        was_blob = bool(linked_blobs) or inode in blobs.unshared_inodes  # (the home's scan came first)
        if len(paths) < 2 and not was_blob:
            continue  # its other names are not Stet's files: the person's link, left alone
        for sha in linked_blobs:
            blobs.unshare(sha)  # the store's copy first, hashed: it never keeps edited bytes
        for path in paths:
            was = stats[path]
            # A blob's inode had the store's mode too (the home's privacy fix made it 0600):
            # the file gets the mode a new file from Stet gets; else its own read/write bits.
            mode = NEW_FILE_MODE if was_blob else stat.S_IMODE(was.st_mode)
            try:
                bit = executable[path] if path in executable else seen[path].executable
                written = _own_inode(root, path, was, with_executable(mode, bit))
            except (OSError, InvalidPath) as exc:
                logger.warning("attachment %s still shares its file with identical ones: %s (tried again "
                               "at the next start)", path, exc)
                continue
            if written is not None:
                s = seen.get(path)
                held = s is not None and (s.size, s.mtime_ns, s.ino) == (was.st_size, was.st_mtime_ns,
                                                                          was.st_ino)
                out.append(Repaired(path, written, held))
    return out


def _inode_of_blob(blobs: BlobStore, sha256: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(blobs.path_of(sha256))
    except (OSError, BlobError):
        return None
    return (st.st_dev, st.st_ino)


def _own_inode(root: Path, path: str, was: os.stat_result, mode: int) -> OnDisk | None:
    """Copy the file beside itself and rename the copy over it, unless it changed
    meanwhile (None: left for the intake, which reads it as the change it is). A file
    alone on its inode already (the home's scan gave the store its copy first) only gets
    its mode."""
    full = resolve_inside(root, path)
    if was.st_nlink == 1:
        os.chmod(full, mode, follow_symlinks=False)
        return on_disk(os.lstat(full))
    tmp = full.parent / f".stet-{secrets.token_hex(6)}.tmp"
    try:
        clone_or_copy(full, tmp, mode)
        os.utime(tmp, ns=(was.st_atime_ns, was.st_mtime_ns), follow_symlinks=False)
        now = os.lstat(full)
        if (now.st_ino, now.st_size, now.st_mtime_ns) != (was.st_ino, was.st_size, was.st_mtime_ns):
            return None
        written = os.lstat(tmp)
        os.replace(tmp, full)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(full.parent)
    return on_disk(written)
