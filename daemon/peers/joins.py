"""The join handshake, both sides: the joining device dials the inviter on the join path
(SNI ``join.stet``) and proves it holds the invite's secret (``join``); the inviter checks
the proof against its open invites and makes the joiner a member (``JoinDesk.handle``).
"""

from __future__ import annotations

import asyncio
import logging
import time
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


class JoinDesk:
    """The inviter's side: a JOIN frame in, a JOIN_OK frame (the vault's index) out."""

    def __init__(self, host: PeerHost, identity: DeviceIdentity,
                 membership_changed: Callable[[], None]) -> None:
        self.host = host
        self.identity = identity
        self.device_id = identity.device_id
        self.membership_changed = membership_changed

    def prepare(self) -> invite_crypto.KeyWork | None:
        """On a join connection, before its request: the proof's checker started now (it
        loads while the joiner signs), if an invite is open -- else no child for a stranger."""
        now = time.time()
        if any(self.host.registry.open_invites(vault_id, now) for vault_id in self.host.vaults):
            return invite_crypto.KeyWork()
        return None

    async def handle(self, frame: pp.Frame, work: invite_crypto.KeyWork | None = None) -> bytes:
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
        # The Ed25519 checks run in a child process: cryptography stays out of the daemon (P7).
        key = await invite_crypto.check_proof(proof, registry.open_invites(vault_id, time.time()), vault_id,
                                              self.identity.cert_der, der, work)
        if key is None or not registry.use_invite(key, device):
            raise pp.ProtocolError("bad, expired or used invite")
        name = pp.field_str(frame.header, "name", max_len=200) if "name" in frame.header else ""
        member = Member(device, cert_pem, self.device_id, time.time(), False, name)
        runtime.service.add_member(member)
        self.membership_changed()
        logger.info("device %s joined vault %s", device[:7], runtime.entry.name)
        index = runtime.service.index.full_update()
        return pp.encode(pp.JOIN_OK, {"vault": vault_id, "name": runtime.entry.name}, index)


async def join(session: aiohttp.ClientSession | None, identity: DeviceIdentity, invite_text: str,
               name: str | None, learned: Callable[[str, str], None]) -> tuple[str, bytes, str]:
    """Dial the inviter, prove the secret; returns (vault name, full index, inviter).
    ``learned(device, address)``: the address that answered, kept for dialing."""
    invite = decode_invite(invite_text)
    if invite.expires_at < time.time():
        raise StetError("the invite has expired: ask for a new one (stet invite)")
    assert session is not None  # the hub is started
    last: Exception | None = None
    for address in invite.addresses:
        try:
            return await _join_at(session, identity, invite, address, name, learned)
        except StetError:
            raise
        except Exception as exc:
            last = exc
    raise StetError(f"could not reach the inviting device at {', '.join(invite.addresses)}: {last}")


async def _join_at(session: aiohttp.ClientSession, identity: DeviceIdentity, invite: Invite,
                   address: str, name: str | None,
                   learned: Callable[[str, str], None]) -> tuple[str, bytes, str]:
    work = invite_crypto.KeyWork()  # the proof's child loads while the inviter is dialed
    try:
        return await _prove_at(session, identity, invite, address, name, learned, work)
    finally:
        await work.close()


async def _prove_at(session: aiohttp.ClientSession, identity: DeviceIdentity, invite: Invite,
                    address: str, name: str | None, learned: Callable[[str, str], None],
                    work: invite_crypto.KeyWork) -> tuple[str, bytes, str]:
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
            "cert_pem": identity.cert_pem.decode(), "name": name or "",
        }))
        msg = await asyncio.wait_for(ws.receive(), 30)
        if msg.type != aiohttp.WSMsgType.BINARY:
            raise StetError("the inviting device closed the connection")
        frame = pp.decode(bytes(msg.data))
        if frame.type != pp.JOIN_OK:
            raise StetError("the invite was refused (already used, expired, or not valid)")
        learned(device_id_of(der), address)
        return str(frame.header.get("name") or "vault"), frame.payload, device_id_of(der)
