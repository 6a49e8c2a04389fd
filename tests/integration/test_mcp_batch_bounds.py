"""Issue 12, finding 2, through a real daemon: one MCP batch of big reads used to build an
839 MB answer on the loop (RSS 175 MB → 2.6 GB, every other client blocked 16 s).

Now (SPEC §6.3): a batch holds at most 32 messages (40 is refused before anything runs);
a batch's answers stop at 64 MiB (the calls past it get ``too_large``); the loop is yielded
between messages, so another client is answered within 1 s meanwhile; RSS stays bounded.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProcess, run_stet
from tests.integration.agent_support import Agent, Answer, owner_agent

NOTE_BYTES = 6 * 1024 * 1024  # an answer carries it twice (text + structuredContent): ~12.6 MB
ANSWER_LIMIT = 64 * 1024 * 1024
# Batches are 2025-03-26's (2025-06-18 removed them: test_mcp_modern.py)
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-03-26"}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def read_batch(n: int) -> bytes:
    return json.dumps([{"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": "read_note", "arguments": {"path": "big.md"}}}
                       for i in range(n)]).encode()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("mcpbatch")
    home, vault = root / "home", root / "vault"
    home.mkdir()
    vault.mkdir()
    (vault / "small.md").write_text("small\n")
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    d = DaemonProcess(home)
    try:
        d.start()
        owner = owner_agent(d)
        line = "a line of a large note, long enough to be realistic.\n"
        owner.ok(owner.create("big.md", line * (NOTE_BYTES // len(line))))
        owner.close()
        yield d
        assert d.stop() == 0, d.log_tail()
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.kill9()


def test_a_batch_of_more_than_32_messages_is_refused(daemon: DaemonProcess) -> None:
    owner = owner_agent(daemon)
    answer = owner.request("POST", "/mcp", raw=read_batch(40), headers=HEADERS)
    assert answer.status == 400, (answer.status, answer.raw[:300])
    assert isinstance(answer.body, dict), answer.raw[:300]
    assert "at most 32" in answer.body["error"]["message"]
    assert answer.body["error"]["data"]["error"]["code"] == "too_large"
    assert len(answer.raw) < 10_000
    owner.close()


def test_a_batch_of_big_reads_is_bounded_and_others_are_answered(daemon: DaemonProcess) -> None:
    assert daemon.proc is not None
    pid = daemon.proc.pid
    baseline = rss_bytes(pid)
    big = owner_agent(daemon)
    result: dict[str, Any] = {}

    def run_batch() -> None:
        # Raw bytes only: decoding 64 MB here would hold this process's GIL and stall the
        # other client's timing below (a test artefact); it is decoded after the join.
        conn = http.client.HTTPConnection(big.host, big.port, timeout=120)
        conn.request("POST", "/mcp", body=read_batch(32), headers={
            "Authorization": f"Bearer {big.token}", "Host": f"127.0.0.1:{big.port}",
            "Content-Type": "application/json", **HEADERS})
        resp = conn.getresponse()
        result["status"], result["raw"] = resp.status, resp.read()
        conn.close()

    thread = threading.Thread(target=run_batch)
    other = owner_agent(daemon)
    try:
        _run_beside(daemon, pid, baseline, thread, other, result)
    finally:
        big.close()
        other.close()


def _run_beside(_daemon: DaemonProcess, pid: int, baseline: int, thread: threading.Thread, other: Agent,
                result: dict[str, Any]) -> None:
    waits: list[float] = []
    peak = baseline
    thread.start()
    deadline = time.monotonic() + 120
    while thread.is_alive() and time.monotonic() < deadline:  # bounded in time
        started = time.monotonic()
        assert other.ok(other.read("small.md"))["content"] == "small\n"
        waits.append(time.monotonic() - started)
        peak = max(peak, rss_bytes(pid))
    thread.join(timeout=120)
    assert not thread.is_alive()
    peak = max(peak, rss_bytes(pid))
    assert result["status"] == 200, result["raw"][:300]
    answer = Answer(result["status"], json.loads(result["raw"]), result["raw"])
    replies = answer.body
    assert isinstance(replies, list)
    assert len(replies) == 32
    assert len(answer.raw) <= ANSWER_LIMIT + 64 * 1024
    served = [r for r in replies if not r["result"]["isError"]]
    refused = [r for r in replies if r["result"]["isError"]]
    assert served, "at least the first reads are answered"
    assert all(len(r["result"]["structuredContent"]["content"]) >= NOTE_BYTES - 64 for r in served)
    assert refused, "the batch went past 64 MiB: the rest must be refused"
    assert all(r["result"]["structuredContent"]["error"]["code"] == "too_large" for r in refused)
    assert sorted(r["id"] for r in replies) == list(range(32))
    print(f"batch of 32 x {NOTE_BYTES} B reads: answer {len(answer.raw)} B, {len(served)} served, "
          f"{len(refused)} too_large; other client: {len(waits)} reads, slowest {max(waits or [0]):.3f} s; "
          f"RSS {baseline >> 20} -> peak {peak >> 20} MiB")
    # Another client was answered while the batch ran, each time within 1 s.
    assert waits, "no request of the other client overlapped the batch"
    assert max(waits) < 1.0, waits
    # RSS bounded (it grew by 2.4 GB for 40 reads of 10 MiB before).
    assert peak - baseline < 512 * 1024 * 1024, (baseline, peak)


def test_the_daemon_still_answers(daemon: DaemonProcess) -> None:
    owner: Agent = owner_agent(daemon)
    assert owner.ok(owner.read("small.md"))["content"] == "small\n"
    owner.close()
