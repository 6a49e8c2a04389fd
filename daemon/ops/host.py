"""The HTTP faces' door to the daemon (issue 31 item 3).

api/, ui/ and live/ reach the running daemon only through ``DAEMON_KEY``, typed as
``ApiHost``: the members the faces use and nothing else. ``app/`` builds the ``Daemon``
and puts it under the key; the Protocols are structural, so ``Daemon`` and
``VaultRuntime`` satisfy them without naming them, and mypy checks that they do where
``app/http.py`` hands the daemon over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from stet.daemon.ops.notes import Principal
from stet.sync.errors import StetError

if TYPE_CHECKING:  # the door names its members' types; importing it loads none of them
    from stet.daemon.attachments.brake import AttachmentBrake
    from stet.daemon.base.activity import Activity
    from stet.daemon.identity.device_cert import DeviceIdentity
    from stet.daemon.notes.event_bus import EventBus
    from stet.daemon.notes.service import NotesService
    from stet.daemon.ops.attachment_versions import AttachmentVersionOps
    from stet.daemon.ops.notes import NoteOperations
    from stet.daemon.ops.open_streams import OpenStreams
    from stet.daemon.peers.hub import PeerHub
    from stet.daemon.safety.brake import Brake
    from stet.sync.config import Config
    from stet.sync.home import HomeRegistry, VaultEntry


class VaultHost(Protocol):
    """One open vault, as the faces see it (``app.vault_runtime.VaultRuntime``)."""

    @property
    def entry(self) -> VaultEntry: ...
    @property
    def service(self) -> NotesService: ...
    @property
    def brake(self) -> Brake | None: ...  # None: the burst brake is off for this vault
    @property
    def attachment_brake(self) -> AttachmentBrake | None: ...

    def describe(self) -> dict[str, Any]: ...  # its row of ``GET /v1/vaults`` and ``status``


class ApiHost(Protocol):
    """The running daemon, as the faces see it (``app.runtime.Daemon``). Read-only
    properties: a face looks at the daemon's parts, it never rebinds them."""

    @property
    def config(self) -> Config: ...
    @property
    def registry(self) -> HomeRegistry: ...  # home.db: vaults, tokens, invites
    @property
    def api_port(self) -> int: ...
    @property
    def activity(self) -> Activity: ...  # ``ready`` once the vaults are open
    @property
    def events(self) -> EventBus: ...
    @property
    def streams(self) -> OpenStreams: ...  # SSE streams and live sockets, by credential
    @property
    def identity(self) -> DeviceIdentity | None: ...  # None until the secrets are read
    @property
    def peers(self) -> PeerHub | None: ...  # None until peer sync runs
    @property
    def vaults(self) -> Mapping[str, VaultHost]: ...  # by vault id

    def vault(self, ref: str) -> VaultHost: ...  # by id or name, else NotFound
    def vault_for(self, ref: str, principal: Principal) -> VaultHost: ...
    def operations(self, ref: str, principal: Principal) -> NoteOperations: ...
    def attachment_versions(self, ref: str, principal: Principal) -> AttachmentVersionOps: ...
    def authenticate(self, token: str) -> Principal | None: ...
    def forget_agent_tokens(self) -> None: ...  # after a revocation: refused at once
    def flush_token_use(self) -> None: ...  # tokens' last use, recorded before it is shown
    def status(self) -> dict[str, Any]: ...
    async def reload_vaults(self) -> list[str]: ...
    async def close_vault(self, vault_id: str) -> bool: ...
    async def process_pending_joins(self) -> list[dict[str, Any]]: ...


DAEMON_KEY = web.AppKey[ApiHost]("daemon")
PRINCIPAL_KEY = "stet.principal"  # set by the guard (api/app.py) or the page's ui_page


def daemon_of(request: web.Request) -> ApiHost:
    """The daemon serving this request, as the faces see it."""
    return request.app[DAEMON_KEY]


def principal_of(request: web.Request) -> Principal:
    """Who is calling, as the guard found it. Typed, and closed by default: a request that
    reached a handler without one (a route the guard let through for its own auth, reached
    by a path the router read differently) is a 401, never a KeyError's 500 or a default."""
    found = request.get(PRINCIPAL_KEY)
    if not isinstance(found, Principal):
        raise StetError("an Authorization: Bearer token is required", code="unauthorized")
    return found
