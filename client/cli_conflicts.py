"""``stet conflicts show ID`` and ``stet conflicts apply ID`` (SPEC §6.4 promotion).

A refused write is kept; ``show`` prints what it attempted beside the note as it is now,
``apply`` promotes it: the daemon applies it as made against the text the agent had read,
so whatever changed since survives, and keeps the text before as a version. Both go
through the daemon's API with the owner token. Registers itself on ``stet conflicts``.
"""

from __future__ import annotations

from typing import Any

import click

from stet.sync.errors import StetError

from .cli import Ctx, cli, emit_json
from .cli_agents import SINCE_HELP, Api, short_rev, since_query, vault_option, when_of
from .daemon_link import ApiError


def _call(api: Api, method: str, conflict_id: int, suffix: str = "") -> Any:
    body: dict[str, Any] | None = {} if method == "POST" else None
    try:
        return api.client.request(method, api.url(f"conflicts/{conflict_id}{suffix}"), body)
    except ApiError as exc:
        if exc.code == "revision_unknown":
            raise StetError(f"conflict {conflict_id} cannot be applied: {exc.message}",
                            code=exc.code) from None
        raise StetError(exc.message, code=exc.code) from None


def _section(title: str, text: str | None) -> None:
    click.echo(f"--- {title}")
    if text is None:
        click.echo("(none)")
    else:
        click.echo(text, nl=not text.endswith("\n"))


@cli.group(invoke_without_command=True)
@click.option("--since", default=None, help=SINCE_HELP)
@click.option("--limit", type=click.IntRange(1, 10000), default=100, show_default=True)
@vault_option
@click.option("--json", "as_json", is_flag=True, help="Print the conflicts as JSON.")
@click.pass_obj
def conflicts(obj: Ctx, since: str | None, limit: int, vault: str | None, as_json: bool) -> None:
    """Refused writes (stale revision, bad anchor, out of scope, brake), newest first.

    `stet conflicts show ID` prints one beside the note now; `stet conflicts apply ID`
    promotes it (cli_conflicts)."""
    if click.get_current_context().invoked_subcommand is not None:
        return
    since_ts = since_query(since)
    api = Api(obj, vault)
    rows = api.call("GET", api.url("conflicts"), query={"since": since_ts, "limit": limit})["conflicts"]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("No refused writes.")
        return
    for c in rows:
        if c.get("target") == "attachment":  # a concurrent change's loser, kept as a version
            click.echo(attachment_line(c))
            continue
        promoted = "  promoted" if c.get("promoted") else ""
        note = f"(note at {short_rev(c.get('currentRevision'))}){promoted}"
        click.echo(f"#{c['id']:<5} {when_of(c['at'])}  {c['token']:<16}  {c['code']:<18}  "
                   f"{c['operation']:<12}  {c['path']}  {note}")


def attachment_line(c: dict[str, Any]) -> str:
    win = c.get("winner")
    won = (f"won by {win['device'][:12]}'s {win['sha256'][:12]}" if win else "the winner is not known here")
    return (f"#{c['id']:<5} {when_of(c['at'])}  {c['token']:<16.16}  {'concurrent':<18}  {'attachment':<12}  "
            f"{c['path']}  ({won}; the loser is version {c['versionId']}: "
            f"`stet show {c['path']} --version {c['versionId']} --output FILE`)")


@conflicts.command("show")
@click.argument("conflict_id", type=click.IntRange(1))
@vault_option
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's answer as JSON.")
@click.pass_obj
def show(obj: Ctx, conflict_id: int, vault: str | None, as_json: bool) -> None:
    """What refused write ID attempted, beside the note as it is now."""
    api = Api(obj, vault)
    c = _call(api, "GET", conflict_id)
    if as_json:
        emit_json(c)
        return
    click.echo(f"Conflict {c['id']}: {c['operation']} of {c['path']} by {c['token']}, refused "
               f"({c['code']}) at {when_of(c['at'])}.")
    click.echo(f"It was made against revision {short_rev(c.get('baseRevision'))}; the note is now at "
               f"{short_rev((c.get('note') or {}).get('revision'))}.")
    if c.get("promoted"):
        p = c["promoted"]
        click.echo(f"Promoted at {when_of(p['at'])} by {p['by']} (revision {short_rev(p.get('revision'))}).")
    attempted = c.get("attemptedText")
    if c["operation"] == "append_note":
        _section("attempted: append", c["attempted"].get("text"))
    elif c["operation"] in ("delete_note", "move_note"):
        _section("attempted", f"{c['operation']} {c['attempted']}\n")
    elif c["operation"] == "merge":
        for side in c["attempted"].get("sides", []):
            _section(f"{side.get('by') or side['source']}'s text before the merge", side.get("text"))
    else:
        if attempted is None and c.get("attemptedError"):
            click.echo(f"(the attempt no longer applies to the text it was made against: "
                       f"{c['attemptedError'].get('message')})")
        _section("attempted", attempted)
    note = c.get("note")
    _section(f"now ({note['path']})" if note else "now", note["content"] if note else None)
    if c["operation"] == "merge":
        click.echo("Both sides changed the same words: each side's lines are in the note, one after "
                   "the other. Delete the line you do not want, or restore a `concurrent` version "
                   f"(stet versions {c['path']}).")
    if c.get("resultText") is not None and not c.get("promoted"):
        overlaps = c.get("resultOverlaps") or 0
        kept = f" ({overlaps} region(s) both changed: both lines kept whole)" if overlaps else ""
        _section(f"after apply{kept}", c["resultText"])
    if c.get("promotable") and not c.get("promoted"):
        click.echo(f"Apply it with: stet conflicts apply {c['id']}")


@conflicts.command("apply")
@click.argument("conflict_id", type=click.IntRange(1))
@vault_option
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's answer as JSON.")
@click.pass_obj
def apply(obj: Ctx, conflict_id: int, vault: str | None, as_json: bool) -> None:
    """Promote refused write ID: apply it as made on the text the agent had read, so what
    changed since survives; the note's text before is kept as a version."""
    api = Api(obj, vault)
    result = _call(api, "POST", conflict_id, "/apply")
    if as_json:
        emit_json(result)
        return
    kept = f"; the text before is version {result['beforeVersion']}" if result.get("beforeVersion") else ""
    click.echo(f"Applied conflict {result['id']} ({result['operation']}) to {result['path']}: now at "
               f"{short_rev(result.get('revision'))}{kept}.")
