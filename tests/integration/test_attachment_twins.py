"""Identical attachments at several paths ("twins") are separate files on every machine
(issue 37 items 1, 2 and 8; issue 33 item 12), through real daemons over loopback TLS.

On the real help vault a receiver landed identical files as hard links of one inode: an
edit of one changed its twins on both machines, and the twins shared one mode, which the
receiver then reported back as chmods nobody made. Here: three twins, only one
executable, synced from A to B, keep each path's own mode on both; an in-place append to
one twin on B changes only that path, on both; a vault an older Stet left with linked
twins gets one inode per file at the next start, modes as the index says, and nothing
recorded as a change; the home's blob store is private (folders 0700, files 0600) from
the start, so the CLI never has to fix it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import blob_path, live, seen_rows, wait_recorded
from tests.integration.peer_support import invite, join, start_daemon, wait_linked

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 40 + b"\x00" * 1000
TWINS = ("x/pic.png", "y/pic.png", "z/pic.png")
MODES = {"x/pic.png": 0o644, "y/pic.png": 0o755, "z/pic.png": 0o644}  # only y executable


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def modes(root: Path) -> dict[str, int]:
    return {p: mode(root / p) for p in TWINS}


def twins_vault(va: Path) -> None:
    for path in TWINS:
        (va / path).parent.mkdir(parents=True, exist_ok=True)
        (va / path).write_bytes(PNG)
        os.chmod(va / path, MODES[path])
    (va / "note.md").write_text("# twins\n")


Pair = tuple[DaemonProcess, DaemonProcess, Path, Path]


def synced_pair(tmp_path: Path, factory: list[DaemonProcess]) -> Pair:
    """A with the twins, B joined; returns once B has written all three (its seen rows)."""
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    twins_vault(va)
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", factory)
    b = start_daemon(tmp_path / "hb", factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_until(lambda: set(TWINS) <= set(seen_rows(b.home)), timeout=60, what="B to write the three twins")
    return a, b, va, vb


def inodes(*files: Path) -> list[tuple[int, int]]:
    out = []
    for f in files:
        st = os.lstat(f)
        out.append((st.st_ino, st.st_nlink))
    return out


def sentinel(src: DaemonProcess, src_root: Path, dst: DaemonProcess, name: str) -> None:
    """A later change from ``src`` recorded by ``dst``: whatever ``src`` recorded before it
    (a mode or bytes read back from a twin) has reached ``dst`` by then."""
    data = b"\x00sentinel " + name.encode()
    (src_root / name).write_bytes(data)
    wait_recorded(dst.home, name, hashlib.sha256(data).hexdigest(), timeout=60)


def test_twins_keep_each_paths_mode_on_both_machines(tmp_path: Path,
                                                     daemon_factory: list[DaemonProcess]) -> None:
    a, b, va, vb = synced_pair(tmp_path, daemon_factory)
    assert modes(vb) == MODES, "B wrote the twins with one shared mode"
    assert all((vb / p).read_bytes() == PNG for p in TWINS)
    ino = [i for i, _n in inodes(*(vb / p for p in TWINS))]
    assert len(set(ino)) == 3, f"B's twins share an inode: {inodes(*(vb / p for p in TWINS))}"
    # B looks at its whole folder again (a restart walks it): nothing it wrote is read back
    # as a person's chmod; a later change from B reaching A proves none was sent.
    b.stop()
    b.start()
    wait_linked(a, b, timeout=30)
    sentinel(b, vb, a, "after-restart.png")
    assert modes(va) == MODES, "A's untouched files were chmod-ed by what B reported"
    assert modes(vb) == MODES
    for home in (a.home, b.home):
        shown = live(home)
        assert {p: shown[p].executable for p in TWINS} == {p: MODES[p] == 0o755 for p in TWINS}


def test_an_in_place_edit_of_one_twin_changes_only_that_path(tmp_path: Path,
                                                             daemon_factory: list[DaemonProcess]) -> None:
    a, b, va, vb = synced_pair(tmp_path, daemon_factory)
    before = live(a.home)
    with open(vb / "y" / "pic.png", "ab") as f:  # printf X >> vault-b/y/pic.png
        f.write(b"X")
    wait_until(lambda: (va / "y" / "pic.png").read_bytes() == PNG + b"X", timeout=60,
               what="B's edit of y/pic.png on A")
    sentinel(b, vb, a, "after-edit.png")
    for root in (va, vb):
        assert (root / "x" / "pic.png").read_bytes() == PNG, f"{root}: x/pic.png changed with y"
        assert (root / "z" / "pic.png").read_bytes() == PNG, f"{root}: z/pic.png changed with y"
        assert (root / "y" / "pic.png").read_bytes() == PNG + b"X"
    after = live(a.home)
    for p in ("x/pic.png", "z/pic.png"):
        assert (after[p].sha256, after[p].hlc) == (before[p].sha256, before[p].hlc), f"{p} was recorded again"
    assert modes(va) == MODES
    assert modes(vb) == MODES


def test_linked_twins_an_older_stet_left_are_repaired_at_start(tmp_path: Path,
                                                                daemon_factory: list[DaemonProcess]) -> None:
    va = tmp_path / "a"
    va.mkdir()
    for path in TWINS:
        (va / path).parent.mkdir(parents=True, exist_ok=True)
        (va / path).write_bytes(PNG)
        os.chmod(va / path, 0o644)
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    sha = wait_recorded(a.home, "x/pic.png").sha256
    for p in TWINS:
        wait_recorded(a.home, p, sha)
    a.stop()
    before = live(a.home)
    # What a receiver's hard-link landing left: the twins and the store's file one inode.
    store = blob_path(a.home, sha)
    for f in (va / "y" / "pic.png", va / "z" / "pic.png", store):
        os.unlink(f)
        os.link(va / "x" / "pic.png", f)
    assert os.lstat(va / "x" / "pic.png").st_nlink == 4
    a.start()

    def repaired() -> bool:
        files = [va / p for p in TWINS] + [store]
        # The mode too: the last twin is alone on the old inode (0600) a moment before its copy.
        return (len({i for i, _n in inodes(*files)}) == 4 and all(n == 1 for _i, n in inodes(*files))
                and modes(va) == {p: 0o644 for p in TWINS})

    wait_until(repaired, timeout=60, what="each twin and the store's file an inode of its own, its mode 0644")
    assert all((va / p).read_bytes() == PNG for p in TWINS)
    assert modes(va) == {p: 0o644 for p in TWINS}
    with open(va / "z" / "pic.png", "ab") as f:
        f.write(b"Z")
    assert (va / "x" / "pic.png").read_bytes() == PNG
    assert (va / "y" / "pic.png").read_bytes() == PNG
    assert store.read_bytes() == PNG
    wait_recorded(a.home, "z/pic.png", hashlib.sha256(PNG + b"Z").hexdigest(), timeout=30)
    sentinel(a, va, a, "after-repair.png")
    after = live(a.home)
    for p in ("x/pic.png", "y/pic.png"):
        assert (after[p].sha256, after[p].hlc) == (before[p].sha256, before[p].hlc), f"{p} recorded again"
    assert [ln for ln in a.log_tail(400).splitlines() if "own inode" in ln], a.log_tail(40)


def test_the_blob_store_is_private_from_the_start(tmp_path: Path,
                                                  daemon_factory: list[DaemonProcess]) -> None:
    a, b, _va, _vb = synced_pair(tmp_path, daemon_factory)
    for d in (a, b):
        root = d.home / "blobs"
        folders = [root, *(p for p in root.rglob("*") if p.is_dir())]
        files = [p for p in root.rglob("*") if p.is_file()]
        assert files, f"no blob landed in {root}"
        assert {str(p.relative_to(d.home)): oct(mode(p)) for p in folders if mode(p) != 0o700} == {}
        assert {str(p.relative_to(d.home)): oct(mode(p)) for p in files if mode(p) != 0o600} == {}
        out = run_stet(d.home, "status")
        assert "private" not in out.stderr.decode(), out.stderr.decode()
