"""The open-streams registry with the page's sessions (issue 33, finding 1): signing out
closes the session's streams at once, an expired session's at the next check, and nobody
else's. The real-daemon cases (a revoked token's SSE stream and live sockets, the page's
sign-out in Chromium) are in tests/integration/test_auth_hardening*.py."""

from __future__ import annotations

from stet.daemon.ops.open_streams import OpenStreams
from stet.daemon.ops.sessions import EXPIRED, SESSION_TTL_S, SIGNED_OUT, UiSessions


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _wired() -> tuple[Clock, UiSessions, OpenStreams]:
    clock = Clock()
    sessions = UiSessions(clock)
    streams = OpenStreams()
    sessions.on_end = streams.end
    streams.add_check(sessions.ended_holders)
    return clock, sessions, streams


def _signed_in(sessions: UiSessions) -> tuple[str, str]:
    sid = sessions.redeem(sessions.new_code())
    assert sid is not None
    found = sessions.session(sid)
    assert found is not None
    return sid, found.principal.holder


def test_signing_out_closes_that_sessions_streams_and_no_others() -> None:
    _, sessions, streams = _wired()
    (sid_a, holder_a), (_, holder_b) = _signed_in(sessions), _signed_in(sessions)
    assert holder_a != holder_b
    assert holder_a.startswith("ui:")
    closed: list[tuple[str, str]] = []
    streams.add(holder_a, lambda why: closed.append(("a1", why)))
    streams.add(holder_a, lambda why: closed.append(("a2", why)))
    streams.add(holder_b, lambda why: closed.append(("b", why)))
    sessions.end(sid_a)
    assert sorted(closed) == [("a1", SIGNED_OUT), ("a2", SIGNED_OUT)]
    assert streams.count(holder_a) == 0
    assert streams.count(holder_b) == 1
    streams.check_now()  # the other session is alive: nothing more is closed
    assert len(closed) == 2


def test_an_expired_session_has_its_streams_closed_at_the_next_check() -> None:
    clock, sessions, streams = _wired()
    _, holder = _signed_in(sessions)
    closed: list[str] = []
    streams.add(holder, closed.append)
    streams.check_now()
    assert closed == []
    clock.now += SESSION_TTL_S + 1
    streams.check_now()
    assert closed == [EXPIRED]
    assert "stet ui" in EXPIRED  # the reason tells a person what to do


def test_a_stream_that_ended_on_its_own_is_forgotten() -> None:
    _, sessions, streams = _wired()
    sid, holder = _signed_in(sessions)
    closed: list[str] = []
    forget = streams.add(holder, closed.append)
    forget()
    sessions.end(sid)
    assert closed == []
    assert streams.count() == 0
