"""mDNS discovery on the loopback interface only: two daemons find each other, not themselves.

Every zeroconf socket here is bound to 127.0.0.1 (``interfaces=["127.0.0.1"]``), so no
packet leaves the loopback interface. Other processes on this machine may announce on the
loopback too (a parallel test run, a daemon): each test uses fresh random device IDs and
asserts only about its own.
"""

from __future__ import annotations

import asyncio
import secrets

import pytest
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from stet.daemon.peers.discovery import SERVICE_TYPE, PeerDiscovery
from stet.sync.device_ids import device_id_from_fingerprint

LOOPBACK = ["127.0.0.1"]
DEADLINE_S = 15.0  # registration probes for ~1.5 s; generous for a loaded CI machine



def new_id() -> str:
    return device_id_from_fingerprint(secrets.token_bytes(32))


class Finds:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.changed = asyncio.Event()

    def __call__(self, device_id: str, host: str, port: int) -> None:
        self.calls.append((device_id, host, port))
        self.changed.set()

    async def wait_for(self, device_id: str) -> None:
        async def until_found() -> None:
            while not any(c[0] == device_id for c in self.calls):
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(until_found(), DEADLINE_S)


async def test_two_devices_find_each_other_and_ignore_themselves() -> None:
    id_a, id_b = new_id(), new_id()
    finds_a, finds_b = Finds(), Finds()
    async with PeerDiscovery(id_a, 41001, finds_a, LOOPBACK) as a, \
            PeerDiscovery(id_b.lower(), 41002, finds_b, LOOPBACK) as b:
        await finds_a.wait_for(id_b)
        await finds_b.wait_for(id_a)
        # Each hears its own announcement too, and skips it.
        await asyncio.wait_for(asyncio.gather(a.seen_self.wait(), b.seen_self.wait()), DEADLINE_S)
        assert id_a not in {c[0] for c in finds_a.calls}
        assert id_b not in {c[0] for c in finds_b.calls}
        assert (id_b, "127.0.0.1", 41002) in finds_a.calls
        assert (id_a, "127.0.0.1", 41001) in finds_b.calls
        assert id_a not in a.peers
        assert a.peers[id_b] == ("127.0.0.1", 41002)
        assert id_b not in b.peers
        assert b.peers[id_a] == ("127.0.0.1", 41001)


async def test_the_announcement_carries_only_the_device_id_and_port() -> None:
    id_a = new_id()
    async with PeerDiscovery(id_a, 41003, Finds(), LOOPBACK) as a:
        await asyncio.wait_for(a.registered.wait(), DEADLINE_S)
        observer = AsyncZeroconf(interfaces=LOOPBACK)
        try:
            info = AsyncServiceInfo(SERVICE_TYPE, f"{id_a}.{SERVICE_TYPE}")
            assert await info.async_request(observer.zeroconf, 5000)
        finally:
            await observer.async_close()
    assert info.properties == {b"id": id_a.encode()}  # the exact TXT keys: nothing else
    assert info.port == 41003
    assert info.parsed_addresses() == ["127.0.0.1"]
    assert info.server == f"{id_a.replace('-', '').lower()}.local."
    assert info.name == f"{id_a}.{SERVICE_TYPE}"


async def test_bad_announcements_and_a_failing_callback_do_not_stop_discovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    id_a, id_b = new_id(), new_id()
    broken_calls = Finds()

    def broken(device_id: str, host: str, port: int) -> None:
        broken_calls(device_id, host, port)
        raise RuntimeError("callback bug")

    finds = Finds()
    async with PeerDiscovery(id_a, 41004, broken, LOOPBACK) as a, \
            PeerDiscovery(id_b, 41005, finds, LOOPBACK):
        rogue = AsyncZeroconf(interfaces=LOOPBACK)
        try:
            label = f"bogus-{secrets.token_hex(4)}"
            bogus = AsyncServiceInfo(SERVICE_TYPE, f"{label}.{SERVICE_TYPE}", port=1,
                                     properties={b"id": b"not-a-device-id"}, server=f"{label}.local.",
                                     parsed_addresses=["127.0.0.1"])
            await (await rogue.async_register_service(bogus))
            await finds.wait_for(id_a)
            assert all(c[2] != 1 for c in finds.calls)  # the bogus announcement (port 1) is ignored
            await broken_calls.wait_for(id_b)  # the failing callback was called, logged, survived
            assert any("callback failed" in r.getMessage() for r in caplog.records)
            assert a.peers[id_b] == ("127.0.0.1", 41005)
        finally:
            await rogue.async_close()


def test_a_malformed_device_id_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="not a device ID"):
        PeerDiscovery("nope", 1, Finds(), LOOPBACK)
