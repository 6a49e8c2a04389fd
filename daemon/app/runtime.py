"""The daemon's running parts, started and stopped in one place and a known order.

``Daemon`` owns the vaults (each a store, a notes service, a file bridge and a
watcher), the HTTP API (TCP on loopback and a unix socket) and ``daemon.json``.
Shutdown stops accepting requests, flushes pending disk writes, stops watchers and
closes stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import json
import logging
import os
import time
from collections.abc import Collection
from typing import Any

from aiohttp import web

from stet.daemon import __version__
from stet.daemon.api.app import check_token
from stet.daemon.app.http import build_app
from stet.daemon.app.vault_runtime import VaultRuntime
from stet.daemon.attachments.brake import AttachmentGates
from stet.daemon.attachments.home_parts import Attachments
from stet.daemon.attachments.status import transfers
from stet.daemon.base.activity import Activity
from stet.daemon.base.health import Health, Problem
from stet.daemon.base.memory import (
    freeze_startup_objects,
)
from stet.daemon.base.slow_clients import with_header_deadline
from stet.daemon.base.turn_memo import TurnMemo
from stet.daemon.identity.device_cert import DeviceIdentity
from stet.daemon.identity.startup_secrets import load_startup_secrets
from stet.daemon.live.routes import HUB_KEY
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.outbound_gate import OutboundGate
from stet.daemon.notes.write_guard import check_writable
from stet.daemon.ops.attachment_versions import AttachmentVersionOps, conflicts_of
from stet.daemon.ops.notes import OWNER, NoteOperations, Principal
from stet.daemon.ops.open_streams import OpenStreams
from stet.daemon.peers.hub import PeerHub
from stet.sync.config import Config
from stet.sync.device_name import read_device_name
from stet.sync.errors import NotFound, StetError
from stet.sync.home import HomeRegistry, VaultEntry, token_hash, write_private_file
from stet.sync.home_layout import HomeLayout
from stet.sync.permissions import Scopes

logger = logging.getLogger(__name__)

TOKEN_USE_STALE_S = 60.0
AGENT_CACHE_SIZE = 256  # agent tokens remembered at once (all forgotten when full)


class Daemon:
    def __init__(self, layout: HomeLayout, config: Config) -> None:
        self.layout = layout
        self.config = config
        self.registry = HomeRegistry(layout)
        self.vaults: dict[str, VaultRuntime] = {}
        self.owner_token = ""
        self.api_port = 0
        self.started_at = time.time()
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self._lock_fd: int | None = None
        self.events = EventBus()
        self.gate = OutboundGate()  # what peers may not hear yet (brake, delete delay)
        self.activity = Activity(layout.starting_json)
        self._open_lock = asyncio.Lock()
        self._token_use: dict[str, float] = {}  # token name -> last use, not yet recorded
        self._token_recorded: dict[str, float] = {}  # token name -> last use recorded in home.db
        self._agents: dict[str, tuple[int, Principal]] = {}  # token -> (home.db data_version, who)
        self._home_version = TurnMemo(lambda: self.registry.data_version())
        # SSE streams and live sockets, by credential: a revoked token's are closed (finding 1).
        self.streams = OpenStreams()
        self.streams.add_check(self._revoked_holders)
        self._streams_home_version: int | None = None
        self.identity: DeviceIdentity | None = None
        self.peers: PeerHub | None = None
        self.discovery: Any = None
        # What is broken now (a supervised task that raised): `stet status`, `stet doctor`.
        self.health = Health()
        self.health.on_change.append(self._health_changed)
        # blobs, fetcher, gate (SPEC §3.14)
        self.attachments = Attachments(layout.root, config, health=self.health)
        self.attachment_gates = AttachmentGates()  # the brake's, one per vault (SPEC §5.6)
        self.attachments.gate = self.attachment_gates

    # -- vaults -------------------------------------------------------------------

    def vault(self, ref: str) -> VaultRuntime:
        for v in self.vaults.values():
            if ref in (v.entry.id, v.entry.name):
                return v
        raise NotFound(f"no vault named {ref!r}", vault=ref)

    def vault_for(self, ref: str, principal: Principal) -> VaultRuntime:
        """The vault ``ref`` as ``principal`` may use it: a vault of another token's is "not
        found" in the very words of a vault that does not exist (issue 33, finding 9)."""
        for v in self.vaults.values():
            if ref in (v.entry.id, v.entry.name) and principal.vault_id in (None, v.entry.id):
                return v
        raise NotFound(f"no vault named {ref!r}", vault=ref)

    async def _open_vault(self, entry: VaultEntry) -> VaultRuntime:
        """Open a vault once: its first rescan lets the loop run, so a second caller
        (a reload while a join opens it) must wait for the first, not open it again."""
        async with self._open_lock:
            existing = self.vaults.get(entry.id)
            if existing is not None:
                return existing
            return await self._open_new_vault(entry)

    async def _open_new_vault(self, entry: VaultEntry) -> VaultRuntime:
        runtime = await VaultRuntime.open(entry, self)
        self.vaults[entry.id] = runtime
        if self.peers is not None:
            self.peers.ensure_self_member(runtime)
            self.peers.membership_changed()
            self.peers.refresh_dialers()
        runtime.start_indexing()
        return runtime

    def publish_all(self, type_: str, data: dict[str, Any]) -> None:
        for vault_id in self.vaults:
            self.events.publish(vault_id, type_, data)

    async def process_pending_joins(self) -> list[dict[str, Any]]:
        """Carry out `stet join` requests: dial the inviter, register, import, sync."""
        results = []
        assert self.peers is not None
        for vault_id, invite, path, name, _error in self.registry.pending_joins():
            try:
                vault_name, index_update, inviter = await self.peers.join(invite, name)
                path.mkdir(parents=True, exist_ok=True)
                entry = self.registry.add_with_id(vault_id, name or vault_name, path)
                runtime = self.vaults.get(entry.id) or await self._open_vault(entry)
                runtime.service.apply_remote_index(index_update, inviter)
                self.peers.membership_changed()
                self.peers.refresh_dialers()
                self.registry.finish_pending_join(vault_id, None)
                results.append({"vault": entry.name, "id": vault_id, "path": str(path), "joined": True})
                logger.info("joined vault %s at %s", entry.name, path)
            except StetError as exc:
                self.registry.finish_pending_join(vault_id, exc.message)
                results.append({"id": vault_id, "joined": False, "error": exc.message})
                logger.error("joining vault %s failed: %s", vault_id, exc.message)
        return results

    def operations(self, ref: str, principal: Principal) -> NoteOperations:
        """The operations of a vault for one caller (a token of another vault: not found)."""
        runtime = self.vault_for(ref, principal)
        ops = NoteOperations(
            runtime.service, self.events, principal,
            extensions=self.config.notes.extensions, max_bytes=self.config.notes.max_bytes,
            search=runtime.records.index, versions=runtime.versions, brake=runtime.brake,
            write_guard=lambda path: check_writable(runtime.bridge.root, runtime.bridge.rules, path),
        )
        ops.attachment_conflicts = functools.partial(conflicts_of, runtime)
        return ops

    def attachment_versions(self, ref: str, principal: Principal) -> AttachmentVersionOps:
        """The attachment versions of a vault for one caller (a token of another vault: not found)."""
        runtime = self.vault_for(ref, principal)
        return AttachmentVersionOps(runtime.entry.id, runtime.store, self.attachments.blobs,
                                    runtime.attachments, principal.scopes, self.config.attachments.keep_bytes)

    async def _start_discovery(self) -> None:
        """mDNS: announce our device ID and port; dial members we hear of at once."""
        if not self.config.peer.mdns or self.peers is None or self.identity is None:
            return
        from stet.daemon.peers.discovery import PeerDiscovery

        hub = self.peers

        def found(device: str, host: str, port: int) -> None:
            if device in hub.members():
                address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                hub.learned_address(device, address)

        try:
            self.discovery = PeerDiscovery(self.identity.device_id, hub.port, found,
                                           list(self.config.peer.mdns_interfaces) or None)
            await self.discovery.__aenter__()
        except Exception as exc:
            logger.warning("mDNS discovery is off: %s", exc)
            self.discovery = None

    async def _housekeeping(self) -> None:
        """Once a minute: record tokens' last use, prune old revision states and keys."""
        from stet.sync.idempotency import IdempotencyKeys
        from stet.sync.snapshots import Snapshots

        while True:
            await asyncio.sleep(60)
            try:
                self.flush_token_use()
                now = time.time()
                for runtime in self.vaults.values():
                    runtime.service.revisions.prune(now)
                    IdempotencyKeys(runtime.store).prune(now)
                    Snapshots(runtime.store).prune(now)
            except Exception:
                logger.exception("housekeeping failed")

    async def reload_vaults(self) -> list[str]:
        """Open vaults registered since start (``stet init`` while running)."""
        opened = []
        for entry in self.registry.vaults():
            if entry.id not in self.vaults:
                if not entry.path.is_dir():
                    logger.error("vault %s: folder %s is missing; not opened", entry.name, entry.path)
                    continue
                await self._open_vault(entry)
                opened.append(entry.name)
        return opened

    async def close_vault(self, vault_id: str) -> bool:
        """Stop an open vault and close its store, its folder left as it is (``stet vault
        remove``); False if it was not open."""
        runtime = self.vaults.pop(vault_id, None)
        if runtime is None:
            return False
        await self._close_vault(runtime)
        return True

    async def _close_vault(self, runtime: VaultRuntime) -> None:
        await runtime.close()

    # -- auth & status ----------------------------------------------------------------

    def authenticate(self, token: str) -> Principal | None:
        """The owner, or a live agent token. Agent tokens are remembered while home.db is
        unchanged by anyone else (SQLite's ``data_version``): a `stet token revoke` or
        `create` from the CLI changes it, so revocation still takes effect at once."""
        if self.owner_token and check_token(token, self.owner_token):
            return OWNER
        version = self._home_version.get()  # once per loop turn (turn_memo.py)
        cached = self._agents.get(token)
        if cached is None or cached[0] != version:
            record = self.registry.lookup_token(token)
            if record is None:
                self._agents.pop(token, None)
                return None
            if len(self._agents) >= AGENT_CACHE_SIZE:
                self._agents.clear()
            principal = Principal("agent", record.name, record.vault_id, Scopes.from_json(record.scopes),
                                  holder="token:" + token_hash(token))
            cached = self._agents[token] = (version, principal)
            self._token_recorded.setdefault(record.name, record.last_used_at or 0.0)
        principal = cached[1]
        now = time.time()
        self._token_use[principal.name] = now
        if now - self._token_recorded.get(principal.name, 0.0) > TOKEN_USE_STALE_S:
            # A token's first use (and a use after a quiet minute) shows in `stet token list`
            # at once; busier use is recorded by the housekeeping, once a minute.
            self.flush_token_use()
        return principal

    def forget_agent_tokens(self) -> None:
        """Drop the token cache: after this process itself revoked a token (its own commit
        to home.db does not change the ``data_version`` the cache watches). The revoked
        token's open streams are closed here and now."""
        self._agents.clear()
        self._streams_home_version = None
        self.streams.check_now()

    def _revoked_holders(self, holders: Collection[str]) -> dict[str, str]:
        """Of the agent tokens with open streams, those no longer in home.db (revoked).
        Looks at the token table only when home.db changed (``data_version``), or after
        ``forget_agent_tokens``."""
        version = self.registry.data_version()
        if version == self._streams_home_version:
            return {}
        self._streams_home_version = version
        hashes = {h.removeprefix("token:") for h in holders if h.startswith("token:")}
        live = self.registry.live_token_hashes(hashes) if hashes else set()
        return {"token:" + h: "the token was revoked" for h in hashes - live}

    def flush_token_use(self) -> None:
        if self._token_use:
            used, self._token_use = self._token_use, {}
            self.registry.touch_tokens(used)
            self._token_recorded.update(used)

    def status(self) -> dict[str, Any]:
        return {
            "version": __version__,
            "pid": os.getpid(),
            "home": str(self.layout.root),
            "apiUrl": f"http://127.0.0.1:{self.api_port}",
            "startedAt": self.started_at,
            "deviceId": self.identity.device_id if self.identity is not None else None,
            "peerPort": self.peers.port if self.peers is not None else None,
            "peers": [
                {"device": d, "vaults": sorted(live.link.vaults), "initiator": live.link.initiator,
                 "bytesSent": live.link.bytes_sent, "bytesReceived": live.link.bytes_received,
                 # of which on its blob channel (daemon/peers/blobs/channel.py)
                 "channelBytesSent": live.channel_sent, "channelBytesReceived": live.channel_received}
                for d, live in (self.peers.links.items() if self.peers is not None else [])
            ],
            "vaults": [v.describe() for v in self.vaults.values()],
            # attachment blobs arriving from peers
            "transfers": transfers(self.attachments.fetcher if getattr(self, "attachments", None) else None),
            "health": self.health.to_json(self._vault_names()),  # {"ok", "problems"} (base/health.py)
            "liveSockets": self._live_socket_count(),  # live editors connected (y-websocket)
        }

    def _live_socket_count(self) -> int:
        hub = self._runner.app.get(HUB_KEY) if self._runner is not None else None
        return hub.connection_count() if hub is not None else 0

    def _vault_names(self) -> dict[str, str]:
        return {vid: v.entry.name for vid, v in self.vaults.items()}

    def _health_changed(self, vault_id: str, what: str, problem: Problem) -> None:
        """``health.changed`` on the vault's stream (every vault's, for the home's own tasks)."""
        data = {"state": what, "healthy": not self.health.problems(),
                "problem": problem.to_json(self._vault_names())}
        if vault_id in self.vaults:
            self.events.publish(vault_id, "health.changed", data)
        else:
            self.publish_all("health.changed", data)

    # -- lifecycle --------------------------------------------------------------------

    async def _acquire_home_lock(self) -> None:
        """Take the home's lock, or refuse to start: a second daemon on one home would
        share its stores and folders and take over its socket and ``daemon.json``."""
        self.layout.ensure()
        fd = os.open(self.layout.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        # A CLI checking for a daemon holds a shared lock for microseconds: retry briefly.
        for attempt in range(20):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 19:
                    os.close(fd)
                    raise StetError(f"another daemon is already running for {self.layout.root}") from None
                await asyncio.sleep(0.025)
        self._lock_fd = fd
        # Any daemon.json now is a dead daemon's (its pid may belong to another process).
        with contextlib.suppress(FileNotFoundError):
            self.layout.daemon_json.unlink()

    async def run(self) -> None:
        await self._acquire_home_lock()
        self.attachments.blobs.clean_tmp()  # leftovers of a crash: ours to remove now we hold the lock
        # Read in a child process: keyring and cryptography never load here (P7).
        self.owner_token, identity = await load_startup_secrets(self.layout)
        app = build_app(self, client_max_size=self.config.notes.max_bytes * 2 + 65536)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        with_header_deadline(self._runner, requests_first=True)  # slow headers cut off; requests first
        try:
            api = web.TCPSite(self._runner, self.config.api.host, self.config.api.port)
            await api.start()
            self.api_port = api._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            sock = self.layout.socket
            with contextlib.suppress(FileNotFoundError):
                sock.unlink()
            unix = web.UnixSite(self._runner, str(sock))
            await unix.start()
            os.chmod(sock, 0o600)
            self.identity = identity
            self.peers = PeerHub(self, self.identity, self.gate, addresses=self.config.peer.addresses,
                                 peers_file=self.layout.root / "peers.json",
                                 device_name=functools.partial(read_device_name, self.layout.root),
                                 max_concurrent_joins=self.config.peer.max_concurrent_joins,
                                 join_attempts_per_minute=self.config.peer.join_attempts_per_minute)
            await self.peers.start(self.config.peer.host, self.config.peer.port)
            await self.reload_vaults()
            await self.process_pending_joins()
            await self._start_discovery()
            housekeeping = asyncio.create_task(self._housekeeping(), name="housekeeping")
            self._write_daemon_json()
            self.activity.mark_ready()
            freeze_startup_objects()  # later full collections skip what start made
            logger.info("ready: api on 127.0.0.1:%d, %d vault(s)", self.api_port, len(self.vaults))
            await self._stopping.wait()
            housekeeping.cancel()
        finally:
            await self._shutdown()

    def stop(self) -> None:
        self._stopping.set()

    def _write_daemon_json(self) -> None:
        info = {
            "pid": os.getpid(),
            "api_url": f"http://127.0.0.1:{self.api_port}",
            "socket": str(self.layout.socket),
            "peer_port": self.peers.port if self.peers is not None else None,
            "device_id": self.identity.device_id if self.identity is not None else None,
            "version": __version__,
        }
        write_private_file(self.layout.daemon_json, json.dumps(info, indent=2).encode())

    async def _shutdown(self) -> None:
        logger.info("shutting down")
        with contextlib.suppress(FileNotFoundError):
            data = json.loads(self.layout.daemon_json.read_text())
            if data.get("pid") == os.getpid():
                self.layout.daemon_json.unlink()
        self.events.close_all()
        if self.discovery is not None:
            with contextlib.suppress(Exception):
                await self.discovery.__aexit__(None, None, None)
        if self.peers is not None:
            await self.peers.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        self.streams.stop()
        self.flush_token_use()
        for runtime in list(self.vaults.values()):
            await self._close_vault(runtime)
        self.vaults.clear()
        self.gate.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.layout.socket)
        self.registry.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the home lock
            self._lock_fd = None
