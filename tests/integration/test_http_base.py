"""The HTTP API base against a real daemon (SPEC §6.1-6.3, §6.7, R4): where it listens,
auth, browser safety (Origin, DNS rebinding), JSON errors, and the read routes.

Requests are raw ``http.client`` (or a unix-socket connection) so that Host, Origin and
Authorization are exactly what the test says. Every reply is checked for two things on
the way in: never a 500, never an ``Access-Control-Allow-Origin`` header.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import stat
import unicodedata
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stet.client.daemon_link import read_owner_token
from stet.daemon import __version__
from stet.sync.home import HomeLayout
from tests.harness import DaemonProcess, run_stet, wait_until

# Notes in the vault before ``stet init`` (path -> exact bytes).
SEED: dict[str, bytes] = {
    "hello.md": b"Hello, world\n",
    "crlf.md": "\ufeffline one\r\nline two".encode(),  # BOM, CRLF, no final newline
    "dir/sp ace \u00e9.md": "caf\u00e9 \U0001f600\n".encode(),
    "100% done #1.md": b"percent and hash in the name\n",
    "deep/a/b/c.md": b"deep\n",
    "other.txt": b"a txt note\n",
    "page-not-in-prefix.md": b"outside page/\n",
}
DEFAULT = object()


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        assert (self.headers.get("Content-Type") or "").startswith("application/json"), self.headers
        return json.loads(self.body)

    def error(self) -> dict[str, Any]:
        data = self.json()
        assert set(data) == {"error"}, data
        err: dict[str, Any] = data["error"]
        assert isinstance(err.get("code"), str), err
        assert isinstance(err.get("message"), str), err
        assert err["message"], err
        return err


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        super().__init__("localhost", timeout=timeout)
        self._unix_path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._unix_path)
        self.sock = sock


def send(conn: http.client.HTTPConnection, method: str, target: str,
         headers: Sequence[tuple[str, str | bytes]]) -> Reply:
    """One request with exactly ``headers`` (no Host or Accept-Encoding added)."""
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        conn.endheaders()
        resp = conn.getresponse()
        reply = Reply(resp.status, resp.headers, resp.read())
    finally:
        conn.close()
    assert reply.status != 500, f"{method} {target}: HTTP 500 {reply.body!r}"
    for name in reply.headers:
        assert not name.lower().startswith("access-control-"), (target, name, reply.headers)
    return reply


@dataclass
class Api:
    daemon: DaemonProcess
    home: Path
    vault: Path
    port: int
    token: str

    @property
    def own_host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def get(self, target: str, *, token: Any = DEFAULT, host: Any = DEFAULT,
            origin: str | None = None, method: str = "GET",
            extra: Sequence[tuple[str, str | bytes]] = ()) -> Reply:
        headers: list[tuple[str, str | bytes]] = []
        if host is not None:
            headers.append(("Host", self.own_host if host is DEFAULT else host))
        if token is not None:
            headers.append(("Authorization", f"Bearer {self.token if token is DEFAULT else token}"))
        if origin is not None:
            headers.append(("Origin", origin))
        headers += list(extra)
        return send(http.client.HTTPConnection("127.0.0.1", self.port, timeout=10), method, target, headers)

    def ok(self, target: str) -> Any:
        reply = self.get(target)
        assert reply.status == 200, (target, reply.status, reply.body)
        return reply.json()


def q(path: str, safe: str = "/") -> str:
    return urllib.parse.quote(path, safe=safe)


def note_url(path: str, *, vault: str = "notes", safe: str = "/") -> str:
    return f"/v1/vaults/{vault}/notes/{q(path, safe)}"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """One daemon for the module: the checks here only read, or write under page/."""
    root = tmp_path_factory.mktemp("http")
    home, vault = root / "home", root / "vault"
    home.mkdir()
    for rel, data in SEED.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_bytes(data)
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    daemon = DaemonProcess(home)
    try:
        daemon.start()
        info = json.loads(daemon.layout.daemon_json.read_text())
        port = urllib.parse.urlsplit(info["api_url"]).port
        token = read_owner_token(HomeLayout(home))
        assert port is not None
        assert token is not None
        yield Api(daemon, home, vault, port, token)
        assert daemon.stop() == 0, daemon.log_tail()
        assert "unhandled error" not in (home / "logs" / "daemon.log").read_text(errors="replace")
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill9()


# -- where: daemon.json, the unix socket -------------------------------------------------


def test_daemon_json_names_pid_url_peer_port_device_and_version(api: Api) -> None:
    path = api.daemon.layout.daemon_json
    info = json.loads(path.read_text())
    assert {"pid", "api_url", "peer_port", "device_id", "version"} <= set(info)
    assert info["pid"] == api.daemon.proc.pid  # type: ignore[union-attr]
    assert info["api_url"] == f"http://127.0.0.1:{api.port}"
    assert info["version"] == __version__
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_unix_socket_is_private_and_answers_with_the_token(api: Api) -> None:
    sock = api.daemon.layout.socket
    assert sock == api.home / "stet.sock"
    st = sock.stat()
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    reply = send(UnixHTTPConnection(sock), "GET", "/v1/status",
                 [("Host", "localhost"), ("Authorization", f"Bearer {api.token}")])
    assert reply.status == 200
    assert reply.json()["pid"] == api.daemon.proc.pid  # type: ignore[union-attr]


def test_unix_socket_still_needs_the_token_and_refuses_foreign_origins(api: Api) -> None:
    sock = api.daemon.layout.socket
    no_token = send(UnixHTTPConnection(sock), "GET", "/v1/status", [("Host", "localhost")])
    assert no_token.status == 401
    assert no_token.error()["code"] == "unauthorized"
    evil = send(UnixHTTPConnection(sock), "GET", "/v1/vaults/notes/notes/hello.md",
                [("Host", "localhost"), ("Authorization", f"Bearer {api.token}"),
                 ("Origin", "http://evil.example")])
    assert evil.status == 403
    assert b"Hello" not in evil.body
    rebound = send(UnixHTTPConnection(sock), "GET", "/v1/vaults/notes/notes/hello.md",
                   [("Host", f"evil.example:{api.port}"), ("Authorization", f"Bearer {api.token}")])
    assert rebound.status == 421
    assert b"Hello" not in rebound.body


def _listening_addresses(port: int) -> list[str]:
    """Local addresses of LISTEN sockets on ``port`` (Linux /proc/net/tcp{,6}, hex)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                addr, hex_port = fields[1].split(":")
                if fields[3] == "0A" and int(hex_port, 16) == port:
                    found.append(addr)
    return found


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc/net/tcp")
def test_api_listens_on_loopback_only(api: Api) -> None:
    """The TCP listener is bound to 127.0.0.1 (the default [api] host), nothing wider."""
    assert _listening_addresses(api.port) == ["0100007F"]  # 127.0.0.1, little-endian hex


