"""The web page at ``/ui/`` (SPEC §6.14): login, notes, a note, its history, held changes,
conflicts and activity (agents and devices: ``ui_admin``).

Server-rendered HTML; scripts only for the live parts (``ui/static``: the activity feed and
the Yjs editor), no inline script (the CSP forbids it). The guard middleware (``http_api``)
applies the Host and Origin rules of §6.3 to ``/ui/`` as to everything and leaves the
auth to ``ui_page``: a live session cookie for every page, plus the session's CSRF token for
every form. Every action calls the existing operations (``NoteOperations``, the brake, the
peer routes' functions) as the owner writing as source ``ui``.
"""

from __future__ import annotations

import logging
import mimetypes
import urllib.parse
from collections import Counter
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon.ops.event_stream import stream_events
from stet.daemon.ops.held import brake_of, release_held, revert_held
from stet.daemon.ops.host import DAEMON_KEY, VaultHost, daemon_of, principal_of
from stet.daemon.ops.notes import NoteOperations
from stet.daemon.ops.sessions import (
    COOKIE,
    SESSIONS_KEY,
    UI_PRINCIPAL,
    Session,
    UiSessions,
    clear_cookie,
    set_cookie,
)
from stet.daemon.safety.brake import held_json
from stet.daemon.ui import admin as ui_admin
from stet.daemon.ui import conflicts as ui_conflicts
from stet.daemon.ui.base import (
    html_response,
    redirect,
    render,
    ui_page,
    vault_name,
    vault_names,
)
from stet.daemon.ui.html import (
    bare_page,
    csrf_field,
    diff_html,
    esc,
    note_tree,
    q,
    render_markdown,
    static_bytes,
    table,
    when,
)
from stet.sync.errors import NotFound, StetError
from stet.sync.json_input import row_id

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

NOTES_PER_PAGE = 5000
DELETED_SHOWN = 100


def csp(request: web.Request) -> str:
    host = request.host  # checked by the guard: a loopback name with our port
    return ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            f"connect-src 'self' ws://{host}; form-action 'self'; frame-ancestors 'none'; "
            "base-uri 'none'")


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    if request.path != "/ui" and not request.path.startswith("/ui/"):
        return
    headers = response.headers
    headers["Content-Security-Policy"] = csp(request)
    headers["X-Content-Type-Options"] = "nosniff"
    # Never to another origin (the login URL holds a code); same-origin, because with
    # "no-referrer" Chrome sends "Origin: null" on the page's own form posts.
    headers["Referrer-Policy"] = "same-origin"
    headers["X-Frame-Options"] = "DENY"
    headers.setdefault("Cache-Control", "no-store")


def _vault(request: web.Request) -> VaultHost:
    return daemon_of(request).vault(request.match_info["vault"])


def ops_for(request: web.Request) -> NoteOperations:
    return daemon_of(request).operations(request.match_info["vault"], UI_PRINCIPAL)


# -- login ----------------------------------------------------------------------------------


async def new_login_code(request: web.Request) -> web.Response:
    """``POST /v1/ui/login`` (owner token): a one-time code and the URL that spends it."""
    if principal_of(request).kind != "owner":
        raise StetError("only the owner token may open the web page", code="forbidden")
    code = request.app[SESSIONS_KEY].new_code()
    url = f"http://127.0.0.1:{daemon_of(request).api_port}/ui/login?code={urllib.parse.quote(code)}"
    return web.json_response({"code": code, "url": url})


async def login(request: web.Request) -> web.StreamResponse:
    sid = request.app[SESSIONS_KEY].redeem(request.query.get("code", ""))
    if sid is None:
        return html_response(bare_page(
            "Sign-in link refused",
            "This sign-in link was used already or has expired (links work once, for two minutes). "
            "Run `stet ui` for a new one."), 403)
    resp = redirect("/ui/")
    set_cookie(resp, sid)
    return resp


