"""Writing note files safely: temp file, fsync, atomic rename, fsync the folder.

The bridge's only way of putting bytes on disk (SPEC §3.3). Kept apart from the
bridge's event logic; pure file-system calls, no store, no loop.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import re
import secrets
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from stet.sync.folder_scan import FileStat


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stat_or_none(path: Path) -> FileStat | None:
    try:
        return FileStat.of(os.lstat(path))
    except FileNotFoundError:
        return None


def atomic_write(target: Path, data: bytes, *,
                 unchanged: Callable[[], bool] | None = None,
                 dirs_to_sync: set[Path] | None = None) -> FileStat | None:
    """Temp file in the same folder, write, fsync, rename over, fsync the folder.

    ``unchanged`` is asked right before the rename (after the slow part): if it says the
    target changed since the caller looked, nothing is replaced and the result is None.
    With ``dirs_to_sync`` the folder is added there for the caller to fsync once for a
    whole batch of files instead of once per file.
    """
    tmp, written = write_temp(target, data)
    if not replace_with(tmp, target, unchanged=unchanged, dirs_to_sync=dirs_to_sync):
        return None
    return written


TEMP_DIR = ".stet-tmp"
"""The vault's folder for the bridge's temp files: left out of the inotify watches (as
``.git`` is: ``observer_without_git``), so writing a note makes one event -- its rename
into place -- instead of five (created, modified, attributes, closed, moved). Ignored by
the pinned ``.stet*`` rule."""


def write_temp(target: Path, data: bytes, temp_dir: Path | None = None, *,
               sync: bool = True, copy_mode: bool = True, folders_ready: bool = False
               ) -> tuple[Path, FileStat]:
    """The slow half of ``atomic_write``: ``data`` in a new temp file beside ``target``
    (or in ``temp_dir``, on the same file system), fsynced, with the target's permissions.
    Safe to run in a worker thread (it touches nothing but the new file); the result is the
    temp path and the stat of what was written.

    ``sync=False``: no fsync here -- the caller makes a whole batch durable at once after
    its renames (``make_durable``) and records it only then. ``copy_mode=False``: a new
    file (none at ``target``, and none replaced: ``replace_with(new=True)``), no
    permissions to take over, so no ``lstat`` of the target. ``folders_ready``: the
    caller made sure ``target``'s folder (and ``temp_dir``) exist -- no ``mkdir`` of each
    (a missing one raises ``FileNotFoundError``).
    """
    folder = target.parent if temp_dir is None else temp_dir
    if not folders_ready:
        target.parent.mkdir(parents=True, exist_ok=True)
        if temp_dir is not None:
            temp_dir.mkdir(exist_ok=True)
    tmp = folder / f".stet-{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        if copy_mode:
            try:
                mode = stat.S_IMODE(os.lstat(target).st_mode)
                os.fchmod(fd, mode)
            except FileNotFoundError:
                pass
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
        # The stat of what WE wrote, taken before the rename: a stat of the path after it
        # could be of a user's save landing in between, which would then look like ours.
        written = FileStat.of(os.fstat(fd))
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    return tmp, written


def replace_with(tmp: Path, target: Path, *, unchanged: Callable[[], bool] | None = None,
                 dirs_to_sync: set[Path] | None = None, new: bool = False) -> bool:
    """The quick half: rename ``tmp`` over ``target`` unless ``unchanged`` says no (then
    the temp file is removed and the answer is False), and fsync (or list) the folder.

    ``new``: the caller found no file at ``target``; it is placed only if there still is
    none, in one call (``rename_new``: no ``lstat`` first, and no window between a check
    and the rename in which a file made there would be replaced unread)."""
    placed = rename_new(tmp, target) if new else None
    if placed is None:  # (not ``new``, or no such call here: the check, then the rename)
        if unchanged is not None and not unchanged():
            os.unlink(tmp)
            return False
        os.replace(tmp, target)
    elif not placed:
        os.unlink(tmp)
        return False
    if dirs_to_sync is None:
        fsync_dir(target.parent)
    else:
        dirs_to_sync.add(target.parent)
    return True


def _libc(name: str, argtypes: list[type[Any]]) -> Any | None:
    """libc's function ``name`` (Linux) returning a C int, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


# syncfs(2); renameat2(2) (glibc 2.28+)
_SYNCFS = cast("Callable[[int], int] | None", _libc("syncfs", [ctypes.c_int]))

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


_RENAMEAT2 = cast("Callable[[int, bytes, int, bytes, int], int] | None", _libc(
    "renameat2", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]))


def rename_new(src: Path, dst: Path) -> bool | None:
    """Rename ``src`` to ``dst`` only if nothing is at ``dst`` (``RENAME_NOREPLACE``: one
    atomic call). True: renamed; False: something is there (``src`` left as it was); None:
    this system or file system cannot say so in one call (the caller checks, then renames)."""
    global _RENAMEAT2
    fn = _RENAMEAT2
    if fn is None:
        return None
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        return False
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        _RENAMEAT2 = None  # (a kernel or file system without the flag: no use asking again)
        return None
    raise OSError(err, os.strerror(err), str(dst))


def make_durable(files: list[Path], dirs: set[Path], *, use_syncfs: bool = True) -> str:
    """Make a batch of files renamed into place (written without their own fsyncs) and
    their folders' entries durable, in one call from a worker thread (ctypes lets go of
    the interpreter lock). Returns how: "syncfs" or "fsync".

    Linux: one ``syncfs(2)`` per file system the folders are on -- one journal commit for
    the whole batch instead of one fsync per file (a first sync of 10,000 notes made
    10,000) and one per folder. Since Linux 5.8 it reports a writeback error; then, and
    elsewhere, each file and each folder is fsynced, so an error is raised here and the
    batch is not recorded as written.
    """
    if use_syncfs and _SYNCFS is not None:
        devices: dict[int, Path] = {}
        for folder in dirs:
            with contextlib.suppress(OSError):
                devices.setdefault(os.stat(folder).st_dev, folder)
        ok = bool(devices)
        for folder in devices.values():
            try:
                fd = os.open(folder, os.O_RDONLY)
            except OSError:
                ok = False
                break
            try:
                if _SYNCFS(fd) != 0:
                    ok = False
                    break
            finally:
                os.close(fd)
        if ok:
            return "syncfs"
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            continue  # replaced or removed since: whoever did that owns its durability
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for folder in sorted(dirs):
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(folder)
    return "fsync"


TEMP_NAME = re.compile(r"\.stet-[0-9a-f]{12}\.tmp")


def sweep_temps(root: Path) -> int:
    """Remove temp files of ours (``write_temp``'s names) left under ``root`` by a
    process killed mid-write; returns how many. Only when no write of ours is in flight."""
    removed = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if TEMP_NAME.fullmatch(name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))
                    removed += 1
    return removed


def trash_unlink(target: Path) -> None:
    try:
        os.unlink(target)
        fsync_dir(target.parent)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