# -- auth (§6.2) -------------------------------------------------------------------------


def test_no_authorization_header_is_401(api: Api) -> None:
    reply = api.get("/v1/status", token=None)
    assert reply.status == 401
    err = reply.error()
    assert err["code"] == "unauthorized"


@pytest.mark.parametrize("value", [
    "Bearer wrong-token",
    "Bearer ",
    "Bearer",
    "Basic dXNlcjpwYXNz",
    "Token {token}",
    "Bearer {token}x",
    "Bearer x{token}",
    "Bearer {token_prefix}",
])
def test_wrong_tokens_are_401(api: Api, value: str) -> None:
    value = value.format(token=api.token, token_prefix=api.token[:-1])
    reply = api.get("/v1/status", token=None, extra=[("Authorization", value)])
    assert reply.status == 401, value
    assert reply.error()["code"] == "unauthorized"


@pytest.mark.parametrize("raw", [b"Bearer \xff\xfe\x80", "Bearer caf\u00e9 \U0001f600".encode()])
def test_a_token_that_is_not_ascii_is_401_not_500(api: Api, raw: bytes) -> None:
    reply = api.get("/v1/status", token=None, extra=[("Authorization", raw)])
    assert reply.status == 401
    assert reply.error()["code"] == "unauthorized"


def test_owner_token_is_200(api: Api) -> None:
    reply = api.get("/v1/status")
    assert reply.status == 200
    assert reply.json()["pid"] == api.daemon.proc.pid  # type: ignore[union-attr]


