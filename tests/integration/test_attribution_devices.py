"""Attribution names the device and how (issue 37 item 7; SPEC §4.6), two real daemons: a
person's edit on B shows in A's `stet log` as ``disk on <B's name>``; notes git created (and a
note git deleted) on A show on B as ``git on <A's name>``, in `stet log`, in `stet versions`
and on the web page's activity and history; a device with no name given is shown by its
short ID, never by the 64-character one."""

from __future__ import annotations

import http.cookiejar
import json
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.agent_support import EventStream, agent_for, event_stream, make_token
from tests.integration.git_support import git, note_text, wait_git_quiet
from tests.integration.peer_support import invite, start_daemon, wait_linked
from tests.integration.versions_support import stet_json

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

A_NAME, B_NAME = "desk-a", "laptop-b"
BASE = [f"base/n{i}.md" for i in range(3)]
GIT_MADE = [f"made/g{i}.md" for i in range(4)]  # created by git's checkout of `other`
GIT_GONE = "base/n0.md"  # deleted by it


def _repo(vault: Path) -> dict[str, str]:
    vault.mkdir()
    main = {p: note_text(p, "main") for p in BASE}
    for p, t in main.items():
        (vault / p).parent.mkdir(parents=True, exist_ok=True)
        (vault / p).write_text(t, encoding="utf-8")
    git(vault, "init", "-q")
    git(vault, "add", "-A")
    git(vault, "commit", "-qm", "main")
    git(vault, "checkout", "-qb", "other")
    git(vault, "rm", "-q", GIT_GONE)
    made = {p: note_text(p, "other") for p in GIT_MADE}
    for p, t in made.items():
        (vault / p).parent.mkdir(parents=True, exist_ok=True)
        (vault / p).write_text(t, encoding="utf-8")
    git(vault, "add", "-A")
    git(vault, "commit", "-qm", "other")
    git(vault, "checkout", "-q", "main")
    return made


def _log(home: Path) -> str:
    return run_stet(home, "log", "--limit", "1000").stdout.decode()


def _log_lines(home: Path, path: str) -> list[str]:
    return [line for line in _log(home).splitlines() if line.endswith(f"  {path}")]


def _page(d: DaemonProcess, page: str) -> str:
    """A page of the web page, signed in through the real `stet ui` link."""
    url = json.loads(run_stet(d.home, "ui", "--json").stdout)["url"]
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    with opener.open(url, timeout=30) as r:
        r.read()
    with opener.open(d.api_url + page, timeout=30) as r:
        return str(r.read().decode())


