"""Every file of a vault as it is on disk -- notes and attachments -- for the files API
(SPEC §6.12): a stat-only listing, contained no-follow opens, and SHA-256s cached by stat.

Blocking file I/O: the daemon calls these from a worker thread. Nothing here writes.
What is listed: regular files under the vault root that no ignore rule covers, whose
names are valid, normalised paths; never a symlink (nor anything under one).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from .errors import StetError
from .folder_walk import walk_folder
from .ignore_rules import IgnoreRules
from .note_paths import InvalidPath, is_note_name, normalize_note_path, resolve_inside

NOTE, ATTACHMENT = "note", "attachment"


class FileChangedWhileRead(StetError):
    code = "unavailable"


@dataclass(frozen=True, slots=True)
class VaultFile:
    path: str
    kind: str  # "note" | "attachment"
    size: int
    mtime_ns: int
    ino: int
    ctime_ns: int
    executable: bool

    @property
    def stat_key(self) -> tuple[int, int, int, int]:
        return (self.size, self.mtime_ns, self.ino, self.ctime_ns)

    @classmethod
    def of(cls, path: str, st: os.stat_result, extensions: tuple[str, ...]) -> VaultFile:
        kind = NOTE if is_note_name(path, extensions) else ATTACHMENT
        return cls(path, kind, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns,
                   bool(st.st_mode & stat.S_IXUSR))


def _may_hold(rel_dir: str, prefix: str) -> bool:
    """Can a folder at ``rel_dir`` hold paths starting with ``prefix``?"""
    d = rel_dir + "/"
    return d.startswith(prefix) or prefix.startswith(d)


def list_files(root: Path, rules: IgnoreRules, extensions: tuple[str, ...],
               prefix: str = "") -> list[VaultFile]:
    """The vault's files whose path starts with ``prefix``, in path order."""
    out: list[VaultFile] = []

    def on_entry(rel: str, st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode) or not rel.startswith(prefix):
            return  # symbolic links are never listed
        try:
            if normalize_note_path(rel) != rel:
                return  # not NFC: it would not round-trip
        except InvalidPath:
            return
        out.append(VaultFile.of(rel, st, extensions))

    walk_folder(root, rules, on_entry, descend=lambda rel: _may_hold(rel, prefix))
    out.sort(key=lambda f: f.path)
    return out


def open_file(root: Path, rules: IgnoreRules, extensions: tuple[str, ...],
              raw_path: str) -> tuple[int, VaultFile]:
    """Open a vault file for reading, proving it is inside the vault: every component a
    real folder (no symlink), the file itself opened ``O_NOFOLLOW`` and a regular file.
    Returns the open descriptor (the caller closes it) and what it is.

    Raises ``InvalidPath`` (bad, ignored or symlinked path) or ``FileNotFoundError``.
    """
    path = normalize_note_path(raw_path)
    if path != raw_path:
        raise InvalidPath("path is not normalised (expected NFC, '/' separators)", raw_path)
    if rules.is_ignored(path):
        raise InvalidPath("an ignore rule covers this path", raw_path)
    full = resolve_inside(root, path)
    fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidPath("not a regular file", raw_path)
    except BaseException:
        os.close(fd)
        raise
    return fd, VaultFile.of(path, st, extensions)


def hash_fd(fd: int) -> str:
    """SHA-256 of an open file from its start, streaming (never whole in memory)."""
    os.lseek(fd, 0, os.SEEK_SET)
    h = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        h.update(chunk)
    return h.hexdigest()


class HashCache:
    """SHA-256 of vault files, remembered by (path, size, mtime, inode, ctime): a file
    whose stat is unchanged is not read again. Bounded (least recently used dropped)."""

    def __init__(self, root: Path, rules: IgnoreRules, extensions: tuple[str, ...],
                 max_entries: int = 100_000) -> None:
        self.root = root
        self.rules = rules
        self.extensions = extensions
        self.max_entries = max_entries
        self._known: OrderedDict[str, tuple[tuple[int, int, int, int], str]] = OrderedDict()
        self.hashed = 0  # files actually read (for tests and the log)

    def cached(self, f: VaultFile) -> str | None:
        known = self._known.get(f.path)
        if known is not None and known[0] == f.stat_key:
            self._known.move_to_end(f.path)
            return known[1]
        return None

    def sha256(self, f: VaultFile) -> str:
        """The file's hash (reading it only if its stat changed since it was hashed).

        Raises ``FileNotFoundError``, ``InvalidPath`` or ``FileChangedWhileRead``."""
        hit = self.cached(f)
        if hit is not None:
            return hit
        fd, now = open_file(self.root, self.rules, self.extensions, f.path)
        try:
            digest = hash_fd(fd)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if (after.st_size, after.st_mtime_ns) != (now.size, now.mtime_ns):
            raise FileChangedWhileRead(f"{f.path} changed while it was read; try again")
        self.hashed += 1
        self._known[f.path] = (now.stat_key, digest)
        self._known.move_to_end(f.path)
        while len(self._known) > self.max_entries:
            self._known.popitem(last=False)
        return digest
