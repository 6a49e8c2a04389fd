"""The join handshake, both sides: the joining device dials the inviter on the join path
(SNI ``join.stet``) and proves it holds the invite's secret (``join``); the inviter checks
the proof against its open invites and makes the joiner a member (``JoinDesk.handle``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import deque
from collections.abc import Callable

import aiohttp

from stet.daemon.identity.device_cert import DeviceIdentity, cert_der_of
from stet.daemon.peers import invite_crypto
from stet.daemon.peers.host import PeerHost
from stet.daemon.peers.tls import JOIN_SERVER_NAME as JOIN_SNI
from stet.daemon.peers.tls import join_client_context, peer_cert_der
from stet.sync import peer_protocol as pp
from stet.sync.errors import StetError
from stet.sync.invites import Invite, decode_invite
from stet.sync.vault_index import Member

logger = logging.getLogger(__name__)


class JoinBusy(StetError):
    """As many pairing checks as ``[peer] max_concurrent_joins`` are running: try again."""

    code = "join_busy"


class AttemptsPerAddress:
    """Join sockets per remote address in the last minute (``[peer] join_attempts_per_minute``).

    Kept for at most ``MAX_ADDRESSES`` addresses: past that, those quiet longest are
    forgotten first (a flood of addresses costs memory no more than a bounded table)."""

    MAX_ADDRESSES = 4096
    WINDOW_S = 60.0

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._seen: dict[str, deque[float]] = {}

    def allow(self, address: str, now: float) -> bool:
        times = self._seen.pop(address, None) or deque()
        while times and times[0] <= now - self.WINDOW_S:
            times.popleft()
        allowed = len(times) < self.per_minute
        if allowed:
            times.append(now)
        if times:
            self._seen[address] = times  # re-inserted: the dict's order is least recently seen first
        while len(self._seen) > self.MAX_ADDRESSES:
            del self._seen[next(iter(self._seen))]
        return allowed


class JoinDesk:
    """The inviter's side: a JOIN frame in, a JOIN_OK frame (the vault's index) out.

    A join socket needs no certificate and the peer port listens on every interface, so
    a stranger's request costs nothing until it has passed the cheap checks: a vault of
    this device with an invite open now, a certificate that parses. Only then is the
    proof checked, in a child process (``invite_crypto``), at most ``max_concurrent``
    at once (more: ``JoinBusy``). No invite open: no child, ever (issue 33, finding 5).
    """

    def __init__(self, host: PeerHost, identity: DeviceIdentity,
                 membership_changed: Callable[[], None], *, max_concurrent: int = 2) -> None:
        self.host = host
        self.identity = identity
        self.device_id = identity.device_id
        self.membership_changed = membership_changed
        self.max_concurrent = max_concurrent
        self.checking = 0  # pairing checks running now (each a child process)

    async def handle(self, frame: pp.Frame) -> bytes:
        from stet.sync.device_ids import device_id_of

        vault_id = pp.field_str(frame.header, "vault")
        proof = pp.field_str(frame.header, "proof")
        cert_pem = pp.field_str(frame.header, "cert_pem", max_len=16384)
        runtime = self.host.vaults.get(vault_id)
        if runtime is None:
            raise pp.ProtocolError("no such vault")  # the same answer as a bad proof
        try:
            der = cert_der_of(cert_pem)
        except ValueError:
            raise pp.ProtocolError("bad certificate") from None
        device = device_id_of(der)
        registry = self.host.registry
        keys = registry.open_invites(vault_id, time.time())
        if not keys:
            raise pp.ProtocolError("no invite is open for that vault")  # the same answer again
        if self.checking >= self.max_concurrent:
            raise JoinBusy("busy with other joins: try again")
        # The Ed25519 checks run in a child process: cryptography stays out of the daemon (P7).
        self.checking += 1
        work = invite_crypto.KeyWork()
        try:
            key = await invite_crypto.check_proof(proof, keys, vault_id, self.identity.cert_der, der, work)
        finally:
            self.checking -= 1
            await work.close()
        if key is None or not registry.use_invite(key, device):
            raise pp.ProtocolError("bad, expired or used invite")
        name = pp.field_str(frame.header, "name", max_len=200) if "name" in frame.header else ""
        # The platform the joiner declares: which names its file system cannot hold
        # (``stet.sync.member_names``); an older Stet sends none.
        platform = pp.field_str(frame.header, "platform", max_len=40) if "platform" in frame.header else ""
        member = Member(device, cert_pem, self.device_id, time.time(), False, name, platform)
        runtime.service.add_member(member)
        self.membership_changed()
        logger.info("device %s joined vault %s", device[:7], runtime.entry.name)
        index = runtime.service.index.full_update()
        return pp.encode(pp.JOIN_OK, {"vault": vault_id, "name": runtime.entry.name}, index)


async def join(session: aiohttp.ClientSession | None, identity: DeviceIdentity, invite_text: str,
               name: str | None, learned: Callable[[str, str], None],
               platform: str = sys.platform) -> tuple[str, bytes, str]:
    """Dial the inviter, prove the secret; returns (vault name, full index, inviter).
    ``learned(device, address)``: the address that answered, kept for dialing.
    ``platform``: the one this device declares (the names its file system can hold)."""
    invite = decode_invite(invite_text)
    if invite.expires_at < time.time():
        raise StetError("the invite has expired: ask for a new one (stet invite)")
    assert session is not None  # the hub is started
    last: Exception | None = None
    for address in invite.addresses:
        try:
            return await _join_at(session, identity, invite, address, name, learned, platform)
        except StetError:
            raise
        except Exception as exc:
            last = exc
    raise StetError(f"could not reach the inviting device at {', '.join(invite.addresses)}: {last}")


async def _join_at(session: aiohttp.ClientSession, identity: DeviceIdentity, invite: Invite,
                   address: str, name: str | None,
                   learned: Callable[[str, str], None], platform: str) -> tuple[str, bytes, str]:
    work = invite_crypto.KeyWork()  # the proof's child loads while the inviter is dialed
    try:
        return await _prove_at(session, identity, invite, address, name, learned, work, platform)
    finally:
        await work.close()


async def _prove_at(session: aiohttp.ClientSession, identity: DeviceIdentity, invite: Invite,
                    address: str, name: str | None, learned: Callable[[str, str], None],
                    work: invite_crypto.KeyWork, platform: str) -> tuple[str, bytes, str]:
    from stet.sync.device_ids import device_id_of, normalize_device_id

    async with session.ws_connect(
        f"wss://{address}/stet/join", ssl=join_client_context(identity), server_hostname=JOIN_SNI,
        max_msg_size=pp.MAX_FRAME, timeout=aiohttp.ClientWSTimeout(ws_close=5),
    ) as ws:
        der = peer_cert_der(ws)
        if der is None or device_id_of(der) != normalize_device_id(invite.device_id):
            raise StetError("the device at that address is not the one that made the invite")
        proof = await invite_crypto.proof_for_secret(invite.secret, invite.vault_id, der,
                                                     identity.cert_der, work)
        await ws.send_bytes(pp.encode(pp.JOIN, {
            "vault": invite.vault_id, "device": identity.device_id, "proof": proof,
            "cert_pem": identity.cert_pem.decode(), "name": name or "", "platform": platform,
        }))
        msg = await asyncio.wait_for(ws.receive(), 30)
        if msg.type != aiohttp.WSMsgType.BINARY:
            raise StetError("the inviting device closed the connection")
        frame = pp.decode(bytes(msg.data))
        if frame.type == pp.ERROR and frame.header.get("code") == JoinBusy.code:
            raise StetError("the inviting device is busy with other joins: try again in a minute")
        if frame.type != pp.JOIN_OK:
            raise StetError("the invite was refused (already used, expired, or not valid)")
        learned(device_id_of(der), address)
        return str(frame.header.get("name") or "vault"), frame.payload, device_id_of(der)
