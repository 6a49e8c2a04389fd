"""Attachments changed while a daemon was offline (SPEC §3.14), through real daemons:
a rename keeps identity (one file at the new path, no copy, no version); modify beats
delete; two machines changing one attachment concurrently get the same winner on all
three, and the loser's bytes are kept as a ``concurrent`` version everywhere (the record
``stet conflicts`` lists) -- never a conflict-copy file.

Every folder starts with a copy of every byte string the test uses (``seeds/``), so each
home's blob store holds them and these tests need no blob transfer between daemons: they
test the folder side (intake, index, winner, outflow, versions) alone.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import (
    attachments,
    live,
    seen_rows,
    versions,
    wait_recorded,
    wait_same_attachments,
)
from tests.integration.peer_support import invite, join, start_daemon, wait_linked

V0 = b"\x00\x01 version zero \xff" * 50
X1 = b"\x89PNG A's edit \x00" * 40
X2 = b"\x89PNG B's edit \x00\x00" * 30


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seed(root: Path) -> None:
    (root / "seeds").mkdir(parents=True)
    for name, data in (("v0.bin", V0), ("x1.bin", X1), ("x2.bin", X2)):
        (root / "seeds" / name).write_bytes(data)
    (root / "img").mkdir()
    (root / "img" / "shared.png").write_bytes(V0)


def members(tmp_path: Path, factory: list[DaemonProcess], n: int) -> list[tuple[DaemonProcess, Path]]:
    """``n`` daemons sharing one vault, each folder holding the same files before joining."""
    roots = [tmp_path / f"v{i}" for i in range(n)]
    for r in roots:
        seed(r)
    run_stet(tmp_path / "h0", "init", str(roots[0]), "--name", "notes")
    first = start_daemon(tmp_path / "h0", factory)
    out = [(first, roots[0])]
    for i in range(1, n):
        d = start_daemon(tmp_path / f"h{i}", factory)
        join(d, invite(first), roots[i])
        wait_linked(first, d)
        out.append((d, roots[i]))
    for d, _ in out:
        wait_recorded(d.home, "img/shared.png", sha(V0))
        # Each daemon has looked at its folder (a file it never saw is a new one to it).
        wait_until(lambda h=d.home: len(seen_rows(h)) == 4, timeout=30, what="every file seen")
    return out


def test_rename_while_the_other_is_offline_is_one_file_at_the_new_path(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    (a, va), (b, vb) = members(tmp_path, daemon_factory, 2)
    before = live(a.home)["img/shared.png"]
    assert b.stop() == 0
    (va / "pics").mkdir()
    (va / "img" / "shared.png").rename(va / "pics" / "renamed.png")
    wait_recorded(a.home, "pics/renamed.png")
    b2 = start_daemon(b.home, daemon_factory)
    wait_linked(a, b2)
    final = wait_same_attachments(va, vb)
    assert final["pics/renamed.png"] == (V0, False)
    assert "img/shared.png" not in final
    assert live(b2.home)["pics/renamed.png"].id == before.id
    assert [v for v in versions(b2.home) if v["sha256"] == sha(V0)] == []  # a move, not delete + copy


def test_modify_beats_delete(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    (a, va), (b, vb) = members(tmp_path, daemon_factory, 2)
    assert b.stop() == 0
    (vb / "img" / "shared.png").unlink()  # deleted on B while offline: it had not seen A's edit
    (va / "img" / "shared.png").write_bytes(X1)
    wait_recorded(a.home, "img/shared.png", sha(X1))
    b2 = start_daemon(b.home, daemon_factory)
    wait_linked(a, b2)
    wait_until(lambda: attachments(vb).get("img/shared.png") == (X1, False), timeout=60,
               what="the modified file back on B")
    final = wait_same_attachments(va, vb)
    assert final["img/shared.png"] == (X1, False)
    for home in (a.home, b2.home):
        assert live(home)["img/shared.png"].sha256 == sha(X1)


def test_concurrent_modification_has_one_winner_on_all_three(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    (a, va), (b, vb), (c, vc) = members(tmp_path, daemon_factory, 3)
    assert b.stop() == 0
    (va / "img" / "shared.png").write_bytes(X1)
    wait_recorded(a.home, "img/shared.png", sha(X1))
    wait_recorded(c.home, "img/shared.png", sha(X1))
    (vb / "img" / "shared.png").write_bytes(X2)  # made without seeing A's change
    b2 = start_daemon(b.home, daemon_factory)
    wait_linked(a, b2)
    # B's change is the later one (by its hybrid logical clock): it wins everywhere.
    final = wait_same_attachments(va, vb, vc)
    assert final["img/shared.png"] == (X2, False)
    assert not any("conflict" in p for p in final)  # never a conflict-copy file
    for home in (a.home, b2.home, c.home):
        assert live(home)["img/shared.png"].sha256 == sha(X2)
        wait_until(lambda h=home: [(v["kind"], v["sha256"]) for v in versions(h)
                                   if v["kind"] == "concurrent"] == [("concurrent", sha(X1))],
                   timeout=30, what="the loser kept as one concurrent version")