@ui_page
async def logout(request: web.Request, session: Session) -> web.StreamResponse:
    request.app[SESSIONS_KEY].end(request.cookies.get(COOKIE))
    resp = html_response(bare_page("Signed out", "Run `stet ui` to open the page again."))
    clear_cookie(resp)
    return resp


async def static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    data = static_bytes(name)
    if data is None:
        return html_response(bare_page("Not found", "No such file."), 404)
    ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return web.Response(body=data, content_type=ctype, headers={"Cache-Control": "no-cache"})


@ui_page
async def home(request: web.Request, session: Session) -> web.StreamResponse:
    names = vault_names(request)
    if not names:
        return redirect("/ui/agents")
    return redirect(f"/ui/v/{q(names[0])}/notes")


# -- notes ------------------------------------------------------------------------------------


def _search_form(vault: str, query: str) -> str:
    return (f'<form method="get" action="/ui/v/{esc(q(vault))}/notes" role="search">'
            '<label for="q">Search the notes</label>'
            f'<input type="search" id="q" name="q" value="{esc(query)}" placeholder="words to find">'
            '<div class="actions"><button type="submit">Search</button></div></form>')


@ui_page
async def notes(request: web.Request, session: Session) -> web.StreamResponse:
    ops = ops_for(request)
    vault = vault_name(request)
    query = request.query.get("q", "").strip()
    parts = [f"<h1>Notes in {esc(vault)}</h1>", _search_form(vault, query)]
    if query:
        await ops.index_caught_up()
        hits = ops.search_notes(query, limit=50)["results"]
        items = "".join(
            f'<li><a href="/ui/v/{esc(q(vault))}/note/{esc(q(h["path"]))}">{esc(h["path"])}</a>'
            f' <span class="muted">line {esc(h["line"])}</span>'
            f'<pre class="snippet">{esc(h["snippet"])}</pre></li>' for h in hits)
        parts.append(f"<h2>Results for “{esc(query)}”</h2>")
        parts.append(f'<ol class="results">{items}</ol>' if items else '<p class="empty">Nothing found.</p>')
    else:
        listed = ops.list_notes(limit=NOTES_PER_PAGE, cursor=request.query.get("cursor", ""))
        paths = [n["path"] for n in listed["notes"]]
        parts.append(f'<p class="muted">{len(paths)} note(s).</p>' if paths
                     else '<p class="empty">This vault has no notes yet.</p>')
        parts.append(note_tree(paths, vault))
        if listed["nextCursor"]:
            cursor = urllib.parse.quote(listed["nextCursor"])
            parts.append(f'<p><a href="/ui/v/{esc(q(vault))}/notes?cursor={esc(cursor)}">More notes</a></p>')
        parts.append(_deleted_notes(ops, vault, set(paths)))
    return render(request, session, title=f"Notes · {vault}", body="".join(parts), active="notes",
                  vault=vault)


def _deleted_notes(ops: NoteOperations, vault: str, live: set[str]) -> str:
    """Deleted notes, newest first, each to its history (where Restore brings it back)."""
    seen: set[str] = set()
    rows = []
    for row in ops.store.deleted_notes():
        if row.path in seen or row.path in live or ops.store.note_at(row.path) is not None:
            continue
        seen.add(row.path)
        rows.append([f'<a href="/ui/v/{esc(q(vault))}/history/{esc(q(row.path))}">{esc(row.path)}</a>',
                     esc(when(row.updated_at)), esc(row.updated_by)])
        if len(rows) >= DELETED_SHOWN:
            break
    if not rows:
        return ""
    return ("<h2>Deleted notes</h2><p class=\"muted\">Open one's history to see what it held and "
            "restore it.</p>" + table(["Note", "Deleted", "By"], rows, caption="Most recent first",
                                      empty=""))


