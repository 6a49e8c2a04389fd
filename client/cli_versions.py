"""Versions and the burst brake on the command line (SPEC §5, §7):

``stet versions PATH`` · ``stet show PATH --version ID`` · ``stet diff PATH VERSION`` ·
``stet restore PATH [VERSION]`` · ``stet held`` · ``stet release [ID...|--all]`` ·
``stet revert [ID...|--all]``, each with ``--json`` and ``--vault``.

Everything goes through the daemon's HTTP API (``/v1/vaults/{vault}/notes/{path}/versions``
and ``/v1/vaults/{vault}/held``). Registers itself on ``stet.client.cli.cli`` when imported.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any

import click

from stet.sync.errors import StetError

from . import cli_attachment_versions
from .cli import Ctx, cli, emit_json
from .daemon_link import ApiError, DaemonClient, quote_path
from .versions_table import Column, common_columns, print_versions
from .versions_table import when as _when

BEFORE_KINDS = ("before-large-deletion", "before-deletion", "before-restore", "before-promotion")

_vault_option = click.option("--vault", default=None, help="Vault name (optional with one vault).")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


def _base(client: DaemonClient, vault: str | None) -> str:
    return f"/v1/vaults/{quote_path(client.resolve_vault(vault))}"


def _note_url(client: DaemonClient, vault: str | None, path: str) -> str:
    return f"{_base(client, vault)}/notes/{quote_path(path)}"


def _version_arg(raw: str) -> str:
    value = raw.strip().lstrip("vV#")
    if not (value.isascii() and value.isdigit()):
        raise StetError(f"a version is a number from `stet versions PATH`, not {raw!r}")
    return value


def _write_raw(text: str) -> None:
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.flush()


# -- versions, show, diff ------------------------------------------------------------------


@cli.command()
@click.argument("path")
@_vault_option
@_json_option
@click.pass_obj
def versions(obj: Ctx, path: str, vault: str | None, as_json: bool) -> None:
    """List the versions kept of a note or an attachment (also of a deleted one), newest first."""
    if cli_attachment_versions.is_attachment(obj, path):
        cli_attachment_versions.list_versions(obj, path, vault, as_json)
        return
    client = obj.client()
    data = client.request("GET", f"{_note_url(client, vault, path)}/versions")
    if as_json:
        emit_json(data)
        return
    print_versions(path, data, [*common_columns(21), Column("SIZE", lambda v: v["size"], 8, right=True),
                                Column("PREVIEW", lambda v: v.get("preview", ""))])


@cli.command()
@click.argument("path")
@click.option("--version", "version", default=None, metavar="ID",
              help="The version to show (default: the note now).")
@click.option("--output", "-o", default=None, metavar="FILE",
              help="Write the bytes to FILE instead of stdout (an attachment's, or a note's text).")
@_vault_option
@_json_option
@click.pass_obj
def show(obj: Ctx, path: str, version: str | None, output: str | None, vault: str | None,
         as_json: bool) -> None:
    """Print a version of a note, or write an attachment's, exactly as it was kept."""
    if cli_attachment_versions.is_attachment(obj, path):
        if version is None:
            raise StetError(f"give the version of {path} to show: --version ID (see `stet versions {path}`)")
        cli_attachment_versions.show_version(obj, path, _version_arg(version), vault, output, as_json)
        return
    client = obj.client()
    url = _note_url(client, vault, path)
    data = client.request("GET", f"{url}/versions/{_version_arg(version)}" if version is not None else url)
    if as_json:
        emit_json(data)
        return
    if output is not None:
        Path(output).write_bytes(data["content"].encode("utf-8"))
        return
    _write_raw(data["content"])


