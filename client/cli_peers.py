"""`stet invite`, `stet join`, `stet devices`: pairing devices into a vault (SPEC §4.2)."""

from __future__ import annotations

from pathlib import Path

import click

from stet.sync.device_name import check_device_name, write_device_name
from stet.sync.errors import StetError
from stet.sync.home import HomeRegistry
from stet.sync.invites import decode_invite

from .cli import Ctx, cli, emit_json
from .daemon_link import DaemonNotRunning, quote_path, read_daemon_info


@cli.command()
@click.argument("vault", required=False)
@click.option("--hours", type=click.FloatRange(0, 720, min_open=True), default=24.0, show_default=True,
              help="How long the invite is valid (more than 0, at most 720 hours).")
@click.option("--address", "addresses", multiple=True, metavar="HOST:PORT",
              help="Address(es) the other device should dial (default: this machine's addresses).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def invite(obj: Ctx, vault: str | None, hours: float, addresses: tuple[str, ...], as_json: bool) -> None:
    """Print a one-line, single-use invite to VAULT for another device."""
    client = obj.client()
    name = client.resolve_vault(vault)
    result = client.request("POST", f"/v1/vaults/{quote_path(name)}/invite",
                            {"ttlHours": hours, "addresses": list(addresses)})
    if as_json:
        emit_json(result)
        return
    click.echo(result["invite"])
    click.echo(f"(valid for {hours:g} h, once; on the other device: stet join INVITE PATH)", err=True)


@cli.command()
@click.argument("invite_text", metavar="INVITE")
@click.argument("path", type=click.Path(path_type=Path, file_okay=False))
@click.option("--name", default=None, help="Local name of the vault (default: the inviter's).")
@click.option("--device-name", default=None,
              help="This device's name, as the other devices show its changes (default: the host's name).")
@click.option("--json", "as_json", is_flag=True)
@click.option("--no-wait", is_flag=True, help="Return once joined; do not follow the first sync.")
@click.option("--wait", "wait_s", type=float, default=120.0, show_default=True,
              help="Stop following the first sync after this many seconds without progress.")
@click.pass_obj
def join(obj: Ctx, invite_text: str, path: Path, name: str | None, device_name: str | None, as_json: bool,
         no_wait: bool, wait_s: float) -> None:
    """Join the vault of INVITE, syncing it into PATH (existing notes there are merged in).

    Follows the first sync with a progress bar until the folder holds every note
    (unless --no-wait or --json); the sync itself runs in the daemon either way."""
    inv = decode_invite(invite_text)
    path = path.expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise StetError(f"{path} is not a folder")
    if device_name is not None:
        device_name = check_device_name(device_name)
    obj.layout.ensure()
    if device_name is not None:
        write_device_name(obj.layout.root, device_name)  # sent to the inviter with the join
    registry = HomeRegistry(obj.layout)
    try:
        registry.add_pending_join(inv.vault_id, invite_text.strip(), path, name)
    finally:
        registry.close()
    if read_daemon_info(obj.layout) is None:
        msg = f"The join of {inv.vault_name!r} into {path} will happen when the daemon starts (stet start)."
        emit_json({"pending": True, "vault": inv.vault_name}) if as_json else click.echo(msg)
        return
    from .progress_display import landed_so_far

    landed_before = None if as_json or no_wait else landed_so_far(obj.client())
    try:
        results = obj.client().request("POST", "/v1/join")["results"]
    except DaemonNotRunning:
        click.echo("The daemon stopped; the join will happen when it starts again.")
        return
    mine = [r for r in results if r.get("id") == inv.vault_id]
    if as_json:
        emit_json(mine[0] if mine else {"pending": True})
        return
    if not mine:
        click.echo("The join is queued.")
    elif mine[0].get("joined"):
        click.echo(f"Joined {mine[0]['vault']!r} at {mine[0]['path']}; syncing.")
        if not no_wait:
            _follow_first_sync(obj, inv.vault_id, str(mine[0]["vault"]), wait_s, landed_before)
    else:
        raise StetError(f"the join failed: {mine[0].get('error')}")


@cli.group(invoke_without_command=True)
@click.option("--vault", default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def devices(ctx: click.Context, vault: str | None, as_json: bool) -> None:
    """List the devices that share a vault (`stet devices remove ID` revokes one)."""
    if ctx.invoked_subcommand is not None:
        return
    obj: Ctx = ctx.obj
    client = obj.client()
    name = client.resolve_vault(vault)
    result = client.request("GET", f"/v1/vaults/{quote_path(name)}/devices")
    if as_json:
        emit_json(result)
        return
    for d in result["devices"]:
        state = "this device" if d["self"] else ("removed" if d["removed"] else (
            "connected" if d["connected"] else "not connected"))
        click.echo(f"{d['device']}  {state}{'  ' + d['name'] if d['name'] else ''}")


@devices.command("remove")
@click.argument("device")
@click.option("--vault", default=None)
@click.pass_obj
def devices_remove(obj: Ctx, device: str, vault: str | None) -> None:
    """Revoke DEVICE: it is disconnected and refused by every member that hears of it."""
    client = obj.client()
    name = client.resolve_vault(vault)
    result = client.request("POST", f"/v1/vaults/{quote_path(name)}/devices/remove", {"device": device})
    click.echo(f"Removed {result['device']} from {name}.")


def _follow_first_sync(obj: Ctx, vault_id: str, name: str, quiet_s: float,
                       landed_before: tuple[int, int] | None = None) -> None:
    from .progress_display import wait_for_first_sync

    try:
        done = wait_for_first_sync(obj.client(), vault_id, name, quiet_s=quiet_s, landed_before=landed_before)
    except KeyboardInterrupt:
        click.echo("Stopped following; the sync goes on in the daemon (`stet status`).")
        return
    if done:
        click.echo(f"{name!r} is in sync.")
    else:
        click.echo("Still syncing in the daemon; `stet status` shows how far it has got.")
