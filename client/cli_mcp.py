"""``stet mcp-config NAME``: the snippet an MCP client needs to reach a vault (SPEC §6.11).

Only token hashes are stored, so an existing token's secret cannot be printed again. The
command therefore creates the agent token NAME (scopes as for ``stet token create``;
default ``--write '**'``: the whole vault) and prints it once inside the snippet, or takes
an existing token's secret with ``--token``. It works on the home directly, with or
without a running daemon; the URL is the running daemon's, else ``config.toml``'s port.
Registers itself on ``stet.client.cli.cli`` when imported.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

from stet.sync.errors import StetError
from stet.sync.home import HomeRegistry, VaultEntry
from stet.sync.permissions import Scopes

from .cli import Ctx, cli, emit_json
from .daemon_link import read_daemon_info

DEFAULT_SCOPES = {"read": [], "append": [], "write": ["**"]}


def _mcp_url(obj: Ctx) -> tuple[str, str | None]:
    """The running daemon's /mcp URL, else the one config.toml's fixed port will give; and a
    note to print once the command has succeeded (an error must stay one line)."""
    api = obj.config().api
    info = read_daemon_info(obj.layout)
    if info is not None:
        note = None
        if api.port and not info.api_url.endswith(f":{api.port}"):
            note = (f"Note: the daemon runs on {info.api_url}, not on config.toml's port {api.port}; "
                    "this URL holds until it restarts.")
        return info.api_url.rstrip("/") + "/mcp", note
    if api.port == 0:
        raise StetError("the daemon is not running and [api] port is 0 (a new port at every start): "
                        "start it first (`stet start`), or set a fixed port in config.toml")
    host = f"[{api.host}]" if ":" in api.host else api.host
    return f"http://{host}:{api.port}/mcp", None


def _server_name(vault: VaultEntry) -> str:
    return "stet-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", vault.name).strip("-") or vault.id[:8])


def _existing_token(registry: HomeRegistry, name: str, secret: str, vault: str | None) -> VaultEntry:
    record = registry.lookup_token(secret)
    if record is None:
        raise StetError("that --token is not valid (revoked or mistyped)")
    if record.name != name:
        raise StetError(f"that --token is named {record.name!r}, not {name!r}")
    entry = registry.find(record.vault_id)
    if vault is not None and registry.find(vault).id != entry.id:
        raise StetError(f"the token {name!r} belongs to the vault {entry.name!r}, not {vault!r}")
    return entry


@cli.command("mcp-config")
@click.argument("name")
@click.option("--vault", default=None, help="The vault to serve (optional with one vault).")
@click.option("--token", "secret", default=None, metavar="TOKEN",
              help="Use this existing token of NAME instead of creating one.")
@click.option("--read", "read_globs", multiple=True, metavar="GLOB", help="Paths it may read (repeatable).")
@click.option("--append", "append_globs", multiple=True, metavar="GLOB",
              help="Paths it may append to (repeatable).")
@click.option("--write", "write_globs", multiple=True, metavar="GLOB",
              help="Paths it may write (implies read and append). Default, with no scope: --write '**'.")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON snippet (e.g. into .mcp.json).")
@click.pass_obj
def mcp_config(obj: Ctx, name: str, vault: str | None, secret: str | None, read_globs: tuple[str, ...],
               append_globs: tuple[str, ...], write_globs: tuple[str, ...], as_json: bool) -> None:
    """Print the MCP client configuration (Claude Code, the MCP Inspector, ...) for agent NAME.

    Creates the agent token NAME for the vault (scopes as for `stet token create`; with no
    --read/--append/--write it may write the whole vault) and prints it inside the snippet.
    The token is shown only this once: only its hash is kept. To print the snippet for an
    existing token, pass its secret with --token; a lost one cannot be recovered:
    `stet token revoke NAME` and run this again.
    """
    if not obj.layout.home_db.exists():
        raise StetError(f"no vault is registered in {obj.layout.root} yet: run `stet init PATH` first")
    scoped = bool(read_globs or append_globs or write_globs)
    if secret is not None and scoped:
        raise StetError("--token names an existing token, whose scopes are fixed: "
                        "drop --read/--append/--write")
    url, note = _mcp_url(obj)
    registry = HomeRegistry(obj.layout)
    try:
        if secret is not None:
            entry = _existing_token(registry, name, secret, vault)
            created = False
        else:
            entry = registry.find(vault)
            if any(t.name == name for t in registry.tokens()):
                raise StetError(f"a token named {name!r} exists already and its secret is not stored: "
                                f"pass it with --token, or `stet token revoke {name}` and run this again")
            raw = ({"read": list(read_globs), "append": list(append_globs), "write": list(write_globs)}
                   if scoped else DEFAULT_SCOPES)
            scopes = Scopes.from_json(raw)
            secret = registry.create_token(name, entry.id, scopes.to_json())
            created = True
    finally:
        registry.close()
    server = _server_name(entry)
    snippet: dict[str, Any] = {"mcpServers": {server: {
        "type": "http", "url": url, "headers": {"Authorization": f"Bearer {secret}"},
    }}}
    if note:
        click.echo(note, err=True)
    if created:
        click.echo(f"Created the agent token {name!r} for vault {entry.name!r}; it is shown only here.",
                   err=True)
    if as_json:
        emit_json(snippet)
        return
    click.echo(f"MCP (Streamable HTTP) for vault {entry.name!r} as agent {name!r}. "
               "Add this to your MCP client's configuration (e.g. .mcp.json):\n")
    click.echo(json.dumps(snippet, indent=2))
    click.echo("\nOr, for Claude Code:\n")
    click.echo(f"  claude mcp add --transport http {server} {url} --header 'Authorization: Bearer {secret}'")
