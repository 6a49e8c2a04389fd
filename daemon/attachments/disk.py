"""Putting attachments in the folder: what the index shows, written safely (SPEC §3.14).

Every change is made only while the path still holds what the daemon last saw there
(``expect``: a ``SeenFile``, or None for nothing), checked right before the step that
replaces it: a file the user changed meanwhile is never written over (the intake records
that change first). A blob lands as a temp file beside its path (``.stet-*``, ignored),
fsynced, then renamed over it; a partial file never appears at the path.

Blocking file I/O: the replica runs these in a worker thread. Each returns the stat of
what is now at the path (None: not done, the path changed).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import secrets
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, cast

from stet.daemon.base.atomic_files import fsync_dir
from stet.daemon.base.emptied_folders import remove_emptied_folders
from stet.sync import direct_io
from stet.sync.attachment_plan import OnDisk, SeenFile
from stet.sync.attachment_scan import EXEC_BITS, on_disk
from stet.sync.blob_store import CHUNK, BlobStore
from stet.sync.note_paths import InvalidPath, resolve_inside

logger = logging.getLogger(__name__)

READ_BITS = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
NEW_FILE_MODE = 0o644  # a file written where there was none (its executable bit aside)


def with_executable(mode: int, executable: bool) -> int:
    """``mode`` with the executable bit set where it is readable (``chmod +x``), or cleared."""
    mode = stat.S_IMODE(mode)
    return mode | ((mode & READ_BITS) >> 2) | stat.S_IXUSR if executable else mode & ~EXEC_BITS


def holds(full: Path, expect: SeenFile | None) -> bool:
    """Whether the path still holds what was seen (``expect`` None: nothing at all)."""
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        return expect is None
    return expect is not None and stat.S_ISREG(st.st_mode) and expect.same_stat(on_disk(st))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


COPY_STEP = 8 << 20  # bytes per copy_file_range call
SYNC_EVERY = 64 << 20  # flush the copy's pages every this many bytes


def _copy_into(src: BinaryIO, fd: int) -> None:
    """Copy ``src`` to ``fd`` in the kernel (``copy_file_range``: no pass through Python's
    buffers, the receiver's main CPU cost in P9), or by reads and writes where the kernel or
    the file systems cannot (a copy started either way resumes from where it got)."""
    copy_range = getattr(os, "copy_file_range", None)
    if copy_range is not None:
        size = os.fstat(src.fileno()).st_size
        done = 0
        try:
            while done < size:
                n = copy_range(src.fileno(), fd, min(size - done, COPY_STEP), done, done)
                if n == 0:
                    break
                done += n
                if done % SYNC_EVERY < n:
                    # Write-behind: a gigabyte of dirty pages at once stalls the fsync of a
                    # note written meanwhile (ext4 commits ordered data in the same journal).
                    os.fdatasync(fd)
        except OSError:
            pass  # e.g. EXDEV/ENOSYS/EINVAL: finish by hand from ``done``
        if done == size:
            os.lseek(fd, done, os.SEEK_SET)
            return
        src.seek(done)
        os.lseek(fd, done, os.SEEK_SET)
    while data := src.read(CHUNK):
        _write_all(fd, data)


def write_blob(blobs: BlobStore, root: Path, path: str, sha256: str, executable: bool,
               expect: SeenFile | None, *,
               make_parents: Callable[[Path], None] | None = None) -> OnDisk | None:
    """Put the blob's bytes at ``path``, in a file of its own (``clone_or_copy``: never a
    hard link of the store's file or of another path's: identical files at several paths
    are separate files, each with its own mode, issue 37). ``make_parents``: makes the
    missing folders (the vault's ``WriterFolders.make_parents``, which remembers them as the
    daemon's own: their events are echoes); else a plain ``mkdir``."""
    st = _put_blob(blobs, root, path, sha256, executable, expect, make_parents)
    if st is not None:
        fsync_dir(resolve_inside(root, path).parent)
    return st


def write_blobs(blobs: BlobStore, root: Path, files: list[tuple[str, str, bool, SeenFile | None]], *,
                make_parents: Callable[[Path], None] | None = None) -> list[OnDisk | None | Exception]:
    """``write_blob`` of each ``(path, sha256, executable, expect)``, in one worker-thread
    trip, each folder fsynced once after its files were renamed into place (a peer's 1,300
    new attachments: two fsyncs and a trip each made 250 files a second). Each outcome:
    what is at the path now, None (the path changed: not done), or the error it met."""
    outcomes: list[OnDisk | None | Exception] = []
    parents: set[Path] = set()
    for path, sha256, executable, expect in files:
        try:
            st = _put_blob(blobs, root, path, sha256, executable, expect, make_parents)
            if st is not None:
                parents.add(resolve_inside(root, path).parent)
            outcomes.append(st)
        except (OSError, InvalidPath) as exc:
            outcomes.append(exc)
    failed: set[Path] = set()
    for parent in parents:  # each rename durable before the caller records it
        try:
            fsync_dir(parent)
        except OSError:
            failed.add(parent)
    if failed:
        for i, (path, *_rest) in enumerate(files):
            if isinstance(outcomes[i], OnDisk) and resolve_inside(root, path).parent in failed:
                outcomes[i] = OSError(f"could not make the folder of {path} durable")
    return outcomes


def _put_blob(blobs: BlobStore, root: Path, path: str, sha256: str, executable: bool,
              expect: SeenFile | None, make_parents: Callable[[Path], None] | None) -> OnDisk | None:
    """The file written and renamed into place, its folder not fsynced yet."""
    full = resolve_inside(root, path)
    if make_parents is not None:
        make_parents(full.parent)
    else:
        full.parent.mkdir(parents=True, exist_ok=True)
    resolve_inside(root, path)  # the folders just made are real folders inside the vault
    try:
        base_mode = stat.S_IMODE(os.lstat(full).st_mode)
    except FileNotFoundError:
        base_mode = NEW_FILE_MODE
    tmp = full.parent / f".stet-{secrets.token_hex(6)}.tmp"
    try:
        written = clone_or_copy(blobs.path_of(sha256), tmp, with_executable(base_mode, executable))
        if not holds(full, expect):
            return None
        os.replace(tmp, full)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return on_disk(written)


FICLONE = 0x40049409  # Linux ioctl: the new file shares the source's extents, copy-on-write


def _reflink(src_fd: int, fd: int) -> bool:
    """Whether the file system made ``fd`` a reflink of ``src_fd`` (btrfs, XFS, bcachefs...:
    no bytes written, yet a separate file -- a write to either copies the blocks it
    touches). ext4, tmpfs, another file system: refused, and the caller copies."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fcntl.ioctl(fd, FICLONE, src_fd)
    except OSError:
        return False
    return True


def clone_or_copy(src: Path, tmp: Path, mode: int) -> os.stat_result:
    """A new file ``tmp`` (created exclusively) with ``src``'s bytes and ``mode``, fsynced:
    a reflink where the file system offers one, else a copy past the page cache
    (``direct_io``), else in the kernel (``copy_file_range``), else by reads and writes."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with open(src, "rb") as source:
            if not _reflink(source.fileno(), fd) and direct_io.copy_direct(src, fd, tmp) is None:
                _copy_into(source, fd)
        os.fchmod(fd, mode)
        os.fsync(fd)
        return os.fstat(fd)
    finally:
        os.close(fd)


def move_file(root: Path, old: str, new: str, expect: SeenFile) -> OnDisk | None:
    src, dest = resolve_inside(root, old), resolve_inside(root, new)
    if not holds(src, expect) or os.path.lexists(dest):
        return None
    dest.parent.mkdir(parents=True, exist_ok=True)
    resolve_inside(root, new)
    if not rename_no_replace(src, dest):
        return None
    fsync_dir(dest.parent)
    if src.parent != dest.parent:
        fsync_dir(src.parent)
    return on_disk(os.lstat(dest))


RENAME_NOREPLACE = 1  # renameat2 flag: fail with EEXIST rather than replace the target
_AT_FDCWD = -100


def _renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):  # not Linux, or a C library without it
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return cast(Callable[[int, bytes, int, bytes, int], int], fn)


