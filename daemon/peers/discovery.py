"""Finding peers on the local network with mDNS/DNS-SD (zeroconf), SPEC §4.4.

We announce ``_stet._tcp.local.`` with the device ID and the peer port only: the
instance is named after the device ID, the TXT record holds ``id=<device ID>`` and
nothing else, and the host name is derived from the ID too, so no vault, note or
machine name leaves the device. We browse for the same type and report each other
device with ``on_found(device_id, host, port)`` (on add and on update); a daemon hears
its own announcement, which is skipped.

An announcement is a hint, never an identity: anyone on the network can announce any
ID. Whoever connects checks the peer's certificate (``peer_tls``).

``interfaces`` are IP addresses (zeroconf's form), e.g. ``["127.0.0.1"]`` in tests,
which keeps every packet on the loopback interface; ``None`` means every interface.
Registration probes for ~1.5 s, so it runs in the background: entering the context
does not wait for it (``registered`` is set when it is done).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

import ifaddr
from zeroconf import InterfaceChoice, NonUniqueNameException, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from stet.sync.device_ids import normalize_device_id, short_id

logger = logging.getLogger(__name__)

SERVICE_TYPE = "_stet._tcp.local."
TXT_ID_KEY = b"id"
MAX_PENDING_RESOLVES = 64  # a noisy network cannot make us start unbounded work


class PeerDiscovery:
    """Announce this device and report others; an async context manager."""

    def __init__(
        self,
        device_id: str,
        port: int,
        on_found: Callable[[str, str, int], None],
        interfaces: list[str] | None,
        *,
        addresses: list[str] | None = None,
        on_lost: Callable[[str], None] | None = None,
        resolve_timeout_s: float = 3.0,
    ) -> None:
        self.device_id = normalize_device_id(device_id)
        self.port = port
        self.on_found = on_found
        self.on_lost = on_lost
        self.interfaces = interfaces
        self.addresses = addresses if addresses is not None else _addresses_to_announce(interfaces)
        self.resolve_timeout_ms = int(resolve_timeout_s * 1000)
        self.registered = asyncio.Event()
        self.seen_self = asyncio.Event()  # our own announcement came back: mDNS works here
        self.peers: dict[str, tuple[str, int]] = {}  # device ID -> (host, port), as last announced
        self._names: dict[str, str] = {}  # service instance name -> device ID
        self._resolving: dict[str, asyncio.Task[None]] = {}
        self._zc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._register_task: asyncio.Task[None] | None = None
        compact = self.device_id.replace("-", "")
        self._info = AsyncServiceInfo(
            SERVICE_TYPE,
            f"{self.device_id}.{SERVICE_TYPE}",
            port=port,
            properties={TXT_ID_KEY: self.device_id.encode("ascii")},
            server=f"{compact.lower()}.local.",
            parsed_addresses=self.addresses,
        )

    async def __aenter__(self) -> PeerDiscovery:
        interfaces: Any = self.interfaces if self.interfaces is not None else InterfaceChoice.All
        self._zc = AsyncZeroconf(interfaces=interfaces)
        self._browser = AsyncServiceBrowser(self._zc.zeroconf, SERVICE_TYPE, handlers=[self._on_change])
        self._register_task = asyncio.create_task(self._register(), name="mdns-register")
        logger.info("mDNS: announcing %s on port %d at %s", short_id(self.device_id), self.port,
                    ", ".join(self.addresses) or "no address")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        tasks = [t for t in (self._register_task, *self._resolving.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._resolving.clear()
        if self._browser is not None:
            await self._browser.async_cancel()
        if self._zc is not None:
            if self.registered.is_set():
                with contextlib.suppress(Exception):  # goodbyes are best effort at shutdown
                    await self._zc.async_unregister_all_services()
            await self._zc.async_close()

    async def _register(self) -> None:
        assert self._zc is not None
        try:
            await (await self._zc.async_register_service(self._info))
        except NonUniqueNameException:
            logger.error("mDNS: another device announces our device ID %s (a copied home?): not "
                         "announcing", short_id(self.device_id))
            return
        self.registered.set()
        logger.debug("mDNS: registered %s", self._info.name)

    # -- browsing -------------------------------------------------------------------

    def _on_change(self, zeroconf: Zeroconf, service_type: str, name: str,
                   state_change: ServiceStateChange) -> None:
        if state_change is ServiceStateChange.Removed:
            device_id = self._names.pop(name, None)
            if device_id is not None and device_id != self.device_id:
                self.peers.pop(device_id, None)
                if self.on_lost is not None:
                    self._call(self.on_lost, device_id)
            return
        if name in self._resolving:
            return  # the pending resolve will read the latest records
        if len(self._resolving) >= MAX_PENDING_RESOLVES:
            logger.debug("mDNS: too many pending resolves, ignoring %s", name)
            return
        task = asyncio.create_task(self._resolve(zeroconf, name), name="mdns-resolve")
        self._resolving[name] = task
        task.add_done_callback(lambda _t: self._resolving.pop(name, None))

    async def _resolve(self, zeroconf: Zeroconf, name: str) -> None:
        info = AsyncServiceInfo(SERVICE_TYPE, name)
        if not await info.async_request(zeroconf, self.resolve_timeout_ms):
            logger.debug("mDNS: %s did not answer in time", name)
            return
        raw = info.properties.get(TXT_ID_KEY)
        try:
            device_id = normalize_device_id(raw.decode("ascii")) if raw else ""
        except (UnicodeDecodeError, ValueError):
            device_id = ""
        if not device_id or info.port is None:
            logger.debug("mDNS: ignoring %s: no valid id or port", name)
            return
        self._names[name] = device_id
        if device_id == self.device_id:
            self.seen_self.set()
            return
        host = _best_address(info.parsed_scoped_addresses())
        if host is None:
            logger.debug("mDNS: %s (%s) announced no address", name, short_id(device_id))
            return
        self.peers[device_id] = (host, info.port)
        logger.debug("mDNS: found %s at %s port %d", short_id(device_id), host, info.port)
        self._call(self.on_found, device_id, host, info.port)

    @staticmethod
    def _call(callback: Callable[..., None], *args: Any) -> None:
        try:
            callback(*args)
        except Exception:
            logger.exception("mDNS: a discovery callback failed")


def _best_address(addresses: list[str]) -> str | None:
    """IPv4 first (no scope to get wrong), then global IPv6, then anything."""
    def rank(text: str) -> int:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
        return 0 if ip.version == 4 else 2 if ip.is_link_local else 1
    return min(addresses, key=rank, default=None)


def _addresses_to_announce(interfaces: list[str] | None) -> list[str]:
    if interfaces is not None:
        return [a for a in interfaces if _is_ip(a) and not ipaddress.ip_address(a).is_unspecified]
    found: list[str] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if ip.is_IPv4 and isinstance(ip.ip, str) and not ipaddress.ip_address(ip.ip).is_loopback:
                found.append(ip.ip)
    return sorted(set(found))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True

