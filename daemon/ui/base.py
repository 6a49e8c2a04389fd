"""What every page of the web page shares (SPEC §6.14): the session check, CSRF, errors
shown as pages, the layout around a body."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

from stet.daemon.ops.host import PRINCIPAL_KEY, daemon_of
from stet.daemon.ops.sessions import Session, csrf_ok, request_session
from stet.daemon.ui.html import bare_page, esc, page
from stet.sync.errors import StetError

UiHandler = Callable[[web.Request, Session], Awaitable[web.StreamResponse]]
NOT_SIGNED_IN = ("Open the page with `stet ui` (it prints or opens a one-time sign-in link); "
                 "nothing is shown without a session.")


def html_response(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


def redirect(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


def vault_names(request: web.Request) -> list[str]:
    return [v.entry.name for v in daemon_of(request).vaults.values()]


def render(request: web.Request, session: Session, *, title: str, body: str, active: str,
           vault: str | None = None, scripts: Iterable[str] = (), status: int = 200) -> web.Response:
    flash, session.flash = session.flash, []
    text = page(title=title, body=body, vault=vault, vaults=vault_names(request), active=active,
                csrf=session.csrf, flash=flash, scripts=scripts)
    return html_response(text, status)


def _back(form: Any, fallback: str) -> str:
    back = form.get("back") if form is not None else None
    if isinstance(back, str) and back.startswith("/ui/") and "//" not in back and "\\" not in back:
        return back
    return fallback


def ui_page(handler: UiHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Session (401 without), CSRF on POST (403), and errors as pages, not JSON."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        session = request_session(request)
        if session is None:
            return html_response(bare_page("Not signed in", NOT_SIGNED_IN), 401)
        form = None
        if request.method == "POST":
            try:
                form = await request.post()
            except web.HTTPException:
                raise  # a body past the size limit: the guard's 413
            except Exception:  # a malformed multipart or urlencoded body (issue 33, finding 11)
                return html_response(bare_page(
                    "Refused", "This form could not be read (a malformed form body): reload the page "
                    "and retry."), 400)
            presented = form.get("csrf")
            if not csrf_ok(session, presented if isinstance(presented, str) else None):
                return html_response(bare_page(
                    "Refused", "This form is stale or came from elsewhere: reload the page and retry."), 403)
        request[PRINCIPAL_KEY] = session.principal  # its streams end when the session does
        try:
            return await handler(request, session)
        except StetError as exc:
            if form is not None:
                session.flash.append(f"Not done: {exc.message}")
                return redirect(_back(form, "/ui/"))
            vault = request.match_info.get("vault")
            title = exc.code.replace("_", " ").capitalize()
            body = f'<h1>{esc(title)}</h1><p class="error">{esc(exc.message)}</p>'
            return render(request, session, title="Error", body=body, active="", vault=vault,
                          status=exc.status)

    return wrapped


def vault_name(request: web.Request) -> str:
    name: str = daemon_of(request).vault(request.match_info["vault"]).entry.name
    return name
