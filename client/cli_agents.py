"""The agent-facing commands (SPEC §6, §7): tokens, and the note operations through the API.

``stet token create|list|revoke`` work on the home directly (``HomeRegistry``), with or
without a running daemon; a running daemon looks tokens up on every request, so a new
or revoked token takes effect at once. ``stet append|write|edit|log|conflicts|search``
go through the daemon's HTTP API exactly as an agent would (``DaemonClient.request``),
so they see the same refusals. Registers itself on ``stet.client.cli.cli`` when imported.
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from stet.sync.errors import StetError
from stet.sync.permissions import Scopes, glob_problem

from .cli import Ctx, cli, emit_json
from .daemon_link import ApiError, DaemonClient, quote_path

if TYPE_CHECKING:
    from stet.sync.home import HomeRegistry

# -- helpers -------------------------------------------------------------------------------


def when_of(ts: float | None) -> str:
    if ts is None:
        return "never"
    return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def short_rev(revision: Any) -> str:
    return str(revision)[:12] if revision else "-"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])\Z")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
SINCE_HELP = ("Only since: 10m, 2h, 1d, 1w, today, yesterday, an ISO time (2026-01-31T09:00) "
              "or a Unix timestamp.")


def parse_since(value: str, *, now: float | None = None) -> float:
    """``--since`` in the CLI's words → a Unix timestamp; a clear error names what it accepts."""
    text = value.strip().lower()
    now = time.time() if now is None else now
    m = _DURATION.match(text)
    if m is not None:
        return now - float(m.group(1)) * _UNIT_S[m.group(2)]
    if text in ("today", "yesterday"):
        midnight = datetime.fromtimestamp(now).astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight.timestamp() - (86400 if text == "yesterday" else 0)
    try:
        number = float(text)
        if math.isfinite(number) and number >= 0:
            return number
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise StetError(f"--since {value!r} is not a time: give 10m, 2h, 1d, 1w, today, yesterday, "
                        "an ISO time (2026-01-31 or 2026-01-31T09:00) or a Unix timestamp") from None
    if when.tzinfo is None:
        when = when.astimezone()  # a time without a zone is local time
    return when.timestamp()


def since_query(value: str | None) -> str | None:
    return None if value is None else repr(parse_since(value))


def _stdin_text(what: str) -> str:
    stream: BinaryIO = sys.stdin.buffer  # click.get_binary_stream is deprecated (Click 8.5)
    if stream.isatty():
        raise StetError(f"pipe the {what} on stdin (e.g. `stet write PATH < file.md`)")
    data: bytes = stream.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise StetError(f"the {what} on stdin is not UTF-8 text") from None


class Api:
    """One vault of the running daemon, reached over HTTP with the owner token."""

    def __init__(self, obj: Ctx, vault: str | None) -> None:
        self.client: DaemonClient = obj.client()
        self.vault = self.client.resolve_vault(vault)

    def url(self, tail: str) -> str:
        return f"/v1/vaults/{quote_path(self.vault)}/{tail}"

    def note_url(self, path: str, suffix: str = "") -> str:
        return self.url(f"notes/{quote_path(path)}{suffix}")

    def call(self, method: str, target: str, body: Any = None, *,
             query: dict[str, Any] | None = None) -> Any:
        try:
            return self.client.request(method, target, body, query=query)
        except ApiError as exc:
            raise _explain(exc) from None


def _explain(exc: ApiError) -> StetError:
    """The daemon's one-sentence message, with what a person needs to act on it."""
    d = exc.details
    if exc.code == "revision_mismatch":
        return StetError(f"the note changed since that revision (it is now at "
                         f"{short_rev(d.get('currentRevision'))}): read it again and retry", code=exc.code)
    if exc.code == "revision_unknown":
        return StetError("that base revision is unknown to the daemon or older than an hour: "
                         "read the note again and retry", code=exc.code)
    return exc


def _result_line(verb: str, result: dict[str, Any]) -> str:
    if result.get("changed") is False:
        return f"{result['path']} already holds that text (revision {short_rev(result.get('revision'))})."
    replayed = " (a retry: the first result, nothing applied)" if result.get("replayed") else ""
    return f"{verb} {result['path']} (revision {short_rev(result.get('revision'))}){replayed}."


