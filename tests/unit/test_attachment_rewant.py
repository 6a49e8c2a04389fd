"""A blob the folder waits for is asked for again while passes keep coming (issue 14, a
winner's bytes that never reached one daemon). The folder side asks the fetcher again after
1 s, then less often: a member that lacked the blob when first asked may hold it since. Each
pass put that ask-again off anew, so while the folder or the index kept changing (a pass
every fraction of a second in the mixed R1 run) a blob once answered MISSING was never asked
for again. In process, on a real folder, store and blob store; the fetcher records the asks."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from stet.daemon.attachments import wants as attachment_wants
from stet.daemon.attachments.replica import AttachmentReplica
from stet.daemon.attachments.seams import NoPeersFetcher, PassGate
from stet.daemon.notes.service import NotesService
from stet.sync.attachment_entry import AttachmentEntry, attachment_id
from stet.sync.blob_store import BlobStore
from stet.sync.hlc import ZERO, Hlc
from stet.sync.ignore_rules import IgnoreRules
from stet.sync.store import VaultStore

THEIRS = b"\x89PNG\x00 a peer's file, not here yet \x00" * 30


class CountingFetcher(NoPeersFetcher):
    def __init__(self) -> None:
        super().__init__()
        self.asks: list[str] = []

    def want(self, vault: str, sha256: str, size: int) -> None:
        self.asks.append(sha256)
        super().want(vault, sha256, size)


async def test_a_blob_waited_for_is_asked_again_while_passes_keep_coming(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attachment_wants, "REWANT_S", (0.3, 1.0))
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    service = NotesService("v1", VaultStore(tmp_path / "vault.db"), device_id="DEVICE-A")
    rules = IgnoreRules.load(root)
    fetcher = CountingFetcher()
    r = AttachmentReplica("v1", root, service, BlobStore(tmp_path / "blobs"), fetcher=fetcher,
                          gate=PassGate(), max_bytes=1 << 20, keep_bytes=1 << 20, extensions=(".md",),
                          rules=lambda: rules, device_id="DEVICE-A", quiet_s=0.0)
    sha = hashlib.sha256(THEIRS).hexdigest()
    r.index.put(AttachmentEntry(attachment_id("img/a.png"), "img/a.png", sha, len(THEIRS), False,
                                Hlc(1_800_000_000_000).pack(), "DEVICE-B", False, ZERO.pack()))
    await r.sync_now()
    assert fetcher.asks == [sha]
    async with asyncio.timeout(30):
        for i in range(300):  # bounded: a pass every 0.1 s (a busy folder) until asked again
            (root / f"busy{i % 3}.bin").write_bytes(b"%d" % i)
            await r.sync_now()
            if len(fetcher.asks) >= 3:
                break
            await asyncio.sleep(0.1)
    assert fetcher.asks.count(sha) >= 3  # asked again, and again (backing off), while passes came
    await r.stop()
