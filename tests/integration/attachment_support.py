"""Helpers for the attachment tests (SPEC §3.14): read-only looks into a vault's store --
the attachment map of the vault index, the seen state, the kept versions -- and
byte-and-mode views of a folder's attachments.

The store is opened read-only while the daemon runs; every connection is closed before
a helper returns. Tests never sleep: a negative ("nothing was recorded") is proven by a
later *sentinel* change, recorded by a later pass of the same sequential pipeline.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pycrdt

from stet.sync.attachment_entry import AttachmentEntry
from stet.sync.attachment_index import AttachmentIndex
from stet.sync.vault_index import INDEX_ID
from tests.harness import wait_until

NOTE_SUFFIXES = (".md", ".markdown", ".txt")


def _connect(home: Path) -> sqlite3.Connection:
    dbs = sorted((home / "vaults").glob("*.db"))
    assert len(dbs) == 1, f"expected one vault store in {home}, found {dbs}"
    return sqlite3.connect(f"file:{dbs[0]}?mode=ro", uri=True, timeout=10)


def stored_index(home: Path) -> AttachmentIndex:
    """The attachment map as the vault index's stored updates rebuild it."""
    db = _connect(home)
    try:
        rows = db.execute("SELECT data FROM updates WHERE note_id = ? ORDER BY seq", (INDEX_ID,)).fetchall()
    finally:
        db.close()
    doc: pycrdt.Doc = pycrdt.Doc(skip_gc=True)
    index = AttachmentIndex(doc)
    for (data,) in rows:
        index.apply_update(bytes(data))
    return index


def slots(home: Path) -> list[AttachmentEntry]:
    return sorted(stored_index(home).slots(), key=lambda e: (e.id, e.device))


def live(home: Path) -> dict[str, AttachmentEntry]:
    return stored_index(home).live()


def seen_rows(home: Path) -> dict[str, tuple[str, str, int]]:
    """path -> (attachment id, sha256, size) of the replica's seen state."""
    db = _connect(home)
    try:
        rows = db.execute("SELECT path, attachment_id, sha256, size FROM attachment_files").fetchall()
    finally:
        db.close()
    return {r[0]: (r[1], r[2], int(r[3])) for r in rows}


def versions(home: Path) -> list[dict[str, object]]:
    db = _connect(home)
    try:
        rows = db.execute("SELECT attachment_id, path, kind, source, sha256, size FROM attachment_versions "
                          "ORDER BY id").fetchall()
    finally:
        db.close()
    return [{"id": r[0], "path": r[1], "kind": r[2], "source": r[3], "sha256": r[4], "size": r[5]}
            for r in rows]


def blob_path(home: Path, sha256: str) -> Path:
    return home / "blobs" / sha256[:2] / sha256[2:]


def attachments(root: Path) -> dict[str, tuple[bytes, bool]]:
    """Every non-note file of a folder (our temp files aside): bytes and executable bit."""
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.is_symlink() or p.name.startswith(".stet") or p.suffix in NOTE_SUFFIXES:
            continue
        out[p.relative_to(root).as_posix()] = (p.read_bytes(), bool(os.stat(p).st_mode & stat.S_IXUSR))
    return out


def wait_recorded(home: Path, path: str, sha256: str | None = None, *,
                  timeout: float = 30) -> AttachmentEntry:
    """Wait until the stored index shows ``path`` live (with these bytes, if given)."""
    def found() -> AttachmentEntry | None:
        e = live(home).get(path)
        return e if e is not None and (sha256 is None or e.sha256 == sha256) else None

    entry: AttachmentEntry = wait_until(found, timeout=timeout,
                                        what=f"{path} recorded in the attachment index")
    return entry


def wait_same_attachments(*roots: Path, timeout: float = 60) -> dict[str, tuple[bytes, bool]]:
    def same() -> dict[str, tuple[bytes, bool]] | None:
        views = [attachments(r) for r in roots]
        return views[0] if all(v == views[0] for v in views[1:]) else None

    result: dict[str, tuple[bytes, bool]] = wait_until(same, timeout=timeout, what="identical attachments",
                                                        interval=0.05)
    return result
