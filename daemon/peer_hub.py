"""Peers: the TLS websocket listener, the dialer with backoff, pairing, and the links.

``PeerHub`` owns every link to another device. Inbound links arrive on the peer port
(mutual TLS 1.3, trusted = the certificates of every paired member); outbound ones
are dialed from manual addresses, addresses learned at pairing, and mDNS. One link per
device: when two exist (both sides dialed), the one initiated by the smaller device
ID survives on both sides. Every local change is queued to every link that shares its
vault, in order, by one writer task per link.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from stet.sync import attachment_protocol as ap
from stet.sync import peer_protocol as pp
from stet.sync.change_kinds import ChangeKind, Source
from stet.sync.errors import StetError
from stet.sync.home import write_private_file
from stet.sync.invites import Invite, decode_invite
from stet.sync.vault_index import Member

from . import invite_crypto
from .blob_transfer import BlobTransfers, LinkPort, vault_references
from .change_frames import ChangeFrames
from .changes import Destruction
from .device_cert import DeviceIdentity, cert_der_of
from .outbound_gate import OutboundGate
from .peer_host import HubVault, PeerHost
from .peer_sync import LinkClosed, PeerLink, PeerSession, VaultAccess, run_session
from .peer_tls import (
    JOIN_SERVER_NAME as JOIN_SNI,
)
from .peer_tls import (
    PEER_TLS,
    ServerTLS,
    client_context,
    join_client_context,
    peer_cert_der,
)
from .peer_tls import (
    SYNC_SERVER_NAME as SYNC_SNI,
)
from .slow_clients import with_header_deadline

if TYPE_CHECKING:
    from .changes import Change

logger = logging.getLogger(__name__)

BACKOFF_START_S = 0.5
BACKOFF_CAP_S = 30.0
OUTBOX_LIMIT = 10_000


@dataclass
class _Live:
    link: PeerLink
    session: PeerSession
    outbox: asyncio.Queue[bytes | asyncio.Event | None] = field(default_factory=asyncio.Queue)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    close: Any = None  # coroutine function closing the websocket
    frames: ChangeFrames | None = None  # local changes, gathered per turn of the loop


class PeerHub:
    def __init__(
        self,
        host: PeerHost,
        identity: DeviceIdentity,
        gate: OutboundGate,
        *,
        addresses: Sequence[str] = (),
        peers_file: Path | None = None,
    ) -> None:
        """``host``: the daemon (its vaults, registry, events), as a narrow Protocol;
        ``addresses``: ``[peer] addresses`` to dial; ``peers_file``: where addresses learned
        per device are kept (``peers.json``; None: not kept)."""
        self.host = host
        self.config_addresses = list(addresses)
        self.peers_file = peers_file
        self.gate = gate  # what peers may not hear yet (the brake, the delete delay)
        self.identity = identity
        self.device_id = identity.device_id
        self.tls = ServerTLS(identity, self.trusted_certs())
        self.links: dict[str, _Live] = {}
        self._membership_check = False  # a check of the members is scheduled
        self._members_seen: list[tuple[str, str]] | None = None
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._dialers: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._session: aiohttp.ClientSession | None = None
        self.known_addresses: dict[str, list[str]] = self._load_addresses()
        self.last_seen: dict[str, float] = {}  # device -> when a link with it was last up (this run)
        self._closing = False
        # Attachment blobs over the links (SPEC §3.14): the home's BlobFetcher, given to
        # the folder side before any vault opens; what lands is handed back to it.
        attachments = host.attachments
        self.transfers = BlobTransfers(attachments.blobs, vault_references(lambda: self.host.vaults))
        self.transfers.arrived.append(attachments.blob_arrived)
        attachments.fetcher = self.transfers
        # The store's own copies of landed blobs wait while blobs arrive (blob_unsharing).
        attachments.unsharing.busy = self.transfers.busy
        self.transfers.idle.append(attachments.unsharing.resume)

    # -- membership -------------------------------------------------------------------

    def members(self) -> dict[str, Member]:
        """Every non-removed member of any vault here, but us."""
        out: dict[str, Member] = {}
        for runtime in self.host.vaults.values():
            for device, m in runtime.service.index.members().items():
                if not m.removed and device != self.device_id:
                    out[device] = m
        return out

    def trusted_certs(self) -> list[bytes]:
        certs = []
        for m in self.members().values():
            try:
                certs.append(cert_der_of(m.cert_pem))  # ssl's own decoder: no cryptography (P7)
            except ValueError:
                logger.warning("member %s has an unreadable certificate", m.device_id[:7])
        return certs

    def _is_member(self, vault_id: str) -> Callable[[str], bool]:
        def check(device: str) -> bool:
            runtime = self.host.vaults.get(vault_id)
            if runtime is None:
                return False
            m = runtime.service.index.members().get(device)
            return m is not None and not m.removed

        return check

    def accesses(self) -> dict[str, VaultAccess]:
        out = {}
        for vid, runtime in self.host.vaults.items():
            out[vid] = VaultAccess(vid, runtime.service, self._is_member(vid), self._may_send(runtime),
                                   settle=functools.partial(runtime.settle_soon, self.outboxes_empty))
        return out

    def outboxes_empty(self) -> bool:
        """Every link has handed its queued frames to its websocket (a first sync served)."""
        return all(live.outbox.empty() for live in self.links.values())

    def _may_send(self, runtime: HubVault) -> Callable[[str], bool]:
        """A note's content held by the burst brake (or waiting at the gate for it) is not sent."""
        def may_send(note_id: str) -> bool:
            if self.gate.waiting(runtime.entry.id, note_id):
                return False
            brake = runtime.brake
            return brake is None or not brake.is_held(note_id)

        return may_send

    def resend_notes(self, vault_id: str, note_ids: list[str]) -> None:
        """Send released notes' full state to every link of the vault."""
        runtime = self.host.vaults.get(vault_id)
        if runtime is None:
            return
        self.gate.supersede(vault_id, note_ids)  # their full state supersedes what waited
        for live in list(self.links.values()):
            if vault_id not in live.link.vaults:
                continue
            batch = pp.UpdateBatch(vault_id, [
                pp.UpdateItem(n, runtime.service.doc(n).full_update(), Source.RELEASE, self.device_id)
                for n in note_ids
            ])
            if batch.items:
                self._enqueue(live, pp.encode_updates(batch))

    def ensure_self_member(self, runtime: HubVault) -> None:
        index = runtime.service.index
        if self.device_id not in index.members():
            member = Member(self.device_id, self.identity.cert_pem.decode(), self.device_id, time.time())
            update = index.put_member(member)
            if update is not None:
                runtime.store.append_update("__index__", update, Source.PAIRING)

    def _check_membership(self) -> None:
        self._membership_check = False
        key = sorted((device, repr(m)) for device, m in self.members().items())
        if key != self._members_seen:
            self._members_seen = key
            self.membership_changed()

    def membership_changed(self) -> None:
        """Rebuild trust and drop links to devices that are no longer members."""
        self.tls.update_trusted(self.trusted_certs())
        members = self.members()
        for device, live in list(self.links.items()):
            if device not in members:
                logger.info("device %s is no longer a member: disconnecting", device[:7])
                self._end(live, "removed")

    # -- local changes → links --------------------------------------------------------

    def on_change(self, vault_id: str, change: Change) -> None:
        if change.update is None:
            return
        if change.kind == ChangeKind.INDEX and not self._membership_check:
            # Once per turn of the loop, and only if the members changed: a bulk intake
            # changes the index once per new note (rebuilding trust took ~0.1 s each).
            self._membership_check = True
            asyncio.get_running_loop().call_soon(self._check_membership)
        # A local change that empties or overwrites a populated note waits at the gate as
        # long as a local delete does (and everything after it on that note waits behind
        # it), so a burst the brake holds never reaches a peer (SPEC §5.6).
        due = self.gate.clock() + self._delay(vault_id) if self._destroys(vault_id, change) else None
        self.gate.defer(vault_id, change.note_id, functools.partial(self._send_now, vault_id, change), due)

    def _delay(self, vault_id: str) -> float:
        runtime = self.host.vaults.get(vault_id)
        return float(runtime.service.delete_delay_s) if runtime is not None else 0.0

    def _destroys(self, vault_id: str, change: Change) -> bool:
        if change.kind != ChangeKind.CHANGED or change.device is not None or self._delay(vault_id) <= 0:
            return False
        return change.destruction in (Destruction.EMPTIED, Destruction.SHRINK)  # classified once

    def _send_now(self, vault_id: str, change: Change) -> None:
        for live in list(self.links.values()):
            if vault_id in live.link.vaults and live.frames is not None:
                live.frames.add(vault_id, change)  # framed with the rest of this turn's

    def _enqueue(self, live: _Live, frame: bytes) -> None:
        if live.outbox.qsize() >= OUTBOX_LIMIT:
            logger.warning("link to %s cannot keep up: resyncing it", live.link.device_id[:7])
            self._end(live, "outbox full")
            return
        live.outbox.put_nowait(frame)

    async def flush_vault_links(self, vault_id: str, wait_s: float) -> list[str]:
        """Wait until every open link sharing ``vault_id`` has sent what is queued for it
        now (a marker goes through each outbox behind those frames); returns the devices
        whose links got there within ``wait_s`` seconds."""
        marks: dict[str, asyncio.Event] = {}
        for device, live in self.links.items():
            if vault_id in live.link.vaults and not live.link.closed:
                if live.frames is not None:
                    live.frames.flush()  # this turn's changes go before the marker
                marks[device] = asyncio.Event()
                live.outbox.put_nowait(marks[device])
        if marks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(m.wait() for m in marks.values())), wait_s)
        return sorted(d for d, m in marks.items() if m.is_set())

    def _end(self, live: _Live, why: str) -> None:
        live.link.closed = True
        live.outbox.put_nowait(None)
        if live.close is not None:
            asyncio.get_running_loop().create_task(live.close())

    # -- links ---------------------------------------------------------------------------

    async def _run_link(self, device: str, initiator: bool, ws: Any, close: Any) -> str:
        """Run one authenticated websocket as a link; returns why it ended."""
        preferred_initiator = min(device, self.device_id) == self.device_id
        existing = self.links.get(device)
        if existing is not None and not existing.link.closed:
            if initiator == preferred_initiator:
                self._end(existing, "replaced by the preferred link")
                await existing.ended.wait()
            else:
                return "duplicate link"
        live = _Live(PeerLink(device, self._raw_sender(ws), initiator), None)  # type: ignore[arg-type]
        live.session = PeerSession(live.link, self.device_id, self.accesses())
        live.close = close
        live.frames = ChangeFrames(live.session, lambda frame: self._enqueue(live, frame))
        live.link.send_raw = self._enqueuer(live)
        self.links[device] = live
        writer = asyncio.create_task(self._writer(live, ws), name=f"peer-writer:{device[:7]}")
        blobs = self.transfers.link_up(LinkPort(device, lambda: live.link.vaults,
                                                lambda frame: self._enqueue(live, frame),
                                                self._bulk_sender(live, ws), live.session.synced.wait))
        self.host.publish_all("peer.connected", {"device": device})
        logger.info("linked with %s (%s)", device[:7], "outbound" if initiator else "inbound")

        async def receive() -> bytes | None:
            msg = await ws.receive()
            while msg.type == aiohttp.WSMsgType.BINARY and ap.is_attachment_frame(msg.data):
                live.link.bytes_received += len(msg.data)
                await blobs.on_frame(bytes(msg.data))  # attachment frames: blob_transfer.py
                msg = await ws.receive()
            if msg.type in (aiohttp.WSMsgType.BINARY,):
                return bytes(msg.data)
            if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                return None
            if msg.type == aiohttp.WSMsgType.ERROR:
                raise LinkClosed(f"websocket error: {ws.exception()}")
            raise pp.ProtocolError(f"unexpected websocket message type {msg.type}")

        why = "cancelled"
        try:
            why = await run_session(live.session, receive)
        finally:
            live.link.closed = True
            self.transfers.link_down(blobs)
            live.outbox.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer, 5)
            with contextlib.suppress(Exception):
                await close()
            if self.links.get(device) is live:
                del self.links[device]
            self.last_seen[device] = time.time()
            live.ended.set()
            self.host.publish_all("peer.disconnected", {"device": device, "reason": why})
            logger.info("link with %s ended: %s", device[:7], why)
        return why

    def _raw_sender(self, ws: Any) -> Any:
        async def send(data: bytes) -> None:
            await ws.send_bytes(data)

        return send

    def _bulk_sender(self, live: _Live, ws: Any) -> Any:
        """Attachment chunks go straight to the websocket (not behind the outbox), so a
        note frame waits for at most the chunk on the wire, never a queue of them."""
        async def send(data: bytes) -> None:
            if live.link.closed:
                raise ConnectionError("the link is closed")
            live.link.bytes_sent += len(data)
            await ws.send_bytes(data)

        return send

    def _enqueuer(self, live: _Live) -> Any:
        async def send(data: bytes) -> None:
            self._enqueue(live, data)

        return send

    async def _writer(self, live: _Live, ws: Any) -> None:
        while True:
            frame = await live.outbox.get()
            if frame is None:
                return
            if isinstance(frame, asyncio.Event):  # flush_vault_links: all before it is sent
                frame.set()
                continue
            try:
                live.link.bytes_sent += len(frame)
                await ws.send_bytes(frame)
            except (ConnectionError, RuntimeError, aiohttp.ClientError) as exc:
                logger.info("send to %s failed: %s", live.link.device_id[:7], exc)
                return

    # -- the listener -------------------------------------------------------------------

    async def start(self, host: str, port: int) -> None:
        app = web.Application(client_max_size=pp.MAX_FRAME,
                              middlewares=[self.tls.middleware(join_paths=["/stet/join"])])
        app.router.add_get("/stet/peer", self._accept_peer)
        app.router.add_get("/stet/join", self._accept_join)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        with_header_deadline(self._runner)  # slow half-sent headers are cut off
        site = web.TCPSite(self._runner, host, port, ssl_context=self.tls.context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._session = aiohttp.ClientSession()

    async def stop(self) -> None:
        self._closing = True
        for task in self._dialers.values():
            task.cancel()
        for task in list(self._dialers.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._dialers.clear()
        for live in list(self.links.values()):
            self._end(live, "shutting down")
        for live in list(self.links.values()):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(live.ended.wait(), 5)
        await self.transfers.stop()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _accept_peer(self, request: web.Request) -> web.StreamResponse:
        info = request[PEER_TLS]
        device = info.device_id
        if info.join or device is None or device not in self.members():
            raise web.HTTPForbidden()
        ws = web.WebSocketResponse(max_msg_size=pp.MAX_FRAME, heartbeat=20)
        await ws.prepare(request)
        await self._run_link(device, False, ws, ws.close)
        return ws

    async def _accept_join(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=1024 * 1024)
        await ws.prepare(request)
        try:
            msg = await asyncio.wait_for(ws.receive(), 30)
            if msg.type != aiohttp.WSMsgType.BINARY:
                raise pp.ProtocolError("expected a join request")
            frame = pp.decode(bytes(msg.data))
            if frame.type != pp.JOIN:
                raise pp.ProtocolError("expected a join request")
            reply = await self._handle_join(frame)
            await ws.send_bytes(reply)
        except (TimeoutError, pp.ProtocolError, StetError) as exc:
            logger.warning("refused a join: %s", exc)
            with contextlib.suppress(Exception):
                await ws.send_bytes(pp.encode(pp.ERROR, {"code": "join_refused", "message": "join refused"}))
        await ws.close()
        return ws

    async def _handle_join(self, frame: pp.Frame) -> bytes:
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
                                              self.identity.cert_der, der)
        if key is None or not registry.use_invite(key, device):
            raise pp.ProtocolError("bad, expired or used invite")
        name = pp.field_str(frame.header, "name", max_len=200) if "name" in frame.header else ""
        member = Member(device, cert_pem, self.device_id, time.time(), False, name)
        runtime.service.add_member(member)
        self.membership_changed()
        logger.info("device %s joined vault %s", device[:7], runtime.entry.name)
        index = runtime.service.index.full_update()
        return pp.encode(pp.JOIN_OK, {"vault": vault_id, "name": runtime.entry.name}, index)

    # -- dialing ---------------------------------------------------------------------------

    def addresses(self) -> list[str]:
        out = list(self.config_addresses)
        members = self.members()
        for device, addrs in self.known_addresses.items():
            if device in members:
                out += addrs
        return list(dict.fromkeys(out))

    def refresh_dialers(self) -> None:
        if self._closing:
            return
        for address in self.addresses():
            if address not in self._dialers:
                self._wake[address] = asyncio.Event()
                self._dialers[address] = asyncio.create_task(self._dial_loop(address), name=f"dial:{address}")

    def kick(self, address: str | None = None) -> None:
        """Retry now (a discovery announcement, a new member)."""
        for addr, event in self._wake.items():
            if address is None or addr == address:
                event.set()

    def learned_address(self, device: str, address: str) -> None:
        addrs = self.known_addresses.setdefault(device, [])
        if address not in addrs:
            addrs.insert(0, address)
            del addrs[5:]
            self._save_addresses()
        self.refresh_dialers()
        self.kick(address)

    def _load_addresses(self) -> dict[str, list[str]]:
        if self.peers_file is None:
            return {}
        try:
            data = json.loads(self.peers_file.read_text())
            return {str(k): [str(a) for a in v] for k, v in data.items()}
        except (FileNotFoundError, ValueError, AttributeError):
            return {}

    def _save_addresses(self) -> None:
        if self.peers_file is None:
            return
        write_private_file(self.peers_file,
                           json.dumps(self.known_addresses, indent=1).encode())

    async def _dial_loop(self, address: str) -> None:
        backoff = BACKOFF_START_S
        wake = self._wake[address]
        while not self._closing:
            wake.clear()
            try:
                why = await self._dial(address)
                logger.debug("link via %s ended: %s", address, why)
                backoff = BACKOFF_START_S
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a dial failure of any kind: retry later
                logger.debug("dialing %s failed: %s", address, exc)
                backoff = min(BACKOFF_CAP_S, backoff * 2)
            delay = backoff * (0.75 + random.random() / 2)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), delay)

    async def _dial(self, address: str) -> str:
        if not self.members():
            return "no members to dial"
        assert self._session is not None
        ctx = client_context(self.identity, self.trusted_certs())
        async with self._session.ws_connect(
            f"wss://{address}/stet/peer", ssl=ctx, server_hostname=SYNC_SNI,
            max_msg_size=pp.MAX_FRAME, heartbeat=20, timeout=aiohttp.ClientWSTimeout(ws_close=5),
        ) as ws:
            der = peer_cert_der(ws)
            if der is None:
                return "no server certificate"
            from stet.sync.device_ids import device_id_of

            device = device_id_of(der)
            if device not in self.members():
                return "not a member"
            live = self.links.get(device)
            if live is not None and not live.link.closed and live.link.initiator == (
                    min(device, self.device_id) == self.device_id):
                await live.ended.wait()
                return "already linked"
            return await self._run_link(device, True, ws, ws.close)

    async def join(self, invite_text: str, name: str | None) -> tuple[str, bytes, str]:
        """Dial the inviter, prove the secret; returns (vault name, full index, inviter)."""
        invite = decode_invite(invite_text)
        if invite.expires_at < time.time():
            raise StetError("the invite has expired: ask for a new one (stet invite)")
        assert self._session is not None
        last: Exception | None = None
        for address in invite.addresses:
            try:
                return await self._join_at(invite, address, name)
            except StetError:
                raise
            except Exception as exc:
                last = exc
        raise StetError(f"could not reach the inviting device at {', '.join(invite.addresses)}: {last}")

    async def _join_at(self, invite: Invite, address: str, name: str | None) -> tuple[str, bytes, str]:
        from stet.sync.device_ids import device_id_of, normalize_device_id

        assert self._session is not None
        async with self._session.ws_connect(
            f"wss://{address}/stet/join", ssl=join_client_context(self.identity), server_hostname=JOIN_SNI,
            max_msg_size=pp.MAX_FRAME, timeout=aiohttp.ClientWSTimeout(ws_close=5),
        ) as ws:
            der = peer_cert_der(ws)
            if der is None or device_id_of(der) != normalize_device_id(invite.device_id):
                raise StetError("the device at that address is not the one that made the invite")
            proof = await invite_crypto.proof_for_secret(invite.secret, invite.vault_id, der,
                                                         self.identity.cert_der)
            await ws.send_bytes(pp.encode(pp.JOIN, {
                "vault": invite.vault_id, "device": self.device_id, "proof": proof,
                "cert_pem": self.identity.cert_pem.decode(), "name": name or "",
            }))
            msg = await asyncio.wait_for(ws.receive(), 30)
            if msg.type != aiohttp.WSMsgType.BINARY:
                raise StetError("the inviting device closed the connection")
            frame = pp.decode(bytes(msg.data))
            if frame.type != pp.JOIN_OK:
                raise StetError("the invite was refused (already used, expired, or not valid)")
            self.learned_address(device_id_of(der), address)
            return str(frame.header.get("name") or "vault"), frame.payload, device_id_of(der)
