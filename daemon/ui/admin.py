"""The web page's agents and devices pages (SPEC §6.14).

Agents: the tokens of ``home.db`` (``HomeRegistry``, as ``stet token`` uses it): create
with scopes (the secret and the MCP client snippets are shown once), revoke (at once: the
daemon's token cache is dropped), last used. Devices: the vault's members and live links
(``ops/devices.py``: ``devices_json``), an invite as text, a ``stet join`` line and a QR code
(segno, SVG), remove a device (``remove_member``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import segno
from aiohttp import web

from stet.daemon.ops.devices import devices_json, make_invite, remove_member
from stet.daemon.ops.host import daemon_of
from stet.daemon.ops.sessions import Session
from stet.daemon.ui.base import redirect, render, ui_page, vault_name
from stet.daemon.ui.html import csrf_field, esc, q, table, when
from stet.sync.errors import StetError
from stet.sync.permissions import Scopes

if TYPE_CHECKING:
    from stet.daemon.ops.host import ApiHost


def _scopes_text(scopes: dict[str, list[str]]) -> str:
    parts = [f"{kind} {', '.join(globs)}" for kind, globs in scopes.items() if globs]
    return "; ".join(parts) or "none"


def _globs(form: Any, name: str) -> list[str]:
    raw = str(form.get(name, ""))
    return [line.strip() for line in raw.replace(",", "\n").splitlines() if line.strip()]


def mcp_snippets(server: str, url: str, secret: str) -> list[tuple[str, str]]:
    """What each MCP client needs (the same shapes as ``stet mcp-config``)."""
    headers = {"Authorization": f"Bearer {secret}"}
    generic = {"mcpServers": {server: {"type": "http", "url": url, "headers": headers}}}
    vscode = {"servers": {server: {"type": "http", "url": url, "headers": headers}}}
    return [
        ("Claude Code, Cursor, the MCP Inspector (.mcp.json / mcp.json)", json.dumps(generic, indent=2)),
        ("Claude Code (command line)",
         f"claude mcp add --transport http {server} {url} --header 'Authorization: Bearer {secret}'"),
        ("VS Code (.vscode/mcp.json)", json.dumps(vscode, indent=2)),
    ]


def _server_name(vault_name: str) -> str:
    import re

    return "stet-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", vault_name).strip("-") or "vault")


def _agents_page(daemon: ApiHost, session: Session, created: str = "") -> str:
    daemon.flush_token_use()
    names = {v.entry.id: v.entry.name for v in daemon.vaults.values()}
    rows = []
    for t in daemon.registry.tokens():
        if t.revoked_at is not None:
            continue
        revoke = (f'<form method="post" action="/ui/agents/revoke" class="inline">{csrf_field(session.csrf)}'
                  f'<input type="hidden" name="name" value="{esc(t.name)}">'
                  '<input type="hidden" name="back" value="/ui/agents">'
                  f'<button type="submit" class="danger" aria-label="Revoke {esc(t.name)}">'
                  "Revoke</button></form>")
        rows.append([esc(t.name), esc(names.get(t.vault_id, t.vault_id)), esc(_scopes_text(t.scopes)),
                     esc(when(t.created_at)), esc(when(t.last_used_at)), revoke])
    options = "".join(f'<option value="{esc(name)}">{esc(name)}</option>' for name in names.values())
    form = (
        '<h2>New agent token</h2>'
        f'<form method="post" action="/ui/agents/create">{csrf_field(session.csrf)}'
        '<input type="hidden" name="back" value="/ui/agents">'
        '<label for="agent-name">Name</label>'
        '<input type="text" id="agent-name" name="name" required pattern="[A-Za-z0-9._-]+" '
        'placeholder="researcher" autocomplete="off">'
        f'<label for="agent-vault">Vault</label><select id="agent-vault" name="vault">{options}</select>'
        '<label for="agent-read">May read (one glob a line)</label>'
        '<textarea id="agent-read" name="read" rows="2" placeholder="**"></textarea>'
        '<label for="agent-append">May append to</label>'
        '<textarea id="agent-append" name="append" rows="2" placeholder="shared/findings.md"></textarea>'
        '<label for="agent-write">May write (create, rewrite, move, delete; implies read and append)</label>'
        '<textarea id="agent-write" name="write" rows="2" placeholder="agents/researcher/**"></textarea>'
        '<p class="muted"><code>**</code> crosses folders; '
        "<code>*</code> and <code>?</code> stay within one.</p>"
        '<div class="actions"><button type="submit">Create token</button></div></form>'
    )
    return ("<h1>Agents</h1>" + created
            + table(["Name", "Vault", "Scopes", "Created", "Last used", ""], rows,
                    caption="Agent tokens (only their hashes are stored)", empty="No agent tokens yet.")
            + form)


async def agents(request: web.Request, session: Session) -> web.StreamResponse:
    body = _agents_page(daemon_of(request), session)
    return render(request, session, title="Agents", body=body, active="agents")


async def create_agent(request: web.Request, session: Session) -> web.StreamResponse:
    daemon = daemon_of(request)
    form = await request.post()
    name = str(form.get("name", "")).strip()
    raw = {"read": _globs(form, "read"), "append": _globs(form, "append"), "write": _globs(form, "write")}
    if not any(raw.values()):
        raise StetError("give the token at least one scope: a glob it may read, append to or write")
    scopes = Scopes.from_json(raw)
    runtime = daemon.vault(str(form.get("vault", "")))
    secret = daemon.registry.create_token(name, runtime.entry.id, scopes.to_json())
    url = f"http://127.0.0.1:{daemon.api_port}/mcp"
    snippets = "".join(
        f'<h3>{esc(label)}</h3><pre class="snippet" tabindex="0">{esc(text)}</pre>'
        for label, text in mcp_snippets(_server_name(runtime.entry.name), url, secret))
    created = (
        '<section class="flash" aria-labelledby="created-title">'
        f'<h2 id="created-title">Created {esc(name)}</h2>'
        "<p>The token is shown only now (only its hash is kept). Copy it or a snippet below.</p>"
        f'<p class="secret" id="new-token">{esc(secret)}</p>{snippets}</section>'
    )
    return render(request, session, title="Agents", body=_agents_page(daemon, session, created),
                  active="agents")


async def revoke_agent(request: web.Request, session: Session) -> web.StreamResponse:
    daemon = daemon_of(request)
    form = await request.post()
    name = str(form.get("name", ""))
    daemon.registry.revoke_token(name)
    daemon.forget_agent_tokens()
    session.flash.append(f"Revoked {name}: it is refused from now on.")
    return redirect("/ui/agents")


# -- devices ----------------------------------------------------------------------------------


def _peers_running(daemon: ApiHost) -> bool:
    return daemon.peers is not None and daemon.identity is not None


async def devices(request: web.Request, session: Session) -> web.StreamResponse:
    daemon = daemon_of(request)
    vault = vault_name(request)
    return render(request, session, title="Devices", body=_devices_body(daemon, session, vault),
                  active="devices", vault=vault)


def _devices_body(daemon: ApiHost, session: Session, vault: str, invite: str = "") -> str:
    if not _peers_running(daemon):
        return "<h1>Devices</h1><p class=\"empty\">Peer sync is not running in this daemon.</p>"
    runtime = daemon.vault(vault)
    listed = devices_json(daemon, runtime)["devices"]
    traffic = {p["device"]: p for p in daemon.status()["peers"]}
    base = f"/ui/v/{q(vault)}/devices"
    rows = []
    for d in listed:
        if d["removed"]:
            state = "removed"
        elif d["self"]:
            state = "this device"
        else:
            state = "connected" if d["connected"] else "not connected"
        link = traffic.get(d["device"])
        moved = (f"sent {link['bytesSent']:,} B, received {link['bytesReceived']:,} B"
                 if link is not None else "")
        action = ""
        if not d["self"] and not d["removed"]:
            action = (f'<form method="post" action="{esc(base)}/remove" class="inline">'
                      f'{csrf_field(session.csrf)}'
                      f'<input type="hidden" name="device" value="{esc(d["device"])}">'
                      f'<input type="hidden" name="back" value="{esc(base)}">'
                      f'<button type="submit" class="danger" '
                      f'aria-label="Remove {esc(d["name"] or d["device"])}">'
                      "Remove</button></form>")
        last_seen = "now" if d["connected"] or d["self"] else when(d["lastSeen"])
        rows.append([esc(d["name"] or "-"), f'<code>{esc(d["device"][:16])}…</code>', esc(state),
                     esc(last_seen), esc(moved), action])
    form = (f'<h2>Invite a device</h2><form method="post" action="{esc(base)}/invite">'
            f'{csrf_field(session.csrf)}'
            f'<input type="hidden" name="back" value="{esc(base)}">'
            '<label for="invite-hours">Valid for (hours)</label>'
            '<input type="number" id="invite-hours" name="hours" value="24" min="1" max="720">'
            '<div class="actions"><button type="submit">Create an invite</button></div></form>')
    return (f"<h1>Devices of {esc(vault)}</h1>" + invite
            + table(["Name", "Device", "State", "Last seen", "Transfer", ""], rows,
                    caption="Members of this vault", empty="No devices.")
            + form)


async def invite_device(request: web.Request, session: Session) -> web.StreamResponse:
    daemon = daemon_of(request)
    vault = vault_name(request)
    if not _peers_running(daemon):
        raise StetError("peer sync is not running in this daemon", code="unavailable")
    form = await request.post()
    try:
        hours = float(str(form.get("hours", "24")))
    except ValueError:
        raise StetError("the hours must be a number") from None
    made = await make_invite(daemon, daemon.vault(vault), hours, None)
    code = made["invite"]
    qr = segno.make(code, error="m").svg_data_uri(scale=4, border=2)
    invite = (
        '<section class="flash" aria-labelledby="invite-title"><h2 id="invite-title">Invite created</h2>'
        f"<p>Valid until {esc(when(made['expiresAt']))}, for one device. On the other device run:</p>"
        '<pre class="snippet" tabindex="0" id="invite-command">'
        f"stet join {esc(code)} ~/Notes/{esc(vault)}</pre>"
        f'<p class="qr"><img src="{esc(qr)}" alt="The invite as a QR code"></p>'
        f'<details><summary>The invite alone</summary><p class="secret">{esc(code)}</p></details></section>'
    )
    return render(request, session, title="Devices", body=_devices_body(daemon, session, vault, invite),
                  active="devices", vault=vault)


async def remove_device(request: web.Request, session: Session) -> web.StreamResponse:
    daemon = daemon_of(request)
    vault = vault_name(request)
    form = await request.post()
    removed = remove_member(daemon, daemon.vault(vault), form.get("device", ""))
    session.flash.append(f"Removed {removed['device'][:16]}…: it no longer syncs {vault}.")
    return redirect(f"/ui/v/{q(vault)}/devices")


def register(app: web.Application) -> None:
    r = app.router
    r.add_get("/ui/agents", ui_page(agents))
    r.add_post("/ui/agents/create", ui_page(create_agent))
    r.add_post("/ui/agents/revoke", ui_page(revoke_agent))
    r.add_get("/ui/v/{vault}/devices", ui_page(devices))
    r.add_post("/ui/v/{vault}/devices/invite", ui_page(invite_device))
    r.add_post("/ui/v/{vault}/devices/remove", ui_page(remove_device))
