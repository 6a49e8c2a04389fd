"""A person renames a file here while the index has already moved its attachment elsewhere
(a peer's rename, not yet carried out in this folder): that is a move of the attachment,
not a new file (issue 14, found by the mixed R1 long run, seed 8, once a rename and a
concurrent change compose: the same bytes ended at two paths, a copy). Before, the file
that vanished counted as the source of a move only while the index still showed its
attachment at that path; so the renamed file was taken in as a new attachment with the
same bytes, and the peer's move put the attachment at a second path.

On the in-memory machines of ``test_attachment_plan.py`` (the planner, the replicated
index and the winner rule), and the planner alone."""

from __future__ import annotations

from stet.sync.attachment_entry import AttachmentEntry
from stet.sync.attachment_plan import OnDisk, RecordChange, RecordMove, SeenFile, plan_intake
from stet.sync.hlc import Hlc
from tests.unit.test_attachment_plan import DEVICES, Machine, converged, settle, sha


def test_a_rename_here_after_a_peer_moved_the_file_is_a_move() -> None:
    a, b = Machine(DEVICES[0]), Machine(DEVICES[1])
    a.write("img/cat.png", b"cat")
    settle([a, b])
    a.rename("img/cat.png", "pets/cat.png")  # A's rename reaches B's index...
    a.step([a])
    b.receive(a)
    b.rename("img/cat.png", "old/cat.png")  # ...before B's folder moved it: a person renames it there
    settle([a, b])
    converged([a, b])
    assert list(b.folder()) == ["old/cat.png"]  # one file, where the later rename put it
    assert len(b.index.live()) == 1


def test_the_vanished_file_of_an_attachment_moved_away_is_a_moves_source() -> None:
    a, b = Machine(DEVICES[0]), Machine(DEVICES[1])
    a.write("img/cat.png", b"cat")
    settle([a, b])
    a.rename("img/cat.png", "pets/cat.png")
    a.step([a])
    b.receive(a)
    entry = b.index.live()["pets/cat.png"]
    seen = b.seen["img/cat.png"]
    disk = {"old/cat.png": OnDisk(3, 99, seen.ino, False)}
    actions = plan_intake(disk, {"old/cat.png": sha(b"cat")}, {"img/cat.png": seen}, b.index.live())
    assert actions == [RecordMove(entry, "img/cat.png", "old/cat.png", False)]


def test_a_new_file_beside_an_attachment_still_in_place_is_new() -> None:
    """The move source must be gone: an attachment whose file is still seen elsewhere here is
    not moved by a new file with its bytes (that is a copy the person made)."""
    hlc = Hlc(1_800_000_000_000).pack()
    entry = AttachmentEntry("b" * 32, "pets/cat.png", sha(b"cat"), 3, False, hlc, DEVICES[0])
    seen_q = SeenFile(entry.id, sha(b"cat"), 3, 1, 5, False, hlc)
    seen_p = SeenFile(entry.id, sha(b"cat"), 3, 1, 6, False, hlc)
    disk = {"pets/cat.png": OnDisk(3, 1, 5, False), "copy.png": OnDisk(3, 2, 7, False)}
    actions = plan_intake(disk, {"copy.png": sha(b"cat")}, {"pets/cat.png": seen_q, "img/cat.png": seen_p},
                          {"pets/cat.png": entry})
    assert [type(x) for x in actions] == [RecordChange]
    assert actions[0].att_id is None  # type: ignore[union-attr]
