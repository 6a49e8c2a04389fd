"""Two or three machines that changed the same line while apart (issue 32, the peer case),
on real daemons paired over loopback TLS: each side's line whole, once, byte-identical on
every machine, the overlap recorded; the same change made on every machine lands once.
The CRDT alone gives ``rate_limit = 1060 rpm`` / ``Status: doneone`` here."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.peer_support import (
    invite,
    join,
    linked,
    linked_pair,
    start_daemon,
    wait_linked,
    wait_same_tree,
)

NOTE = "# Limits\n\nrate_limit = 50 rpm\nStatus: draft\n"
MIXED = ("1060", "6010", "10100", "10060", "doneone", "donedone")


def _save(vault: Path, text: str) -> None:
    (vault / "cfg.md").write_text(text, encoding="utf-8")


def _merged_conflicts(d: DaemonProcess) -> list[dict[str, object]]:
    listed = json.loads(run_stet(d.home, "conflicts", "--json").stdout)
    rows = listed["conflicts"] if isinstance(listed, dict) else listed
    return [c for c in rows if c["code"] == "merged"]


def _check_whole(text: str, *lines: str) -> None:
    for line in lines:
        assert text.count(line + "\n") == 1, (line, text)
    for mixed in MIXED:
        assert mixed not in text, text


def test_two_laptops_offline_changing_one_line_keep_both_lines_whole(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    a, b, va, vb = linked_pair(tmp_path, {"cfg.md": NOTE.encode()}, daemon_factory)
    b.stop()
    _save(va, NOTE.replace("50", "100").replace("draft", "done"))
    wait_until(lambda: "100 rpm" in (a.content("cfg.md") or ""), what="A's save taken in")
    _save(vb, NOTE.replace("50", "60").replace("draft", "done"))  # while B's daemon is stopped
    b = start_daemon(tmp_path / "hb", daemon_factory)
    wait_linked(a, b)
    files = wait_same_tree(va, vb, timeout=20)
    text = files["cfg.md"].decode()
    _check_whole(text, "rate_limit = 100 rpm", "rate_limit = 60 rpm", "Status: done", "# Limits")
    assert text.count("rate_limit") == 2
    wait_until(lambda: a.content("cfg.md") == text and b.content("cfg.md") == text, what="the stores agree")
    assert _merged_conflicts(a) or _merged_conflicts(b)


def test_three_machines_offline_each_changing_one_line_keep_three_whole_lines(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    a, b, va, vb = linked_pair(tmp_path, {"cfg.md": NOTE.encode(), "same.md": NOTE.encode()},
                               daemon_factory)
    vc = tmp_path / "c"
    c = start_daemon(tmp_path / "hc", daemon_factory)
    join(c, invite(a), vc)
    wait_linked(a, c)
    wait_same_tree(va, vb, vc)
    b.stop()
    c.stop()
    fixed = NOTE.replace("Status: draft", "Status: done")  # the same fix on all three
    _save(va, NOTE.replace("50", "100"))
    (va / "same.md").write_text(fixed, encoding="utf-8")
    wait_until(lambda: "100 rpm" in (a.content("cfg.md") or "") and a.content("same.md") == fixed,
               what="A's saves taken in")
    for vault, value in ((vb, "60"), (vc, "75")):
        _save(vault, NOTE.replace("50", value))
        (vault / "same.md").write_text(fixed, encoding="utf-8")
    b = start_daemon(tmp_path / "hb", daemon_factory)
    c = start_daemon(tmp_path / "hc", daemon_factory)
    wait_until(lambda: linked(a, b) and linked(a, c), timeout=20, what="B and C back with A")
    files = wait_same_tree(va, vb, vc, timeout=30)
    text = files["cfg.md"].decode()
    _check_whole(text, "rate_limit = 100 rpm", "rate_limit = 60 rpm", "rate_limit = 75 rpm",
                 "Status: draft", "# Limits")
    assert text.count("rate_limit") == 3
    assert files["same.md"].decode() == fixed
    for d in (a, b, c):
        wait_until(lambda d=d: d.content("cfg.md") == text, what="every store agrees")
