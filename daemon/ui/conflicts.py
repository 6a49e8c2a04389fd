"""The web page's conflicts page (SPEC §6.4, §6.8, §6.14): refused writes — when, who,
what, why — and, for one picked conflict, what it attempted against the note now, with
**Apply** (promotion: ``promotion.show`` / ``promotion.promote``, as ``stet conflicts
show|apply``; the note's text before is kept as a version)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from stet.daemon.ops import promotion
from stet.daemon.ops.host import daemon_of
from stet.daemon.ops.sessions import UI_PRINCIPAL, Session
from stet.daemon.ui.base import redirect, render, ui_page, vault_name
from stet.daemon.ui.html import csrf_field, diff_html, esc, q, table, when

WHY = {
    "forbidden": "its token's scopes do not allow this",
    "revision_mismatch": "the note had changed since the revision it expected",
    "anchor_not_found": "the text it meant to replace is not in the note",
    "anchor_ambiguous": "the text it meant to replace is in the note more than once",
    "anchors_overlap": "its edits overlapped",
    "brake_engaged": "the brake holds this agent's destructive writes until you release",
    "concurrent": "two devices changed this attachment at once; the other one's bytes won",
    "merged": "two writers changed the same words: both lines are in the note, one after the other",
}


def _detail(ops: Any, vault: str, picked: str, session: Session) -> str:
    shown = promotion.show(ops, picked)
    note = shown.get("note")
    now = note["content"] if note else ""
    attempted = shown.get("attemptedText")
    parts = [f'<h2 id="detail">Conflict {esc(shown["id"])}: {esc(shown["operation"])} '
             f'{esc(shown["path"])} by {esc(shown["token"])}</h2>']
    result = shown.get("resultText")
    if result is not None:
        parts.append(diff_html(now, result, old_label="the note now" if note else "no note now",
                               new_label="with this write applied (merged with what changed since)"))
    elif attempted is not None:
        parts.append(diff_html(now, attempted, old_label="the note now" if note else "no note now",
                               new_label="with this write applied"))
    if shown["operation"] == "merge":
        for side in shown["attempted"].get("sides", []):
            parts.append(f'<h3>{esc(side.get("by") or side["source"])}\'s text before the merge</h3>'
                         f'<pre class="snippet">{esc(str(side.get("text", ""))[:20000])}</pre>')
        parts.append('<p class="muted">Delete the line you do not want in the note, or restore one of '
                     'its <code>concurrent</code> versions from its history.</p>')
    elif shown.get("attemptedError"):
        parts.append(f'<p class="error">{esc(shown["attemptedError"].get("message", ""))}</p>')
    if shown["promoted"]:
        p = shown["promoted"]
        parts.append(f"<p>Applied {esc(when(p['at']))} by {esc(p['by'])}.</p>")
    elif shown["promotable"]:
        back = f"/ui/v/{q(vault)}/conflicts?c={q(str(shown['id']))}"
        parts.append(
            f'<form method="post" action="/ui/v/{esc(q(vault))}/conflicts/apply">{csrf_field(session.csrf)}'
            f'<input type="hidden" name="id" value="{esc(shown["id"])}">'
            f'<input type="hidden" name="back" value="{esc(back)}">'
            '<p class="muted">Apply makes this write now, as yours, on top of whatever changed since '
            "(the note's text before is kept as a version).</p>"
            f'<button type="submit">Apply conflict {esc(shown["id"])}</button></form>')
    return "".join(parts)


async def conflicts(request: web.Request, session: Session) -> web.StreamResponse:
    ops = daemon_of(request).operations(request.match_info["vault"], UI_PRINCIPAL)
    vault = vault_name(request)
    listed = ops.list_conflicts(limit=200)["conflicts"]
    picked = request.query.get("c", "")
    base = f"/ui/v/{q(vault)}/conflicts"
    rows = []
    for c in listed:
        attempted = json.dumps(c["attempted"], ensure_ascii=False, indent=1)
        compare = f'<a class="nowrap" href="{esc(base)}?c={esc(c["id"])}#detail">compare</a>'
        state = "applied" if c.get("promoted") else compare
        if c.get("target") == "attachment":  # a concurrent loser: its bytes are a version
            state = f"kept as version {esc(c['versionId'])}"
        rows.append([
            esc(when(c["at"])), esc(c["token"]),
            f'{esc(c["operation"])} <a href="/ui/v/{esc(q(vault))}/history/{esc(q(c["path"]))}">'
            f'{esc(c["path"])}</a><details><summary>what was attempted</summary>'
            f'<pre class="snippet">{esc(attempted[:4000])}</pre></details>',
            f'<strong>{esc(c["code"])}</strong>: {esc(WHY.get(c["code"], "refused"))}',
            state,
        ])
    body = ("<h1>Conflicts</h1><p class=\"muted\">Writes the daemon refused (nothing was written); "
            "what was attempted is kept here, and can be applied.</p>"
            + table(["When", "Who", "What", "Why", ""], rows, caption="Refused writes, newest first",
                    empty="No refused writes."))
    if picked:
        body += _detail(ops, vault, picked, session)
    return render(request, session, title="Conflicts", body=body, active="conflicts", vault=vault)


async def apply_conflict(request: web.Request, session: Session) -> web.StreamResponse:
    ops = daemon_of(request).operations(request.match_info["vault"], UI_PRINCIPAL)
    vault = vault_name(request)
    form = await request.post()
    result = promotion.promote(ops, str(form.get("id", "")))
    session.flash.append(f"Applied conflict {result['id']}: {result['operation']} {result['path']}.")
    return redirect(f"/ui/v/{q(vault)}/conflicts?c={q(str(result['id']))}")


def register(app: web.Application) -> None:
    app.router.add_get("/ui/v/{vault}/conflicts", ui_page(conflicts))
    app.router.add_post("/ui/v/{vault}/conflicts/apply", ui_page(apply_conflict))
