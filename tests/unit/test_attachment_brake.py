"""The burst brake counts attachment deletions and overwrites made on disk like notes'
(SPEC §3.14, §5.6): held, listed, released to the folder side, reverted byte-identical --
driven in-process on a real store, real blob store and real files, with the folder side
played by ``FakeReplica`` (the real planner, the real gate)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stet.daemon.attachments.brake import AttachmentBrake
from stet.daemon.safety.brake import held_json
from stet.sync.attachment_plan import IntakeAction, RecordChange, RecordDelete
from stet.sync.attachment_versions import AttachmentVersionStore
from stet.sync.blob_store import BlobStore
from stet.sync.brake import BrakePolicy
from stet.sync.held_attachments import action_from_json, action_to_json
from tests.unit.attachment_fakes import FakeReplica
from tests.unit.test_versions_keeper import Rig, _disk_rewrite, make_rig


@dataclass
class AttRig:
    rig: Rig
    gate: AttachmentBrake
    replica: FakeReplica
    versions: AttachmentVersionStore
    admitted: list[IntakeAction] = field(default_factory=list)  # what the last `_rm` let through

    @property
    def root(self) -> Path:
        return self.rig.root

    def held(self, *, every: bool = False) -> list[dict[str, object]]:
        return [held_json(h, self.rig.brake.policy) for h in self.rig.brake.changes(include_resolved=every)]


def make(tmp: Path, policy: BrakePolicy | None = None) -> AttRig:
    rig = make_rig(tmp, brake=policy)
    versions = AttachmentVersionStore(rig.store, 1 << 30)
    gate = AttachmentBrake(rig.brake, versions, rig.root)
    replica = FakeReplica("v", rig.root, rig.store, BlobStore(tmp / "blobs"), gate)
    gate.attach(replica)
    return AttRig(rig, gate, replica, versions)


def _files(n: int) -> dict[str, bytes]:
    """Binary files with NULs, one executable script among them."""
    out = {f"img/p{i:02d}.png": b"\x89PNG\r\n\x1a\n\x00\x00" + bytes([i]) * (100 + i) + b"\x00end"
           for i in range(n)}
    out["bin/run.sh"] = b"#!/bin/sh\necho hi\n"
    return out


def _write(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.chmod(p, 0o755 if path.endswith(".sh") else 0o644)


@pytest.fixture
def a(tmp_path: Path) -> AttRig:
    return make(tmp_path)


def _recorded(a: AttRig, files: dict[str, bytes]) -> dict[str, bytes]:
    """Write the files and let the folder side record them."""
    _write(a.root, files)
    a.replica.scan()
    return files


def _rm(a: AttRig, files: dict[str, bytes]) -> dict[str, bytes]:
    """`rm` them all and scan: ``files``, and ``a.admitted`` what the gate let through."""
    for path in files:
        (a.root / path).unlink()
    a.admitted = a.replica.scan()
    return files


@pytest.fixture
def held_rm(a: AttRig) -> dict[str, bytes]:
    """12 attachments recorded, then removed at once: the brake holds the deletions."""
    return _rm(a, _recorded(a, _files(11)))


def test_rm_of_12_attachments_is_held_and_revert_brings_them_back_byte_identical(a: AttRig) -> None:
    files = _files(11)
    _write(a.root, files)
    assert len(a.replica.scan()) == 12  # recorded
    for path in files:
        (a.root / path).unlink()
    admitted = a.replica.scan()
    assert admitted == []  # nothing recorded: peers never hear of it
    held = a.held()
    assert len(held) == 12
    assert {h["target"] for h in held} == {"attachment"}
    assert {h["kind"] for h in held} == {"deleted"}
    assert {h["path"] for h in held} == set(files)
    assert a.rig.brake.is_engaged("disk")
    assert sorted(a.replica.live) == sorted(files)  # the index still has them
    # Every held change's bytes are a pinned version.
    pinned = [v for v in a.versions.all() if v.pinned]
    assert len(pinned) == 12
    # Planned again by the next scan: still held, not held twice.
    assert a.replica.scan() == []
    assert len(a.held()) == 12

    reverted, skipped = asyncio.run(a.gate.revert(None))
    assert skipped == []
    assert len(reverted) == 12
    assert all("error" not in r for r in reverted)
    for path, data in files.items():
        assert (a.root / path).read_bytes() == data
    assert os.stat(a.root / "bin/run.sh").st_mode & 0o111
    assert not os.stat(a.root / "img/p00.png").st_mode & 0o111
    assert a.held() == []
    assert not a.rig.brake.is_engaged("disk")
    assert not any(v.pinned for v in a.versions.all())
    assert {h["state"] for h in a.held(every=True)} == {"reverted"}


@pytest.mark.usefixtures("held_rm")
def test_release_hands_the_held_changes_to_the_folder_side(a: AttRig) -> None:
    ids = [int(str(h["id"])) for h in a.held()]

    async def release() -> None:
        a.rig.brake.release(None)
        await a.gate.settled()

    asyncio.run(release())
    assert a.replica.live == {}  # recorded now: the deletions go to peers
    assert {type(x) for x in a.replica.recorded[-12:]} == {RecordDelete}
    assert a.held() == []
    assert {h["state"] for h in a.held(every=True)} == {"released"}
    assert not a.rig.brake.is_engaged("disk")
    assert not any(v.pinned for v in a.versions.all())
    assert len(ids) == 12


def test_nine_deletions_pass_and_git_bursts_pass(a: AttRig) -> None:
    _rm(a, _recorded(a, {f"f{i}.bin": bytes([i]) * 10 for i in range(9)}))
    assert len(a.admitted) == 9
    assert a.held() == []
    more = _recorded(a, {f"g{i}.bin": bytes([i]) * 10 for i in range(20)})
    for path in more:
        (a.root / path).unlink()
    assert len(a.replica.scan("git")) == 20  # git's own burst: versions elsewhere, nothing held
    assert a.held() == []


def test_empty_files_destroy_nothing(a: AttRig) -> None:
    _rm(a, _recorded(a, {f"e{i}.bin": b"" for i in range(12)}))
    assert len(a.admitted) == 12
    assert a.held() == []


def test_notes_and_attachments_share_the_window(a: AttRig) -> None:
    texts = {f"n{i}.md": f"# note {i}\n" + "worth keeping\n" * 5 for i in range(5)}
    for path, text in texts.items():
        _disk_rewrite(a.rig, path, text)
    files = _rm(a, _recorded(a, {f"f{i}.bin": bytes([i + 1]) * 50 for i in range(5)}))
    assert len(a.admitted) == 5  # 5 attachments first: recorded (the window holds them)
    assert a.held() == []
    for path in texts:  # then 5 notes: the tenth change trips the brake
        (a.root / path).unlink()
        a.rig.bridge.ingest_path(path)
    held = a.held()
    assert sorted(str(h["target"]) for h in held) == ["attachment"] * 5 + ["note"] * 5
    # Revert both: the notes by the brake, the attachments' bytes by the gate.
    reverted, _ = asyncio.run(a.gate.revert(None))
    assert len(reverted) == 5
    a.rig.brake.revert(None)
    a.rig.bridge.flush_writes()
    for path, data in files.items():
        assert (a.root / path).read_bytes() == data
    for path, text in texts.items():
        assert (a.root / path).read_text() == text
    assert a.held() == []
    assert not a.rig.brake.is_engaged("disk")


def test_overwrites_are_held_and_a_file_written_again_leaves_held(a: AttRig) -> None:
    files = _recorded(a, {f"doc{i}.pdf": b"%PDF-1.7\x00" + bytes([i]) * 300 for i in range(11)})
    for path in files:
        (a.root / path).write_bytes(b"encrypted\x00" + path.encode())
    assert a.replica.scan() == []
    held = a.held()
    assert len(held) == 11
    assert {h["kind"] for h in held} == {"overwritten"}
    # A person writes doc3 again: it leaves held by itself (recorded, not held: the
    # brake holds destruction of what was recorded, and doc3's recorded bytes are the old).
    (a.root / "doc3.pdf").write_bytes(b"written again by a person")
    a.replica.scan()
    assert "doc3.pdf" not in {h["path"] for h in a.held()}
    (back,) = [h for h in a.held(every=True) if h["path"] == "doc3.pdf"]
    assert back["state"] == "came-back"
    # doc4 is written again after the scan: revert skips it and says so.
    (a.root / "doc4.pdf").write_bytes(b"another edit")
    reverted, skipped = asyncio.run(a.gate.revert(None))
    assert [s["path"] for s in skipped] == ["doc4.pdf"]
    assert "written again" in str(skipped[0]["reason"])
    assert len(reverted) == 9
    assert (a.root / "doc4.pdf").read_bytes() == b"another edit"
    assert (a.root / "doc3.pdf").read_bytes() == b"written again by a person"
    for i in (0, 1, 2, 5, 10):
        assert (a.root / f"doc{i}.pdf").read_bytes() == files[f"doc{i}.pdf"]


def test_a_held_deletion_whose_file_reappears_leaves_held(a: AttRig, held_rm: dict[str, bytes]) -> None:
    files = held_rm
    _write(a.root, {"img/p01.png": files["img/p01.png"]})  # cp back from a backup
    a.replica.scan()
    assert "img/p01.png" not in {h["path"] for h in a.held()}
    _write(a.root, {"img/p02.png": b"other bytes"})  # recreated after the scan
    reverted, skipped = asyncio.run(a.gate.revert(None))
    assert [s["path"] for s in skipped] == ["img/p02.png"]
    assert (a.root / "img/p02.png").read_bytes() == b"other bytes"
    assert len(reverted) == 10


def test_revert_by_id_and_unknown_ids(a: AttRig, held_rm: dict[str, bytes]) -> None:
    files = held_rm
    first = a.held()[0]
    reverted, _ = asyncio.run(a.gate.revert([int(str(first["id"]))]))
    assert [r["path"] for r in reverted] == [first["path"]]
    assert (a.root / str(first["path"])).read_bytes() == files[str(first["path"])]
    assert len(a.held()) == 11
    assert a.rig.brake.is_engaged("disk")  # the others are still held


def test_actions_round_trip_through_json(a: AttRig) -> None:
    files = {"x.bin": b"\x00\x01", "y.bin": b"y"}
    _write(a.root, files)
    for action in a.replica.scan():
        assert action_from_json(action_to_json(action)) == action
    (a.root / "x.bin").rename(a.root / "z.bin")
    (a.root / "y.bin").unlink()
    actions = a.replica.scan()
    assert len(actions) == 2
    for action in actions:
        assert action_from_json(action_to_json(action)) == action
    with pytest.raises(ValueError, match="not a held"):
        action_from_json({"type": "nonsense"})
    assert isinstance(action_from_json(action_to_json(RecordChange("p", "0" * 64, 1, False, None, "0" * 16))),
                      RecordChange)


@pytest.mark.usefixtures("held_rm")
def test_held_changes_are_released_to_the_folder_side_after_the_hold_time(a: AttRig) -> None:
    assert len(a.held()) == 12

    async def later() -> int:
        now = a.rig.clock.advance(a.rig.brake.policy.hold_s + 1)
        released = a.rig.brake.tick(now)
        await a.gate.settled()
        return released

    assert asyncio.run(later()) == 12
    assert a.replica.live == {}
    assert {h["state"] for h in a.held(every=True)} == {"released"}
    assert {h["resolvedBy"] for h in a.held(every=True)} == {"timeout"}


def test_on_timeout_hold_keeps_them(tmp_path: Path) -> None:
    a = make(tmp_path, BrakePolicy(on_timeout="hold"))
    files = _rm(a, _recorded(a, _files(11)))
    assert a.rig.brake.tick(a.rig.clock.advance(10 * a.rig.brake.policy.hold_s)) == 0
    assert len(a.held()) == 12
    assert set(files) <= set(a.replica.live)
