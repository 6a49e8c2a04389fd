"""Note paths: validation, normalisation and containment (SPEC §2 "path", §3.13).

A *path* is a note's location relative to the vault root: POSIX separators, NFC-normalised.
Everything an agent, a peer or the disk hands us goes through :func:`normalize_note_path`
before it is used as a key, and through :func:`resolve_inside` before anything is opened.

Every name the members' file systems can hold syncs (issue 37: a note named
``הנחות לחינוך ולמלכ"רים.md`` was refused on two Linux machines). The rules every machine keeps:

* no absolute paths, no ``.``/``..`` segments, no empty segments, no trailing ``/``;
* no backslash (a separator on Windows, a name character on POSIX: ambiguous);
* no control characters (C0, DEL, C1);
* at most 255 UTF-8 bytes per segment and 1024 bytes in total;
* the path must be encodable as UTF-8 (rejects lone surrogates from undecodable file names).

What only Windows cannot hold (``< > : " | ? *``, a drive letter, the reserved device names
``CON``, ``NUL``, ``COM1``, ``LPT1`` ... in any segment, with or without an extension, in any
case, a segment ending in ``.`` or a space) is :func:`windows_refusal`'s: refused where the
receiving file system is Windows' (``HOLDS_WINDOWS_NAMES`` false there), held everywhere else.

Nothing is stripped or rewritten silently except Unicode NFC normalisation.

This module is pure: it touches the filesystem only in :func:`resolve_inside`, and then only
with ``os.lstat`` (never following a symlink).
"""

from __future__ import annotations

import functools
import os
import re
import stat
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "MAX_PATH_BYTES",
    "MAX_SEGMENT_BYTES",
    "InvalidPath",
    "casefold_key",
    "is_note_name",
    "normalize_note_path",
    "resolve_inside",
    "resolve_inside_str",
    "windows_refusal",
]

# Whether this machine's file systems hold the names Windows refuses (every POSIX system
# does). A Windows daemon refuses them where it would have to write them, and says why.
HOLDS_WINDOWS_NAMES = sys.platform != "win32"

MAX_SEGMENT_BYTES = 255
"""Longest allowed path segment, in UTF-8 bytes (NAME_MAX on Linux/macOS)."""

MAX_PATH_BYTES = 1024
"""Longest allowed vault-relative path, in UTF-8 bytes."""

# Characters Windows refuses in file names (besides '/' and '\\', handled separately).
_FORBIDDEN_CHARS = frozenset('<>:"|?*')

# Windows device names. Reserved whatever the extension ("con.md", "Com1.tar.gz") and the
# case. COM0/LPT0 and the superscript-digit forms are listed by Microsoft's naming docs too;
# CONIN$/CONOUT$ are console devices. Stricter than the brief's list on purpose.
_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"COM{d}" for d in "0123456789\u00b9\u00b2\u00b3"}
    | {f"LPT{d}" for d in "0123456789\u00b9\u00b2\u00b3"}
)

# Windows FILE_ATTRIBUTE_REPARSE_POINT (symlinks, junctions, mount points): 0x400.
_FILE_ATTRIBUTE_REPARSE_POINT = 0x400


class InvalidPath(ValueError):
    """A path that is refused. ``reason`` is a short human sentence; ``path`` the input."""

    def __init__(self, reason: str, path: str | None = None) -> None:
        self.reason = reason
        self.path = path
        super().__init__(reason if path is None else f"{reason}: {path!r}")


# C0 (U+0000-U+001F), DEL (U+007F) and C1 (U+0080-U+009F): Unicode category Cc. One
# search in C, not a Python call per character (half of a first-seen path's check).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _windows_segment_refusal(seg: str) -> str | None:
    if seg.endswith((".", " ")):
        return "a path segment ends with '.' or a space"
    bad = sorted(_FORBIDDEN_CHARS.intersection(seg))
    if bad:
        return f"path contains a forbidden character {bad[0]!r}"
    # Windows: the device name is the part before the first dot, trailing spaces ignored
    # ("CON.md", "nul.tar.gz", "COM1 .txt" are all the device).
    stem = seg.split(".", 1)[0].rstrip(" ")
    if stem.upper() in _WINDOWS_RESERVED:
        return f"path uses the Windows-reserved name {stem!r}"
    return None


