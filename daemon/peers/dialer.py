"""Dialing: the addresses to dial (``[peer] addresses``, those learned per device at
pairing or by mDNS and kept in ``peers.json``), one dial loop per address with backoff
(0.5 s doubling to 30 s, at once on a kick), and the dial itself: a mutual-TLS websocket
to a member, handed to the link runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from stet.daemon.identity.device_cert import DeviceIdentity
from stet.daemon.peers.link import LiveLink
from stet.daemon.peers.tls import SYNC_SERVER_NAME as SYNC_SNI
from stet.daemon.peers.tls import client_context, peer_cert_der
from stet.sync import peer_protocol as pp
from stet.sync.home import write_private_file
from stet.sync.vault_index import Member

logger = logging.getLogger(__name__)

BACKOFF_START_S = 0.5
BACKOFF_CAP_S = 30.0

# Runs a dialed websocket as a link: (device, initiator, ws, close, address) -> why it ended.
RunLink = Callable[[str, bool, Any, Any, str], Awaitable[str]]


class PeerDialer:
    def __init__(self, identity: DeviceIdentity, links: Mapping[str, LiveLink],
                 members: Callable[[], dict[str, Member]], trusted_certs: Callable[[], list[bytes]],
                 run_link: RunLink, *, addresses: Sequence[str] = (),
                 peers_file: Path | None = None) -> None:
        self.identity = identity
        self.device_id = identity.device_id
        self.links = links
        self.members = members
        self.trusted_certs = trusted_certs
        self.run_link = run_link
        self.config_addresses = list(addresses)
        self.peers_file = peers_file
        self.known_addresses: dict[str, list[str]] = self._load_addresses()
        self.session: aiohttp.ClientSession | None = None  # dials and joins (the hub opens it)
        self.closing = False
        self._dialers: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}

    def addresses(self) -> list[str]:
        out = list(self.config_addresses)
        members = self.members()
        for device, addrs in self.known_addresses.items():
            if device in members:
                out += addrs
        return list(dict.fromkeys(out))

    def refresh(self) -> None:
        """A dial loop for every address not dialed yet."""
        if self.closing:
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
        self.refresh()
        self.kick(address)

    async def stop(self) -> None:
        """No more dialing: every dial loop is cancelled and waited for."""
        self.closing = True
        for task in self._dialers.values():
            task.cancel()
        for task in list(self._dialers.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._dialers.clear()

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
        while not self.closing:
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
        assert self.session is not None
        ctx = client_context(self.identity, self.trusted_certs())
        async with self.session.ws_connect(
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
            return await self.run_link(device, True, ws, ws.close, address)