def test_bearer_scheme_is_case_insensitive(api: Api) -> None:
    reply = api.get("/v1/status", token=None, extra=[("Authorization", f"bearer {api.token}")])
    assert reply.status == 200


def test_owner_token_falls_back_to_a_0600_file(api: Api) -> None:
    """The tests run with the fail keyring backend, so the token lives in the home."""
    token_file = HomeLayout(api.home).owner_token_file
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.read_text().strip() == api.token


def test_refusals_do_not_leak_note_content_or_names(api: Api) -> None:
    for reply in (
        api.get(note_url("hello.md"), token=None),
        api.get(note_url("hello.md"), token="wrong"),
        api.get("/v1/vaults/notes/notes", token=None),
        api.get("/v1/vaults", token="wrong"),
        api.get(note_url("hello.md"), origin="http://evil.example"),
        api.get(note_url("hello.md"), host=f"evil.example:{api.port}"),
    ):
        assert reply.status in (401, 403, 421), reply
        assert b"Hello" not in reply.body
        assert b"hello.md" not in reply.body


def test_unknown_routes_need_auth_first(api: Api) -> None:
    """Route existence is not probeable without a token."""
    assert api.get("/v1/nothing-here", token=None).status == 401
    reply = api.get("/v1/nothing-here")
    assert reply.status == 404
    assert reply.error()["code"] == "not_found"


def test_wrong_method_is_a_json_4xx(api: Api) -> None:
    reply = api.get("/v1/status", method="POST", extra=[("Content-Length", "0")])
    assert reply.status == 405
    assert reply.error()["code"] == "bad_request"


# -- browser safety (§6.3) ---------------------------------------------------------------


@pytest.mark.parametrize("origin", [
    "http://evil.example",
    "https://evil.example",
    "null",
    "http://127.0.0.1:1",
    "https://127.0.0.1:{port}",
    "http://127.0.0.1:{port}.evil.example",
    "http://evil.example:{port}",
])
def test_foreign_origin_is_403_even_with_a_valid_token(api: Api, origin: str) -> None:
    reply = api.get(note_url("hello.md"), origin=origin.format(port=api.port))
    assert reply.status == 403, origin
    assert reply.error()["code"] == "forbidden"
    assert b"Hello" not in reply.body


@pytest.mark.parametrize("origin", ["http://127.0.0.1:{port}", "http://localhost:{port}"])
def test_own_origin_is_allowed(api: Api, origin: str) -> None:
    reply = api.get("/v1/status", origin=origin.format(port=api.port))
    assert reply.status == 200


def test_cors_preflight_from_a_foreign_origin_is_refused(api: Api) -> None:
    reply = api.get("/v1/vaults/notes/notes", method="OPTIONS", token=None,
                    origin="http://evil.example",
                    extra=[("Access-Control-Request-Method", "GET"),
                           ("Access-Control-Request-Headers", "authorization")])
    assert reply.status == 403


@pytest.mark.parametrize("host", [
    "evil.example:{port}",
    "evil.example",
    "127.0.0.1",               # no port: not how a client of this port would say it
    "127.0.0.1:1",
    "127.0.0.2:{port}",
    "localhost.evil.example:{port}",
    "0.0.0.0:{port}",
])
def test_foreign_host_is_421(api: Api, host: str) -> None:
    """DNS rebinding: evil.example resolves to 127.0.0.1, the browser sends its Host."""
    reply = api.get(note_url("hello.md"), host=host.format(port=api.port))
    assert reply.status == 421, host
    assert "code" in reply.error()
    assert b"Hello" not in reply.body


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "LOCALHOST:{port}"])
def test_loopback_host_is_allowed(api: Api, host: str) -> None:
    assert api.get("/v1/status", host=host.format(port=api.port)).status == 200


def test_missing_host_is_refused(api: Api) -> None:
    reply = api.get("/v1/status", host=None)
    assert 400 <= reply.status < 500


def test_no_response_carries_cors_headers(api: Api) -> None:
    """``send`` checks every reply; this walks one of each status on purpose."""
    replies = [
        api.get("/v1/status", origin=f"http://127.0.0.1:{api.port}"),
        api.get("/v1/status", token=None, origin=f"http://127.0.0.1:{api.port}"),
        api.get("/v1/status", origin="http://evil.example"),
        api.get("/v1/status", host="evil.example"),
        api.get(note_url("missing.md"), origin=f"http://localhost:{api.port}"),
        api.get(note_url("..%2Fx.md", safe="%/")),
    ]
    assert sorted({r.status for r in replies}) == [200, 400, 401, 403, 404, 421]