def _has_drive_letter(path: str) -> bool:
    return len(path) >= 2 and path[1] == ":" and path[0].isascii() and path[0].isalpha()


def windows_refusal(path: str) -> str | None:
    """Why a Windows file system cannot hold the (valid, normalised) ``path``, or None."""
    if _has_drive_letter(path):
        return "path starts with a drive letter"
    for seg in path.split("/"):
        reason = _windows_segment_refusal(seg)
        if reason is not None:
            return reason
    return None


def _check_segment(seg: str, raw: str) -> None:
    if seg == "":
        raise InvalidPath("path has an empty segment ('//' or a leading/trailing '/')", raw)
    if seg in (".", ".."):
        raise InvalidPath(f"path has a {seg!r} segment", raw)
    if not HOLDS_WINDOWS_NAMES:
        reason = _windows_segment_refusal(seg)
        if reason is not None:
            raise InvalidPath(f"{reason} (this device's file system, Windows', cannot hold it)", raw)
    if len(seg.encode("utf-8")) > MAX_SEGMENT_BYTES:
        raise InvalidPath(f"a path segment is longer than {MAX_SEGMENT_BYTES} UTF-8 bytes", raw)


def normalize_note_path(raw: str) -> str:
    """Validate and normalise a vault-relative path given by an agent or found on disk.

    Returns the POSIX, NFC-normalised path. Raises :class:`InvalidPath` (a ``ValueError``)
    for anything refused by the rules in the module docstring. Idempotent: a returned path
    is returned unchanged by a second call.
    """
    if not isinstance(raw, str):
        raise InvalidPath(f"path must be a string, not {type(raw).__name__}")
    return _normalized(raw)


# A pure function of the string, asked of the same paths again and again: a flush plans
# a note's path and checks it again at the rename, a peer's intake and the index ask it
# of each note they take (~4 % of a receiving peer's loop in P8). Refusals are not kept
# (an exception is never cached): they are asked again, and rare.
@functools.lru_cache(maxsize=4096)
def _normalized(raw: str) -> str:
    if raw == "":
        raise InvalidPath("path is empty", raw)
    # Control characters first, so the reason names the real problem (NUL, newline ...).
    control = _CONTROL.search(raw)
    if control is not None:
        raise InvalidPath(f"path contains a control character (U+{ord(control.group()):04X})", raw)
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPath("path is not valid Unicode (cannot be encoded as UTF-8)", raw) from None
    if "\\" in raw:
        raise InvalidPath("path contains a backslash; use '/' as the separator", raw)

    path = unicodedata.normalize("NFC", raw)

    if path.startswith("/"):
        raise InvalidPath("path is absolute; give a path relative to the vault root", raw)
    if not HOLDS_WINDOWS_NAMES and _has_drive_letter(path):
        raise InvalidPath("path starts with a drive letter", raw)
    if path.endswith("/"):
        raise InvalidPath("path ends with '/'; a note path names a file", raw)
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise InvalidPath(f"path is longer than {MAX_PATH_BYTES} UTF-8 bytes", raw)
    for seg in path.split("/"):
        _check_segment(seg, raw)
    return path


def _normalize_extension(ext: str) -> str:
    ext = ext.strip().lower()
    return ext if ext.startswith(".") else "." + ext


def is_note_name(path: str, extensions: Sequence[str]) -> bool:
    """Whether ``path`` names a note by its extension (case-insensitive).

    ``extensions`` are like ``[".md", ".markdown", ".txt"]`` (a missing leading dot is
    tolerated). A file whose whole name is the extension (``.md``) is a dotfile, not a note.
    Only the name is looked at; validity of the path is :func:`normalize_note_path`'s job.
    """
    name = path.rsplit("/", 1)[-1].lower()
    for ext in extensions:
        e = _normalize_extension(ext)
        if e != "." and name.endswith(e) and len(name) > len(e):
            return True
    return False


