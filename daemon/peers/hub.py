"""Peers: the registry of live links and the wiring of the parts that run them.

``PeerHub`` owns every link to another device (``links``: one per device) and what they
share: the members (trust, membership checks, who may hear which vault), local changes
queued to every link of their vault, in order, behind the outbound gate, and the flush
before a vault is left. The parts, joined here by composition:

- ``peer_server.PeerServer``: the TLS listener (accepting links, joins, blob channels);
- ``peer_dialer.PeerDialer``: addresses (manual, learned, mDNS), dial loops with backoff;
- ``peer_links.LinkRunner``: running one link (receive loop, writer, senders);
- ``link_channels.LinkChannels``: a link's blob channel, both ends;
- ``peer_joins``: the join handshake, both sides;
- ``live_link.LiveLink``: one link's state (outbox, blob channel ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp

from stet.daemon.identity.device_cert import DeviceIdentity, cert_der_of
from stet.daemon.notes.changes import Destruction
from stet.daemon.notes.outbound_gate import OutboundGate
from stet.daemon.peers import joins as peer_joins
from stet.daemon.peers import link as live_link
from stet.daemon.peers.blobs import channel as blob_channel
from stet.daemon.peers.blobs.link_channels import LinkChannels
from stet.daemon.peers.blobs.transfer import BlobTransfers, vault_references
from stet.daemon.peers.dialer import PeerDialer
from stet.daemon.peers.host import HubVault, PeerHost
from stet.daemon.peers.link import OUTBOX_LIMIT, LiveLink
from stet.daemon.peers.links import LinkRunner
from stet.daemon.peers.server import PeerServer
from stet.daemon.peers.session import VaultAccess
from stet.daemon.peers.tls import ServerTLS
from stet.sync import peer_protocol as pp
from stet.sync.change_kinds import ChangeKind, Source
from stet.sync.vault_index import Member

if TYPE_CHECKING:
    from stet.daemon.notes.changes import Change

logger = logging.getLogger(__name__)

__all__ = ["OUTBOX_LIMIT", "LiveLink", "PeerHub"]


class PeerHub:
    def __init__(
        self,
        host: PeerHost,
        identity: DeviceIdentity,
        gate: OutboundGate,
        *,
        addresses: Sequence[str] = (),
        peers_file: Path | None = None,
        device_name: Callable[[], str] = str,
        max_concurrent_joins: int = 2,
        join_attempts_per_minute: int = 10,
    ) -> None:
        """``host``: the daemon (its vaults, registry, events), as a narrow Protocol;
        ``addresses``: ``[peer] addresses`` to dial; ``peers_file``: where addresses learned
        per device are kept (``peers.json``; None: not kept)."""
        self.host = host
        self.gate = gate  # what peers may not hear yet (the brake, the delete delay)
        self.identity = identity
        self.device_id = identity.device_id
        # This device's name (``stet init/join --device-name``), read when asked: what the
        # members show for its changes (``disk on laptop``) and in ``stet devices``.
        self.device_name = device_name
        self.tls = ServerTLS(identity, self.trusted_certs())
        self.links: dict[str, LiveLink] = {}
        self._membership_check = False  # a check of the members is scheduled
        self._members_seen: list[tuple[str, str]] | None = None
        self.blob_thread = blob_channel.ChannelReaders()  # read every blob channel, off the main loop
        self.last_seen: dict[str, float] = {}  # device -> when a link with it was last up (this run)
        # Attachment blobs over the links (SPEC §3.14): the home's BlobFetcher, given to
        # the folder side before any vault opens; what lands is handed back to it.
        attachments = host.attachments
        self.transfers = BlobTransfers(attachments.blobs, vault_references(lambda: self.host.vaults))
        self.transfers.arrived.append(attachments.blob_arrived)
        attachments.fetcher = self.transfers
        self.channels = LinkChannels(identity, self.blob_thread, self.links, self.members, self.trusted_certs,
                                     lambda device: self.dialer.known_addresses.get(device, []))
        self.runner = LinkRunner(self.device_id, self.links, self.last_seen, self.accesses, self.transfers,
                                 self.channels, host.publish_all)
        self.dialer = PeerDialer(identity, self.links, self.members, self.trusted_certs, self.runner.run,
                                 addresses=addresses, peers_file=peers_file)
        self.joins = peer_joins.JoinDesk(host, identity, self.membership_changed,
                                         max_concurrent=max_concurrent_joins)
        self.server = PeerServer(self.tls, self.members, self.runner.run, self.joins,
                                 self.channels.accept, join_attempts_per_minute=join_attempts_per_minute)

    @property
    def port(self) -> int:
        """The peer port (0 until started)."""
        return self.server.port

    @property
    def known_addresses(self) -> dict[str, list[str]]:
        """Addresses learned per device (``peers.json``)."""
        return self.dialer.known_addresses

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
                                   settle=functools.partial(runtime.settle_soon, self.outboxes_empty),
                                   room=runtime.room_for_new_notes)
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
        name = self.device_name()
        current = index.members().get(self.device_id)
        if current is None:
            member = Member(self.device_id, self.identity.cert_pem.decode(), self.device_id, time.time(),
                            name=name, platform=sys.platform)
        elif (current.name, current.platform) != (name, sys.platform) and not current.removed:
            # renamed (`stet init --device-name`), or the platform declared (by an older
            # Stet's entry, or the one the inviter wrote at the join)
            member = dataclasses.replace(current, name=name, platform=sys.platform)
        else:
            return
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
        due = self.gate.clock() + self._delay(vault_id, change) if self._destroys(vault_id, change) else None
        self.gate.defer(vault_id, change.note_id, functools.partial(self._send_now, vault_id, change), due)

    def _delay(self, vault_id: str, change: Change) -> float:
        """How long the change waits: the delete delay, none for git's burst (SPEC §3.16)."""
        runtime = self.host.vaults.get(vault_id)
        return float(runtime.service.delete_delay_for(change.source)) if runtime is not None else 0.0

    def _destroys(self, vault_id: str, change: Change) -> bool:
        if change.kind != ChangeKind.CHANGED or change.device is not None:
            return False
        if self._delay(vault_id, change) <= 0:
            return False
        return change.destruction in (Destruction.EMPTIED, Destruction.SHRINK)  # classified once

    def _send_now(self, vault_id: str, change: Change) -> None:
        for live in list(self.links.values()):
            if vault_id in live.link.vaults and live.frames is not None:
                live.frames.add(vault_id, change)  # framed with the rest of this turn's

    def _enqueue(self, live: LiveLink, frame: bytes) -> None:
        live_link.enqueue(live, frame)

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

    def _end(self, live: LiveLink, why: str) -> None:
        """End a link (``vault_routes`` ends those of a vault it removes)."""
        live_link.end(live, why)

    # -- start, stop, dialing, joining ---------------------------------------------------

    async def start(self, host: str, port: int) -> None:
        await self.server.start(host, port)
        self.dialer.session = aiohttp.ClientSession()
        self.blob_thread.start()

    async def stop(self) -> None:
        await self.dialer.stop()
        for live in list(self.links.values()):
            self._end(live, "shutting down")
        for live in list(self.links.values()):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(live.ended.wait(), 5)
        await self.transfers.stop()
        await self.blob_thread.stop()
        if self.dialer.session is not None:
            await self.dialer.session.close()
        await self.server.stop()

    def addresses(self) -> list[str]:
        return self.dialer.addresses()

    def refresh_dialers(self) -> None:
        self.dialer.refresh()

    def kick(self, address: str | None = None) -> None:
        """Retry now (a discovery announcement, a new member)."""
        self.dialer.kick(address)

    def learned_address(self, device: str, address: str) -> None:
        self.dialer.learned_address(device, address)

    async def join(self, invite_text: str, name: str | None) -> tuple[str, bytes, str]:
        """Dial the inviter, prove the secret; returns (vault name, full index, inviter).
        ``name``: the vault's local name (kept here); the inviter is told this device's name."""
        return await peer_joins.join(self.dialer.session, self.identity, invite_text, self.device_name(),
                                     self.learned_address)
