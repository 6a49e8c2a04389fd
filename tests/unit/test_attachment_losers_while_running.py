"""A concurrent loser that arrives while the daemon runs is fetched and kept (found by the
mixed R1 run, issue 18 item 4, seeds 1804 and 1805).

B holds an image; C and A change it at once (both on B's bytes), A later by the clock. B
hears of C's change first and starts fetching it, then of A's, which wins: C's bytes must
still be fetched and kept as a ``concurrent`` version (SPEC §3.14). Before, the replica
watched the index's attachment map through a pycrdt wrapper it did not keep: the
subscription went with the wrapper, no change of the map was ever noted, and losers were
looked for only after a restart -- C's bytes were dropped from the wanted list and never
kept on B.

In process, on a real folder, store and blob store, with a fetcher that records what is
wanted; the peers' changes are put into the index as their index updates would be."""

from __future__ import annotations

import hashlib
from pathlib import Path

from stet.daemon.attachments.replica import AttachmentReplica
from stet.daemon.attachments.seams import PassGate
from stet.daemon.notes.service import NotesService
from stet.sync.attachment_entry import AttachmentEntry
from stet.sync.blob_store import BlobStore
from stet.sync.hlc import Hlc
from stet.sync.ignore_rules import IgnoreRules
from stet.sync.store import VaultStore

MINE = b"\x89PNG\x00 B's bytes \x00" * 20
FROM_C = b"\x89PNG\x00 C's change \x00\x01" * 20
FROM_A = b"\x89PNG\x00 A's change \x00\x02" * 20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class RecordingFetcher:
    def __init__(self) -> None:
        self.wanted: set[str] = set()

    def want(self, vault: str, sha256: str, size: int) -> None:
        self.wanted.add(sha256)

    def unwant(self, vault: str, sha256: str) -> None:
        self.wanted.discard(sha256)

    def progress(self) -> dict[str, int]:
        return {}


async def test_a_concurrent_loser_heard_of_while_running_is_fetched_and_kept(tmp_path: Path) -> None:
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    store = VaultStore(tmp_path / "vault.db")
    service = NotesService("v1", store, device_id="DEVICE-B")
    rules = IgnoreRules.load(root)
    fetcher = RecordingFetcher()
    r = AttachmentReplica("v1", root, service, BlobStore(tmp_path / "blobs"), fetcher=fetcher,
                          gate=PassGate(), max_bytes=1 << 20, keep_bytes=1 << 20, extensions=(".md",),
                          rules=lambda: rules, device_id="DEVICE-B", quiet_s=0.0)
    (root / "a.png").write_bytes(MINE)
    await r.sync_now()
    mine = r.index.live()["a.png"]
    h = Hlc.unpack(mine.hlc)

    c_hlc = h.next().next().pack()
    r.index.put(AttachmentEntry(mine.id, "a.png", sha(FROM_C), len(FROM_C), False, c_hlc, "DEVICE-C", False,
                                mine.hlc))
    await r.sync_now()
    assert fetcher.wanted == {sha(FROM_C)}  # the winner for now: to be written here

    r.blobs.put_bytes(FROM_A)  # A's change arrives with its bytes, later by the clock: it wins
    a_hlc = Hlc.unpack(c_hlc).next().pack()
    r.index.put(AttachmentEntry(mine.id, "a.png", sha(FROM_A), len(FROM_A), False, a_hlc, "DEVICE-A", False,
                                mine.hlc))
    await r.sync_now()
    assert (root / "a.png").read_bytes() == FROM_A
    assert fetcher.wanted == {sha(FROM_C)}, "the loser's bytes are still wanted, to be kept"

    r.blobs.put_bytes(FROM_C)  # they arrive
    r.blob_arrived(sha(FROM_C))
    await r.sync_now()
    kept = {(v.kind, v.sha256) for v in r.versions.all()}
    assert ("concurrent", sha(FROM_C)) in kept
    assert ("before-overwrite", sha(MINE)) in kept
    assert fetcher.wanted == set()
    await r.stop()
