"""A deletion is final (issue 37, item 3: files git deleted came back on A within seconds,
31 twins of one png among them). Twins -- files with the same bytes at several paths -- let a
path hold the bytes the index shows there while its seen state names *another* attachment:
a peer moved this path's attachment away (to a path where a twin already lies here) and put
a new attachment with the same bytes at the path. The outflow had nothing to write (same
bytes) and left the seen state naming the old attachment; when git then deleted the file,
the intake found no deletion to record (the seen attachment lives elsewhere), the path was
not held, and the outflow wrote the index's attachment back: the deleted file came back.

In process, on a real folder, store and blob store (``attachment_replica_rig``); the peer's
changes go into the index as a peer's index update would."""

from __future__ import annotations

import hashlib
from pathlib import Path

from stet.sync.attachment_entry import AttachmentEntry, fresh_attachment_id, moved
from stet.sync.hlc import Hlc
from tests.unit.attachment_replica_rig import make_replica

TWIN = b"\x89PNG\r\n\x1a\n\x00 Mac-OS-DateTime" * 60


def later(hlc: str, steps: int = 1) -> str:
    h = Hlc.unpack(hlc)
    for _ in range(steps):
        h = h.next()
    return h.pack()


def files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


async def test_a_twin_deleted_after_a_peer_swapped_identities_stays_deleted(tmp_path: Path) -> None:
    r, root = make_replica(tmp_path)
    (root / "nl").mkdir()
    (root / "nl" / "Mac-OS-DateTime.png").write_bytes(TWIN)
    await r.sync_now()
    first = r.index.live()["nl/Mac-OS-DateTime.png"]

    # The peer moved it to de/ and made a new attachment (a copy: same bytes) at nl/; here
    # git's checkout already put the twin at de/.
    away = moved(first, "de/Mac-OS-DateTime.png", hlc=later(first.hlc), device="DEVICE-B")
    copy_hlc = later(first.hlc, 2)
    copy = AttachmentEntry(fresh_attachment_id("nl/Mac-OS-DateTime.png", copy_hlc, "DEVICE-B"),
                           "nl/Mac-OS-DateTime.png", hashlib.sha256(TWIN).hexdigest(), len(TWIN), False,
                           copy_hlc, "DEVICE-B")
    (root / "de").mkdir()
    (root / "de" / "Mac-OS-DateTime.png").write_bytes(TWIN)
    r.index.put(away)
    r.index.put(copy)
    await r.sync_now()
    await r.sync_now()
    assert files(root) == ["de/Mac-OS-DateTime.png", "nl/Mac-OS-DateTime.png"]
    seen = r.seen.get("nl/Mac-OS-DateTime.png")
    assert seen is not None
    assert seen.att_id == copy.id  # the file is the index's attachment at that path now

    # git deletes nl/'s file: a deletion of that attachment, never a file written back.
    (root / "nl" / "Mac-OS-DateTime.png").unlink()
    await r.sync_now()
    await r.sync_now()
    assert files(root) == ["de/Mac-OS-DateTime.png"]
    assert sorted(r.index.live()) == ["de/Mac-OS-DateTime.png"]