# -- status and vaults -----------------------------------------------------------------------


def test_status(api: Api) -> None:
    data = api.ok("/v1/status")
    assert data["version"] == __version__
    assert data["pid"] == api.daemon.proc.pid  # type: ignore[union-attr]
    assert data["home"] == str(api.home)
    assert data["apiUrl"] == f"http://127.0.0.1:{api.port}"
    [vault] = data["vaults"]
    assert vault["name"] == "notes"
    assert vault["path"] == str(api.vault.resolve())


def test_vaults(api: Api) -> None:
    data = api.ok("/v1/vaults")
    [vault] = data["vaults"]
    assert vault["name"] == "notes"
    assert isinstance(vault["id"], str)
    assert vault["notes"] >= len(SEED)
    assert vault["skipped"] == []
    # A vault is reachable by id as well as by name.
    by_id = api.ok(f"/v1/vaults/{vault['id']}/notes?prefix=deep/")
    assert [n["path"] for n in by_id["notes"]] == ["deep/a/b/c.md"]


def test_unknown_vault_is_404(api: Api) -> None:
    for target in ("/v1/vaults/nope/notes", note_url("hello.md", vault="nope")):
        reply = api.get(target)
        assert reply.status == 404, target
        assert reply.error()["code"] == "not_found"


# -- listing --------------------------------------------------------------------------------


def test_listing_rows_carry_revision_size_and_attribution(api: Api) -> None:
    data = api.ok("/v1/vaults/notes/notes")
    rows = {n["path"]: n for n in data["notes"]}
    for rel, raw in SEED.items():
        row = rows[rel]
        assert row["revision"] == hashlib.sha256(raw).hexdigest(), rel
        assert row["size"] == len(raw), rel
        assert row["updatedBy"] == "disk"
        assert row["updatedAt"].endswith("Z")
    paths = [n["path"] for n in data["notes"]]
    assert paths == sorted(paths)
    assert data["nextCursor"] is None


def test_listing_pages_through_25_notes(api: Api) -> None:
    for i in range(25):
        (api.vault / "page" / f"n{i:02d}.md").parent.mkdir(exist_ok=True)
        (api.vault / "page" / f"n{i:02d}.md").write_text(f"note {i}\n")
    expected = [f"page/n{i:02d}.md" for i in range(25)]

    def all_listed() -> bool:
        data = api.ok("/v1/vaults/notes/notes?prefix=page/")
        return [n["path"] for n in data["notes"]] == expected

    wait_until(all_listed, timeout=15, what="25 new notes to be listed")

    def pages(limit: int) -> list[list[str]]:
        out: list[list[str]] = []
        cursor = ""
        for _ in range(100):  # bounded
            data = api.ok(f"/v1/vaults/notes/notes?prefix=page/&limit={limit}&cursor={q(cursor, '')}")
            out.append([n["path"] for n in data["notes"]])
            if data["nextCursor"] is None:
                return out
            assert data["nextCursor"] == out[-1][-1]
            cursor = data["nextCursor"]
        raise AssertionError("pagination did not end")

    by10 = pages(10)
    assert [len(p) for p in by10] == [10, 10, 5]
    assert sum(by10, []) == expected
    # A page that ends exactly at the last note still says there is nothing more.
    by5 = pages(5)
    assert [len(p) for p in by5] == [5] * 5
    assert sum(by5, []) == expected
    assert pages(25) == [expected]
    # The prefix is a path prefix, not a folder match on something else.
    everything = [n["path"] for n in api.ok("/v1/vaults/notes/notes?limit=10000")["notes"]]
    assert "page-not-in-prefix.md" in everything
    # A cursor past the end is an empty last page.
    tail = api.ok(f"/v1/vaults/notes/notes?prefix=page/&cursor={q('page/zzz', '')}")
    assert tail == {"notes": [], "nextCursor": None}


