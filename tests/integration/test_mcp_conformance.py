"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, pinned in
tests/js/package.json) against a real daemon's /mcp (issue 34).

The suite's client sends no ``Authorization`` header, so it talks to a small loopback proxy
that adds the agent token and otherwise forwards every request as it came (a Host or Origin
naming the proxy is translated to the daemon's own address, so the DNS-rebinding scenario
still sees a foreign Host refused). Scenarios that do not apply to Stet are listed, each with
its reason, in tests/integration/mcp_conformance_baseline.yml; the suite itself fails the run
on an unexpected failure *and* on a baseline entry that now passes (a stale baseline).

Pinned to 0.1.13: 0.1.14 and later import ``fs.globSync`` (Node 22), and .ci installs Node 20.
That version speaks the handshake era (2025-11-25); 2026-07-28 is proven through the Python
SDK in test_mcp_2026.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.harness import DaemonProcess
from tests.integration.test_mcp import make_token

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "js" / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
BASELINE = Path(__file__).resolve().parent / "mcp_conformance_baseline.yml"
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "origin",
              "authorization", "upgrade", "te", "trailer", "proxy-authorization"}

pytestmark = pytest.mark.skipif(shutil.which("node") is None or not SUITE.exists(),
                                reason="needs Node and `npm ci --prefix tests/js`")


class AuthProxy:
    """127.0.0.1:<port> → the daemon, adding ``Authorization: Bearer <token>``."""

    def __init__(self, upstream: str, token: str) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.token = token
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._runner: web.AppRunner | None = None

    def _translate(self, value: str | None, own: str, theirs: str) -> str | None:
        if value is None:
            return None
        return value.replace(own, theirs) if own in value else value

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        own_host, daemon_host = f"127.0.0.1:{self.port}", self.upstream.netloc
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Authorization"] = f"Bearer {self.token}"
        host = request.headers.get("Host", own_host)
        headers["Host"] = daemon_host if host in (own_host, f"localhost:{self.port}") else host
        origin = request.headers.get("Origin")
        if origin is not None:
            for own in (own_host, f"localhost:{self.port}"):
                origin = self._translate(origin, own, daemon_host) or origin
            headers["Origin"] = origin
        body = await request.read()
        url = f"{self.upstream.scheme}://{daemon_host}{request.path_qs}"
        async with aiohttp.ClientSession(auto_decompress=False) as session, \
                session.request(request.method, url, data=body, headers=headers,
                                skip_auto_headers={"User-Agent"}) as answer:
            payload = await answer.read()
            out = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
            return web.Response(status=answer.status, body=payload, headers=out)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        self.loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self.loop.run_forever()

    def __enter__(self) -> AuthProxy:
        self._thread.start()
        assert self._ready.wait(10), "the proxy did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def proxy(daemon: DaemonProcess) -> Iterator[AuthProxy]:
    token = make_token(daemon, "conformance")
    with AuthProxy(daemon.api_url, token) as p:
        yield p


def scenario_results(results: Path) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for checks in sorted(results.glob("server-*/checks.json")):
        name = re.sub(r"-\d{4}-\d{2}-\d{2}T[\dZ-]+$", "", checks.parent.name.removeprefix("server-"))
        found[name] = json.loads(checks.read_text())
    return found


def test_the_conformance_suite_passes_all_that_applies(proxy: AuthProxy, tmp_path: Path) -> None:
    proc = subprocess.run(
        ["node", str(SUITE), "server", "--url", f"http://localhost:{proxy.port}/mcp", "--suite", "all",
         "--expected-failures", str(BASELINE), "--output-dir", str(tmp_path / "results")],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    summary = proc.stdout[-6000:] + proc.stderr[-3000:]
    print(summary)
    results = scenario_results(tmp_path / "results")
    passed = sorted(n for n, checks in results.items()
                    if checks and all(c["status"] in ("SUCCESS", "INFO") for c in checks))
    print(f"conformance 0.1.13: {len(passed)} of {len(results)} scenarios pass: {', '.join(passed)}")
    for name, checks in sorted(results.items()):
        for check in checks:
            if check["status"] == "FAILURE":
                print(f"  {name}: {check['id']}: {str(check.get('errorMessage'))[:300]}")
    # the suite's verdict: no unexpected failure, no baseline entry that now passes
    assert proc.returncode == 0, summary
    # what applies passes (checked here too, not only by the suite's exit code)
    for scenario in ("server-initialize", "ping", "tools-list", "dns-rebinding-protection", "resources-list",
                     "prompts-list"):
        assert scenario in passed, (scenario, results.get(scenario))
    assert len(results) >= 30, sorted(results)  # the whole suite ran
