"""Versions of attachments (SPEC §3.14): the old bytes of a replaced or deleted attachment,
and of the loser of a concurrent change, kept within ``attachments.keep_bytes`` per vault.

The bytes are blobs (``blob_store``), named by SHA-256 and shared: a version costs the
size of its blob once, however many versions (or live files) hold the same bytes. The
rows live in the vault's store (table ``attachment_versions``, schema step 5).

Retention (pure: ``versions_to_drop``): while the distinct blobs the versions hold add
up to more than ``keep_bytes``, the oldest version goes. A pinned version (one a held
change of the brake points at) is never dropped. A version bigger than the whole budget
is therefore not kept at all (unless pinned).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from .store import VaultStore

BEFORE_OVERWRITE = "before-overwrite"
BEFORE_DELETION = "before-deletion"
CONCURRENT = "concurrent"
KINDS = (BEFORE_OVERWRITE, BEFORE_DELETION, CONCURRENT)

_COLS = "id, attachment_id, path, kind, source, created_at, sha256, size, executable, pinned"


@dataclass(frozen=True, slots=True)
class AttachmentVersion:
    id: int
    attachment_id: str
    path: str  # where the attachment was when this version was kept
    kind: str
    source: str
    created_at: float
    sha256: str
    size: int
    executable: bool
    pinned: bool = False

    def to_json(self) -> dict[str, Any]:
        from datetime import UTC, datetime

        return {"id": self.id, "kind": self.kind, "path": self.path, "source": self.source,
                "createdAt": datetime.fromtimestamp(self.created_at, UTC).isoformat().replace("+00:00", "Z"),
                "sha256": self.sha256, "size": self.size, "executable": self.executable}


def _row(r: Sequence[Any]) -> AttachmentVersion:
    return AttachmentVersion(int(r[0]), r[1], r[2], r[3], r[4], float(r[5]), r[6], int(r[7]), bool(r[8]),
                             bool(r[9]))


def versions_to_drop(versions: Sequence[AttachmentVersion], keep_bytes: int,
                     pinned: Collection[int] = ()) -> list[int]:
    """The ids to drop, oldest first, until the distinct blobs of the kept versions fit
    ``keep_bytes`` (pinned versions are never dropped)."""
    refs: dict[str, int] = {}
    for v in versions:
        refs[v.sha256] = refs.get(v.sha256, 0) + 1
    sizes = {v.sha256: v.size for v in versions}
    used = sum(sizes.values())
    drop = []
    for v in sorted(versions, key=lambda v: (v.created_at, v.id)):
        if used <= keep_bytes:
            break
        if v.id in pinned or v.pinned:
            continue
        drop.append(v.id)
        refs[v.sha256] -= 1
        if refs[v.sha256] == 0:
            used -= sizes[v.sha256]  # the last version holding these bytes
    return sorted(drop)


class AttachmentVersionStore:
    """The ``attachment_versions`` table of one vault store."""

    def __init__(self, store: VaultStore, keep_bytes: int) -> None:
        self.store = store
        self.keep_bytes = keep_bytes

    @property
    def _db(self) -> Any:
        return self.store.db

    def add(self, *, attachment_id: str, path: str, kind: str, source: str, created_at: float,
            sha256: str, size: int, executable: bool,
            pinned: bool = False) -> tuple[AttachmentVersion | None, set[str]]:
        """Keep a version, then apply retention, in one transaction.

        Returns the version (None if retention dropped it at once: bigger than the
        budget) and the blobs no version holds any more: the caller removes those from
        the blob store unless a live attachment still has them.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown attachment version kind {kind!r}")
        with self.store.transaction():
            cur = self._db.execute(
                f"INSERT INTO attachment_versions ({_COLS.removeprefix('id, ')}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (attachment_id, path, kind, source, created_at, sha256, size, int(executable), int(pinned)),
            )
            vid = int(cur.lastrowid)
            released = self.apply_retention()
            version = self.get(vid)
        return version, released

    def apply_retention(self) -> set[str]:
        """Drop the oldest versions over the budget; returns blobs no version holds now.

        The rule of ``versions_to_drop``, walked in the table: what the versions cost is one
        row (schema step 7's triggers), so a version kept within the budget costs no scan,
        and one over it reads only the oldest rows it drops.
        """
        with self.store.transaction():
            if self.used_bytes() <= self.keep_bytes:
                return set()
            dropped: set[str] = set()
            after: tuple[float, int] = (float("-inf"), 0)
            while self.used_bytes() > self.keep_bytes:
                rows = self._db.execute(
                    "SELECT id, sha256, created_at FROM attachment_versions "
                    "WHERE pinned = 0 AND (created_at, id) > (?, ?) ORDER BY created_at, id LIMIT 256",
                    after).fetchall()
                if not rows:
                    break  # what is left is pinned
                for vid, sha256, created_at in rows:
                    self._db.execute("DELETE FROM attachment_versions WHERE id = ?", (vid,))
                    dropped.add(sha256)
                    after = (float(created_at), int(vid))
                    if self.used_bytes() <= self.keep_bytes:
                        break
            return {s for s in dropped if not self.holds(s)}

    def set_pinned(self, version_id: int, pinned: bool) -> None:
        with self.store.transaction():
            self._db.execute("UPDATE attachment_versions SET pinned = ? WHERE id = ?",
                             (int(pinned), version_id))

    def get(self, version_id: int) -> AttachmentVersion | None:
        r = self._db.execute(f"SELECT {_COLS} FROM attachment_versions WHERE id = ?",
                             (version_id,)).fetchone()
        return None if r is None else _row(r)

    def all(self) -> list[AttachmentVersion]:
        rows = self._db.execute(f"SELECT {_COLS} FROM attachment_versions ORDER BY id").fetchall()
        return [_row(r) for r in rows]

    def for_attachment(self, attachment_id: str) -> list[AttachmentVersion]:
        """Newest first."""
        rows = self._db.execute(
            f"SELECT {_COLS} FROM attachment_versions WHERE attachment_id = ? "
            "ORDER BY created_at DESC, id DESC",
            (attachment_id,),
        ).fetchall()
        return [_row(r) for r in rows]

    def at_path(self, path: str) -> list[AttachmentVersion]:
        """Versions kept while an attachment was at ``path``, newest first."""
        rows = self._db.execute(
            f"SELECT {_COLS} FROM attachment_versions WHERE path = ? ORDER BY created_at DESC, id DESC",
            (path,),
        ).fetchall()
        return [_row(r) for r in rows]

    def holds(self, sha256: str) -> bool:
        return self._db.execute(
            "SELECT 1 FROM attachment_versions WHERE sha256 = ? LIMIT 1", (sha256,)).fetchone() is not None

    def used_bytes(self) -> int:
        """What the kept versions cost: each distinct blob once."""
        row = self._db.execute("SELECT bytes FROM attachment_versions_used WHERE id = 0").fetchone()
        return int(row[0])
