"""A peer's index update wakes the attachment pass (a walk of the whole folder) only when it
changed the attachments' map: a peer's bulk of notes (P8: an index update per batch of its
new notes) woke one pass after another on the receiving peer (issue 11)."""

from __future__ import annotations

from pathlib import Path

from stet.daemon.notes.service import NotesService
from stet.sync.attachment_entry import AttachmentEntry
from stet.sync.attachment_index import AttachmentIndex
from stet.sync.store import VaultStore
from tests.unit.attachment_replica_rig import make_replica


async def test_a_peers_index_update_of_notes_only_wakes_no_pass(tmp_path: Path) -> None:
    r, _root = make_replica(tmp_path)
    await r.sync_now()
    peer = NotesService("v1", VaultStore(tmp_path / "peer.db"), device_id="DEVICE-B")
    with peer.write("disk"):
        for i in range(3):
            peer.write_text(f"n{i}.md", f"note {i}\n", "disk")
    r.loop.woken.clear()
    r.service.apply_remote_index(peer.index.full_update(), "DEVICE-B")
    assert not r.loop.woken.is_set()  # nothing for attachments in it: no pass

    AttachmentIndex(peer.index.doc).put(AttachmentEntry("att1", "img/a.png", "ab" * 32, 4, False,
                                                        "0000000000000001-0000", "DEVICE-B", False, None))
    r.service.apply_remote_index(peer.index.full_update(), "DEVICE-B")
    assert r.loop.woken.is_set()  # an attachment's entry came: a pass looks at it
    peer.store.close()
    await r.stop()
