"""Two real daemons: attachment entries reach the peer through the vault index's sync
(SPEC §3.14). A file whose bytes the peer's own blob store holds is written from there; one
whose bytes it lacks is fetched from A first; the daemon's own writes do not come back as
changes."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import attachments, slots, wait_recorded
from tests.integration.peer_support import device_id, invite, join, start_daemon, wait_linked

PNG = b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)) * 4


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_entries_reach_the_peer_and_own_writes_are_not_echoed(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    (va / "img").mkdir(parents=True)
    (va / "img" / "cat.png").write_bytes(PNG)
    (va / "only-on-a.bin").write_bytes(b"\x00bytes B never gets\x00")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    cat = wait_recorded(a.home, "img/cat.png", sha(PNG))
    wait_recorded(a.home, "only-on-a.bin")
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)

    # A's entries reach B's index as they are.
    assert wait_recorded(b.home, "img/cat.png", sha(PNG)) == cat
    wait_recorded(b.home, "only-on-a.bin")

    # B gets the same bytes at another path: now its blob store holds them, and it
    # writes A's cat.png from there; A writes B's copy.png from its own store.
    (vb / "copy.png").write_bytes(PNG)
    copy = wait_recorded(b.home, "copy.png", sha(PNG))
    wait_recorded(a.home, "copy.png", sha(PNG))
    wait_until(lambda: (vb / "img" / "cat.png").exists() and (va / "copy.png").exists(), timeout=30,
               what="each side's file written from its own blob store")
    assert (vb / "img" / "cat.png").read_bytes() == PNG
    assert (va / "copy.png").read_bytes() == PNG
    # Bytes only A holds are fetched over the link (daemon/peers/blobs/transfer.py), then written.
    wait_until(lambda: attachments(vb).get("only-on-a.bin") == (b"\x00bytes B never gets\x00", False),
               timeout=30, what="only-on-a.bin fetched from A")

    # Sentinels: recorded by passes after the ones that wrote the files and saw their events.
    (va / "sentinel-a.bin").write_bytes(b"a")
    (vb / "sentinel-b.bin").write_bytes(b"b")
    wait_recorded(a.home, "sentinel-b.bin")
    wait_recorded(b.home, "sentinel-a.bin")
    for home in (a.home, b.home):
        held = slots(home)
        assert [e.device for e in held if e.id == cat.id] == [device_id(a)]
        assert [e.device for e in held if e.id == copy.id] == [device_id(b)]
