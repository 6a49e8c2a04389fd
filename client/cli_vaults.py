"""``stet vaults`` (list) and ``stet vaults remove NAME`` (unregister), SPEC §7.

Both work with or without a running daemon. Removing a vault forgets it in this home (its
agent tokens and open invites go with it); a running daemon stops serving it at once
(``DELETE /v1/vaults/{vault}``). The folder and every file in it are left as they are, and
so is the vault's store under ``<home>/vaults/`` (its versions), until deleted by hand.
Registers itself on ``stet.client.cli.cli`` when imported.
"""

from __future__ import annotations

from typing import Any

import click

from stet.sync.errors import StetError
from stet.sync.home import HomeRegistry

from .cli import Ctx, cli, emit_json
from .daemon_link import DaemonClient, DaemonNotRunning, quote_path, read_daemon_info
from .folder_claims import drop_claim


def _registry(obj: Ctx) -> HomeRegistry | None:
    return HomeRegistry(obj.layout) if obj.layout.home_db.exists() else None


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the vaults as JSON.")
@click.pass_context
def vaults(ctx: click.Context, as_json: bool) -> None:
    """The vaults of this home (name, folder); `stet vaults remove NAME` unregisters one."""
    if ctx.invoked_subcommand is not None:
        return
    obj: Ctx = ctx.obj
    registry = _registry(obj)
    entries = []
    if registry is not None:
        try:
            entries = registry.vaults()
        finally:
            registry.close()
    rows = [{"name": e.name, "id": e.id, "path": str(e.path), "folderExists": e.path.is_dir()}
            for e in entries]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo(f"No vault in {obj.layout.root} yet: `stet init PATH`.")
        return
    width = max(len("NAME"), *(len(e.name) for e in entries))
    click.echo(f"{'NAME'.ljust(width)}  FOLDER")
    for e, r in zip(entries, rows, strict=True):
        missing = "" if r["folderExists"] else "  (folder missing: `stet vaults remove` it, or restore it)"
        click.echo(f"{e.name.ljust(width)}  {e.path}{missing}")


@vaults.command("remove")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def vaults_remove(obj: Ctx, name: str, as_json: bool) -> None:
    """Unregister the vault NAME; its folder and files are left as they are."""
    registry = _registry(obj)
    if registry is None:
        raise StetError(f"no vault is registered in {obj.layout.root}: nothing to remove")
    try:
        entry = registry.find(name)
        result: dict[str, Any]
        try:
            if read_daemon_info(obj.layout) is None:
                raise DaemonNotRunning("not running")
            client = DaemonClient.for_home(obj.layout)
            result = client.request("DELETE", f"/v1/vaults/{quote_path(entry.id)}")
            result["daemonDropped"] = True
        except DaemonNotRunning:
            tokens = registry.unregister(entry.id)
            result = {"vault": entry.name, "id": entry.id, "path": str(entry.path), "tokensRemoved": tokens,
                      "daemonDropped": False}
    finally:
        registry.close()
    drop_claim(entry.path, obj.layout.root)
    result["store"] = str(obj.layout.vault_db(entry.id))
    if as_json:
        emit_json(result)
        return
    click.echo(f"Removed the vault {entry.name!r} from {obj.layout.root}; the folder {entry.path} "
               "and its files are left as they are.")
    if result.get("tokensRemoved"):
        click.echo(f"Its {result['tokensRemoved']} agent token(s) no longer work.")
    if result["daemonDropped"]:
        click.echo("The running daemon has stopped syncing it.")
        told = result.get("toldDevices") or []
        if told:
            click.echo(f"Its peers were told this device left ({len(told)} connected: "
                       f"{', '.join(d[:7] for d in told)}).")
        else:
            click.echo("No peer was connected to be told this device left: they list it as offline "
                       "until it is removed there with `stet devices remove`.")
    else:
        click.echo("The daemon was not running, so no peer was told this device left: they list it "
                   "as offline until it is removed there with `stet devices remove`.")
    click.echo(f"Its versions stay in {result['store']} (delete that file to reclaim the space).")