@ui_page
async def note(request: web.Request, session: Session) -> web.StreamResponse:
    ops = ops_for(request)
    vault = vault_name(request)
    path = request.match_info["path"]
    found = ops.read_note(path)
    content: str = found["content"]
    vault_id = ops.service.vault_id
    base = f"/ui/v/{q(vault)}"
    ws = f"ws://{request.host}/v1/vaults/{urllib.parse.quote(vault_id, safe='')}/yjs"
    body = (
        f"<h1>{esc(path)}</h1>"
        f'<p class="actions"><a href="{esc(base)}/history/{esc(q(path))}">History and restore</a>'
        f'<a href="{esc(base)}/notes">All notes</a></p>'
        f'<article class="note-body" aria-label="The note, rendered">{render_markdown(content)}</article>'
        '<h2 id="edit">Edit live</h2>'
        '<p class="muted">Edits go straight into the note (and to disk and your devices) as you type; '
        'the history keeps what they replace.</p>'
        f'<label for="editor">Text of {esc(path)}</label>'
        f'<textarea id="editor" data-ws="{esc(ws)}" data-path="{esc(path)}" spellcheck="false" readonly>'
        f"{esc(content)}</textarea>"
        '<p id="editor-status" role="status" class="muted">Live editing needs JavaScript.</p>'
    )
    return render(request, session, title=path, body=body, active="notes", vault=vault,
                  scripts=("editor.js",))


# -- history ----------------------------------------------------------------------------------


@ui_page
async def history(request: web.Request, session: Session) -> web.StreamResponse:
    ops = ops_for(request)
    vault = vault_name(request)
    path = request.match_info["path"]
    listed = ops.history.list_versions(path)
    versions: list[dict[str, Any]] = listed["versions"]
    try:
        current: str | None = ops.read_note(path)["content"]
    except NotFound:
        current = None
    kinds = Counter(v["kind"] for v in versions)
    kind = request.query.get("kind", "")
    shown = [v for v in versions if not kind or v["kind"] == kind]
    base = f"/ui/v/{q(vault)}/history/{q(path)}"
    all_here = ' aria-current="true"' if not kind else ""
    filters = [f'<a href="{esc(base)}"{all_here}>all ({len(versions)})</a>']
    for k, n in sorted(kinds.items()):
        here = ' aria-current="true"' if k == kind else ""
        filters.append(f'<a href="{esc(base)}?kind={esc(urllib.parse.quote(k))}"{here}>{esc(k)} ({n})</a>')
    picked_id = request.query.get("v") or (str(shown[0]["id"]) if shown else "")
    rows = []
    for v in shown:
        vid = str(v["id"])
        also_kind = "&amp;kind=" + esc(kind) if kind else ""
        compare = "shown below" if vid == picked_id else \
            f'<a class="nowrap" href="{esc(base)}?v={esc(vid)}{also_kind}#compare">compare</a>'
        rows.append([esc(vid), f'<span class="kind {esc(v["kind"])}">{esc(v["kind"])}</span>',
                     esc(when(v["createdAt"])), esc(v.get("by") or v["source"]), esc(v["chars"]),
                     f'<span class="muted">{esc(v.get("preview", ""))}</span>', compare])
    state = "deleted (restoring brings it back)" if current is None else "live"
    parts = [
        f"<h1>History of {esc(path)}</h1>",
        f'<p>The note is {state}. <a href="/ui/v/{esc(q(vault))}/note/{esc(q(path))}">Open the note</a></p>'
        if current is not None else f"<p>The note is {state}.</p>",
        '<nav aria-label="Version kinds" class="actions">' + " ".join(filters) + "</nav>",
        table(["#", "Kind", "Saved", "By", "Chars", "Begins", ""], rows,
              caption="Versions, newest first", empty="No versions of this kind."),
    ]
    if picked_id:
        picked = ops.history.read_version(path, picked_id)
        now_label = "the note now" if current is not None else "the note now (deleted)"
        parts += [
            f'<h2 id="compare">Version {esc(picked_id)} ({esc(picked["kind"])}, '
            f"{esc(when(picked['createdAt']))}) against now</h2>",
            diff_html(picked["content"], current or "", old_label=f"version {picked_id}",
                      new_label=now_label),
            f'<form method="post" action="/ui/v/{esc(q(vault))}/restore/{esc(q(path))}">',
            csrf_field(session.csrf),
            f'<input type="hidden" name="version" value="{esc(picked_id)}">',
            f'<input type="hidden" name="back" value="{esc(base)}">',
            '<p class="muted">Restoring keeps the text now as a before-restore version, '
            "so it can be undone.</p>",
            f'<button type="submit">Restore version {esc(picked_id)}</button></form>',
            '<details><summary>The full text of this version</summary>'
            f'<pre class="snippet">{esc(picked["content"])}</pre></details>',
        ]
    return render(request, session, title=f"History · {path}", body="".join(parts), active="notes",
                  vault=vault)


