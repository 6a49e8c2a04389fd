"""`stet versions`, `stet show --version [--output]` and `stet restore` for attachments, and
their concurrent losers in `stet conflicts` (SPEC §3.14, §7), through a real daemon and the
real CLI: the versions are the ones the folder side keeps when a file is overwritten or
deleted on disk; scopes apply to agent tokens."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from stet.client.daemon_link import ApiError, quote_path
from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import wait_recorded, wait_same_attachments
from tests.integration.bridge_support import start_daemon, vault_db
from tests.integration.peer_support import invite, join, wait_linked
from tests.integration.peer_support import start_daemon as peer_daemon
from tests.integration.versions_support import agent_client, stet_json

A = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 3 + b"\x00first"
B = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(255, -1, -1)) * 2 + b"\x00second"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _versions(home: Path, path: str, count: int) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        data: dict[str, Any] = stet_json(home, "versions", path)
        return data if len(data["versions"]) >= count else None

    found: dict[str, Any] = wait_until(check, timeout=30, what=f"{count} version(s) of {path}")
    return found


def _url(path: str) -> str:
    return f"/v1/vaults/notes/attachments/{quote_path(path)}/versions"


def test_versions_show_restore_of_an_attachment(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    (vault / "img").mkdir(parents=True)
    (vault / "img" / "cat.png").write_bytes(A)
    (vault / "tools").mkdir()
    (vault / "tools" / "go.sh").write_bytes(b"#!/bin/sh\necho one\n")
    os.chmod(vault / "tools" / "go.sh", 0o755)
    start_daemon(home, vault, daemon_factory)
    wait_recorded(home, "img/cat.png", sha(A))
    wait_recorded(home, "tools/go.sh")

    (vault / "img" / "cat.png").write_bytes(B)  # overwritten on disk: A is kept
    wait_recorded(home, "img/cat.png", sha(B))
    listed = _versions(home, "img/cat.png", 1)
    (v,) = listed["versions"]
    assert (v["kind"], v["sha256"], v["size"]) == ("before-overwrite", sha(A), len(A))
    assert listed["deleted"] is False
    table = run_stet(home, "versions", "img/cat.png").stdout.decode()
    assert "before-overwrite" in table
    assert sha(A)[:12] in table

    # show: the bytes, exactly, to stdout and to a file.
    out = run_stet(home, "show", "img/cat.png", "--version", str(v["id"])).stdout
    assert out == A
    target = tmp_path / "out" / "cat-old.png"
    target.parent.mkdir()
    run_stet(home, "show", "img/cat.png", "--version", str(v["id"]), "--output", str(target))
    assert target.read_bytes() == A
    assert [p.name for p in target.parent.iterdir()] == ["cat-old.png"]  # no temp file left
    missing = run_stet(home, "show", "img/cat.png", "--version", "999999", check=False)
    assert missing.returncode != 0
    assert b"has no version 999999" in missing.stderr
    assert b"Traceback" not in missing.stderr
    refused = run_stet(home, "diff", "img/cat.png", str(v["id"]), check=False)
    assert refused.returncode != 0
    assert b"--output FILE" in refused.stderr

    # restore: A is back at the path; B, which it replaced, is kept in turn.
    said = run_stet(home, "restore", "img/cat.png", "--version", str(v["id"])).stdout.decode()
    assert "Restored img/cat.png" in said
    assert (vault / "img" / "cat.png").read_bytes() == A
    wait_recorded(home, "img/cat.png", sha(A))
    kept = _versions(home, "img/cat.png", 2)["versions"]
    assert sha(B) in {x["sha256"] for x in kept}
    again = stet_json(home, "restore", "img/cat.png", "--version", str(v["id"]))
    assert again["changed"] is False

    # A deleted script: listed as deleted, restored by default with its executable bit.
    (vault / "tools" / "go.sh").unlink()
    gone = _versions(home, "tools/go.sh", 1)
    wait_until(lambda: stet_json(home, "versions", "tools/go.sh")["deleted"], timeout=30,
               what="tools/go.sh seen deleted")
    assert gone["versions"][0]["kind"] == "before-deletion"
    assert gone["versions"][0]["executable"] is True
    run_stet(home, "restore", "tools/go.sh")
    assert (vault / "tools" / "go.sh").read_bytes() == b"#!/bin/sh\necho one\n"
    assert os.stat(vault / "tools" / "go.sh").st_mode & stat.S_IXUSR


def test_agent_scopes_apply_to_attachment_versions(tmp_path: Path,
                                                   daemon_factory: list[DaemonProcess]) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    (vault / "img").mkdir(parents=True)
    (vault / "img" / "cat.png").write_bytes(A)
    daemon = start_daemon(home, vault, daemon_factory)
    wait_recorded(home, "img/cat.png", sha(A))
    (vault / "img" / "cat.png").write_bytes(B)
    (v,) = _versions(home, "img/cat.png", 1)["versions"]

    outsider = agent_client(daemon, "outsider", {"read": ["notes/**"], "append": [], "write": []})
    with pytest.raises(ApiError) as no_read:
        outsider.request("GET", _url("img/cat.png"))
    assert no_read.value.code == "forbidden"
    with pytest.raises(ApiError) as no_show:
        outsider.request("GET", f"{_url('img/cat.png')}/{v['id']}")
    assert no_show.value.code == "forbidden"
    reader = agent_client(daemon, "reader", {"read": ["**"], "append": [], "write": []})
    assert reader.request("GET", _url("img/cat.png"))["versions"][0]["id"] == v["id"]
    with pytest.raises(ApiError) as no_write:
        reader.request("POST", f"{_url('img/cat.png')}/{v['id']}/restore", {})
    assert no_write.value.code == "forbidden"
    assert (vault / "img" / "cat.png").read_bytes() == B  # nothing written
    writer = agent_client(daemon, "writer", {"read": ["**"], "append": [], "write": ["img/**"]})
    assert writer.request("POST", f"{_url('img/cat.png')}/{v['id']}/restore", {})["changed"] is True
    wait_until(lambda: (vault / "img" / "cat.png").read_bytes() == A, timeout=10, what="restored")


def test_concurrent_losers_are_listed_in_conflicts(tmp_path: Path,
                                                   daemon_factory: list[DaemonProcess]) -> None:
    """The folder side keeps a concurrent loser as a version of kind `concurrent` (the
    lead's decision); here one is put in the store as it would, beside a refused write."""
    home, vault = tmp_path / "home", tmp_path / "vault"
    (vault / "img").mkdir(parents=True)
    (vault / "img" / "cat.png").write_bytes(A)
    start_daemon(home, vault, daemon_factory)
    entry = wait_recorded(home, "img/cat.png", sha(A))
    (vault / "img" / "cat.png").write_bytes(B)  # B's blob is in the store: the loser's bytes
    wait_recorded(home, "img/cat.png", sha(B))
    (vault / "img" / "cat.png").write_bytes(A)
    wait_recorded(home, "img/cat.png", sha(A))
    db = sqlite3.connect(vault_db(home), timeout=10)
    try:
        with db:
            cur = db.execute(
                "INSERT INTO attachment_versions (attachment_id, path, kind, source, created_at, sha256, "
                "size, executable, pinned) VALUES (?, 'img/cat.png', 'concurrent', 'peer:OTHERDEVICE', "
                "strftime('%s','now'), ?, ?, 0, 0)", (entry.id, sha(B), len(B)))
            vid = int(cur.lastrowid or 0)
    finally:
        db.close()
    rows = stet_json(home, "conflicts")
    (c,) = [r for r in rows if r.get("target") == "attachment"]
    assert (c["path"], c["code"], c["versionId"], c["token"]) == ("img/cat.png", "concurrent", vid,
                                                                  "peer:OTHERDEVICE")
    assert c["attempted"]["sha256"] == sha(B)
    assert c["winner"]["sha256"] == sha(A)
    text = run_stet(home, "conflicts").stdout.decode()
    assert "img/cat.png" in text
    assert f"--version {vid}" in text
    # The loser's bytes are a version like any other: show writes them out.
    assert run_stet(home, "show", "img/cat.png", "--version", str(vid)).stdout == B


def test_a_real_concurrent_change_shows_in_conflicts_on_both_devices(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    """A and B change one image while B is stopped: the same winner on both folders, no
    conflict copy, and the loser's bytes in `stet conflicts` and `stet show` on both."""
    va, vb = tmp_path / "a", tmp_path / "b"
    (va / "img").mkdir(parents=True)
    (va / "img" / "cat.png").write_bytes(A)
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = peer_daemon(tmp_path / "ha", daemon_factory)
    wait_recorded(a.home, "img/cat.png", sha(A))
    b = peer_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_until(lambda: (vb / "img" / "cat.png").exists() and (vb / "img" / "cat.png").read_bytes() == A,
               timeout=60, what="cat.png on B")
    wait_recorded(b.home, "img/cat.png", sha(A))
    assert b.stop() == 0

    x, y = A + b"\x00changed on A", B + b"\x00changed on B"
    (va / "img" / "cat.png").write_bytes(x)
    wait_recorded(a.home, "img/cat.png", sha(x))
    (vb / "img" / "cat.png").write_bytes(y)  # made without seeing A's change: concurrent
    b = peer_daemon(b.home, daemon_factory)
    wait_linked(a, b)
    wait_same_attachments(va, vb)
    winner = (va / "img" / "cat.png").read_bytes()
    assert winner in (x, y)
    loser = y if winner == x else x
    for root in (va, vb):
        assert sorted(p.name for p in (root / "img").iterdir()) == ["cat.png"]  # no conflict copy

    for home in (a.home, b.home):
        def listed(home: Path = home) -> dict[str, Any] | None:
            rows = [r for r in stet_json(home, "conflicts") if r.get("target") == "attachment"]
            return rows[0] if rows else None

        c = wait_until(listed, timeout=60, what="the concurrent change in stet conflicts")
        assert c["path"] == "img/cat.png"
        assert c["attempted"]["sha256"] == sha(loser)
        assert c["winner"]["sha256"] == sha(winner)
        assert run_stet(home, "show", "img/cat.png", "--version", str(c["versionId"])).stdout == loser