def _send_edit(api: Api, path: str, suffix: str, body: dict[str, Any], *, as_json: bool,
               expected_revision: str | None = None, key: str | None = None,
               verb: Callable[[dict[str, Any]], str] = lambda _result: "Edited") -> None:
    """POST a change of the note PATH (with the revision it expects and its idempotency
    key, when given) and say what it did: the daemon's answer with --json, else one line."""
    if expected_revision is not None:
        body["expectedRevision"] = expected_revision
    if key is not None:
        body["idempotencyKey"] = key
    result = api.call("POST", api.note_url(path, suffix), body)
    if as_json:
        emit_json(result)
        return
    click.echo(_result_line(verb(result), result))


# -- tokens ----------------------------------------------------------------------------------


@cli.group()
def token() -> None:
    """Agent tokens: create, list, revoke (with or without a running daemon)."""


def _registry(obj: Ctx) -> HomeRegistry:
    from stet.sync.home import HomeRegistry  # SQLite: only the token commands need it

    if not obj.layout.home_db.exists():
        raise StetError(f"no vault is registered in {obj.layout.root} yet: run `stet init PATH` first")
    return HomeRegistry(obj.layout)


@token.command("create")
@click.argument("name")
@click.option("--vault", default=None, help="The vault the token belongs to (optional with one vault).")
@click.option("--read", "read_globs", multiple=True, metavar="GLOB", help="Paths it may read (repeatable).")
@click.option("--append", "append_globs", multiple=True, metavar="GLOB",
              help="Paths it may append to (repeatable; does not imply read).")
@click.option("--write", "write_globs", multiple=True, metavar="GLOB",
              help="Paths it may create, rewrite, edit, move and delete (implies read and append).")
@click.option("--json", "as_json", is_flag=True, help='Print {"token": ...} as JSON.')
@click.pass_obj
def token_create(obj: Ctx, name: str, vault: str | None, read_globs: tuple[str, ...],
                 append_globs: tuple[str, ...], write_globs: tuple[str, ...], as_json: bool) -> None:
    """Create the agent token NAME for one vault and print it (only this once).

    Globs: ``**`` crosses folders, ``*`` and ``?`` stay within one, e.g.
    --write 'agents/researcher/**' --append 'shared/findings.md' --read '**'.
    """
    if not (read_globs or append_globs or write_globs):
        raise StetError("give the token at least one scope: --read, --append or --write GLOB")
    scopes = checked_scopes(read_globs, append_globs, write_globs)
    registry = _registry(obj)
    try:
        entry = registry.find(vault)
        secret = registry.create_token(name, entry.id, scopes.to_json())
    finally:
        registry.close()
    if as_json:
        emit_json({"token": secret, "name": name, "vault": entry.name, "scopes": scopes.to_json()})
        return
    click.echo(secret)
    click.echo(f"Token {name!r} for vault {entry.name!r} created; it is shown only this once.", err=True)


def checked_scopes(read: tuple[str, ...], append: tuple[str, ...], write: tuple[str, ...]) -> Scopes:
    """The scopes of a new token, each glob checked, errors naming the option as typed."""
    for option, globs in (("--read", read), ("--append", append), ("--write", write)):
        for glob in globs:
            problem = glob_problem(glob)
            if problem is not None:
                raise StetError(f"{option} {glob!r} is not a valid glob: {problem}; "
                                "e.g. --write 'agents/**' --read '**'")
    return Scopes.from_json({"read": list(read), "append": list(append), "write": list(write)})


def _scopes_text(scopes: dict[str, list[str]]) -> str:
    parts = [f"{kind} {' '.join(scopes.get(kind, []))}" for kind in ("read", "append", "write")
             if scopes.get(kind)]
    return "; ".join(parts) or "none"


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the tokens as JSON.")
@click.pass_obj
def token_list(obj: Ctx, as_json: bool) -> None:
    """Agent tokens: name, vault, scopes, created, last used (never the secret)."""
    registry = _registry(obj)
    try:
        names = {v.id: v.name for v in registry.vaults()}
        records = registry.tokens()
    finally:
        registry.close()
    rows = [dict(r.to_json(), vault=names.get(r.vault_id, r.vault_id), vaultId=r.vault_id) for r in records]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("No agent tokens yet: `stet token create NAME --write GLOB`.")
        return
    header = ("NAME", "VAULT", "CREATED", "LAST USED", "SCOPES")
    table = [header] + [(r.name, names.get(r.vault_id, r.vault_id), when_of(r.created_at),
                         when_of(r.last_used_at), _scopes_text(r.scopes)) for r in records]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4])