@ui_page
async def restore(request: web.Request, session: Session) -> web.StreamResponse:
    ops = ops_for(request)
    vault = vault_name(request)
    path = request.match_info["path"]
    form = await request.post()
    version = str(form.get("version", ""))
    result = ops.history.restore_version(path, version)
    where = result.get("path", path)
    session.flash.append(f"Restored {where} to version {version}; the text it replaced "
                         "is kept as a before-restore version.")
    return redirect(f"/ui/v/{q(vault)}/history/{q(str(where))}")


# -- held changes, conflicts, activity ------------------------------------------------------


@ui_page
async def held(request: web.Request, session: Session) -> web.StreamResponse:
    vault = vault_name(request)
    brake = brake_of(_vault(request))
    changes = [held_json(h, brake.policy) for h in brake.changes()]
    engaged = brake.engaged()
    parts = ["<h1>Held changes</h1>"]
    if engaged:
        items = "".join(f"<li>Brake engaged for <strong>{esc(src)}</strong> since {esc(when(since))}: "
                        f"{brake.held.count_held(src)} change(s) held</li>" for src, since in engaged.items())
        parts.append(f'<ul class="engaged">{items}</ul>')
    parts.append('<p class="muted">A burst of deletions or emptied notes from one source is held here: '
                 "not sent to your other devices until you release it. Revert puts the notes back.</p>")
    rows = []
    for h in changes:
        box_id = f"held-{h['id']}"
        rows.append([
            f'<input type="checkbox" name="ids" value="{esc(h["id"])}" id="{esc(box_id)}" form="held-form">'
            f'<label class="check" for="{esc(box_id)}"> {esc(h["path"])}</label>',
            esc(("attachment " if h.get("target") == "attachment" else "") + h["kind"]), esc(h["source"]),
            esc(when(h["heldAt"])), esc(when(h["releasesAt"])),
        ])
    parts.append(table(["Note", "Change", "Source", "Held", "Released at"], rows,
                       caption=f"{len(changes)} held change(s)", empty="Nothing is held."))
    if changes:
        parts.append(
            f'<form method="post" id="held-form" action="/ui/v/{esc(q(vault))}/held">'
            f'{csrf_field(session.csrf)}'
            f'<input type="hidden" name="back" value="/ui/v/{esc(q(vault))}/held">'
            '<div class="actions">'
            '<button type="submit" name="action" value="revert">Revert selected</button>'
            '<button type="submit" name="action" value="release" class="secondary">Release selected</button>'
            '<button type="submit" name="action" value="revert-all">Revert all</button>'
            '<button type="submit" name="action" value="release-all" class="secondary">Release all</button>'
            "</div></form>")
    return render(request, session, title="Held changes", body="".join(parts), active="held", vault=vault)


