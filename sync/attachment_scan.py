"""The folder's attachments, stat-only, and reading one into the blob store (SPEC §3.14).

``scan_attachments`` lists the vault's attachments (every regular file that is not a
note and that no ignore rule covers) as ``attachment_plan.OnDisk`` stats, without
opening any; files over ``max_bytes`` and names that cannot sync are reported instead.
``ingest`` copies one file into the blob store (hashing it on the way) and returns the
stat it had, or None when it changed while being read (read again once it settles);
``sha_of_file`` hashes one the same way, storing nothing.

Blocking file I/O: the daemon runs both in a worker thread.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from .attachment_plan import OnDisk
from .blob_store import CHUNK, BlobError, BlobInfo, BlobStore
from .folder_walk import walk_folder
from .ignore_rules import IgnoreRules
from .note_paths import InvalidPath, is_note_name, normalize_note_path, resolve_inside

EXEC_BITS = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


class _Sized(Protocol):
    @property
    def size(self) -> int: ...


_R = TypeVar("_R", bound=_Sized)
# Whether a file's writer may still be at it, from its stat and the wall time just before
# the stat was taken (``FolderEvents.unsettled``): such a file is not read yet.
StillWriting = Callable[[OnDisk, float], bool]


def on_disk(st: os.stat_result) -> OnDisk:
    return OnDisk(st.st_size, st.st_mtime_ns, st.st_ino, bool(st.st_mode & stat.S_IXUSR))


@dataclass(slots=True)
class AttachmentScan:
    files: dict[str, OnDisk] = field(default_factory=dict)
    too_large: dict[str, int] = field(default_factory=dict)  # path -> size (over max_bytes)
    unsyncable: dict[str, str] = field(default_factory=dict)  # path -> why its name cannot sync


def is_attachment_path(path: str, rules: IgnoreRules, extensions: tuple[str, ...]) -> bool:
    """Whether a vault-relative path (from a peer or an event) may hold an attachment here."""
    try:
        if normalize_note_path(path) != path:
            return False
    except InvalidPath:
        return False
    return not is_note_name(path, extensions) and not rules.is_ignored(path)


def scan_attachments(root: Path, rules: IgnoreRules, extensions: tuple[str, ...],
                     max_bytes: int) -> AttachmentScan:
    result = AttachmentScan()

    def on_entry(rel: str, st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode) or is_note_name(rel, extensions):
            return  # symlinks are never followed; notes are the bridge's
        try:
            ok = normalize_note_path(rel) == rel
            why = "name is not in Unicode normal form C"
        except InvalidPath as exc:
            ok, why = False, f"name cannot be synced: {exc.reason}"
        if not ok:
            result.unsyncable[rel] = why
        elif st.st_size > max_bytes:
            result.too_large[rel] = st.st_size
        else:
            result.files[rel] = on_disk(st)

    walk_folder(root, rules, on_entry)  # unreadable folders: the note scan reports them
    return result


HASH_FIRST_BYTES = 1 << 20  # files up to this size are hashed before anything is written


def ingest(blobs: BlobStore, root: Path, path: str, max_bytes: int,
           still_writing: StillWriting | None = None) -> tuple[BlobInfo, OnDisk] | None:
    """Copy the file at ``path`` into the blob store (streaming, never following a link).

    Returns the blob and the stat the file had while read; None if it is gone, is not a
    regular file any more, changed while it was read, or ``still_writing`` says of the
    stat it has as it is opened that its writer may be at it. ``OSError``: it cannot be
    read."""
    def store(f: io.BufferedReader) -> BlobInfo | None:
        try:
            if os.fstat(f.fileno()).st_size <= HASH_FIRST_BYTES:
                # Hashed in memory first: bytes the store already holds (a twin, a file a
                # checkout brings back) cost no temp file and no fsync (a checkout back to
                # 1,300 known attachments wrote and fsynced each one again).
                data = f.read(HASH_FIRST_BYTES + 1)
                if len(data) > max_bytes:
                    return None  # grew past the limit while read
                sha = hashlib.sha256(data).hexdigest()
                if blobs.has(sha):
                    return BlobInfo(sha, len(data), False)
                return blobs.put_bytes(data, expected=sha)
            return blobs.put_stream(iter(lambda: f.read(CHUNK), b""), max_bytes=max_bytes)
        except BlobError:
            return None  # grew past the limit while read

    return _read_steady(root, path, max_bytes, store, still_writing)


def sha_of_file(root: Path, path: str, max_bytes: int) -> tuple[str, OnDisk] | None:
    """The SHA-256 of the file at ``path``, stored nowhere (as ``ingest`` reads it)."""
    def digest(f: io.BufferedReader) -> _Hashed:
        return _Hashed(hashlib.file_digest(f, "sha256").hexdigest(), f.tell())

    got = _read_steady(root, path, max_bytes, digest)
    return None if got is None else (got[0].sha256, got[1])


@dataclass(frozen=True, slots=True)
class _Hashed:
    sha256: str
    size: int


def _read_steady(root: Path, path: str, max_bytes: int, read: Callable[[io.BufferedReader], _R | None],
                 still_writing: StillWriting | None = None) -> tuple[_R, OnDisk] | None:
    """``read`` the file at ``path`` (never following a link): its result and the stat the
    file had, or None if it is gone, not a regular file, over ``max_bytes``, changed (or
    was renamed over) while read, or ``still_writing`` (its stat as opened, the wall time
    just before that stat) holds it back."""
    try:
        full = resolve_inside(root, path)
        fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except (InvalidPath, FileNotFoundError):
        return None
    with os.fdopen(fd, "rb") as f:
        # The quiet rule judged on this stat, not the (older) walk's: a file a writer went
        # on with meanwhile through a hard link (no event here) is not read mid-write.
        wall = time.time()
        before = os.fstat(f.fileno())
        if not stat.S_ISREG(before.st_mode) or before.st_size > max_bytes:
            return None
        if still_writing is not None and still_writing(on_disk(before), wall):
            return None
        info = read(f)
        if info is None:
            return None
        after = os.fstat(f.fileno())
    if (before.st_mtime_ns, before.st_size, info.size) != (after.st_mtime_ns, after.st_size, after.st_size):
        return None
    try:
        now = os.lstat(full)
    except FileNotFoundError:
        return None
    if (now.st_ino, now.st_mtime_ns, now.st_size) != (after.st_ino, after.st_mtime_ns, after.st_size):
        return None  # replaced (renamed over) while read
    return info, on_disk(now)