_RENAMEAT2 = _renameat2()


def rename_no_replace(src: Path, dest: Path) -> bool:
    """Rename ``src`` to ``dest`` unless something is at ``dest`` (False then). Never by a
    hard link and an unlink: a crash between the two left both paths one inode, and an
    edit of either changed the other (issue 37). ``renameat2(RENAME_NOREPLACE)`` checks in
    the kernel; where it is missing or the file system refuses the flag, a check just
    before a plain rename (the window is the two calls)."""
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dest), RENAME_NOREPLACE) == 0:
            return True
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            return False
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), str(src), None, str(dest))
    if os.path.lexists(dest):
        return False
    os.rename(src, dest)
    return True


def remove_files(root: Path, files: list[tuple[str, SeenFile]],
                 is_ignored: Callable[[str], bool] | None = None) -> list[bool | Exception]:
    """Each file removed if it still holds what was seen, then the folders each left
    empty: one worker-thread trip for a peer's burst of deletions, each folder fsynced once
    after its files went (a trip per file waited for the loop each time: 5 files a second
    while notes were applied). Each outcome: removed, False (the path changed: not done),
    or the error it met."""
    outcomes: list[bool | Exception] = []
    parents: set[Path] = set()
    for path, expect in files:
        try:
            full = resolve_inside(root, path)
            if not holds(full, expect):
                outcomes.append(False)
                continue
            os.unlink(full)
            parents.add(full.parent)
            outcomes.append(True)
        except (OSError, InvalidPath) as exc:
            outcomes.append(exc)
    for parent in parents:  # each deletion durable before the caller records it
        with contextlib.suppress(OSError):
            fsync_dir(parent)
    for (path, _), outcome in zip(files, outcomes, strict=True):
        if outcome is True:
            with contextlib.suppress(OSError):
                remove_emptied_folders(root, path, is_ignored)
    return outcomes


def set_executable(root: Path, path: str, executable: bool, expect: SeenFile) -> OnDisk | None:
    full = resolve_inside(root, path)
    if not holds(full, expect):
        return None
    os.chmod(full, with_executable(os.lstat(full).st_mode, executable))
    return on_disk(os.lstat(full))
