"""``stet versions``, ``stet show`` and ``stet restore`` for attachments (SPEC §3.14, §7):
a path whose name is not a note's (``[notes] extensions``) is an attachment's, asked of
``/v1/vaults/{vault}/attachments/{path}/versions``. ``show`` writes the version's bytes
to stdout or ``--output FILE`` (streamed; the file appears only once complete)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import click

from stet.sync.errors import StetError

from .cli import Ctx, emit_json
from .daemon_link import ApiError, DaemonClient, quote_path
from .versions_table import Column, common_columns, print_versions

# What `stet restore PATH` picks without a version: the newest bytes that were replaced.
RESTORABLE = ("before-overwrite", "before-deletion", "concurrent")


def is_attachment(obj: Ctx, path: str) -> bool:
    from stet.sync.note_paths import is_note_name

    return not is_note_name(path, obj.config().notes.extensions)


def _url(client: DaemonClient, vault: str | None, path: str) -> str:
    return f"/v1/vaults/{quote_path(client.resolve_vault(vault))}/attachments/{quote_path(path)}/versions"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    x = float(n)
    for unit in ("KB", "MB"):
        x /= 1024
        if x < 1024:
            return f"{x:.1f} {unit}"
    return f"{x / 1024:.1f} GB"


def list_versions(obj: Ctx, path: str, vault: str | None, as_json: bool) -> None:
    client = obj.client()
    data = client.request("GET", _url(client, vault, path))
    if as_json:
        emit_json(data)
        return
    print_versions(path, data, [
        *common_columns(17), Column("SIZE", lambda v: _size(v["size"]), 9, right=True),
        Column("SHA256", lambda v: f"{v['sha256'][:12]}{'  (executable)' if v['executable'] else ''}")])


def _download(client: DaemonClient, target: str, out: BinaryIO) -> int:
    """Stream a GET's body into ``out``; an error answer raises ``ApiError``."""
    import http.client

    conn = http.client.HTTPConnection(client.host, client.port, timeout=client.timeout)
    try:
        conn.request("GET", target, headers={"Authorization": f"Bearer {client.token}"})
        resp = conn.getresponse()
        if resp.status >= 400:
            try:
                err = json.loads(resp.read()).get("error", {})
            except ValueError:
                err = {}
            message = err.get("message", f"HTTP {resp.status}")
            raise ApiError(resp.status, err.get("code", "bad_request"), message,
                           {k: v for k, v in err.items() if k not in ("code", "message")})
        n = 0
        while chunk := resp.read(1 << 20):
            out.write(chunk)
            n += len(chunk)
        return n
    except (ConnectionError, http.client.HTTPException) as exc:
        raise StetError(f"the daemon's answer was cut short: {exc}") from None
    finally:
        conn.close()


def show_version(obj: Ctx, path: str, version: str, vault: str | None, output: str | None,
                 as_json: bool) -> None:
    client = obj.client()
    url = f"{_url(client, vault, path)}/{version}"
    if as_json:  # the version's description, not its bytes
        listed = client.request("GET", _url(client, vault, path))["versions"]
        found = next((v for v in listed if str(v["id"]) == version), None)
        if found is None:
            raise StetError(f"{path} has no version {version} (see stet versions {path})")
        emit_json(found)
        return
    if output is None:
        _download(client, url, sys.stdout.buffer)
        sys.stdout.flush()
        return
    dest = Path(output)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as f:
            n = _download(client, url, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    click.echo(f"Wrote version {version} of {path} to {dest} ({n} bytes).", err=True)


def restore_version(obj: Ctx, path: str, version: str | None, vault: str | None, as_json: bool) -> None:
    client = obj.client()
    url = _url(client, vault, path)
    if version is None:
        listed: list[dict[str, Any]] = client.request("GET", url)["versions"]
        chosen = next((v for v in listed if v["kind"] in RESTORABLE), None)
        if chosen is None:
            raise StetError(f"{path} has no version to restore; see `stet versions {path}`")
        version = str(chosen["id"])
    result = client.request("POST", f"{url}/{version}/restore", {})
    if as_json:
        emit_json(result)
        return
    if not result["changed"]:
        click.echo(f"{path} already holds version {version}: nothing to do.")
        return
    click.echo(f"Restored {path} to version {version}. The bytes it replaced are kept as a version "
               f"(`stet versions {path}`).")