def test_changes_name_how_and_on_which_device(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    made = _repo(va)
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes", "--device-name", A_NAME)
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    out = run_stet(b.home, "join", invite(a), str(vb), "--json", "--device-name", B_NAME).stdout
    assert json.loads(out).get("joined"), out
    wait_linked(a, b)
    wait_until(lambda: all((vb / p).exists() for p in BASE), timeout=30, what="B to hold the notes")

    # A person's edit on B: A's log says it was made on disk, on B.
    with open(vb / BASE[1], "a", encoding="utf-8") as f:
        f.write("an edit made by hand on B\n")
    lines = wait_until(lambda: x if (x := _log_lines(a.home, BASE[1])) and "changed" in x[0] else None,
                       timeout=30, what="A's log to show B's edit")
    assert f"disk on {B_NAME} " in lines[0], lines
    assert f"disk on {B_NAME}" in _log(b.home)  # and B's own log names B too

    # git on A: the notes it created and the one it deleted show on B as git's, on A.
    wait_git_quiet(va)
    git(va, "checkout", "-q", "other")
    wait_until(lambda: all((vb / p).exists() for p in made) and not (vb / GIT_GONE).exists(), timeout=30,
               what="B to follow git's checkout")
    for path in GIT_MADE:
        lines = wait_until(lambda p=path: _log_lines(b.home, p) or None, timeout=20,
                           what=f"B's log of {path}")
        assert f"git on {A_NAME} " in lines[0], lines
    gone = _log_lines(b.home, GIT_GONE)
    assert f"git on {A_NAME} " in gone[0], gone
    assert "deleted" in gone[0], gone
    versions = run_stet(b.home, "versions", GIT_GONE).stdout.decode()
    assert f"git on {A_NAME}" in versions, versions
    device_a = stet_json(a.home, "status")["deviceId"]
    assert device_a not in _log(b.home) + versions  # never the long ID where a person reads

    # The web page: activity and a note's history say the same.
    assert f"git on {A_NAME}" in _page(b, "/ui/v/notes/activity")
    assert f"git on {A_NAME}" in _page(b, f"/ui/v/notes/history/{GIT_GONE}")
    assert f"disk on {B_NAME}" in _page(a, "/ui/v/notes/activity")


def test_a_device_without_a_name_is_shown_by_its_short_id(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    (va / "n.md").write_text("a note\n", encoding="utf-8")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes", "--device-name", A_NAME)
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    (b.home / "device-name").write_text("\n")  # a name left empty: the host's name ...
    out = run_stet(b.home, "join", invite(a), str(vb), "--json").stdout
    assert json.loads(out).get("joined"), out
    wait_linked(a, b)
    wait_until(lambda: (vb / "n.md").exists(), timeout=30, what="B to hold the note")
    (vb / "n.md").write_text("a note\nedited on B\n", encoding="utf-8")
    lines = wait_until(lambda: x if (x := _log_lines(a.home, "n.md")) and "changed" in x[0] else None,
                       timeout=30, what="A's log to show B's edit")
    device_b = stet_json(b.home, "status")["deviceId"]
    names = {d["device"]: d["name"] for d in stet_json(a.home, "devices")["devices"]}
    shown = names.get(device_b) or device_b[:7]  # ... or, with no host name, the short ID
    assert f"disk on {shown} " in lines[0], lines
    assert device_b not in lines[0]


def test_events_carry_the_attribution_on_both_sides(tmp_path: Path,
                                                    daemon_factory: list[DaemonProcess]) -> None:
    """The SSE stream's note events say ``by`` as `stet log` does, on both sides of a pair:
    a person's edit on B (``disk on laptop-b``), git's checkout on A (``git on desk-a``, for
    the notes it made and the one it deleted) and an agent's note on B
    (``agent:researcher on laptop-b``)."""
    va, vb = tmp_path / "a", tmp_path / "b"
    made = _repo(va)
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes", "--device-name", A_NAME)
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    out = run_stet(b.home, "join", invite(a), str(vb), "--json", "--device-name", B_NAME).stdout
    assert json.loads(out).get("joined"), out
    wait_linked(a, b)
    wait_until(lambda: all((vb / p).exists() for p in BASE), timeout=30, what="B to hold the notes")
    token = make_token(b.home, "researcher", write=("**",))
    with event_stream(a, a.client.token) as on_a, event_stream(b, b.client.token) as on_b:
        with open(vb / BASE[1], "a", encoding="utf-8") as f:
            f.write("an edit made by hand on B\n")
        for stream in (on_a, on_b):
            _wait_by(stream, "note.changed", BASE[1], f"disk on {B_NAME}")

        wait_git_quiet(va)
        git(va, "checkout", "-q", "other")
        for stream in (on_a, on_b):
            for path in sorted(made):
                _wait_by(stream, "note.changed", path, f"git on {A_NAME}")
            _wait_by(stream, "note.deleted", GIT_GONE, f"git on {A_NAME}")

        agent = agent_for(b, token)
        try:
            agent.ok(agent.create("agent/found.md", "what the agent found\n"))
        finally:
            agent.close()
        for stream in (on_a, on_b):
            _wait_by(stream, "note.changed", "agent/found.md", f"agent:researcher on {B_NAME}")


def _wait_by(stream: EventStream, type_: str, path: str, by: str, timeout: float = 30) -> None:
    """Until an event of ``type_`` for ``path`` says ``by`` (any seen so far counts, in
    whatever order they came); the failure lists what the events of that path said."""
    deadline = time.monotonic() + timeout
    while True:
        said = [e.data.get("by") for e in stream.seen if e.type == type_ and e.data.get("path") == path]
        if by in said:
            return
        if stream.next_event(deadline) is None:
            raise AssertionError(f"no {type_} of {path} by {by!r} within {timeout}s; they said {said}")
