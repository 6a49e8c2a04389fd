"""Issue 12, finding 3, through a real daemon (SPEC R4): a reader of the home's files
(home.db, the stores, every other file, backups of them) can neither join a vault nor act
as a token; the home is 0700 and its files 0600, also a home made beforehand with looser
modes.

Before: ``home.db`` kept ``key_hash``, the very HMAC key of a join proof; a copy of it
joined the vault and received the index with every note path. Now it keeps an Ed25519
public key, which checks a proof but cannot make one.

The daemon here keeps its owner token and device key in a keyring outside the home (the
system keyring's place; ``outside_keyring.py``). Without any keyring backend they are 0600
files in the home, the documented fallback (docs/agents.md), which this test does not cover.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest

from stet.daemon.identity.device_identity import DeviceIdentity, generate_identity
from stet.daemon.peers.tls import JOIN_SERVER_NAME
from stet.sync import peer_protocol as pp
from stet.sync.invites import decode_invite, proof_for_secret
from tests import harness
from tests.harness import DaemonProcess, run_stet
from tests.integration.agent_support import Agent, make_token, owner_agent
from tests.integration.outside_keyring import OutsideKeyring
from tests.integration.peer_support import invite, peer_port
from tests.integration.peer_wire import WireClient, errors_in, no_cert_context, peer_cert_of

REPO = Path(__file__).resolve().parents[2]
SECRET_TEXT = "the launch code is 0000\n"


@pytest.fixture
def outside_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    store = tmp_path / "keyring-outside-the-home.json"
    monkeypatch.setattr(harness, "KEYRING_ENV", {
        "PYTHON_KEYRING_BACKEND": "tests.integration.outside_keyring.OutsideKeyring",
        "STET_TEST_KEYRING": str(store),
        "PYTHONPATH": str(REPO),  # the daemon imports the backend from tests/
    })
    monkeypatch.setenv("STET_TEST_KEYRING", str(store))
    previous = keyring.get_keyring()
    keyring.set_keyring(OutsideKeyring())
    try:
        yield store
    finally:
        keyring.set_keyring(previous)


def modes(root: Path) -> dict[str, int]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, ""]:
            p = Path(dirpath) / name
            st = os.lstat(p)
            if not stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(root))] = stat.S_IMODE(st.st_mode)
    return out


def strings_in(copy: Path) -> set[str]:
    """Every string a reader of the copy could try: each text value of each SQLite table,
    and every token-like run of characters in every file."""
    found: set[str] = set()
    for path in copy.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        found |= {m.decode() for m in re.findall(rb"[A-Za-z0-9_:\-]{16,200}", data)}
        if data.startswith(b"SQLite format 3"):
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
                for table in tables:
                    for row in db.execute(f'SELECT * FROM "{table}"'):  # noqa: S608 -- names from the file
                        found |= {v for v in row if isinstance(v, str)}
            finally:
                db.close()
    return found


def try_join(port: int, server_der: bytes, vault_id: str, proof: str, mallory: DeviceIdentity) -> list[int]:
    """One join attempt by hand on the join path; the frame types answered."""
    with WireClient(port, no_cert_context(), JOIN_SERVER_NAME) as client:
        assert client.upgrade("/stet/join") == 101
        assert client.sock.getpeercert(binary_form=True) == server_der
        client.send_stet(pp.JOIN, {"vault": vault_id, "device": mallory.device_id, "proof": proof,
                                   "cert_pem": mallory.cert_pem.decode(), "name": "mallory"})
        _, messages = client.until_closed(timeout=10)
    types = [m.frame.type for m in messages]
    if pp.ERROR in types:
        assert errors_in(messages) == [{"code": "join_refused", "message": "join refused"}]
    return types


def test_a_copy_of_the_home_neither_joins_nor_authenticates(tmp_path: Path, outside_keyring: Path) -> None:
    home, vault, scratch = tmp_path / "home", tmp_path / "vault", tmp_path / "scratch"
    # A home made beforehand, the way people do: world-readable folder and file.
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    (home / "config.toml").write_text("# made by hand\n")
    os.chmod(home / "config.toml", 0o644)
    vault.mkdir()
    (vault / "plans.md").write_text(SECRET_TEXT)
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    daemon = DaemonProcess(home)
    try:
        daemon.start()
        agent_token = make_token(home, "agent", read=("**",), write=("**",))
        live = decode_invite(invite(daemon))  # an open invite: what the home must not give away
        server_der = peer_cert_of(home)
        port = peer_port(daemon)
        vault_id = live.vault_id
        owner = owner_agent(daemon)
        owner.ok(owner.read("plans.md"))
        owner.close()

        # Home 0700, every folder 0700, every file 0600 (the hand-made ones too).
        for rel, mode in modes(home).items():
            assert mode & 0o077 == 0, f"{rel or 'the home'} is {oct(mode)}"
        assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
        # With a keyring, neither the owner token nor the device key is in the home.
        assert not (home / "owner.token").exists()
        assert not (home / "device.key").exists()

        # The reader's copy: every file, and "backups" of the databases.
        shutil.copytree(home, scratch, symlinks=True, ignore=shutil.ignore_patterns("*.sock", "*.lock"))
        for db in list(scratch.rglob("*.db")):
            shutil.copy(db, db.with_suffix(".db.bak"))
        candidates = strings_in(scratch)
        assert any(c.startswith("ed25519:") for c in candidates), "the invite's stored key was not found"
        assert len(candidates) < 20_000, len(candidates)

        # 1. No string of the copy is a token (owner or agent): each is refused with 401.
        tries = Agent(daemon.api_url, "x")
        accepted = []
        tried = 0
        for candidate in sorted(candidates):
            if not re.fullmatch(r"[\x21-\x7e]{1,4096}", candidate):
                continue  # not sendable as a header value, so not a token either
            tries.token = candidate
            tried += 1
            answer = tries.request("GET", "/v1/vaults")
            if answer.status != 401:
                accepted.append(candidate)
        tries.close()
        print(f"home copy: {len(candidates)} strings found, {tried} sent as bearer tokens, "
              f"{len(accepted)} accepted")
        assert tried > 10
        assert accepted == []
        assert agent_token not in candidates

        # 2. What home.db keeps about the open invite makes no valid join proof, whichever way
        # it is used: as the HMAC key of version 1, or as an Ed25519 key.
        db = sqlite3.connect(f"file:{scratch / 'home.db'}?mode=ro", uri=True)
        stored = [r[0] for r in db.execute("SELECT key_hash FROM invites WHERE used_at IS NULL")]
        db.close()
        assert stored
        attempts = 0
        for value in stored:
            key = bytes.fromhex(value.removeprefix("ed25519:"))
            mallory_like = generate_identity()
            message = (b"stet-join\0" + vault_id.encode() + b"\0" + hashlib.sha256(server_der).digest()
                       + hashlib.sha256(mallory_like.cert_der).digest())
            v1 = hmac.new(key, message, hashlib.sha256).hexdigest()
            v2 = proof_for_secret(base64.urlsafe_b64encode(key).decode().rstrip("="), vault_id, server_der,
                                  mallory_like.cert_der)
            for proof in (v1, v2):
                assert try_join(port, server_der, vault_id, proof, mallory_like) == [pp.ERROR]
                attempts += 1
        assert attempts >= 2
        assert daemon.content("plans.md") == SECRET_TEXT

        # The control: the invite line itself does join (the attempts above could succeed).
        real = generate_identity()
        with WireClient(port, no_cert_context(), JOIN_SERVER_NAME) as client:
            assert client.upgrade("/stet/join") == 101
            proof = proof_for_secret(live.secret, vault_id, server_der, real.cert_der)
            client.send_stet(pp.JOIN, {"vault": vault_id, "device": real.device_id, "proof": proof,
                                       "cert_pem": real.cert_pem.decode(), "name": "real"})
            _, messages = client.until_closed(timeout=10)
        assert [m.frame.type for m in messages][:1] == [pp.JOIN_OK]
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill9()


def test_a_home_with_loose_modes_is_made_private_at_start(tmp_path: Path) -> None:
    """A home from before this fix (0755, files 0644): fixed at the next start."""
    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    (vault / "a.md").write_text("a\n")
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    for path in [home, *home.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    daemon = DaemonProcess(home)
    try:
        daemon.start()
        loose = {rel: oct(m) for rel, m in modes(home).items() if m & 0o077}
        assert loose == {}
        assert daemon.stop() == 0
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill9()
