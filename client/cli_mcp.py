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
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from stet.sync.errors import StetError

from .cli import Ctx, cli, emit_json
from .daemon_link import read_daemon_info

if TYPE_CHECKING:  # imported where used: `stet mcp --stdio` must start fast (<= 300 ms)
    from stet.sync.home import HomeRegistry, VaultEntry

DEFAULT_SCOPES = {"read": [], "append": [], "write": ["**"]}
CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode", "json")


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
@click.option("--client", type=click.Choice(CLIENTS), default=None,
              help="Print that client's own configuration (its file's shape) instead of the overview.")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON snippet (e.g. into .mcp.json).")
@click.pass_obj
def mcp_config(obj: Ctx, name: str, vault: str | None, secret: str | None, read_globs: tuple[str, ...],
               append_globs: tuple[str, ...], write_globs: tuple[str, ...], client: str | None,
               as_json: bool) -> None:
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
    from stet.sync.home import HomeRegistry
    from stet.sync.permissions import Scopes

    from .cli_agents import checked_scopes

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
            scopes = (checked_scopes(read_globs, append_globs, write_globs) if scoped
                      else Scopes.from_json(DEFAULT_SCOPES))
            secret = registry.create_token(name, entry.id, scopes.to_json())
            created = True
    finally:
        registry.close()
    server = _server_name(entry)
    if note:
        click.echo(note, err=True)
    if created:
        click.echo(f"Created the agent token {name!r} for vault {entry.name!r}; it is shown only here.",
                   err=True)
    if client is not None:
        text, hint = client_config(client, server, url, secret, obj.layout.root)
        click.echo(text)
        click.echo(hint, err=True)
        return
    snippet = http_snippet(server, url, secret)
    if as_json:
        emit_json(snippet)
        return
    click.echo(f"MCP (Streamable HTTP) for vault {entry.name!r} as agent {name!r}. "
               "Add this to your MCP client's configuration (e.g. .mcp.json):\n")
    click.echo(json.dumps(snippet, indent=2))
    click.echo("\nOr, for Claude Code:\n")
    click.echo(f"  {claude_code_command(server, url, secret)}")
    click.echo("\nOther clients: `stet mcp-config NAME --client claude-desktop|cursor|vscode` "
               "(needs a new token NAME, or --token).")


# -- each client's own shape ---------------------------------------------------------------------



def http_snippet(server: str, url: str, secret: str) -> dict[str, Any]:
    """The common ``mcpServers`` shape (Claude Code's .mcp.json, the MCP Inspector, ...)."""
    return {"mcpServers": {server: {
        "type": "http", "url": url, "headers": {"Authorization": f"Bearer {secret}"},
    }}}


def claude_code_command(server: str, url: str, secret: str) -> str:
    return f"claude mcp add --transport http {server} {url} --header 'Authorization: Bearer {secret}'"


def stdio_command(home: Path) -> list[str]:
    """How a client spawns `stet mcp --stdio` for this home, with absolute paths (desktop apps
    start servers with a bare PATH): the `stet` script beside this Python, else `python -m`."""
    script = Path(sys.executable).parent / "stet"
    head = [str(script)] if script.is_file() and os.access(script, os.X_OK) else [
        sys.executable, "-m", "stet.client"]
    return [*head, "--home", str(home), "mcp", "--stdio"]


def client_config(client: str, server: str, url: str, secret: str, home: Path) -> tuple[str, str]:
    """(what to paste, on stdout; where it goes, on stderr) in the client's own shape."""
    bearer = {"Authorization": f"Bearer {secret}"}
    if client == "claude-desktop":
        command = stdio_command(home)
        data: dict[str, Any] = {"mcpServers": {server: {
            "command": command[0], "args": command[1:], "env": {"STET_TOKEN": secret},
        }}}
        hint = ("Claude Desktop spawns stdio servers only: merge this into claude_desktop_config.json "
                "(Settings > Developer > Edit Config), then restart Claude Desktop.")
    elif client == "cursor":
        data = {"mcpServers": {server: {"url": url, "headers": bearer}}}
        hint = "Merge this into ~/.cursor/mcp.json (all projects) or .cursor/mcp.json (this project)."
    elif client == "vscode":
        input_id = f"{server}-token"
        data = {
            "inputs": [{"type": "promptString", "id": input_id, "password": True,
                        "description": f"Stet agent token for {server}"}],
            "servers": {server: {"type": "http", "url": url,
                                 "headers": {"Authorization": f"Bearer ${{input:{input_id}}}"}}},
        }
        hint = (f"Merge this into .vscode/mcp.json (or MCP: Open User Configuration). VS Code asks for "
                f"the token once and keeps it out of the file; paste: {secret}")
    elif client == "claude-code":
        data = http_snippet(server, url, secret)
        hint = f"Put this in .mcp.json (project scope), or run: {claude_code_command(server, url, secret)}"
    else:
        data = http_snippet(server, url, secret)
        hint = "The MCP server entry (Streamable HTTP) for any client that reads mcpServers JSON."
    return json.dumps(data, indent=2), hint


# -- stet mcp --stdio ----------------------------------------------------------------------------


def _stdio_token(token_file: Path | None) -> str:
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise StetError(f"cannot read the token file {token_file}: "
                            f"{getattr(exc, 'strerror', None) or exc}") from None
        if not token:
            raise StetError(f"the token file {token_file} is empty: put an agent token in it "
                            "(`stet token create NAME --write GLOB`)")
        return token
    token = os.environ.get("STET_TOKEN", "").strip()
    if not token:
        raise StetError("give the agent token with --token-file FILE or the STET_TOKEN environment variable "
                        "(create one with `stet token create NAME --write GLOB`)")
    return token


@cli.command("mcp")
@click.option("--stdio", is_flag=True, help="Serve MCP on stdin/stdout (the only mode; required).")
@click.option("--token-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="A file holding the agent token (else the STET_TOKEN environment variable).")
@click.pass_obj
def mcp(obj: Ctx, stdio: bool, token_file: Path | None) -> None:
    """A stdio MCP server for clients that only spawn one (Claude Desktop): it proxies every
    message to the running daemon's /mcp with the agent token, and keeps running while the
    daemon restarts (a request meanwhile gets an error saying so)."""
    if not stdio:
        raise StetError("`stet mcp` serves MCP over stdio only: run `stet mcp --stdio` "
                        "(for MCP over HTTP, `stet mcp-config NAME` prints the URL and headers)")
    token = _stdio_token(token_file)

    def find_url() -> str:
        try:
            return _mcp_url(obj)[0]
        except StetError as exc:
            raise ConnectionRefusedError(exc.message) from None

    from .mcp_stdio import StdioBridge

    sys.exit(StdioBridge(find_url, token, sys.stdout.buffer).run(sys.stdin.buffer))
