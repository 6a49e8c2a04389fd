"""HTML of the web page (SPEC §6.14): the layout, escaping, markdown and diffs.

Every value that reaches a page goes through ``esc`` (``html.escape``) or through
markdown-it with raw HTML off (it escapes any tag in a note and refuses ``javascript:``,
``vbscript:``, ``file:`` and ``data:`` links). No inline script or style anywhere: the
Content-Security-Policy (``ui_routes``) forbids them, so even a slip cannot run a note's
script. The layout is ``ui/layout.html`` (a ``string.Template``), shipped as package data.
"""

from __future__ import annotations

import difflib
import html
import urllib.parse
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from string import Template
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

NAV = (("notes", "Notes"), ("held", "Held changes"), ("conflicts", "Conflicts"),
       ("activity", "Activity"), ("agents", "Agents"), ("devices", "Devices"))


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def q(path: str) -> str:
    """A note path inside a URL (folders stay readable)."""
    return urllib.parse.quote(path, safe="/")


def when(value: Any) -> str:
    """A time for people: ISO strings and epoch seconds, shown in UTC."""
    if value is None or value == "":
        return "never"
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value).replace("T", " ").split(".")[0].removesuffix("Z").removesuffix("+00:00") + " UTC"


@cache
def _asset(name: str) -> str:
    return resources.files("stet.daemon").joinpath("ui", name).read_text(encoding="utf-8")


def static_bytes(name: str) -> bytes | None:
    """A file of ``ui/static`` (only plain names: no folders, no dot files)."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    entry = resources.files("stet.daemon").joinpath("ui", "static", name)
    return entry.read_bytes() if entry.is_file() else None


def page(*, title: str, body: str, vault: str | None, vaults: Iterable[str], active: str,
         csrf: str | None, flash: Iterable[str] = (), scripts: Iterable[str] = ()) -> str:
    names = list(vaults)
    nav_vault = vault or (names[0] if names else None)  # pages of no vault link to the first
    links = []
    for key, label in NAV:
        if key != "agents" and nav_vault is None:
            continue
        href = "/ui/agents" if key == "agents" else f"/ui/v/{q(nav_vault or '')}/{key}"
        current = ' aria-current="page"' if key == active else ""
        links.append(f'<li><a href="{esc(href)}"{current}>{esc(label)}</a></li>')
    switch = ""
    if len(names) > 1:
        here = ' aria-current="true"'
        options = "".join(
            f'<li><a href="/ui/v/{esc(q(n))}/notes"{here if n == vault else ""}>{esc(n)}</a></li>'
            for n in names)
        switch = f'<nav aria-label="Vaults" class="vaults"><ul>{options}</ul></nav>'
    logout = ""
    if csrf is not None:
        logout = (f'<form method="post" action="/ui/logout" class="logout">{csrf_field(csrf)}'
                  '<button type="submit">Sign out</button></form>')
    notices = "".join(f'<p class="flash" role="status">{esc(m)}</p>' for m in flash)
    script_tags = "".join(f'<script src="/ui/static/{esc(s)}" defer></script>' for s in scripts)
    return Template(_asset("layout.html")).substitute(
        title=esc(title), vault=esc(vault or ""), nav="".join(links), vault_switch=switch,
        logout=logout, flash=notices, body=body, scripts=script_tags,
    )


def csrf_field(csrf: str) -> str:
    return f'<input type="hidden" name="csrf" value="{esc(csrf)}">'


def bare_page(title: str, message: str) -> str:
    """A page for someone without a session: says what to do, shows nothing of the vault."""
    return Template(_asset("layout.html")).substitute(
        title=esc(title), vault="", nav="", vault_switch="", logout="", flash="",
        body=f"<h1>{esc(title)}</h1><p>{esc(message)}</p>", scripts="",
    )


@cache
def _markdown() -> MarkdownIt:
    # Imported on the first page that renders a note: ~0.5 MB resident the daemon does not
    # carry otherwise (P7; most daemons never serve the web page).
    from markdown_it import MarkdownIt

    # html=False: a tag in a note is shown as text, never parsed as HTML.
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def render_markdown(text: str) -> str:
    return str(_markdown().render(text))


def diff_html(old: str, new: str, *, old_label: str, new_label: str) -> str:
    """A unified diff (what restoring ``old`` would change back), each line escaped."""
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), old_label, new_label,
                                      lineterm="", n=3))
    if not lines:
        return '<p class="same">This version is the same as the note now.</p>'
    out = []
    for line in lines[2:]:
        cls = "hunk" if line.startswith("@@") else {"+": "add", "-": "del"}.get(line[:1], "ctx")
        out.append(f'<span class="{cls}">{esc(line)}</span>')
    header = f'<p class="diff-legend"><span class="del">− {esc(old_label)}</span> ' \
             f'<span class="add">+ {esc(new_label)}</span></p>'
    return header + '<pre class="diff">' + "".join(out) + "</pre>"


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], *, caption: str, empty: str) -> str:
    """A table whose cells are already HTML (escape them first)."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers)
    return (f'<div class="table-wrap"><table><caption>{esc(caption)}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


def note_tree(paths: list[str], vault: str) -> str:
    """Nested lists of folders (``<details>``, keyboard-operable) and note links."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        *folders, _ = path.split("/")
        for folder in folders:
            node = node.setdefault(folder + "/", {})
        node[path] = None

    def render(node: dict[str, Any]) -> str:
        items = []
        for key in sorted(node, key=lambda k: (not k.endswith("/"), k.lower())):
            child = node[key]
            if child is None:
                name = key.rsplit("/", 1)[-1]
                items.append(f'<li><a href="/ui/v/{esc(q(vault))}/note/{esc(q(key))}">{esc(name)}</a></li>')
            else:
                items.append(f"<li><details open><summary>{esc(key)}</summary>{render(child)}</details></li>")
        return '<ul class="tree">' + "".join(items) + "</ul>"

    return render(tree)
