"""Edits that land in a note's file just as the bridge replaces it (issue 11).

The bridge writes a note's file by renaming a new file over it, after checking that the
old one is still what it last saw. A writer that opened the old file before the rename
(a shell's ``>>``, an editor saving in place) may write after that check: its bytes go
into the replaced file, which no one reads any more. So the bridge opens the old file
before its check and keeps it open for a moment after the rename: whatever landed in
it is read from that descriptor and merged as a file edit made on the state the old
file was based on (the same fork-and-merge as any disk edit), then written out again.

Pure file-system helpers here; the merge itself goes through ``NotesService``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from stet.sync.folder_scan import FileStat

RECHECK_AFTER_S = (0.05, 0.5)  # after the immediate check: a writer preempted mid-append
MAX_WATCHED = 128  # replaced files kept open at once (a bulk flush checks the rest at once)


@dataclass(slots=True)
class ReplacedFile:
    """A file the bridge replaced, still open: what it held when checked, and what that
    state of the file was based on (to merge an edit that lands in it)."""

    note_id: str
    path: str
    fd: int
    seen: FileStat
    base_revision: str | None
    base_snapshot: bytes | None
    checks_left: int = len(RECHECK_AFTER_S)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def open_for_watch(target: Path) -> int | None:
    """The current file at ``target``, opened read-only (None if there is none)."""
    try:
        return os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def landed(item: ReplacedFile) -> tuple[FileStat, bytes] | None:
    """If the replaced file changed since it was checked: its stat and whole content."""
    st = FileStat.of(os.fstat(item.fd))
    if st == item.seen:
        return None
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(item.fd, 1 << 20, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return FileStat.of(os.fstat(item.fd)), b"".join(chunks)
