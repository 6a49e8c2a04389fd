"""Stat-only scans of a vault folder and contained, no-follow reads of note files.

The scan never opens a file; it lists what looks like a note and why anything else
was skipped. ``read_note_file`` is the one way note bytes are read from disk: it
proves containment component by component, refuses symlinks, and reports a file
that changed while it was read (so a half-written file is never taken as a note).
"""

from __future__ import annotations

import os
import stat
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from .errors import StetError
from .folder_walk import walk_folder
from .ignore_rules import IgnoreRules
from .note_paths import InvalidPath, casefold_key, is_note_name, normalize_note_path, resolve_inside_str

CASE_CLASH = "differs only by case from"  # a skip's reason, then the other path


@dataclass(frozen=True, slots=True)
class FileStat:
    mtime_ns: int
    size: int
    ino: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStat:
        return cls(st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass(slots=True)
class ScanResult:
    notes: dict[str, FileStat] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    other_files: int = 0
    other_bytes: int = 0  # the regular ones' sizes (what `stet init` reports as attachments)


class SkipFile(StetError):
    """A file that is not taken as a note; ``message`` says why."""


class FileChanged(StetError):
    """The file changed while it was being read: read it again once it settles."""


def scan_folder(
    root: Path, rules: IgnoreRules, extensions: tuple[str, ...], max_bytes: int
) -> ScanResult:
    result = ScanResult()
    seen_case: dict[str, str] = {}

    def unreadable(rel_dir: str, exc: OSError) -> None:
        result.skipped[rel_dir or "."] = f"folder cannot be read: {exc.strerror}"

    def on_entry(rel: str, st: os.stat_result) -> None:
        if stat.S_ISLNK(st.st_mode):
            if is_note_name(rel, extensions) or os.path.isdir(root / rel):
                result.skipped[rel] = "symbolic link (never followed)"
            return
        if not stat.S_ISREG(st.st_mode) or not is_note_name(rel, extensions):
            result.other_files += 1
            if stat.S_ISREG(st.st_mode):
                result.other_bytes += st.st_size
            return
        try:
            path = normalize_note_path(rel)
        except InvalidPath as exc:
            result.skipped[rel] = f"name cannot be synced: {exc.reason}"
            return
        if path != rel:
            result.skipped[rel] = "name is not in Unicode normal form C"
            return
        if st.st_size > max_bytes:
            result.skipped[rel] = f"too large ({st.st_size} bytes; the limit is {max_bytes})"
            return
        key = casefold_key(path)
        if key in seen_case:
            result.skipped[rel] = f"{CASE_CLASH} {seen_case[key]}"
            return
        seen_case[key] = path
        result.notes[path] = FileStat.of(st)

    walk_folder(root, rules, on_entry, on_unreadable=unreadable, sort=True)
    return result


def read_note_file(root: Path, path: str, max_bytes: int) -> tuple[bytes, FileStat]:
    """Read a note's bytes without following links out of (or within) the vault.

    Raises ``FileNotFoundError`` if it is gone, ``SkipFile`` if it is not a note we
    may read, and ``FileChanged`` if it changed while being read.
    """
    try:
        full = resolve_inside_str(os.fspath(root), path)
    except InvalidPath as exc:
        raise SkipFile(f"not read: {exc.reason}") from None
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(full, flags)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        if exc.errno in (getattr(os, "ELOOP", -1), getattr(os, "EMLINK", -1)):
            raise SkipFile("symbolic link (never followed)") from None
        raise SkipFile(f"cannot be read: {exc.strerror}") from None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise SkipFile("not a regular file")
        if before.st_size > max_bytes:
            raise SkipFile(f"too large ({before.st_size} bytes; the limit is {max_bytes})")
        chunks = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise SkipFile(f"too large (over {max_bytes} bytes)")
    if (before.st_mtime_ns, before.st_size) != (after.st_mtime_ns, after.st_size) or len(
        data
    ) != after.st_size:
        raise FileChanged(f"{path} changed while it was read")
    return data, FileStat.of(after)


def decode_note(data: bytes) -> str:
    """Note bytes to text, exactly: strict UTF-8 (a BOM stays as U+FEFF, CRLF stays)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkipFile(f"not valid UTF-8 (byte {exc.start})") from None


def is_nfc(name: str) -> bool:
    return unicodedata.is_normalized("NFC", name)