def unified_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    """A unified diff of two texts; a last line without a newline is marked as diff does."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out = []
    for line in difflib.unified_diff(a, b, old_name, new_name):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


@cli.command()
@click.argument("path")
@click.argument("version")
@_vault_option
@_json_option
@click.pass_obj
def diff(obj: Ctx, path: str, version: str, vault: str | None, as_json: bool) -> None:
    """Show what changed from a version to the note as it is now (unified diff)."""
    if cli_attachment_versions.is_attachment(obj, path):
        raise StetError(f"{path} is an attachment: its versions are bytes, not text; "
                        f"write one out with `stet show {path} --version {version} --output FILE`")
    client = obj.client()
    url = _note_url(client, vault, path)
    vid = _version_arg(version)
    old = client.request("GET", f"{url}/versions/{vid}")
    try:
        current = client.request("GET", url)["content"]
        now_name = f"{path} (now)"
    except ApiError as exc:
        if exc.code != "not_found":
            raise
        current, now_name = "", f"{path} (deleted)"
    text = unified_diff(old["content"], current, f"{path} (version {vid}, {old['kind']})", now_name)
    if as_json:
        emit_json({"path": path, "version": old["id"], "identical": not text, "diff": text})
        return
    if not text:
        click.echo(f"Version {vid} is identical to {path} as it is now.")
        return
    _write_raw(text)


# -- restore ---------------------------------------------------------------------------------


@cli.command()
@click.argument("path")
@click.argument("version", required=False)
@click.option("--version", "version_option", default=None, metavar="ID", help="The version to restore.")
@_vault_option
@_json_option
@click.pass_obj
def restore(obj: Ctx, path: str, version: str | None, version_option: str | None, vault: str | None,
            as_json: bool) -> None:
    """Bring a note or an attachment back to VERSION (default: its newest before-* version).

    A restore is an edit: the text it replaces is kept as a before-restore version, so
    running `stet restore PATH` again undoes it. A deleted note comes back at its path,
    or beside it if something else took that path. An attachment's bytes come back at
    PATH (the bytes they replace are kept as a version).
    """
    if version is not None and version_option is not None and version != version_option:
        raise StetError("give the version once: as VERSION or as --version, not both")
    version = version if version is not None else version_option
    if cli_attachment_versions.is_attachment(obj, path):
        cli_attachment_versions.restore_version(
            obj, path, _version_arg(version) if version is not None else None, vault, as_json)
        return
    client = obj.client()
    url = _note_url(client, vault, path)
    if version is None:
        listed = client.request("GET", f"{url}/versions")["versions"]
        chosen = next((v for v in listed if v["kind"] in BEFORE_KINDS), None)
        if chosen is None:
            raise StetError(f"{path} has no before-deletion, before-large-deletion or before-restore "
                            f"version; pick one from `stet versions {path}`")
        vid = str(chosen["id"])
    else:
        vid = _version_arg(version)
    result = client.request("POST", f"{url}/versions/{vid}/restore", {})
    if as_json:
        emit_json(result)
        return
    if not result["changed"]:
        click.echo(f"{path} already holds version {vid}: nothing to do.")
        return
    if result["undeleted"]:
        if result["pathWasTaken"]:
            click.echo(f"Restored the deleted note from version {vid} to {result['path']} "
                       f"({result['originalPath']} is taken by another note).")
        else:
            click.echo(f"Restored the deleted note {result['path']} from version {vid}.")
        return
    click.echo(f"Restored {result['path']} to version {vid}. The text it replaced is version "
               f"{result['beforeRestore']}: `stet restore {result['path']}` undoes this.")


# -- the burst brake ------------------------------------------------------------------------------


@cli.command()
@click.option("--all", "every", is_flag=True, help="Also list released and reverted changes.")
@_vault_option
@_json_option
@click.pass_obj
def held(obj: Ctx, every: bool, vault: str | None, as_json: bool) -> None:
    """List the changes the burst brake holds (not sent to peers until released)."""
    client = obj.client()
    data = client.request("GET", f"{_base(client, vault)}/held", query={"all": "1" if every else None})
    if as_json:
        emit_json(data)
        return
    for e in data["engaged"]:
        refusal = "; its destructive writes are refused" if e["refusesWrites"] else ""
        click.echo(f"Brake engaged for {e['source']} since {_when(e['since'])} ({e['held']} held{refusal}).")
    for line in held_table(data["held"]):
        click.echo(line)


def held_table(rows: list[dict[str, Any]]) -> list[str]:
    """`stet held`'s table: columns as wide as their widest cell (KIND holds "overwritten")."""
    if not rows:
        return ["Nothing is held."]
    until = {h["id"]: (h["state"] if h["state"] != "held" else
                       _when(h["releasesAt"]) if h["releasesAt"] else "a person acts") for h in rows}
    kinds = {h["id"]: (f"attachment {h['kind']}" if h.get("target") == "attachment" else h["kind"])
             for h in rows}
    kind_w = max(len("KIND"), *(len(k) for k in kinds.values()))
    until_w = max(len("UNTIL"), *(len(u) for u in until.values()))
    lines = [f"{'ID':>6}  {'KIND':<{kind_w}}  {'SOURCE':<16}  {'HELD':<19}  {'UNTIL':<{until_w}}  PATH"]
    for h in rows:
        kind = kinds[h["id"]]
        lines.append(f"{h['id']:>6}  {kind:<{kind_w}}  {h['source']:<16.16}  {_when(h['heldAt']):<19}  "
                     f"{until[h['id']]:<{until_w}}  {h['path']}")
    if any(h["state"] == "held" for h in rows):
        lines.append("`stet release ID|--all` lets them go; `stet revert ID|--all` puts the files back.")
    return lines


