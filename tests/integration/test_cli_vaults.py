"""``stet init`` refusing a typo, ``stet vaults`` and ``stet vaults remove`` (SPEC §7), with
real CLI processes and a real daemon.

Issue 13 item 6: ``stet init /nonexistent/dir`` used to exit 0 and create the folder, and from
then on every command asked for ``--vault``, with no command to unregister the stray vault; a
second home could ``stet init`` a folder another home already manages, silently.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from stet.client.daemon_link import ApiError, DaemonClient
from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.test_cli import one_sentence, seed


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) with its content hash."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_init_of_a_missing_folder_fails_and_creates_nothing(tmp_path: Path) -> None:
    home, missing = tmp_path / "home", tmp_path / "nonexistent" / "dir"
    line = one_sentence(run_stet(home, "init", str(missing), check=False))
    assert str(missing) in line
    assert "does not exist" in line
    assert "--create" in line
    assert not missing.exists()
    assert not missing.parent.exists()
    assert not home.exists()  # not even the home


def test_init_create_makes_the_folder(tmp_path: Path) -> None:
    home, new = tmp_path / "home", tmp_path / "new" / "notes"
    data = json.loads(run_stet(home, "init", str(new), "--create", "--json").stdout)
    assert new.is_dir()
    assert data["vault"] == "notes"
    assert data["imported"] == 0
    listed = json.loads(run_stet(home, "vaults", "--json").stdout)
    assert [(v["name"], v["path"]) for v in listed] == [("notes", str(new.resolve()))]


def test_init_refuses_a_folder_inside_or_around_a_vault_and_creates_nothing(tmp_path: Path) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    seed(vault, {"a.md": b"a\n"})
    run_stet(home, "init", str(vault))
    inside = vault / "sub" / "deeper"
    line = one_sentence(run_stet(home, "init", str(inside), "--create", check=False))
    assert "lies inside the vault 'vault'" in line
    assert not (vault / "sub").exists()
    around = one_sentence(run_stet(home, "init", str(tmp_path), check=False))
    assert "holds the vault 'vault'" in around
    assert [v["name"] for v in json.loads(run_stet(home, "vaults", "--json").stdout)] == ["vault"]


def test_a_second_home_cannot_init_a_folder_another_home_manages(tmp_path: Path) -> None:
    first, second, vault = tmp_path / "first", tmp_path / "second", tmp_path / "vault"
    seed(vault, {"a.md": b"a\n"})
    run_stet(first, "init", str(vault), "--name", "notes")
    for target in (vault, vault / "sub"):
        line = one_sentence(run_stet(second, "init", str(target), "--create", check=False))
        assert str(first) in line
        assert "another Stet home" in line
        assert "vaults remove notes" in line
    assert not (vault / "sub").exists()
    assert not (second / "home.db").exists() or json.loads(
        run_stet(second, "vaults", "--json").stdout) == []
    # Once the first home lets go, the second may take it.
    run_stet(first, "vaults", "remove", "notes")
    data = json.loads(run_stet(second, "init", str(vault), "--json").stdout)
    assert data["imported"] == 1


def test_vaults_remove_with_the_daemon_running(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    """The typo scenario: a stray second vault; removing it leaves its files alone, the
    running daemon drops it at once, and commands need no --vault again."""
    home, notes, stray = tmp_path / "home", tmp_path / "notes", tmp_path / "stray"
    seed(notes, {"a.md": b"the real note\n"})
    seed(stray, {"s.md": b"stray\n", ".hidden.md": b"h\n", "sub/t.txt": b"t\n"})
    run_stet(home, "init", str(notes))
    d = DaemonProcess(home)
    daemon_factory.append(d)
    d.start()
    run_stet(home, "init", str(stray))  # taken up by the running daemon
    before = tree(stray)
    assert "--vault" in one_sentence(run_stet(home, "read", "a.md", check=False))
    made = run_stet(home, "token", "create", "bot", "--vault", "stray", "--write", "**")
    secret = made.stdout.decode().strip()
    with pytest.raises(ApiError) as refused:  # an agent may not unregister its vault
        DaemonClient(d.api_url, secret).request("DELETE", "/v1/vaults/stray")
    assert refused.value.code == "forbidden"

    out = run_stet(home, "vaults", "remove", "stray").stdout.decode()
    assert "left as they are" in out
    assert "stopped syncing it" in out
    assert "1 agent token" in out

    assert tree(stray) == before  # not one byte touched
    assert [v["name"] for v in d.client.request("GET", "/v1/vaults")["vaults"]] == ["notes"]
    assert run_stet(home, "read", "a.md").stdout == b"the real note\n"  # no --vault needed
    assert json.loads(run_stet(home, "token", "list", "--json").stdout) == []
    # The daemon no longer watches it: a new file there never becomes a note.
    (stray / "new.md").write_bytes(b"after removal\n")
    (notes / "b.md").write_bytes(b"still synced\n")
    d.wait_content("b.md", "still synced\n", vault="notes")
    assert "stray" in one_sentence(run_stet(home, "read", "--vault", "stray", "new.md", check=False))
    # A restart does not bring it back.
    d.stop()
    d.start()
    assert [v["name"] for v in d.client.request("GET", "/v1/vaults")["vaults"]] == ["notes"]
    assert run_stet(home, "read", "a.md").stdout == b"the real note\n"


def test_vaults_remove_without_a_daemon_and_unknown_names(tmp_path: Path,
                                                          daemon_factory: list[DaemonProcess]) -> None:
    home, notes, stray = tmp_path / "home", tmp_path / "notes", tmp_path / "stray"
    seed(notes, {"a.md": b"a\n"})
    seed(stray, {"s.md": b"s\n"})
    run_stet(home, "init", str(notes))
    run_stet(home, "init", str(stray))
    listing = run_stet(home, "vaults").stdout.decode()
    assert "notes" in listing
    assert str(stray.resolve()) in listing
    before = tree(stray)
    unknown = one_sentence(run_stet(home, "vaults", "remove", "nosuch", check=False))
    assert "no vault named 'nosuch'" in unknown
    out = run_stet(home, "vaults", "remove", "stray").stdout.decode()
    assert "stopped syncing" not in out
    assert tree(stray) == before
    d = DaemonProcess(home)
    daemon_factory.append(d)
    d.start()
    wait_until(lambda: run_stet(home, "read", "a.md").stdout == b"a\n", timeout=30,
               what="a read without --vault")
    assert [v["name"] for v in json.loads(run_stet(home, "vaults", "--json").stdout)] == ["notes"]


def test_removing_a_vault_shared_with_a_peer(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    """A drops the vault it shares with B while linked: A's folder stays as it was, A's other
    vault keeps working, B keeps its copy and goes on alone; nothing fails in A's daemon."""
    from tests.integration.peer_support import invite, join, start_daemon, wait_linked, wait_same_tree

    a_notes, a_solo, b_notes = tmp_path / "a-notes", tmp_path / "a-solo", tmp_path / "b-notes"
    seed(a_notes, {"shared.md": b"shared\n"})
    seed(a_solo, {"mine.md": b"mine\n"})
    run_stet(tmp_path / "a", "init", str(a_notes), "--name", "notes")
    run_stet(tmp_path / "a", "init", str(a_solo), "--name", "solo")
    a = start_daemon(tmp_path / "a", daemon_factory)
    b = start_daemon(tmp_path / "b", daemon_factory)
    join(b, invite(a, "notes"), b_notes)
    wait_linked(a, b)
    wait_same_tree(a_notes, b_notes, timeout=30)
    before = tree(a_notes)

    run_stet(a.home, "vaults", "remove", "notes")
    assert [v["name"] for v in a.client.request("GET", "/v1/vaults")["vaults"]] == ["solo"]
    (b_notes / "after.md").write_bytes(b"written on B after A left\n")
    b.wait_content("after.md", "written on B after A left\n", vault="notes")
    (a_solo / "more.md").write_bytes(b"A's other vault still syncs its folder\n")
    a.wait_content("more.md", "A's other vault still syncs its folder\n", vault="solo")
    assert run_stet(a.home, "read", "mine.md").stdout == b"mine\n"  # one vault left: no --vault
    assert tree(a_notes) == before
    assert a.proc is not None
    assert a.proc.poll() is None
    log = (a.layout.log_dir / "daemon.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_vaults_remove_tells_the_peers_this_device_left(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """SPEC §7: `stet vaults remove NAME` unregisters the vault here and peers are told this
    device left: the peer lists it as removed (not as a member gone offline), drops the link
    and stops trusting it, while the files on both sides stay as they are."""
    from tests.integration.peer_support import (
        device_id,
        invite,
        join,
        linked,
        start_daemon,
        wait_linked,
        wait_same_tree,
    )

    va, vb = tmp_path / "a", tmp_path / "b"
    seed(va, {"kept.md": b"kept on both sides\n"})
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_same_tree(va, vb)
    b_id = device_id(b)
    before_b = tree(vb)

    out = run_stet(b.home, "vaults", "remove", "notes")
    assert "told" in out.stdout.decode(), out.stdout

    def a_knows() -> bool:
        devices = a.client.request("GET", "/v1/vaults/notes/devices")["devices"]
        return any(d["device"] == b_id and d["removed"] for d in devices)

    wait_until(a_knows, what="A to hear that B left")
    wait_until(lambda: not linked(a, b), what="A to drop its link with B")
    assert tree(vb) == before_b  # B's files untouched
    assert (va / "kept.md").read_bytes() == b"kept on both sides\n"  # and A keeps its notes
    # B's later edits in the folder it left reach nobody.
    (vb / "after-leaving.md").write_text("written after leaving\n")
    (va / "from-a.md").write_text("A goes on\n")
    a.wait_content("from-a.md", "A goes on\n")
    assert not (va / "after-leaving.md").exists()
