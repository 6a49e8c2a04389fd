"""Pairing's key work started ahead (P9/P4: every join waited for two ~0.1 s child starts
one after the other): the joiner's child loads while it dials, the inviter's while the
joiner signs -- started on a join connection only while an invite is open, and ended if
never asked. Real children (``python -m stet.daemon.peers.invite_crypto``), real Ed25519."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace

from stet.daemon.peers import invite_crypto
from stet.daemon.peers.joins import JoinDesk

INVITER = b"inviter certificate (DER)"
JOINER = b"joiner certificate (DER)"


def loaded(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


async def until(what, deadline_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(deadline_s):
        while not what():  # noqa: ASYNC110 - a child process's state, under a deadline
            await asyncio.sleep(0.01)


async def test_a_childs_cryptography_loads_before_its_question_and_it_answers() -> None:
    secret, verify_key = await invite_crypto.new_invite_key()
    work = invite_crypto.KeyWork()
    proc = await work._proc
    if sys.platform.startswith("linux"):  # the library seen loaded, unasked
        await until(lambda: loaded(proc.pid, "cryptography"))
    proof = await invite_crypto.proof_for_secret(secret, "v1", INVITER, JOINER, work)
    checker = invite_crypto.KeyWork()
    assert await invite_crypto.check_proof(proof, [verify_key], "v1", INVITER, JOINER, checker) == verify_key
    assert await invite_crypto.check_proof(proof, [verify_key], "v2", INVITER, JOINER) is None
    await work.close()
    await checker.close()


async def test_a_child_never_asked_is_ended() -> None:
    work = invite_crypto.KeyWork()
    proc = await work._proc
    await work.close()
    assert proc.returncode is not None  # killed and reaped


def desk(open_invites: dict[str, list[str]]) -> JoinDesk:
    registry = SimpleNamespace(open_invites=lambda vault_id, now: open_invites.get(vault_id, []))
    host = SimpleNamespace(vaults={"v1": object(), "v2": object()}, registry=registry)
    identity = SimpleNamespace(device_id="INVITER", cert_der=INVITER)
    return JoinDesk(host, identity, lambda: None)  # type: ignore[arg-type]


async def test_a_join_connection_starts_the_checker_only_while_an_invite_is_open() -> None:
    assert desk({}).prepare() is None  # a stranger's connection starts no process
    work = desk({"v2": ["ed25519:00"]}).prepare()
    assert work is not None
    proc = await work._proc
    await work.close()
    assert proc.returncode is not None
