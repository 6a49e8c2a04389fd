"""Versions of attachments for people and agents (SPEC §3.14, §5, §7): what ``stet versions``,
``stet show --version`` and ``stet restore`` do for a path that is not a note, and the
attachment rows of ``stet conflicts``.

- A path names the versions kept while an attachment was there, and those of the
  attachment at the path now (kept under an older name before a rename).
- Showing a version streams its blob; restoring one puts its bytes back at the path
  through the folder side's ``write_back`` (which keeps the bytes it replaces as a
  ``before-overwrite`` version first: a restore is undone by restoring that one).
- A concurrent loser *is* a version of kind ``concurrent`` (kept by the folder side); the
  conflicts list shows each with the winner's device and bytes when the index knows them.

Scopes apply to agent tokens: read to list and show, write to restore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from stet.daemon.attachments.seams import AttachmentReplicaApi
from stet.daemon.base.timestamps import iso
from stet.daemon.ops.versions import parse_version_id
from stet.sync.attachment_files import AttachmentFiles
from stet.sync.attachment_plan import SeenFile
from stet.sync.attachment_versions import CONCURRENT, AttachmentVersion, AttachmentVersionStore
from stet.sync.blob_store import BlobStore
from stet.sync.errors import NotFound, StetError
from stet.sync.permissions import READ, WRITE, Scopes
from stet.sync.store import VaultStore

if TYPE_CHECKING:
    from stet.daemon.attachments.replica import AttachmentReplica


class _Winners(Protocol):
    def current(self, att_id: str) -> Any: ...


class AttachmentsOfVault(Protocol):
    """What ``conflicts_of`` reads of a vault (the runtime; its replica may come later)."""

    @property
    def store(self) -> VaultStore: ...
    @property
    def attachments(self) -> AttachmentReplica | None: ...


def version_json(v: AttachmentVersion) -> dict[str, Any]:
    return {**v.to_json(), "attachmentId": v.attachment_id}


@dataclass
class AttachmentVersionOps:
    vault: str
    store: VaultStore
    blobs: BlobStore | None
    replica: AttachmentReplicaApi | None
    scopes: Scopes
    keep_bytes: int = 1 << 30

    @property
    def versions(self) -> AttachmentVersionStore:
        return AttachmentVersionStore(self.store, self.keep_bytes)

    def _of_path(self, path: str) -> list[AttachmentVersion]:
        """Newest first: kept at ``path``, and of the attachment at ``path`` now -- those
        kept where this token may read: an attachment moved out of hiding does not show
        what it was, or where, while it was hidden (as the change log blanks ``oldPath``;
        issue 33, finding 8)."""
        found = {v.id: v for v in self.versions.at_path(path)}
        seen = AttachmentFiles(self.store).get(path)
        if seen is not None:
            found.update({v.id: v for v in self.versions.for_attachment(seen.att_id)})
        readable = [v for v in found.values() if self.scopes.allows(READ, v.path)]
        return sorted(readable, key=lambda v: (v.created_at, v.id), reverse=True)

    def _seen_here(self, path: str) -> SeenFile | None:
        """What the folder side last saw at ``path`` (None: nothing, or its deletion waits)."""
        seen = AttachmentFiles(self.store).get(path)
        if seen is not None and self.replica is not None and path in self.replica.deleted_waiting(self.vault):
            return None
        return seen

    def list_versions(self, path: str) -> dict[str, Any]:
        self.scopes.check(READ, path)
        listed = self._of_path(path)
        here = self._seen_here(path) is not None
        if not listed and not here:
            raise NotFound(f"no attachment at {path}, now or before", path=path)
        return {"path": path, "deleted": not here, "versions": [version_json(v) for v in listed]}

    def version(self, path: str, raw_id: Any) -> AttachmentVersion:
        self.scopes.check(READ, path)
        vid = parse_version_id(raw_id)
        for v in self._of_path(path):
            if v.id == vid:
                return v
        raise NotFound(f"{path} has no version {vid} (see stet versions {path})", path=path, version=vid)

    def blob_of(self, v: AttachmentVersion) -> BlobStore:
        if self.blobs is None or not self.blobs.has(v.sha256):
            raise NotFound(f"the bytes of version {v.id} are no longer in this home", version=v.id)
        return self.blobs

    async def restore(self, path: str, raw_id: Any) -> dict[str, Any]:
        self.scopes.check(WRITE, path)
        v = self.version(path, raw_id)
        self.blob_of(v)
        if self.replica is None:
            raise StetError("attachments are not synced for this vault", code="not_found")
        seen = self._seen_here(path)
        if seen is not None and seen.sha256 == v.sha256 and seen.executable == v.executable:
            return {"path": path, "versionId": v.id, "sha256": v.sha256, "changed": False}
        await self.replica.write_back(self.vault, path, v.sha256, v.executable)
        return {"path": path, "versionId": v.id, "sha256": v.sha256, "size": v.size, "changed": True}


def attachment_conflicts(store: VaultStore, winners: _Winners | None, *, since: float | None,
                         limit: int) -> list[dict[str, Any]]:
    """The concurrent losers kept as versions, newest first, in the conflicts list's shape."""
    rows = store.db.execute(
        "SELECT id FROM attachment_versions WHERE kind = ? AND created_at >= ? "
        "ORDER BY created_at DESC, id DESC LIMIT ?", (CONCURRENT, since or 0.0, limit)).fetchall()
    versions = AttachmentVersionStore(store, 0)
    out = []
    for (vid,) in rows:
        v = versions.get(int(vid))
        if v is None:
            continue
        win = winners.current(v.attachment_id) if winners is not None else None
        winner = None
        if win is not None and not getattr(win, "deleted", False):
            winner = {"device": win.device, "sha256": win.sha256, "size": win.size, "path": win.path}
        out.append({
            "id": f"v{v.id}", "target": "attachment", "at": v.created_at, "token": v.source,
            "path": v.path, "operation": "concurrent-change", "code": CONCURRENT,
            "attempted": {"sha256": v.sha256, "size": v.size, "executable": v.executable},
            "versionId": v.id, "attachmentId": v.attachment_id, "winner": winner,
            "currentRevision": None, "baseRevision": None, "promoted": None, "keptAt": iso(v.created_at),
        })
    return out


def conflicts_of(runtime: AttachmentsOfVault, since: float | None, limit: int) -> list[dict[str, Any]]:
    """A vault's attachment conflicts (the winner from the folder side's index, if any)."""
    replica = runtime.attachments
    winners: _Winners | None = replica.index if replica is not None else None
    return attachment_conflicts(runtime.store, winners, since=since, limit=limit)
