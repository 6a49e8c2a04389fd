"""The folder side's API to the brake and status (``AttachmentReplicaApi``), in process on a
real folder, store and blob store: a gate that holds deletions keeps them out of the index
(and the file is not written back meanwhile) until ``record_held`` releases them;
``write_back`` puts a blob back (revert) and records it as a change; ``counts`` reports
attachments, bytes and the files skipped over ``max_bytes``. Passes are driven with
``sync_now`` (no watcher here)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from stet.daemon.attachments.replica import AttachmentReplica
from stet.daemon.attachments.seams import NoPeersFetcher, PassGate
from stet.daemon.folder.watcher import FsEvent
from stet.daemon.notes.service import NotesService
from stet.sync.attachment_plan import IntakeAction, RecordDelete
from stet.sync.blob_store import BlobStore
from stet.sync.ignore_rules import IgnoreRules
from stet.sync.store import VaultStore


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class HoldDeletes:
    def __init__(self) -> None:
        self.held: list[IntakeAction] = []

    def admit(self, vault: str, actions: Sequence[IntakeAction], source: str) -> list[IntakeAction]:
        out = []
        for a in actions:
            if isinstance(a, RecordDelete):
                self.held.append(a)
            else:
                out.append(a)
        return out


def replica(tmp_path: Path, gate: object, max_bytes: int = 1000) -> tuple[AttachmentReplica, Path]:
    root = (tmp_path / "vault").resolve()
    root.mkdir(exist_ok=True)
    store = VaultStore(tmp_path / "vault.db")
    service = NotesService("v1", store, device_id="DEVICE-A")
    rules = IgnoreRules.load(root)
    r = AttachmentReplica("v1", root, service, BlobStore(tmp_path / "blobs"), fetcher=NoPeersFetcher(),
                          gate=gate, max_bytes=max_bytes, keep_bytes=1 << 20,  # type: ignore[arg-type]
                          extensions=(".md",), rules=lambda: rules, device_id="DEVICE-A", quiet_s=0.0)
    return r, root


async def test_a_held_deletion_stays_out_of_the_index_until_released(tmp_path: Path) -> None:
    gate = HoldDeletes()
    r, root = replica(tmp_path, gate)
    for i in range(3):
        (root / f"pic{i}.png").write_bytes(b"\x00png %d" % i)
    await r.sync_now()
    assert sorted(r.index.live()) == ["pic0.png", "pic1.png", "pic2.png"]
    for i in range(3):
        os.unlink(root / f"pic{i}.png")
    await r.sync_now()
    assert len(gate.held) == 3
    assert sorted(r.index.live()) == ["pic0.png", "pic1.png", "pic2.png"]  # held: not recorded
    await r.sync_now()
    assert len(gate.held) == 3  # not handed to the gate twice
    assert not (root / "pic0.png").exists()  # and not written back while held

    # Revert one: its bytes come back from the blob store; the held deletion is moot.
    kept = gate.held[0]
    assert isinstance(kept, RecordDelete)
    await r.write_back("v1", kept.path, kept.seen.sha256, kept.seen.executable)
    assert (root / kept.path).read_bytes() == b"\x00png 0"
    # Release the other two: recorded now.
    await r.record_held("v1", gate.held[1:])
    assert sorted(r.index.live()) == ["pic0.png"]
    assert sorted(v.kind for v in r.versions.all()) == ["before-deletion", "before-deletion"]
    await r.stop()


async def test_counts_and_a_file_over_max_bytes(tmp_path: Path) -> None:
    r, root = replica(tmp_path, HoldDeletes(), max_bytes=100)
    (root / "small.bin").write_bytes(b"x" * 40)
    (root / "also.bin").write_bytes(b"")
    (root / "big.iso").write_bytes(b"y" * 101)
    (root / "n.md").write_text("a note\n")
    await r.sync_now()
    assert r.counts("v1") == {"attachments": 2, "bytes": 40, "skipped": 1, "toPlace": 0,
                              "placedFiles": 2, "placedBytes": 40}  # both in place (the join bar)
    assert r.too_large() == {"big.iso": 101}
    assert not r.blobs.has(sha(b"y" * 101))
    await r.stop()


async def test_write_back_over_a_file_keeps_what_it_replaced(tmp_path: Path) -> None:
    r, root = replica(tmp_path, HoldDeletes())
    (root / "doc.pdf").write_bytes(b"%PDF one")
    await r.sync_now()
    (root / "doc.pdf").write_bytes(b"%PDF two")
    await r.sync_now()
    old = r.versions.all()[-1]
    assert (old.kind, old.sha256) == ("before-overwrite", sha(b"%PDF one"))
    await r.write_back("v1", "doc.pdf", old.sha256, False)  # restore the first
    assert (root / "doc.pdf").read_bytes() == b"%PDF one"
    assert r.index.live()["doc.pdf"].sha256 == sha(b"%PDF one")
    assert [v.sha256 for v in r.versions.all()][-1] == sha(b"%PDF two")
    await r.sync_now()  # our own write: nothing new
    assert r.index.live()["doc.pdf"].sha256 == sha(b"%PDF one")
    assert len(r.index.slots()) == 1
    await r.stop()


async def test_a_file_grown_over_max_bytes_is_left_alone_not_deleted(tmp_path: Path) -> None:
    r, root = replica(tmp_path, PassGate(), max_bytes=100)
    (root / "log.bin").write_bytes(b"z" * 50)
    await r.sync_now()
    before = r.index.live()["log.bin"]
    (root / "log.bin").write_bytes(b"z" * 500)
    await r.sync_now()
    assert r.index.live()["log.bin"] == before  # not recorded as deleted, nor as changed
    assert (root / "log.bin").read_bytes() == b"z" * 500  # and not written over
    assert r.counts("v1")["skipped"] == 1
    (root / "log.bin").write_bytes(b"z" * 60)  # back under the limit: a change again
    await r.sync_now()
    assert r.index.live()["log.bin"].size == 60
    await r.stop()


async def test_the_sweep_removes_only_blobs_no_vault_refers_to(tmp_path: Path) -> None:
    from stet.daemon.attachments.home_parts import Attachments
    from stet.sync.config import Config

    home = tmp_path / "home"
    att = Attachments(home, Config(), sweep_age_s=0.0)
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    service = NotesService("v1", VaultStore(tmp_path / "vault.db"), device_id="DEVICE-A")
    rules = IgnoreRules.load(root)
    r = att.open_vault("v1", root, service, lambda: rules)
    (root / "kept.png").write_bytes(b"\x00kept")
    (root / "gone.png").write_bytes(b"\x00gone")
    for name in ("kept.png", "gone.png"):  # as the folder watcher reports them (no watcher here)
        r.on_fs_event(FsEvent("closed", name))
    await r.sync_now()
    orphan = att.blobs.put_bytes(b"stored, never recorded").sha256  # e.g. changed while read
    os.unlink(root / "gone.png")
    await r.sync_now()  # its bytes are a before-deletion version now: still referenced
    assert sorted(await att.sweep()) == [orphan]
    assert att.blobs.has(sha(b"\x00kept"))
    assert att.blobs.has(sha(b"\x00gone"))
    assert not att.blobs.has(orphan)
    await att.close_vault("v1")
