"""A member of one vault gets no blob of another by its hash (SPEC §3.14, §4 scopes).

A holds two vaults; B is a member of one. Speaking for B (its certificate, B stopped) with
a hand-made client, every REQUEST for the other vault's blob -- naming the vault B shares,
or the vault B is not in -- is answered MISSING and not one byte of it crosses; the
control: a blob of the shared vault comes back in CHUNKs, byte for byte.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from stet.daemon.identity.device_identity import load_or_create_identity
from stet.sync import attachment_protocol as ap
from stet.sync.home import HomeLayout
from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import blob_path
from tests.integration.peer_support import invite, join, peer_port, start_daemon, wait_linked
from tests.integration.peer_wire import OP_BINARY, WireClient, open_member_session, peer_cert_of

SHARED = b"\x89PNG shared picture\x00" * 100
SECRET = b"%PDF-1.7 the private contract k7f2-q9\x00" * 100


def blob_frames(client: WireClient, count: int) -> list[ap.BlobFrame]:
    """The next ``count`` attachment frames (note frames skipped), bounded by a deadline."""
    out: list[ap.BlobFrame] = []
    for _ in range(1000):  # bounded
        msg = client.recv(timeout=10)
        assert msg is not None, f"the daemon sent no more ({client.ended})"
        assert msg.opcode == OP_BINARY, f"the daemon closed the link ({msg.close_code})"
        if ap.is_attachment_frame(msg.data):
            frame = ap.decode(msg.data)
            assert isinstance(frame, ap.BlobFrame)
            out.append(frame)
            if len(out) == count:
                return out
    raise AssertionError("too many frames")


def test_a_blob_of_another_vault_is_never_sent(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    shared, private = tmp_path / "shared", tmp_path / "private"
    shared.mkdir()
    private.mkdir()
    (shared / "pic.png").write_bytes(SHARED)
    (private / "contract.pdf").write_bytes(SECRET)
    run_stet(tmp_path / "ha", "init", str(shared), "--name", "shared")
    run_stet(tmp_path / "ha", "init", str(private), "--name", "private")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a, "shared"), tmp_path / "b")
    wait_linked(a, b)
    shared_sha, secret_sha = hashlib.sha256(SHARED).hexdigest(), hashlib.sha256(SECRET).hexdigest()
    wait_until(lambda: (tmp_path / "b" / "pic.png").exists(), timeout=60, what="B to get the shared picture")
    wait_until(lambda: blob_path(a.home, secret_sha).exists(), timeout=60, what="A to hold the private blob")
    ids = {v["name"]: v["id"] for v in a.client.status()["vaults"]}
    assert b.stop() == 0

    member = load_or_create_identity(HomeLayout(b.home))
    with open_member_session(peer_port(a), member, peer_cert_of(a.home), ids["shared"]) as client:
        client.send_binary(ap.encode_request(ids["shared"], secret_sha, 0, len(SECRET)))
        client.send_binary(ap.encode_request(ids["private"], secret_sha, 0, len(SECRET)))
        refused = blob_frames(client, 2)
        assert [f.type for f in refused] == [ap.MISSING, ap.MISSING]
        assert all(f.sha256 == secret_sha for f in refused)

        # The control: the same client gets a blob of the vault it shares.
        client.send_binary(ap.encode_request(ids["shared"], shared_sha, 0, len(SHARED)))
        (chunk,) = blob_frames(client, 1)
        assert chunk.type == ap.CHUNK
        assert chunk.data == SHARED
    assert b"k7f2-q9" not in bytes(client.received)
