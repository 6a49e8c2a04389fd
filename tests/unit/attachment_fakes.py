"""A small stand-in for the folder side (``AttachmentReplicaApi``) over a real folder, a
real store and a real blob store: it scans the folder's non-note files with the real
planner (``plan_intake``), asks the gate, and records what was admitted in a dict (the
index) and in ``attachment_files`` (the seen state). Enough to drive the brake's gate,
release, revert and restore without the real replica."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from stet.daemon.attachments.seams import AttachmentGate
from stet.sync.attachment_entry import AttachmentEntry, attachment_id
from stet.sync.attachment_files import AttachmentFiles
from stet.sync.attachment_plan import (
    IntakeAction,
    OnDisk,
    RecordChange,
    RecordDelete,
    RecordMove,
    SeenFile,
    Touch,
    needs_hash,
    plan_intake,
)
from stet.sync.blob_store import BlobStore
from stet.sync.store import VaultStore


def _on_disk(st: os.stat_result) -> OnDisk:
    return OnDisk(st.st_size, st.st_mtime_ns, st.st_ino, bool(st.st_mode & stat.S_IXUSR))


class FakeReplica:
    def __init__(self, vault: str, root: Path, store: VaultStore, blobs: BlobStore,
                 gate: AttachmentGate) -> None:
        self.vault = vault
        self.root = root
        self.files = AttachmentFiles(store)
        self.blobs = blobs
        self.gate = gate
        self.live: dict[str, AttachmentEntry] = {}
        self._n = 0
        self.recorded: list[IntakeAction] = []

    def _hlc(self) -> str:
        self._n += 1
        return f"{self._n:016x}"

    def disk(self) -> dict[str, OnDisk]:
        out = {}
        for dirpath, _dirs, names in os.walk(self.root):
            for name in names:
                p = Path(dirpath) / name
                rel = p.relative_to(self.root).as_posix()
                if rel.endswith(".md"):
                    continue
                out[rel] = _on_disk(p.lstat())
        return out

    def scan(self, source: str = "disk") -> list[IntakeAction]:
        disk = self.disk()
        seen = self.files.all()
        hashes = {p: self.blobs.put_file(self.root / p).sha256 for p in needs_hash(disk, seen)}
        actions = plan_intake(disk, hashes, seen, self.live)
        admitted = self.gate.admit(self.vault, actions, source)
        self._record(admitted)
        return admitted

    def _record(self, actions: Sequence[IntakeAction]) -> None:
        for a in actions:
            self.recorded.append(a)
            if isinstance(a, RecordChange):
                att = a.att_id or attachment_id(a.path)
                e = AttachmentEntry(att, a.path, a.sha256, a.size, a.executable, self._hlc(), "dev")
                self.live[a.path] = e
                self._see(a.path, e)
            elif isinstance(a, RecordDelete):
                self.live.pop(a.path, None)
                self.files.remove(a.path)
            elif isinstance(a, RecordMove):
                e = self.live.pop(a.old_path)
                moved = AttachmentEntry(e.id, a.new_path, e.sha256, e.size, a.executable, self._hlc(), "dev")
                self.live[a.new_path] = moved
                self.files.remove(a.old_path)
                self._see(a.new_path, moved)
            elif isinstance(a, Touch):
                s = self.files.get(a.path)
                assert s is not None
                self.files.put(a.path, SeenFile(s.att_id, s.sha256, a.disk.size, a.disk.mtime_ns, a.disk.ino,
                                                a.disk.executable, s.hlc))

    def _see(self, path: str, e: AttachmentEntry) -> None:
        d = _on_disk((self.root / path).lstat())
        self.files.put(path, SeenFile(e.id, e.sha256, d.size, d.mtime_ns, d.ino, d.executable, e.hlc))

    # -- AttachmentReplicaApi ------------------------------------------------------------

    async def record_held(self, vault: str, actions: Sequence[IntakeAction]) -> None:
        assert vault == self.vault
        self._record([a for a in actions
                      if not (isinstance(a, RecordDelete) and (self.root / a.path).exists())])

    async def write_back(self, vault: str, path: str, sha256: str, executable: bool) -> None:
        assert vault == self.vault
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".stet-{target.name}.tmp")
        tmp.write_bytes(b"".join(self.blobs.read_chunks(sha256)))  # small test files
        os.chmod(tmp, 0o755 if executable else 0o644)
        os.replace(tmp, target)
        prev = self.live.get(path)
        att = prev.id if prev is not None else attachment_id(path)
        e = AttachmentEntry(att, path, sha256, target.stat().st_size, executable, self._hlc(), "dev")
        self.live[path] = e
        self._see(path, e)

    def deleted_waiting(self, vault: str) -> set[str]:
        return set()  # deletions are recorded at once here

    def counts(self, vault: str) -> dict[str, int]:
        return {"attachments": len(self.live), "bytes": sum(e.size for e in self.live.values()), "skipped": 0}
