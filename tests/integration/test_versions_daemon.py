"""Versions against a real daemon (SPEC §5.1-§5.5, §6.4 version routes, §7 CLI): every write
path that exists today leaves a version the user finds with `stet versions` and brings
back with `stet restore`; the boundaries of the large-deletion rule on disk; idle
versions and restarts; restore as an edit (undo, deleted notes, concurrent edits)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stet.client.daemon_link import ApiError
from tests.harness import DaemonProcess, run_stet
from tests.integration.bridge_support import restart, start_daemon
from tests.integration.versions_support import (
    FORTY_LINES,
    FOUR_LINES,
    agent_client,
    editor_save,
    note_url,
    stet_json,
    versions_of,
    wait_file,
    wait_versions,
)

# -- before-large-deletion from the disk (an editor), then show / diff / restore / undo ------------


def test_an_editor_cutting_40_lines_to_4_keeps_the_40(daemon: DaemonProcess, home: Path,
                                                       vault_dir: Path) -> None:
    note = vault_dir / "plan.md"
    editor_save(note, FORTY_LINES)
    daemon.wait_content("plan.md", FORTY_LINES)
    editor_save(note, FOUR_LINES)
    daemon.wait_content("plan.md", FOUR_LINES)

    listed = stet_json(home, "versions", "plan.md")
    (v,) = listed["versions"]
    assert (v["kind"], v["source"], v["chars"]) == ("before-large-deletion", "disk", len(FORTY_LINES))
    assert v["preview"] == FORTY_LINES.splitlines()[0]
    vid = str(v["id"])
    assert run_stet(home, "show", "plan.md", "--version", vid).stdout == FORTY_LINES.encode()
    diff = run_stet(home, "diff", "plan.md", vid).stdout.decode()
    assert diff.startswith(f"--- plan.md (version {vid}, before-large-deletion)\n+++ plan.md (now)\n")
    assert "-line 39: a sentence somebody wrote and wants to keep\n" in diff
    assert stet_json(home, "diff", "plan.md", vid)["identical"] is False

    # `stet restore PATH`: the newest before-* version; the file follows.
    out = run_stet(home, "restore", "plan.md").stdout.decode()
    assert f"to version {vid}" in out
    wait_file(note, FORTY_LINES.encode())
    kinds = [x["kind"] for x in stet_json(home, "versions", "plan.md")["versions"]]
    assert kinds == ["before-restore", "before-large-deletion"]
    # ... and `stet restore PATH` again undoes the restore.
    run_stet(home, "restore", "plan.md")
    wait_file(note, FOUR_LINES.encode())
    assert daemon.content("plan.md") == FOUR_LINES


def test_the_boundaries_on_disk(daemon: DaemonProcess, vault_dir: Path) -> None:
    text = "".join(chr(0x61 + i % 26) for i in range(1000))
    cases = {  # path: (before, after, version expected)
        "exactly-20.md": (text, text[:200], True),
        "21-percent.md": (text, text[:210], False),
        "199-chars.md": (text[:199], "", False),
        "200-chars.md": (text[:200], "", True),
    }
    for path, (before, _, _) in cases.items():
        (vault_dir / path).write_text(before, encoding="utf-8")
    for path, (before, _, _) in cases.items():
        daemon.wait_content(path, before)
    for path, (_, after, _) in cases.items():
        (vault_dir / path).write_text(after, encoding="utf-8")
    for path, (_, after, _) in cases.items():
        daemon.wait_content(path, after)
    for path, (before, _, expected) in cases.items():
        versions = versions_of(daemon.client, path)
        assert len(versions) == int(expected), path
        if expected:
            assert versions[0]["kind"] == "before-large-deletion"
            assert daemon.client.request("GET", note_url(path) + f"/versions/{versions[0]['id']}")[
                "content"] == before


def test_a_note_shrunk_by_several_small_saves_keeps_no_shrink_version(daemon: DaemonProcess,
                                                                       vault_dir: Path) -> None:
    lines = [f"paragraph {i}: some text that is cut away a bit at a time\n" for i in range(50)]
    for keep in (50, 40, 30, 22, 16, 12, 9, 7, 5):  # every save keeps well over 20% of the last
        text = "".join(lines[:keep])
        editor_save(vault_dir / "shrinking.md", text)
        daemon.wait_content("shrinking.md", text)
    assert versions_of(daemon.client, "shrinking.md") == []


# -- one test per write path -----------------------------------------------------------------------


def test_every_write_path_leaves_a_version(daemon: DaemonProcess, vault_dir: Path) -> None:
    owner = daemon.client
    agent = agent_client(daemon, "researcher")
    url = note_url("paths.md")
    owner.request("POST", url, {"content": FORTY_LINES})

    # The CLI / owner token over REST: source "cli".
    owner.request("PUT", url, {"content": FOUR_LINES})
    # An agent token over REST: source "agent:researcher" (other text: SPEC §5.7 keeps a
    # text once, so the same forty lines cut again would refresh the first version).
    forty_b = FORTY_LINES.replace("somebody", "someone else")
    owner.request("PUT", url, {"content": FOUR_LINES + forty_b[len(FOUR_LINES):]})
    agent.request("PUT", url, {"content": FOUR_LINES})
    # A restore (the API's restore_version) that itself cuts: before-restore and the cut's source.
    first = versions_of(owner, "paths.md")[-1]
    owner.request("POST", url + f"/versions/{first['id']}/restore", {})  # back to 40 lines
    small = next(v for v in versions_of(owner, "paths.md") if v["kind"] == "before-restore")
    owner.request("POST", url + f"/versions/{small['id']}/restore", {})  # 40 -> 4 lines
    # The disk: a file emptied in place.
    (vault_dir / "disk-empties.md").write_bytes(FORTY_LINES.encode())
    daemon.wait_content("disk-empties.md", FORTY_LINES)
    (vault_dir / "disk-empties.md").write_bytes(b"")
    daemon.wait_content("disk-empties.md", "")
    # Deletes: by an agent over REST, and by the disk.
    owner.request("POST", note_url("agent-deletes.md"), {"content": FORTY_LINES})
    agent.request("DELETE", note_url("agent-deletes.md"))
    owner.request("POST", note_url("disk-deletes.md"), {"content": FORTY_LINES})
    wait_file(vault_dir / "disk-deletes.md", FORTY_LINES.encode())
    (vault_dir / "disk-deletes.md").unlink()
    daemon.wait_content("disk-deletes.md", None)

    forty, four = len(FORTY_LINES), len(FOUR_LINES)
    kept = [(v["kind"], v["source"], v["chars"]) for v in reversed(versions_of(owner, "paths.md"))]
    assert kept == [
        ("before-large-deletion", "agent:researcher", len(forty_b)),
        ("before-restore", "restore", four),  # the restore back to 40 lines
        # The restore down to 4 lines, which is also a large cut: its text is the first
        # version's, kept once (SPEC §5.7) with its time and source refreshed.
        ("before-large-deletion", "restore", forty),
    ]
    (emptied,) = versions_of(owner, "disk-empties.md")
    assert (emptied["kind"], emptied["source"], emptied["chars"]) == ("before-large-deletion", "disk", forty)
    ((kind, source),) = [(v["kind"], v["source"]) for v in versions_of(owner, "agent-deletes.md")]
    assert (kind, source) == ("before-deletion", "agent:researcher")
    ((kind, source),) = [(v["kind"], v["source"]) for v in versions_of(owner, "disk-deletes.md")]
    assert (kind, source) == ("before-deletion", "disk")


# -- restore (SPEC §5.4) ------------------------------------------------------------------------------


def test_restore_of_a_deleted_note_to_its_path_and_beside_a_newcomer(daemon: DaemonProcess, home: Path,
                                                                    vault_dir: Path) -> None:
    data = "\ufeff# Gone\r\n".encode() + "a paragraph worth keeping 😀\r\n".encode() * 12
    (vault_dir / "gone.md").write_bytes(data)
    daemon.wait_content("gone.md", data.decode())
    subprocess.run(["rm", str(vault_dir / "gone.md")], check=True)
    daemon.wait_content("gone.md", None)
    listed = stet_json(home, "versions", "gone.md")
    assert listed["deleted"] is True
    ((kind, deleted),) = [(v["kind"], v["noteDeleted"]) for v in listed["versions"]]
    assert (kind, deleted) == ("before-deletion", True)
    result = stet_json(home, "restore", "gone.md")
    assert (result["undeleted"], result["pathWasTaken"], result["path"]) == (True, False, "gone.md")
    wait_file(vault_dir / "gone.md", data)  # byte-identical: BOM, CRLF, emoji

    # Deleted again, and a new note takes the path: the old one comes back beside it.
    (vault_dir / "gone.md").unlink()
    daemon.wait_content("gone.md", None)
    (vault_dir / "gone.md").write_text("a newcomer\n", encoding="utf-8")
    daemon.wait_content("gone.md", "a newcomer\n")
    out = run_stet(home, "restore", "gone.md").stdout.decode()
    assert "gone (restored).md" in out
    wait_file(vault_dir / "gone (restored).md", data)
    assert (vault_dir / "gone.md").read_text(encoding="utf-8") == "a newcomer\n"


def test_an_agents_concurrent_rewrite_survives_a_restore(daemon: DaemonProcess, home: Path) -> None:
    owner = daemon.client
    agent = agent_client(daemon, "writer")
    url = note_url("shared.md")
    old = "# Findings\n\n" + "".join(f"- finding {i} with its evidence\n" for i in range(20)) + "\n## Open\n"
    owner.request("POST", url, {"content": old})
    owner.request("PUT", url, {"content": "# Findings\n\n(cleared by mistake)\n\n## Open\n"})
    seen = agent.request("GET", url)  # the agent reads the note...
    (cut,) = versions_of(owner, "shared.md")
    run_stet(home, "restore", "shared.md", str(cut["id"]))  # ...a person restores meanwhile...
    # ...and the agent's rewrite, made on what it read, lands as a concurrent edit.
    agent.request("PUT", url, {"content": seen["content"] + "- new question from the agent\n",
                               "baseRevision": seen["revision"]})
    assert daemon.content("shared.md") == old + "- new question from the agent\n"


# -- the HTTP routes ------------------------------------------------------------------------------------


def test_version_routes_scopes_errors_and_idempotency(daemon: DaemonProcess) -> None:
    owner = daemon.client
    url = note_url("r.md")
    owner.request("POST", url, {"content": FORTY_LINES})
    owner.request("PUT", url, {"content": "short\n"})
    (v,) = versions_of(owner, "r.md")
    assert owner.request("GET", url, query={"version": str(v["id"])})["content"] == FORTY_LINES
    for bad, code in (("abc", "bad_request"), ("0", "bad_request"), ("999999", "not_found")):
        with pytest.raises(ApiError) as exc:
            owner.request("GET", url + f"/versions/{bad}")
        assert exc.value.code == code, bad
    with pytest.raises(ApiError) as exc:
        versions_of(owner, "never-was.md")
    assert exc.value.code == "not_found"
    # A version of another note is not reachable through this path.
    owner.request("POST", note_url("other.md"), {"content": "x"})
    with pytest.raises(ApiError) as exc:
        owner.request("GET", note_url("other.md") + f"/versions/{v['id']}")
    assert exc.value.code == "not_found"
    # Scopes: reading versions needs read, restoring needs write.
    reader = agent_client(daemon, "reader", {"read": ["r.md"], "append": [], "write": []})
    stranger = agent_client(daemon, "stranger", {"read": ["elsewhere/**"], "append": [], "write": []})
    assert len(versions_of(reader, "r.md")) == 1
    refused = ((stranger, "GET", "/versions"), (reader, "POST", f"/versions/{v['id']}/restore"))
    for client, method, suffix in refused:
        with pytest.raises(ApiError) as exc:
            client.request(method, url + suffix, {} if method == "POST" else None)
        assert exc.value.code == "forbidden"
    # Idempotency: the same key restores once.
    body = {"idempotencyKey": "restore-1"}
    first = owner.request("POST", url + f"/versions/{v['id']}/restore", body)
    owner.request("PUT", url, {"content": "edited again\n"})
    again = owner.request("POST", url + f"/versions/{v['id']}/restore", body)
    assert again.get("replayed") is True
    assert again["revision"] == first["revision"]
    assert daemon.content("r.md") == "edited again\n"


def test_cli_errors_are_one_sentence(daemon: DaemonProcess, home: Path) -> None:
    daemon.client.request("POST", note_url("plain.md"), {"content": "never cut\n"})
    for args in (("restore", "plain.md"), ("show", "plain.md", "--version", "x1"), ("diff", "plain.md", "77"),
                 ("versions", "missing.md"), ("release",), ("revert", "5", "--all")):
        proc = run_stet(home, *args, check=False)
        err = proc.stderr.decode()
        assert proc.returncode == 1, (args, err)
        assert "Traceback" not in err, (args, err)
        assert len(err.strip().splitlines()) == 1, (args, err)


# -- idle versions and restarts (SPEC §5.2, §5.5) -------------------------------------------------------


def test_idle_versions_and_versions_survive_a_restart(tmp_path: Path,
                                                       daemon_factory: list[DaemonProcess]) -> None:
    home, vault_dir = tmp_path / "home", tmp_path / "vault"
    vault_dir.mkdir()
    # 0.005 minutes = 0.3 s without edits (the clock is the real one here; unit tests inject it).
    d = start_daemon(home, vault_dir, daemon_factory, config="[versions]\nidle_minutes = 0.005\n")
    (vault_dir / "idle.md").write_text("draft one\n", encoding="utf-8")
    (v,) = wait_versions(d, "idle.md", 1)
    assert (v["kind"], v["source"]) == ("idle", "disk")
    (vault_dir / "idle.md").write_text("draft two\n", encoding="utf-8")
    versions = wait_versions(d, "idle.md", 2)
    assert [x["preview"] for x in versions] == ["draft two", "draft one"]
    assert d.stop() == 0
    # Edited while the daemon is down: picked up at start, and its idle version follows.
    (vault_dir / "idle.md").write_text("draft three\n", encoding="utf-8")
    d = restart(home, daemon_factory)
    versions = wait_versions(d, "idle.md", 3)
    assert [x["preview"] for x in versions] == ["draft three", "draft two", "draft one"]
