"""Sessions of the web page (SPEC §6.14): one-time login codes, session cookies, CSRF.

``stet ui`` asks the daemon (owner token) for a login code; the browser opens
``/ui/login?code=...``; the code works once, within ``CODE_TTL_S``, and becomes a session
cookie (HttpOnly, SameSite=Strict). Codes and session ids are kept only as SHA-256 hashes,
in memory: a daemon restart logs the page out (run ``stet ui`` again). Every write form
carries the session's CSRF token, compared in constant time.

``session_principal(request)`` is the one function other routes (the Yjs endpoint of
§6.13) call to accept the page's cookie: it returns ``UI_PRINCIPAL`` (the owner, writing
as source ``ui``) or None. It lives in ops/, below the faces, because two of them read it:
the page (``ui/``) and the live socket (``live/``), which do not import each other.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from aiohttp import web

from stet.daemon.ops.notes import Principal

COOKIE = "stet_ui"
CODE_TTL_S = 120.0
SESSION_TTL_S = 12 * 3600.0  # idle time after which a session ends
MAX_CODES = 64
MAX_SESSIONS = 256

UI_PRINCIPAL = Principal("owner", "ui")


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


SIGNED_OUT = "signed out"
EXPIRED = "the session expired: run `stet ui` again"


@dataclass(slots=True)
class Session:
    csrf: str
    expires: float
    holder: str = "ui:"  # "ui:<sha256 of the session id>": its open streams (ops/open_streams.py)
    flash: list[str] = field(default_factory=list)  # messages for the next page shown

    @property
    def principal(self) -> Principal:
        """The owner, writing as "ui", holding this session (signing out closes its streams)."""
        return Principal("owner", "ui", holder=self.holder)


class UiSessions:
    """Login codes and sessions, by hash. Bounded: the oldest are dropped first."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # Called with (holder, reason) when a session is ended: closes its open streams.
        self.on_end: Callable[[str, str], object] | None = None
        self._codes: dict[str, float] = {}  # sha256(code) -> expiry
        self._sessions: dict[str, Session] = {}  # sha256(session id) -> session

    def _prune(self) -> None:
        now = self.clock()
        self._codes = {h: t for h, t in self._codes.items() if t > now}
        self._sessions = {h: s for h, s in self._sessions.items() if s.expires > now}

    def new_code(self) -> str:
        self._prune()
        while len(self._codes) >= MAX_CODES:
            self._codes.pop(next(iter(self._codes)))
        code = secrets.token_urlsafe(24)
        self._codes[_hash(code)] = self.clock() + CODE_TTL_S
        return code

    def redeem(self, code: str) -> str | None:
        """A new session id for a live, unused code (which is then spent), else None."""
        self._prune()
        if self._codes.pop(_hash(code), None) is None:
            return None
        while len(self._sessions) >= MAX_SESSIONS:
            dropped = self._sessions.pop(next(iter(self._sessions)))
            if self.on_end is not None:
                self.on_end(dropped.holder, SIGNED_OUT)
        sid = secrets.token_urlsafe(32)
        key = _hash(sid)
        self._sessions[key] = Session(secrets.token_urlsafe(24), self.clock() + SESSION_TTL_S, "ui:" + key)
        return sid

    def session(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        found = self._sessions.get(_hash(sid))
        now = self.clock()
        if found is None or found.expires <= now:
            return None
        found.expires = now + SESSION_TTL_S
        return found

    def end(self, sid: str | None) -> None:
        """Sign out: the session goes, and its open streams are closed now."""
        if sid:
            found = self._sessions.pop(_hash(sid), None)
            if found is not None and self.on_end is not None:
                self.on_end(found.holder, SIGNED_OUT)

    def ended_holders(self, holders: Collection[str]) -> dict[str, str]:
        """Of the page's holders with open streams, those whose session is gone or expired
        (``OpenStreams`` asks, a few times a second while streams are open)."""
        now = self.clock()
        ended: dict[str, str] = {}
        for holder in holders:
            if holder.startswith("ui:"):
                found = self._sessions.get(holder.removeprefix("ui:"))
                if found is None or found.expires <= now:
                    ended[holder] = EXPIRED if found is not None else SIGNED_OUT
        return ended


SESSIONS_KEY = web.AppKey("stet.ui_sessions", UiSessions)


def request_session(request: web.Request) -> Session | None:
    sessions = request.app.get(SESSIONS_KEY)
    if sessions is None:
        return None
    return sessions.session(request.cookies.get(COOKIE))


def session_principal(request: web.Request) -> Principal | None:
    """The page's principal if the request carries a live session cookie, else None.

    For routes outside ``/ui/`` that accept the page (the Yjs websocket): the Host and
    Origin rules of §6.3 are the guard middleware's and still apply."""
    found = request_session(request)
    return found.principal if found is not None else None


def csrf_ok(session: Session, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(
        presented.encode("utf-8", "replace"), session.csrf.encode())


def set_cookie(resp: web.StreamResponse, sid: str) -> None:
    resp.set_cookie(COOKIE, sid, path="/", httponly=True, samesite="Strict", max_age=int(SESSION_TTL_S))


def clear_cookie(resp: web.StreamResponse) -> None:
    resp.del_cookie(COOKIE, path="/")
