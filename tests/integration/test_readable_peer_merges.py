"""Two or three machines that changed the same line while apart (issue 32, the peer case),
on real daemons paired over loopback TLS: each side's line whole, once, byte-identical on
every machine, the overlap recorded; the same change made on every machine lands once.
The CRDT alone gives ``rate_limit = 1060 rpm`` / ``Status: doneone`` here.

The overlap is recorded on *every* machine, not only on the one that computed the merge: one
``merged`` conflict per machine with each side's whole text and who wrote it, a
``note.merged`` event on its SSE stream, each side's text kept as a ``concurrent`` version."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.agent_support import event_stream
from tests.integration.peer_support import (
    device_id,
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


def _merged_for(d: DaemonProcess, path: str) -> list[dict[str, object]]:
    return [c for c in _merged_conflicts(d) if c["path"] == path]


def _check_overlap_recorded(d: DaemonProcess, path: str, sides: dict[str, str], *,
                            announced_here: bool = True) -> None:
    """``d`` lists exactly one ``merged`` conflict for ``path`` whose sides are ``sides``
    (device id -> the whole line that device wrote), each named by who wrote it on which
    device; announced on its SSE stream; each side's text kept as a ``concurrent`` version."""
    # Recorded once the merged text arrived: wait for the record, then check it stays one.
    wait_until(lambda: _merged_for(d, path), timeout=15, what=f"the overlap recorded on {d.home.name}")
    rows = _merged_for(d, path)
    assert len(rows) == 1, rows
    shown = json.loads(run_stet(d.home, "conflicts", "show", str(rows[0]["id"]), "--json").stdout)
    recorded = shown["attempted"]["sides"]
    assert len(recorded) == len(sides), recorded
    by: list[str] = []
    for device, line in sides.items():
        mine = [s for s in recorded if s["text"].count(line + "\n") == 1]
        assert len(mine) == 1, (line, recorded)
        # Who wrote that side: the person's save on disk, on the device that made it.
        assert mine[0]["source"] == f"disk on {device}", (line, mine[0]["source"])
        # As a person reads it: the device by the name it was given, not its ID.
        assert mine[0]["by"].startswith("disk on "), mine[0]
        assert device[:7] not in mine[0]["by"], mine[0]
        by.append(mine[0]["by"])
        for other in sides.values():
            if other != line:
                assert other not in mine[0]["text"], (other, mine[0]["text"])
    printed = run_stet(d.home, "conflicts", "show", str(rows[0]["id"])).stdout.decode()
    for line in sides.values():
        assert line in printed, printed
    for name in by:
        assert f"{name}'s text before the merge" in printed, printed
    versions = json.loads(run_stet(d.home, "versions", path, "--json").stdout)["versions"]
    kept = [v for v in versions if v["kind"] == "concurrent"]
    for device in sides:
        assert [v for v in kept if v["source"] == f"disk on {device}"], (device, kept)
    if not announced_here:
        return  # (a daemon restarted since: its stream's buffer began after the merge)
    # Announced: the stream replays its buffer from the start; a third side folded into the
    # record later is announced again, for the same conflict.
    wanted = {f"disk on {dev}" for dev in sides}
    announced: set[str] = set()
    with event_stream(d, d.client.token, last_event_id=0) as events:  # the buffer from its start
        for _ in range(len(sides)):
            event = events.wait_for("note.merged", path=path)
            assert event.data["conflict"] == rows[0]["id"], event.data
            announced |= set(event.data["sources"])
            if wanted <= announced:
                break
    assert wanted <= announced, (wanted, announced)


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
    sides = {device_id(a): "rate_limit = 100 rpm", device_id(b): "rate_limit = 60 rpm"}
    for d in (a, b):
        _check_overlap_recorded(d, "cfg.md", sides)
    # Not again after a restart and a second sync: still one record on each machine.
    b.stop()
    b = start_daemon(tmp_path / "hb", daemon_factory)
    wait_linked(a, b)
    assert wait_same_tree(va, vb)["cfg.md"].decode() == text
    _check_overlap_recorded(a, "cfg.md", sides)
    _check_overlap_recorded(b, "cfg.md", sides, announced_here=False)


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
    sides = {device_id(a): "rate_limit = 100 rpm", device_id(b): "rate_limit = 60 rpm",
             device_id(c): "rate_limit = 75 rpm"}
    for d in (a, b, c):
        _check_overlap_recorded(d, "cfg.md", sides)
        # The same fix made on every machine is no overlap: nothing recorded for it anywhere.
        assert _merged_for(d, "same.md") == []
        assert d.content("same.md") == fixed
