"""``stet ui``: open the web page (SPEC §6.14) with a one-time sign-in link.

The daemon makes the code (``POST /v1/ui/login``, owner token); the link works once, for
two minutes, and turns into a session cookie in the browser that opens it. Registers itself
on ``stet.client.cli.cli`` when imported.
"""

from __future__ import annotations

import webbrowser

import click

from .cli import Ctx, cli, emit_json


@cli.command("ui")
@click.option("--no-browser", is_flag=True, help="Print the sign-in link instead of opening a browser.")
@click.option("--json", "as_json", is_flag=True, help='Print {"url": ...} as JSON (implies --no-browser).')
@click.pass_obj
def ui(obj: Ctx, no_browser: bool, as_json: bool) -> None:
    """Open the web page: notes, history and restore, held changes, agents, devices.

    The link signs this browser in once; run `stet ui` again for another browser or after
    the daemon restarts.
    """
    url = str(obj.client().request("POST", "/v1/ui/login")["url"])
    if as_json:
        emit_json({"url": url})
        return
    if not no_browser and webbrowser.open(url):
        click.echo("Opened the web page in your browser (the sign-in link works once).")
        return
    click.echo("Open this link in your browser (it works once, for two minutes):")
    click.echo(url)