@token.command("revoke")
@click.argument("name")
@click.pass_obj
def token_revoke(obj: Ctx, name: str) -> None:
    """Revoke the token NAME: refused from the very next request on."""
    registry = _registry(obj)
    try:
        registry.revoke_token(name)
    finally:
        registry.close()
    click.echo(f"Revoked the token {name!r}.")


# -- writes through the API ------------------------------------------------------------------

vault_option = click.option("--vault", default=None, help="Vault name (optional with one vault).")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print the daemon's answer as JSON.")
_key_option = click.option("--idempotency-key", "key", default=None,
                           help="Retry-safe: the same key again returns the first result, applies nothing.")


_OPTION_LIKE = re.compile(r"--?[A-Za-z][A-Za-z0-9_-]*(=.*)?\Z", re.DOTALL)


class DashTextCommand(click.Command):
    """A command whose text argument may start with a dash, as a markdown list item does
    (``stet append log.md "- found X"``), while a word like ``--vualt`` is still refused as an
    unknown option (text that really is ``--x`` goes after ``--``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        known = {o for p in self.get_params(ctx) for o in (*p.opts, *p.secondary_opts)}
        for arg in args:
            if arg == "--":
                break
            name = arg.split("=", 1)[0]
            if _OPTION_LIKE.match(arg) and name not in known:
                raise click.NoSuchOption(name, ctx=ctx)
        return super().parse_args(ctx, args)


@cli.command(cls=DashTextCommand, context_settings={"ignore_unknown_options": True})
@click.argument("path")
@click.argument("text")
@vault_option
@_key_option
@_json_option
@click.pass_obj
def append(obj: Ctx, path: str, text: str, vault: str | None, key: str | None, as_json: bool) -> None:
    """Append TEXT (or stdin, for -) at the end of the note PATH, creating it if missing.

    TEXT may start with a dash, as a markdown list item does: stet append log.md "- found X".
    """
    if text == "-":
        text = _stdin_text("text to append")
    _send_edit(Api(obj, vault), path, "/append", {"text": text}, as_json=as_json, key=key,
               verb=lambda result: "Created" if result.get("created") else "Appended to")


@cli.command()
@click.argument("path")
@click.option("--expected-revision", default=None, metavar="REV",
              help="Refuse unless the note is still at REV (first committer wins).")
@click.option("--base-revision", default=None, metavar="REV",
              help="The revision you read: changes made since by others survive the rewrite.")
@vault_option
@_key_option
@_json_option
@click.pass_obj
def write(obj: Ctx, path: str, expected_revision: str | None, base_revision: str | None,
          vault: str | None, key: str | None, as_json: bool) -> None:
    """Rewrite the note PATH with stdin (a minimal diff), or create it if missing.

    With --expected-revision or --base-revision the note must exist.
    """
    if expected_revision is not None and base_revision is not None:
        raise StetError("give --expected-revision or --base-revision, not both")
    content = _stdin_text("new content")
    api = Api(obj, vault)
    body: dict[str, Any] = {"content": content}
    if expected_revision is not None:
        body["expectedRevision"] = expected_revision
    if base_revision is not None:
        body["baseRevision"] = base_revision
    if key is not None:
        body["idempotencyKey"] = key
    conditional = expected_revision is not None or base_revision is not None
    result: dict[str, Any]
    verb = "Wrote"
    try:
        result = api.client.request("PUT", api.note_url(path), body)
    except ApiError as exc:
        if exc.code != "not_found" or conditional:
            raise _explain(exc) from None
        create = {k: v for k, v in body.items() if k in ("content", "idempotencyKey")}
        try:
            result = api.client.request("POST", api.note_url(path), create)
            verb = "Created"
        except ApiError as exc2:
            if exc2.code != "already_exists":
                raise _explain(exc2) from None
            result = api.call("PUT", api.note_url(path), body)  # created meanwhile: rewrite it
    if as_json:
        emit_json(result)
        return
    click.echo(_result_line(verb, result))


@cli.command()
@click.argument("path")
@click.option("--old", "olds", multiple=True, required=True, metavar="TEXT",
              help="Text that must occur exactly once in the note (repeatable, paired with --new).")
@click.option("--new", "news", multiple=True, required=True, metavar="TEXT",
              help="What replaces the matching --old.")
@click.option("--expected-revision", default=None, metavar="REV",
              help="Refuse unless the note is still at REV.")
@vault_option
@_key_option
@_json_option
@click.pass_obj
def edit(obj: Ctx, path: str, olds: tuple[str, ...], news: tuple[str, ...], expected_revision: str | None,
         vault: str | None, key: str | None, as_json: bool) -> None:
    """Replace each --old by its --new in the note PATH; all or nothing."""
    if len(olds) != len(news):
        raise StetError(f"give as many --new as --old (got {len(olds)} --old and {len(news)} --new)")
    body: dict[str, Any] = {"edits": [{"oldText": o, "newText": n} for o, n in zip(olds, news, strict=True)]}
    _send_edit(Api(obj, vault), path, "/edit", body, as_json=as_json, expected_revision=expected_revision,
               key=key)


@cli.command()
@click.argument("path")
@click.argument("heading")
@click.argument("text")
@click.option("--mode", type=click.Choice(["append", "prepend", "insert_after", "replace"]),
              default="append", show_default=True, help="Where TEXT goes in the section.")
@click.option("--expected-revision", default=None, metavar="REV",
              help="Refuse unless the note is still at REV.")
@vault_option
@_key_option
@_json_option
@click.pass_obj
def section(obj: Ctx, path: str, heading: str, text: str, mode: str, expected_revision: str | None,
            vault: str | None, key: str | None, as_json: bool) -> None:
    """Write TEXT into the section HEADING of the note PATH ('Parent > Child' where needed)."""
    _send_edit(Api(obj, vault), path, "/section", {"heading": heading, "mode": mode, "text": text},
               as_json=as_json, expected_revision=expected_revision, key=key)


@cli.command()
@click.argument("path")
@click.argument("task")
@click.option("--undo", is_flag=True, help="Untick it instead.")
@vault_option
@_json_option
@click.pass_obj
def tick(obj: Ctx, path: str, task: str, undo: bool, vault: str | None, as_json: bool) -> None:
    """Tick the task item TASK (its text after the box) in the note PATH."""
    _send_edit(Api(obj, vault), path, "/task", {"task": task, "done": not undo}, as_json=as_json)


@cli.command()
@click.argument("path")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE",
              help="Set a field (repeatable); VALUE is read as YAML: 3, true, [a, b], text.")
@click.option("--delete", "deletes", multiple=True, metavar="FIELD", help="Remove a field (repeatable).")
@click.option("--tag", "add_tags", multiple=True, metavar="TAG", help="Add a tag (repeatable).")
@click.option("--untag", "remove_tags", multiple=True, metavar="TAG", help="Remove a tag (repeatable).")
@vault_option
@_json_option
@click.pass_obj
def frontmatter(obj: Ctx, path: str, sets: tuple[str, ...], deletes: tuple[str, ...],
                add_tags: tuple[str, ...], remove_tags: tuple[str, ...], vault: str | None,
                as_json: bool) -> None:
    """Show the frontmatter of the note PATH, or change its fields and tags."""
    import yaml

    api = Api(obj, vault)
    if not (sets or deletes or add_tags or remove_tags):
        result = api.call("GET", api.note_url(path, ""), query={"include": "frontmatter"})
        if as_json:
            emit_json(result["frontmatter"])
            return
        shown = result["frontmatter"]
        click.echo(yaml.safe_dump(shown, allow_unicode=True, sort_keys=False).rstrip() if shown
                   else "no frontmatter")
        return
    fields: dict[str, Any] = {}
    for item in sets:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise StetError(f"--set takes FIELD=VALUE, not {item!r}")
        try:
            fields[name.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            fields[name.strip()] = value
    body: dict[str, Any] = {"set": fields, "delete": list(deletes), "addTags": list(add_tags),
                            "removeTags": list(remove_tags)}
    _send_edit(api, path, "/frontmatter", body, as_json=as_json)


@cli.command()
@click.argument("path")
@click.option("--depth", type=click.IntRange(0, 3), default=1, show_default=True, help="Links away.")
@click.option("--limit", type=click.IntRange(1, 50), default=20, show_default=True,
              help="At most this many notes.")
@vault_option
@_json_option
@click.pass_obj
def context(obj: Ctx, path: str, depth: int, limit: int, vault: str | None, as_json: bool) -> None:
    """The note PATH with the notes it links to and the notes linking to it."""
    api = Api(obj, vault)
    result = api.call("GET", api.note_url(path, "/context"), query={"depth": depth, "limit": limit})
    if as_json:
        emit_json(result)
        return
    for note in result["notes"]:
        how = f" ({note['reachedBy']} from {note['from']})" if note.get("reachedBy") else ""
        click.echo(f"== {note['path']}{how}")
        click.echo(note["content"].rstrip("\n"))
    if result.get("truncated"):
        click.echo("(more notes are linked: raise --limit or lower --depth)")


@cli.command()
@click.argument("path")
@vault_option
@_json_option
@click.pass_obj
def links(obj: Ctx, path: str, vault: str | None, as_json: bool) -> None:
    """The links of the note PATH and the notes linking to it."""
    api = Api(obj, vault)
    result = api.call("GET", api.note_url(path, "/links"))
    if as_json:
        emit_json(result)
        return
    for link in result["links"]:
        where = f"  ({link['resolved']})" if link.get("resolved") else "  (no note)"
        click.echo(f"-> {link['target']}{where}")
    for back in result["backlinks"]:
        via = f"  (by its old path {back['viaOldPath']})" if back.get("viaOldPath") else ""
        click.echo(f"<- {back['path']}{via}")
    if not result["links"] and not result["backlinks"]:
        click.echo("no links to or from this note")


# -- records through the API -----------------------------------------------------------------


@cli.command()
@click.argument("path", required=False)
@click.option("--since", default=None, help=SINCE_HELP)
@click.option("--limit", type=click.IntRange(1, 10000), default=100, show_default=True)
@vault_option
@click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON.")
@click.pass_obj
def log(obj: Ctx, path: str | None, since: str | None, limit: int, vault: str | None, as_json: bool) -> None:
    """The attributed change log (newest first), of one note or the vault."""
    since_ts = since_query(since)
    api = Api(obj, vault)
    # One more than asked: the hint below says "older changes exist" only when they do.
    fetched = api.call("GET", api.url("log"), query={"path": path, "since": since_ts,
                                                     "limit": min(limit + 1, 10000)})["changes"]
    changes = fetched[:limit]
    more = len(fetched) > limit or len(fetched) == 10000
    if as_json:
        emit_json(changes)
        return
    if not changes:
        click.echo("No changes.")
        return
    for c in changes:
        where = f"{c['oldPath']} -> {c['path']}" if c.get("oldPath") else c["path"]
        who = c.get("by") or c["source"]  # "disk on laptop": how, and on which device
        click.echo(f"{when_of(c['at'])}  {who:<24}  {c['kind']:<8}  +{c['inserted']} -{c['deleted']}  "
                   f"{short_rev(c.get('revisionAfter'))}  {where}")
    if more:
        wider = f"with --limit {min(limit * 10, 10000)} or " if limit < 10000 else ""
        click.echo(f"(stopped at --limit {limit}: older changes exist; see them {wider}narrow it with "
                   "--since, e.g. --since 1d, or a PATH)", err=True)


@cli.command()
@click.argument("query")
@click.option("--limit", type=click.IntRange(1, 200), default=20, show_default=True)
@vault_option
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_obj
def search(obj: Ctx, query: str, limit: int, vault: str | None, as_json: bool) -> None:
    """Full-text search in any language: every word must match, each as the start of a
    word; "a phrase" in that order; a OR b; -word excludes (docs/agents.md)."""
    if not query.strip():
        raise StetError("give the words to search for, e.g. `stet search meeting notes`")
    api = Api(obj, vault)
    answer = api.call("GET", api.url("search"), query={"q": query, "limit": limit})
    results = answer["results"]
    if answer.get("indexing"):  # the index is being rebuilt: say so beside what it found
        click.echo(f"({answer['indexing']})", err=True)
    if as_json:
        emit_json(results)
        return
    if not results:
        click.echo("No matches.")
        return
    for r in results:
        click.echo(f"{r['path']}:{r['line']}: {r['snippet']}")
