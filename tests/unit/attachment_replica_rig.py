"""A real folder side (``AttachmentReplica``) for unit tests: a folder, a store and a blob
store under ``tmp_path``, no peers, a gate that admits everything; passes are driven with
``sync_now`` (no watcher). Its files are written before each pass that reads them, so a
file a walk finds is read at once (``quiet_s=0``; a daemon waits until a file no event
vouches for has gone unmodified a while: ``FolderEvents.unsettled``)."""

from __future__ import annotations

from pathlib import Path

from stet.daemon.attachments.replica import AttachmentReplica
from stet.daemon.attachments.seams import NoPeersFetcher, PassGate
from stet.daemon.notes.service import NotesService
from stet.sync.blob_store import BlobStore
from stet.sync.ignore_rules import IgnoreRules
from stet.sync.store import VaultStore


def make_replica(tmp_path: Path, max_bytes: int = 1 << 20, *,
                 quiet_s: float = 0.0) -> tuple[AttachmentReplica, Path]:
    """The replica of device ``DEVICE-A`` for vault ``v1``, and its folder."""
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    service = NotesService("v1", VaultStore(tmp_path / "vault.db"), device_id="DEVICE-A")
    rules = IgnoreRules.load(root)
    r = AttachmentReplica("v1", root, service, BlobStore(tmp_path / "blobs"), fetcher=NoPeersFetcher(),
                          gate=PassGate(), max_bytes=max_bytes, keep_bytes=1 << 20, extensions=(".md",),
                          rules=lambda: rules, device_id="DEVICE-A", quiet_s=quiet_s)
    return r, root