@ui_page
async def held_action(request: web.Request, session: Session) -> web.StreamResponse:
    vault = vault_name(request)
    runtime = _vault(request)
    brake_of(runtime)  # the vault's brake is running (else: not found)
    form = await request.post()
    action = str(form.get("action", ""))
    ids: list[int] | None = None
    if not action.endswith("-all"):
        try:
            ids = [row_id(str(i), "held change id") for i in form.getall("ids", [])]
        except StetError:
            raise StetError("the held change ids must be whole numbers from 1 to 2^63-1") from None
        if not ids:
            raise StetError("select the held changes first (or use Release all / Revert all)")
    if action.startswith("release"):
        released = await release_held(runtime, ids)
        session.flash.append(f"Released {len(released)} held change(s): they go to your devices now.")
    elif action.startswith("revert"):
        results, skipped = await revert_held(runtime, ids)  # notes and attachments
        done = [r for r in results if "error" not in r]
        files = sum(1 for r in done if "attachmentId" in r)
        session.flash.append(f"Reverted {len(done) - files} note(s)"
                             + (f" and {files} attachment(s)." if files else "."))
        for r in results:
            if "error" in r:
                session.flash.append(f"Not reverted: {r['path']}: {r['error'].get('message', '')}")
        for s in skipped:
            session.flash.append(f"Skipped {s['path']}: {s['reason']} (left as it is).")
    else:
        raise StetError("unknown action")
    return redirect(f"/ui/v/{q(vault)}/held")


@ui_page
async def activity(request: web.Request, session: Session) -> web.StreamResponse:
    ops = ops_for(request)
    vault = vault_name(request)
    changes = ops.recent_changes(limit=100)["changes"]
    rows = [[esc(when(c["at"])), esc(c.get("by") or c["source"]), esc(c["kind"]),
             f'<a href="/ui/v/{esc(q(vault))}/note/{esc(q(c["path"]))}">{esc(c["path"])}</a>',
             f'<span class="add">+{esc(c["inserted"])}</span> <span class="del">−{esc(c["deleted"])}</span>']
            for c in changes]
    body = (
        "<h1>Activity</h1><h2>Live</h2>"
        # lastEventId=0: the page shows what is still buffered, then what happens (a stream
        # without it starts now; the browser's reconnects send Last-Event-ID themselves)
        f'<ol class="events" id="live" data-events="/ui/v/{esc(q(vault))}/events?lastEventId=0" '
        'aria-live="polite">'
        '<li class="muted" id="live-status">Connecting to the event stream…</li></ol>'
        "<h2>Recent changes</h2>"
        + table(["When", "Who", "What", "Note", "Chars"], rows, caption="The change log, newest first",
                empty="No changes yet.")
    )
    return render(request, session, title="Activity", body=body, active="activity", vault=vault,
                  scripts=("activity.js",))


@ui_page
async def events(request: web.Request, session: Session) -> web.StreamResponse:
    """The vault's event stream (§6.9) for the page, as the session's owner: it ends when
    the session does."""
    daemon = daemon_of(request)
    return await stream_events(request, daemon, daemon.operations(request.match_info["vault"],
                                                                   principal_of(request)))


def register(app: web.Application) -> None:
    sessions = app[SESSIONS_KEY] = UiSessions()
    host = app.get(DAEMON_KEY)
    if host is not None:  # signing out (or expiring) closes the session's streams
        sessions.on_end = host.streams.end
        host.streams.add_check(sessions.ended_holders)
    app.on_response_prepare.append(_security_headers)
    r = app.router
    r.add_post("/v1/ui/login", new_login_code)
    r.add_get("/ui/login", login)
    r.add_post("/ui/logout", logout)
    r.add_get("/ui/static/{name}", static)
    r.add_get("/ui/", home)
    r.add_get("/ui", home)
    v = "/ui/v/{vault}"
    r.add_get(v + "/notes", notes)
    r.add_get(v + "/note/{path:.+}", note)
    r.add_get(v + "/history/{path:.+}", history)
    r.add_post(v + "/restore/{path:.+}", restore)
    r.add_get(v + "/held", held)
    r.add_post(v + "/held", held_action)
    r.add_get(v + "/activity", activity)
    r.add_get(v + "/events", events)
    ui_admin.register(app)
    ui_conflicts.register(app)
