"""Pairing's key work started ahead (P9/P4: every join waited for two ~0.1 s child starts
one after the other): the joiner's child loads while it dials, and a child is ended if
never asked. (The inviter's child no longer starts ahead: it starts only for a request
that passed the cheap checks, issue 33.) Real children (``python -m
stet.daemon.peers.invite_crypto``), real Ed25519."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from stet.daemon.peers import invite_crypto
from stet.daemon.peers.joins import AttemptsPerAddress

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


def test_join_attempts_are_counted_per_address_over_a_minute() -> None:
    # Which join requests start a child at all: tests/integration/test_peer_join_bounds.py.
    rate = AttemptsPerAddress(2)
    assert rate.allow("10.0.0.1", 0.0)
    assert rate.allow("10.0.0.1", 1.0)
    assert not rate.allow("10.0.0.1", 2.0)  # the third within a minute
    assert rate.allow("10.0.0.2", 2.0)  # another address has its own count
    assert rate.allow("10.0.0.1", 60.5)  # the first has left the window
    assert not rate.allow("10.0.0.1", 60.6)


def test_the_address_table_stays_bounded() -> None:
    rate = AttemptsPerAddress(1)
    for i in range(AttemptsPerAddress.MAX_ADDRESSES + 100):
        assert rate.allow(f"a{i}", float(i) / 1000)
    assert len(rate._seen) == AttemptsPerAddress.MAX_ADDRESSES
    assert rate.allow("a0", 1.0)  # forgotten first: the longest quiet