@pytest.mark.parametrize("query", [
    "limit=abc", "limit=0", "limit=-1", "limit=10001", "limit=99999999999999999999999",
    "limit=1.5", "limit=1_0", "limit=%205", "limit=%D9%A3", "limit=--5", "limit=0x10",
])
def test_bad_limit_is_400_bad_request(api: Api, query: str) -> None:
    reply = api.get(f"/v1/vaults/notes/notes?{query}")
    assert reply.status == 400, query
    err = reply.error()
    assert err["code"] == "bad_request"
    assert "limit" in err["message"]


@pytest.mark.parametrize("query", ["prefix=%00", "prefix=%FF", "cursor=%00", "cursor=%FF%FE",
                                   "prefix=" + "x" * 5000, "limit=", "prefix=&limit=&cursor="])
def test_odd_but_harmless_listing_queries_are_not_errors(api: Api, query: str) -> None:
    reply = api.get(f"/v1/vaults/notes/notes?{query}")
    assert reply.status == 200, (query, reply.body[:200])
    assert set(reply.json()) == {"notes", "nextCursor"}


# -- reading -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", sorted(SEED))
def test_read_note_returns_exact_content_and_its_sha256(api: Api, rel: str) -> None:
    data = api.ok(note_url(rel))
    assert data == {
        "path": rel,
        "content": SEED[rel].decode("utf-8"),
        "revision": hashlib.sha256(SEED[rel]).hexdigest(),
    }
    assert data["content"].encode("utf-8") == (api.vault / rel).read_bytes()


def test_read_with_every_character_percent_encoded(api: Api) -> None:
    rel = "dir/sp ace \u00e9.md"
    for target in (
        note_url(rel, safe=""),  # the slash as %2F too
        "/v1/vaults/notes/notes/" + "".join(f"%{b:02X}" for b in rel.encode()),
        "/v1/vaults/notes/notes/dir/sp%20ace%20%c3%a9.md",  # lowercase hex
    ):
        assert api.ok(target)["path"] == rel, target


def test_read_by_a_decomposed_unicode_path_finds_the_nfc_note(api: Api) -> None:
    rel = "dir/sp ace \u00e9.md"
    nfd = unicodedata.normalize("NFD", rel)
    assert nfd != rel
    data = api.ok(note_url(nfd))
    assert data["path"] == rel
    assert data["content"] == SEED[rel].decode()


def test_unknown_note_is_404(api: Api) -> None:
    reply = api.get(note_url("missing.md"))
    assert reply.status == 404
    err = reply.error()
    assert err["code"] == "not_found"
    assert err["path"] == "missing.md"


@pytest.mark.parametrize("target", [
    "..%2Fx.md",
    "%2E%2E/x.md",
    "..%2F..%2Fhome%2Fowner.token",
    "%00.md",
    "%2Fabs.md",
    "/abs.md",
    "dir/%2E/hello.md",
    "a%5Cb.md",
    "a.md/",
    "%7F.md",  # (CON.md was here: a name Linux holds, refused only on Windows now, issue 37)
    "%1F.md",
    "x" * 300 + ".md",
    "/".join(["abcdefgh"] * 200) + ".md",
])
def test_invalid_paths_are_400_invalid_path(api: Api, target: str) -> None:
    reply = api.get("/v1/vaults/notes/notes/" + target)
    assert reply.status == 400, (target, reply.status, reply.body[:200])
    assert reply.error()["code"] == "invalid_path"


@pytest.mark.parametrize("target", [
    "a/../hello.md",           # raw dot segments in the URL
    "./hello.md",
    "dir/../../hello.md",
    "%ff.md",                  # not UTF-8 once decoded
    "%ED%A0%80.md",            # an encoded lone surrogate
    "",                        # no path at all
    "%",
    "%zz.md",
])
def test_other_bad_paths_are_a_4xx_json_error_and_never_a_note(api: Api, target: str) -> None:
    reply = api.get("/v1/vaults/notes/notes/" + target)
    assert 400 <= reply.status < 500, (target, reply.status)
    assert reply.error()["code"] in ("invalid_path", "not_found", "bad_request")
    assert b"Hello" not in reply.body


def test_daemon_is_healthy_after_all_of_the_above(api: Api) -> None:
    assert api.daemon.proc is not None
    assert api.daemon.proc.poll() is None
    assert api.ok("/v1/status")["pid"] == api.daemon.proc.pid
    assert os.path.exists(api.daemon.layout.socket)
