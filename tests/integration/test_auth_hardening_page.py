"""Issue 33, findings 1 and 11 on the web page, in headless Chromium against a real daemon:
signing out closes the page's live socket (the editor says so) and its event stream within a
second; the page's forms refuse ids beyond 2^63 and malformed multipart bodies with a 400."""

from __future__ import annotations

import http.client
import time
import urllib.parse
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, expect

from tests.harness import DaemonProcess, wait_until
from tests.integration.bridge_support import start_daemon
from tests.integration.ui_support import browser, signed_in

__all__ = ["browser"]  # the module-scoped fixture, used by name

CLOSE_WITHIN_S = 1.0
BEYOND_2_63 = 2**64 + 5


def _port(d: DaemonProcess) -> int:
    port = urllib.parse.urlsplit(d.api_url).port
    assert port is not None
    return port


def _raw(d: DaemonProcess, method: str, target: str, headers: dict[str, str] | None = None,
         body: bytes | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", _port(d), timeout=30)
    try:
        conn.request(method, target, body=body, headers={"Host": f"127.0.0.1:{_port(d)}", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def _cookie_header(context: Any) -> str:
    return "; ".join(f"{c['name']}={c['value']}" for c in context.cookies())


def _read_to_end(resp: http.client.HTTPResponse, conn: http.client.HTTPConnection,
                 deadline: float) -> tuple[bool, str]:
    """What an SSE stream says until it ends (True) or the deadline passes (False)."""
    lines: list[str] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False, "".join(lines)
        assert conn.sock is not None
        conn.sock.settimeout(remaining)
        try:
            line = resp.readline()
        except TimeoutError:
            return False, "".join(lines)
        if not line:
            return True, "".join(lines)
        lines.append(line.decode("utf-8", "replace"))


def test_signing_out_closes_the_pages_socket_and_event_stream(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], browser: Browser) -> None:
    (vault_dir / "live.md").write_text("first line\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    context, page = signed_in(browser, d)
    editor_page = context.new_page()
    editor_page.goto(d.api_url + "/ui/v/notes/note/live.md")
    expect(editor_page.locator("#editor-status")).to_contain_text("Live")
    # The page's event stream, on the session's cookie.
    conn = http.client.HTTPConnection("127.0.0.1", _port(d), timeout=10)
    conn.request("GET", "/ui/v/notes/events", headers={"Host": f"127.0.0.1:{_port(d)}",
                                                        "Cookie": _cookie_header(context)})
    resp = conn.getresponse()
    assert resp.status == 200
    try:
        page.goto(d.api_url + "/ui/")
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_text("Signed out")).to_be_visible()
        signed_out = time.monotonic()
        ended, said = _read_to_end(resp, conn, signed_out + CLOSE_WITHIN_S)
        took = time.monotonic() - signed_out
        assert ended, f"the page's event stream was open {took:.2f}s after sign-out"
        assert "signed out" in said, said
        # The open editor says so, in words, and no longer receives the note.
        expect(editor_page.locator("#editor-status")).to_contain_text(
            "Live editing closed by the daemon (4401: signed out", timeout=CLOSE_WITHIN_S * 1000 + 500)
        d.client.request("POST", "/v1/vaults/notes/notes/live.md/append", {"text": "after sign-out\n"})
        d.wait_content("live.md", "first line\nafter sign-out\n")
        assert "after sign-out" not in editor_page.get_by_label("Text of live.md").input_value()
    finally:
        conn.close()
        context.close()


def _page_csrf(d: DaemonProcess, cookie: str) -> str:
    status, body = _raw(d, "GET", "/ui/v/notes/held", {"Cookie": cookie})
    assert status == 200, body
    start = body.index('name="csrf" value="') + len('name="csrf" value="')
    return body[start:body.index('"', start)]


def test_the_pages_forms_refuse_huge_ids_and_malformed_multipart_with_a_400(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], browser: Browser) -> None:
    d = start_daemon(home, vault_dir, daemon_factory)
    context, _ = signed_in(browser, d)
    cookie = _cookie_header(context)
    context.close()
    csrf = _page_csrf(d, cookie)
    form = urllib.parse.urlencode({"csrf": csrf, "action": "release", "ids": str(BEYOND_2_63)})
    status, body = _raw(d, "POST", "/ui/v/notes/held", {
        "Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"}, form.encode())
    # A form error comes back as the page with a notice (a redirect), never a 500.
    assert status in (303, 400), (status, body[:500])
    status, shown = _raw(d, "GET", "/ui/v/notes/held", {"Cookie": cookie})
    assert "held change ids" in shown or "2^63" in shown, shown[:2000]
    for content_type, raw in (
            ("multipart/form-data; boundary=XYZ",
             b"--XYZ\r\nContent-Disposition: form-data\r\n\r\nno name\r\n"),
            ("multipart/form-data", b"--XYZ\r\n\r\n"),  # no boundary at all
            ("multipart/form-data; boundary=XYZ", b"garbage without any boundary"),
            ("multipart/form-data; boundary=XYZ",
             b"--XYZ\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n" + csrf.encode())):  # cut short
        for target in ("/ui/v/notes/held", "/ui/logout", "/ui/agents/revoke"):
            status, body = _raw(d, "POST", target, {"Cookie": cookie, "Content-Type": content_type}, raw)
            assert status == 400, (target, content_type, raw, status, body[:500])
            assert "form" in body.lower(), body[:500]
    assert "unhandled error" not in (home / "logs" / "daemon.log").read_text(errors="replace")
    wait_until(lambda: d.proc is not None and d.proc.poll() is None, what="the daemon to be up")