def _selection(ids: tuple[int, ...], every: bool) -> dict[str, Any]:
    if every and ids:
        raise StetError("give held change IDs or --all, not both")
    if not every and not ids:
        raise StetError("give the IDs of held changes (see `stet held`) or --all")
    return {"all": True} if every else {"ids": list(ids)}


@cli.command()
@click.argument("ids", nargs=-1, type=click.IntRange(min=1))
@click.option("--all", "every", is_flag=True, help="Release every held change and every engaged brake.")
@_vault_option
@_json_option
@click.pass_obj
def release(obj: Ctx, ids: tuple[int, ...], every: bool, vault: str | None, as_json: bool) -> None:
    """Let held changes go (they are sent to peers); an agent's brake ends too."""
    body = _selection(ids, every)
    client = obj.client()
    data = client.request("POST", f"{_base(client, vault)}/held/release", body)
    if as_json:
        emit_json(data)
        return
    n = len(data["released"])
    click.echo(f"Released {n} held change{'s' if n != 1 else ''}." if n or not every else "Nothing was held.")


@cli.command()
@click.argument("ids", nargs=-1, type=click.IntRange(min=1))
@click.option("--all", "every", is_flag=True, help="Revert every held change.")
@_vault_option
@_json_option
@click.pass_obj
def revert(obj: Ctx, ids: tuple[int, ...], every: bool, vault: str | None, as_json: bool) -> None:
    """Put held notes back on disk as they were before the change."""
    body = _selection(ids, every)
    client = obj.client()
    data = client.request("POST", f"{_base(client, vault)}/held/revert", body)
    results = data["reverted"]
    failed = [r for r in results if "error" in r]
    if as_json:
        emit_json(data)
    else:
        for r in results:
            if "error" in r:
                continue
            where = r["path"] if not r.get("pathWasTaken") else f"{r['path']} ({r['originalPath']} is taken)"
            click.echo(f"Reverted {where}.")
        skipped = data.get("skipped", [])
        for s in skipped:  # came back after the hold: never overwritten
            click.echo(f"Skipped {s['path']}: {s['reason']} (left as it is).")
        if not results and not skipped:
            click.echo("Nothing was held.")
    if failed:
        raise StetError(f"{len(failed)} of {len(results)} held changes could not be reverted "
                        f"(first: {failed[0]['path']}: {failed[0]['error']['message']})")
