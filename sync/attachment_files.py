"""The ``attachment_files`` table of a vault store: per path, what the daemon last saw
there or wrote there (``attachment_plan.SeenFile``), so a restart plans from where it
stopped. Every write joins the caller's transaction when there is one (the index record
and the seen state of one change commit together)."""

from __future__ import annotations

from typing import Any

from .attachment_plan import SeenFile
from .store import VaultStore

_COLS = "path, attachment_id, sha256, size, mtime_ns, ino, executable, hlc"

# The ``hlc`` of a row `stet init` wrote (its bytes in the blob store, no index entry yet:
# the CLI has no device identity). The daemon's first pass records these as created before
# it looks at the folder, so a file deleted right after the start is a deletion (issue 37).
TAKEN_AT_INIT = ""


class AttachmentFiles:
    def __init__(self, store: VaultStore) -> None:
        self.store = store

    @property
    def _db(self) -> Any:
        return self.store.db

    def all(self) -> dict[str, SeenFile]:
        rows = self._db.execute(f"SELECT {_COLS} FROM attachment_files").fetchall()
        return {r[0]: SeenFile(r[1], r[2], int(r[3]), int(r[4]), int(r[5]), bool(r[6]), r[7]) for r in rows}

    def get(self, path: str) -> SeenFile | None:
        r = self._db.execute(f"SELECT {_COLS} FROM attachment_files WHERE path = ?", (path,)).fetchone()
        return None if r is None else SeenFile(r[1], r[2], int(r[3]), int(r[4]), int(r[5]), bool(r[6]), r[7])

    def put(self, path: str, seen: SeenFile) -> None:
        with self.store.transaction():
            self._db.execute(
                f"INSERT INTO attachment_files ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(path) DO UPDATE SET attachment_id = excluded.attachment_id, "
                "sha256 = excluded.sha256, size = excluded.size, mtime_ns = excluded.mtime_ns, "
                "ino = excluded.ino, executable = excluded.executable, hlc = excluded.hlc",
                (path, seen.att_id, seen.sha256, seen.size, seen.mtime_ns, seen.ino, int(seen.executable),
                 seen.hlc),
            )

    def page(self, after: str, limit: int) -> list[tuple[str, int, int]]:
        """(path, size, mtime_ns) of the attachments after ``after``, in path order."""
        rows = self._db.execute("SELECT path, size, mtime_ns FROM attachment_files WHERE path > ? "
                                "ORDER BY path LIMIT ?", (after, limit)).fetchall()
        return [(str(r[0]), int(r[1]), int(r[2])) for r in rows]

    def remove(self, path: str) -> None:
        with self.store.transaction():
            self._db.execute("DELETE FROM attachment_files WHERE path = ?", (path,))

    def shas(self) -> set[str]:
        """Blobs the folder holds (never removed from the blob store while here)."""
        return {str(r[0]) for r in self._db.execute("SELECT DISTINCT sha256 FROM attachment_files")}