# Pure, and asked of the same paths again and again: a new file's case clash check folds
# the live paths of its folder that hold other characters than ASCII (P8: ten a file).
@functools.lru_cache(maxsize=8192)
def casefold_key(path: str) -> str:
    """Key under which two paths that differ only by case (or by Unicode normal form) collide.

    Canonical caseless matching (Unicode §3.13): full case folding of the NFD form, then NFC.
    Full folding is stricter than what case-insensitive filesystems do (it folds "ß" to
    "ss"), which errs on the side of refusing a path rather than clobbering a note on macOS
    or Windows.
    """
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", path).casefold())


def _is_link(st: os.stat_result) -> bool:
    if stat.S_ISLNK(st.st_mode):
        return True
    # Windows junctions and other reparse points are not reported as S_ISLNK.
    attrs: int = getattr(st, "st_file_attributes", 0)
    return bool(attrs & _FILE_ATTRIBUTE_REPARSE_POINT)


def resolve_inside(root: Path, rel: str) -> Path:
    """Join ``root`` and the normalised path ``rel``, proving the result stays in the vault.

    Never follows a symlink: every component from ``root`` down to the parent that exists
    must be a real directory (checked with ``os.lstat``), and the final component, if it
    exists, must be a regular file. Components that do not exist yet are accepted (the
    caller may create them). ``root`` must already be resolved (``Path.resolve()``).

    Raises :class:`InvalidPath` if ``rel`` is not a valid, already-normalised note path or if
    any component is a symlink, not a directory, or (last) not a regular file.

    This is a check at one instant: callers that open the result should still use
    ``O_NOFOLLOW`` where available and tolerate the file changing underneath them.
    """
    if not root.is_absolute():
        raise ValueError(f"vault root must be an absolute, resolved path: {root!r}")
    return Path(resolve_inside_str(os.fspath(root), rel))


def resolve_inside_str(root: str, rel: str) -> str:
    """:func:`resolve_inside` on strings: the same checks, the joined path as a string.

    For the hot paths (a bulk intake reads every new file through it): pathlib's joins
    and ``__fspath__`` were most of the check's cost, not the ``lstat`` calls."""
    if not os.path.isabs(root):
        raise ValueError(f"vault root must be an absolute, resolved path: {root!r}")
    norm = normalize_note_path(rel)
    if norm != rel:
        raise InvalidPath("path is not normalised (expected NFC)", rel)

    try:
        st = os.lstat(root)
    except FileNotFoundError:
        raise InvalidPath("vault root does not exist", root) from None
    if _is_link(st) or not stat.S_ISDIR(st.st_mode):
        raise InvalidPath("vault root is not a real directory", root)

    parts = norm.split("/")
    prefix = root.rstrip(os.sep)  # "" for the filesystem's root
    full = prefix + os.sep + os.sep.join(parts)
    current = prefix
    last_index = len(parts) - 1
    for i, part in enumerate(parts):
        current = current + os.sep + part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            # Nothing below a missing component can exist either.
            return full
        except NotADirectoryError:  # pragma: no cover - caught by the S_ISDIR check below
            raise InvalidPath("a parent of the path is not a directory", rel) from None
        if _is_link(st):
            shown = "/".join(parts[: i + 1])
            raise InvalidPath(f"{shown!r} is a symlink; symlinks are never followed", rel)
        if i == last_index:
            if not stat.S_ISREG(st.st_mode):
                shown = "/".join(parts[: i + 1])
                raise InvalidPath(f"{shown!r} exists and is not a regular file", rel)
        elif not stat.S_ISDIR(st.st_mode):
            shown = "/".join(parts[: i + 1])
            raise InvalidPath(f"{shown!r} is not a directory", rel)
    return full
