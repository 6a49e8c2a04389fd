"""The web page's sign-in codes and sessions (SPEC §6.14): a code works once and only for
a short time, only hashes are kept, sessions end when idle or signed out; and the HTML
helpers escape what a note holds."""

from __future__ import annotations

import hashlib

from stet.daemon.ops.sessions import CODE_TTL_S, SESSION_TTL_S, UI_PRINCIPAL, UiSessions, csrf_ok
from stet.daemon.ui.html import diff_html, note_tree, render_markdown


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_code_works_once_and_expires() -> None:
    clock = Clock()
    sessions = UiSessions(clock)
    code = sessions.new_code()
    sid = sessions.redeem(code)
    assert sid is not None
    assert sessions.redeem(code) is None  # spent
    late = sessions.new_code()
    clock.now += CODE_TTL_S + 1
    assert sessions.redeem(late) is None  # expired
    assert sessions.redeem("") is None
    assert sessions.redeem("guess") is None


def test_only_hashes_are_kept() -> None:
    sessions = UiSessions(Clock())
    code = sessions.new_code()
    assert code not in repr(sessions.__dict__)
    assert hashlib.sha256(code.encode()).hexdigest() in sessions._codes
    sid = sessions.redeem(code)
    assert sid is not None
    assert sid not in repr(sessions.__dict__)


def test_sessions_end_when_idle_or_signed_out_and_carry_a_csrf_token() -> None:
    clock = Clock()
    sessions = UiSessions(clock)
    sid = sessions.redeem(sessions.new_code())
    session = sessions.session(sid)
    assert session is not None
    assert csrf_ok(session, session.csrf)
    assert not csrf_ok(session, None)
    other_last = "y" if session.csrf.endswith("x") else "x"  # (a token ends in "x" 1 time in 64)
    assert not csrf_ok(session, session.csrf[:-1] + other_last)
    clock.now += SESSION_TTL_S - 1
    assert sessions.session(sid) is session  # use keeps it alive
    clock.now += SESSION_TTL_S - 1
    assert sessions.session(sid) is session
    clock.now += SESSION_TTL_S + 1
    assert sessions.session(sid) is None  # idle too long
    sid = sessions.redeem(sessions.new_code())
    sessions.end(sid)
    assert sessions.session(sid) is None
    assert UI_PRINCIPAL.source == "ui"
    assert UI_PRINCIPAL.kind == "owner"


def test_markdown_keeps_html_and_script_links_inert() -> None:
    out = render_markdown('<script>alert(1)</script>\n\n[x](javascript:alert(1)) '
                          '[y](vbscript:msgbox) ![i](data:text/html;base64,PHNjcmlwdD4=) '
                          '<img src=x onerror=alert(1)> [ok](https://example.org/?a=1&b="2")\n')
    assert "<script" not in out
    assert "<img src=x" not in out
    assert 'href="javascript' not in out
    assert 'href="vbscript' not in out
    assert 'src="data:text/html' not in out
    assert "&lt;script&gt;" in out
    assert 'href="https://example.org/?a=1&amp;b=%222%22"' in out


def test_diffs_and_the_tree_escape_what_notes_hold() -> None:
    diff = diff_html("<b>old</b>\nsame\n", "<i>new</i>\nsame\n", old_label="v<1>", new_label="now")
    assert "<b>" not in diff
    assert "<i>" not in diff
    assert '<span class="del">-&lt;b&gt;old&lt;/b&gt;</span>' in diff
    assert '<span class="add">+&lt;i&gt;new&lt;/i&gt;</span>' in diff
    assert "v&lt;1&gt;" in diff
    assert "same as the note now" in diff_html("a\n", "a\n", old_label="v", new_label="now")
    tree = note_tree(['a/"><script>x.md', "b.md"], 'v"x')
    assert "<script>" not in tree
    assert 'href="/ui/v/v%22x/note/a/%22%3E%3Cscript%3Ex.md"' in tree
