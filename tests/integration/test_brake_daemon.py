"""The burst brake against a real daemon (SPEC §5.6): `rm` of 12 notes, a `git checkout`
that replaces 30 notes, a runaway agent; `stet held`, `stet release`, `stet revert`, and
the release after the hold time."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from stet.client.daemon_link import ApiError
from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.bridge_support import start_daemon
from tests.integration.versions_support import (
    agent_client,
    held,
    note_url,
    sse_events,
    stet_json,
    versions_of,
    wait_file,
    wait_held,
)

# Byte shapes that must come back exactly: BOM, CRLF, no final newline, emoji, CJK, combining.
SHAPES = [
    "\ufeff# BOM note {i}\nbody\n",
    "CRLF note {i}\r\nsecond line\r\n",
    "no final newline {i} 😀",
    "日本語のノート {i}\n中文内容\n",
    "cafe\u0301 {i}\n",
    "plain note {i}\n" + "with a longer body that goes on for a while\n" * 6,
]


def _seed(vault_dir: Path, n: int, prefix: str = "") -> dict[str, bytes]:
    notes = {f"{prefix}note-{i:02d}.md": SHAPES[i % len(SHAPES)].format(i=i).encode("utf-8")
             for i in range(n)}
    for path, data in notes.items():
        (vault_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (vault_dir / path).write_bytes(data)
    return notes


def test_rm_of_12_notes_is_held_and_revert_brings_them_back_byte_identical(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    home, vault_dir = tmp_path / "home", tmp_path / "vault"
    vault_dir.mkdir()
    notes = _seed(vault_dir, 12)
    (vault_dir / "keep.md").write_text("this one stays\n", encoding="utf-8")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    subprocess.run(["rm", *[str(vault_dir / p) for p in notes]], check=True)

    rows = wait_held(home, 12)
    assert sorted(r["path"] for r in rows) == sorted(notes)
    assert {(r["kind"], r["source"], r["state"]) for r in rows} == {("deleted", "disk", "held")}
    (engaged,) = held(home)["engaged"]
    assert (engaged["source"], engaged["held"], engaged["refusesWrites"]) == ("disk", 12, False)
    # Every held note has its before-deletion version, even the small ones.
    for r in rows:
        v = daemon.client.request("GET", note_url(r["path"]) + f"/versions/{r['versionId']}")
        assert v["kind"] == "before-deletion"
        assert v["content"].encode("utf-8") == notes[r["path"]]
    table = run_stet(home, "held").stdout.decode()
    assert "Brake engaged for disk" in table
    assert "note-11.md" in table

    out = run_stet(home, "revert", "--all").stdout.decode()
    assert out.count("Reverted ") == 12
    for path, data in notes.items():
        wait_file(vault_dir / path, data)
    assert held(home) == {"held": [], "engaged": []}
    assert {r["state"] for r in stet_json(home, "held", "--all")["held"]} == {"reverted"}
    assert daemon.content("keep.md") == "this one stays\n"
    # The event stream told of it all (SPEC §6.9).
    events = sse_events(daemon, lambda seen: sum(k == "brake.released" for k, _ in seen) == 12)
    assert sum(1 for k, _ in events if k == "brake.held") == 12
    assert {d["path"] for k, d in events if k == "brake.released"} == set(notes)
    assert all(d["reverted"] for k, d in events if k == "brake.released")
    assert sum(1 for k, _ in events if k == "version.created") >= 12


def _git(vault_dir: Path, *args: str) -> None:
    config = ("-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main")
    subprocess.run(["git", *config, *args], cwd=vault_dir, check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_with_trust_git_off_a_git_checkout_replacing_30_notes_is_held_and_recoverable(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    """`[brake] trust_git = false`: git's bursts are held like any other (by default they
    are not: tests/integration/test_git_editor.py)."""
    home, vault_dir = tmp_path / "home", tmp_path / "vault"
    vault_dir.mkdir()
    body = "".join(f"research line {j}: what we learned on this branch\n" for j in range(8))
    main = {f"shared/s{i:02d}.md": f"# Shared {i} (main)\n{body}" for i in range(15)}
    main |= {f"main-only/m{i:02d}.md": f"# Main only {i}\n{body}" for i in range(15)}
    _git(vault_dir, "init", "-q")
    for path, text in main.items():
        (vault_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (vault_dir / path).write_text(text, encoding="utf-8")
    _git(vault_dir, "add", "-A")
    _git(vault_dir, "commit", "-qm", "main")
    # Another branch: the shared notes hold other text, the main-only ones do not exist.
    _git(vault_dir, "checkout", "-qb", "other")
    _git(vault_dir, "rm", "-rq", "main-only")
    for i in range(15):
        (vault_dir / f"shared/s{i:02d}.md").write_text(f"OTHER BRANCH {i}\n" + "unrelated words\n" * 12)
        (vault_dir / f"other-only/o{i:02d}.md").parent.mkdir(exist_ok=True)
        (vault_dir / f"other-only/o{i:02d}.md").write_text(f"other only {i}\n")
    _git(vault_dir, "add", "-A")
    _git(vault_dir, "commit", "-qm", "other")
    _git(vault_dir, "checkout", "-q", "main")

    daemon = start_daemon(home, vault_dir, daemon_factory, config="[brake]\ntrust_git = false\n")
    _git(vault_dir, "checkout", "-q", "other")  # 30 notes replaced at once
    rows = wait_held(home, 30)
    assert {r["source"] for r in rows} == {"git"}
    assert {r["kind"] for r in rows} <= {"deleted", "overwritten"}
    assert {r["path"] for r in rows} == set(main)
    wait_until(lambda: daemon.content("other-only/o14.md") == "other only 14\n", what="the new notes")

    reverted = stet_json(home, "revert", "--all")["reverted"]
    assert len(reverted) == 30
    assert all("error" not in r for r in reverted)
    # Recoverable: every note of main is back on disk, byte for byte (at its path, or
    # beside it when the checkout's file took the path in the meantime).
    for r in reverted:
        wait_file(vault_dir / r["path"], main[r["originalPath"]].encode())
    assert {r["originalPath"] for r in reverted} == set(main)
    assert held(home)["engaged"] == []
    assert (vault_dir / "other-only/o00.md").read_text() == "other only 0\n"  # the checkout's own notes stay


def test_an_agent_that_trips_the_brake_is_refused_until_a_person_releases(daemon: DaemonProcess,
                                                                        home: Path) -> None:
    owner = daemon.client
    for i in range(12):
        owner.request("POST", note_url(f"a{i:02d}.md"), {"content": f"agent-visible note {i}\n"})
    agent = agent_client(daemon, "runaway")
    for i in range(10):
        agent.request("DELETE", note_url(f"a{i:02d}.md"))
    rows = wait_held(home, 10)
    assert {r["source"] for r in rows} == {"agent:runaway"}
    with pytest.raises(ApiError) as refused:
        agent.request("DELETE", note_url("a10.md"))
    assert (refused.value.code, refused.value.http_status) == ("brake_engaged", 423)
    with pytest.raises(ApiError):
        agent.request("PUT", note_url("a10.md"), {"content": ""})
    agent.request("POST", note_url("a10.md") + "/append", {"text": "appending is fine\n"})
    # Each refusal is recorded for a person to see (SPEC §6.8).
    recorded = [(c["path"], c["operation"]) for c in owner.request("GET", "/v1/vaults/notes/conflicts")[
        "conflicts"] if c["code"] == "brake_engaged"]
    assert sorted(recorded) == [("a10.md", "delete_note"), ("a10.md", "update_note")]
    (engaged,) = held(home)["engaged"]
    assert (engaged["source"], engaged["refusesWrites"]) == ("agent:runaway", True)
    # An agent token cannot release its own brake.
    with pytest.raises(ApiError) as forbidden:
        agent.request("POST", "/v1/vaults/notes/held/release", {"all": True})
    assert forbidden.value.code == "forbidden"

    out = run_stet(home, "release", *[str(r["id"]) for r in rows[:4]]).stdout.decode()
    assert "Released 4 held changes." in out
    with pytest.raises(ApiError):  # six still held: still engaged
        agent.request("DELETE", note_url("a10.md"))
    run_stet(home, "release", "--all")
    assert held(home) == {"held": [], "engaged": []}
    agent.request("DELETE", note_url("a10.md"))  # a person released: the agent may again
    assert daemon.content("a00.md") is None  # released deletions stay deleted
    assert len(versions_of(owner, "a00.md")) == 1  # ...and keep their version


def test_held_changes_are_released_after_the_hold_time(tmp_path: Path,
                                                         daemon_factory: list[DaemonProcess]) -> None:
    home, vault_dir = tmp_path / "home", tmp_path / "vault"
    vault_dir.mkdir()
    notes = _seed(vault_dir, 10)
    # 0.01 minutes = 0.6 s of holding.
    config = '[brake]\nhold_minutes = 0.01\non_timeout = "release"\n'
    start_daemon(home, vault_dir, daemon_factory, config=config)
    for path in notes:
        (vault_dir / path).unlink()
    wait_until(lambda: {r["state"] for r in stet_json(home, "held", "--all")["held"]} == {"released"}
               and len(stet_json(home, "held", "--all")["held"]) == 10,
               timeout=15, what="the held deletions to be released", interval=0.1)
    rows = stet_json(home, "held", "--all")["held"]
    assert {r["resolvedBy"] for r in rows} == {"timeout"}
    assert held(home)["engaged"] == []
    assert not any((vault_dir / p).exists() for p in notes)
