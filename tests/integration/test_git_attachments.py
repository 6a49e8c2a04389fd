"""Attachments follow git's rules for notes (SPEC §3.14, §3.16; issue 14 edges), with a real
git repository as the vault and a paired peer: a checkout that deletes 12 attachments and
rewrites 3 is git's -- nothing held, the peer follows, each deleted or overwritten file keeps
its version (source ``git``), ``stet log`` names the changes ``git``; the checkout back and a
stash round trip likewise. A person's ``rm`` of 12 attachments in the same repository is
still held."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import attachments, versions, wait_recorded
from tests.integration.git_support import git, held_rows, log_sources, nothing_held, wait_git_quiet
from tests.integration.peer_support import invite, join, start_daemon, wait_linked

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

GONE = [f"img/a{i:02d}.png" for i in range(12)]  # deleted by the other branch
REWRITTEN = [f"papers/p{i}.pdf" for i in range(3)]  # other bytes on the other branch
KEPT = [f"keep/k{i:02d}.bin" for i in range(12)]  # the same on both branches


def _bytes(path: str, flavour: str) -> bytes:
    return b"\x89PNG\r\n\x1a\n\x00" + f"{flavour}:{path}".encode() * 40 + b"\x00end"


def _write(vault: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        (vault / path).parent.mkdir(parents=True, exist_ok=True)
        (vault / path).write_bytes(data)


def _repo(vault: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    vault.mkdir()
    main = {p: _bytes(p, "main") for p in GONE + REWRITTEN + KEPT}
    other = {p: _bytes(p, "other") for p in REWRITTEN} | {p: main[p] for p in KEPT}
    git(vault, "init", "-q")
    _write(vault, main)
    (vault / "readme.md").write_text("a note beside the attachments\n", encoding="utf-8")
    git(vault, "add", "-A")
    git(vault, "commit", "-qm", "main")
    git(vault, "checkout", "-qb", "other")
    git(vault, "rm", "-rq", "img")
    _write(vault, {p: other[p] for p in REWRITTEN})
    git(vault, "commit", "-qam", "other")
    git(vault, "checkout", "-q", "main")
    return main, other


def _as_tree(files: dict[str, bytes]) -> dict[str, tuple[bytes, bool]]:
    return {p: (d, False) for p, d in files.items()}


def _outside_git(root: Path) -> dict[str, tuple[bytes, bool]]:
    return {p: v for p, v in attachments(root).items() if not p.startswith(".git/")}


def wait_same_attachments(a: Path, b: Path, timeout: float = 60) -> dict[str, tuple[bytes, bool]]:
    """The attachments of both folders (``.git`` left out), once they are the same."""
    def same() -> dict[str, tuple[bytes, bool]] | None:
        ta, tb = _outside_git(a), _outside_git(b)
        return ta if ta == tb else None

    result: dict[str, tuple[bytes, bool]] = wait_until(same, timeout=timeout, what="identical attachments",
                                                        interval=0.05)
    return result


def test_git_checkouts_of_attachments_are_not_held_and_a_persons_rm_is(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    main, other = _repo(va)
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    for path in main:
        wait_recorded(a.home, path)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    assert wait_same_attachments(va, vb) == _as_tree(main)

    # main -> other: 12 attachments deleted, 3 rewritten, by git.
    git(va, "checkout", "-q", "other")
    assert wait_same_attachments(va, vb) == _as_tree(other)
    nothing_held(a, b)
    kept = {(v["path"], v["kind"]): v for v in versions(a.home)}
    for path in GONE:
        v = kept[(path, "before-deletion")]
        assert v["source"] == "git"
        assert v["size"] == len(main[path])
    for path in REWRITTEN:
        assert kept[(path, "before-overwrite")]["source"] == "git"
    logged = set(log_sources(a.home))
    assert {("git", "deleted", p) for p in GONE} <= logged
    assert {("git", "changed", p) for p in REWRITTEN} <= logged

    # And back: nothing held, the peer follows.
    git(va, "checkout", "-q", "main")
    assert wait_same_attachments(va, vb) == _as_tree(main)
    nothing_held(a, b)
    logged = set(log_sources(a.home))
    assert {("git", "created", p) for p in GONE} <= logged

    # Stash: a person's edits of 3 attachments, cut away by `git stash` (git's: not held
    # whatever the brake's count) and brought back by `git stash pop`.
    wait_git_quiet(va)
    edited = {p: _bytes(p, "edited") for p in REWRITTEN}
    _write(va, edited)
    assert wait_same_attachments(va, vb) == _as_tree(main | edited)
    git(va, "stash", "-q")
    assert wait_same_attachments(va, vb) == _as_tree(main)
    nothing_held(a, b)
    git(va, "stash", "pop", "-q")
    assert wait_same_attachments(va, vb) == _as_tree(main | edited)
    nothing_held(a, b)
    logged_list = log_sources(a.home)
    for path in REWRITTEN:  # the person's edit is theirs; two checkouts, the stash and the pop git's
        assert ("disk", "changed", path) in logged_list
        assert logged_list.count(("git", "changed", path)) >= 4, logged_list

    # A person's rm of 12 attachments (git not involved) is held; the peer keeps them.
    wait_git_quiet(va)
    subprocess.run(["rm", *[str(va / p) for p in GONE]], check=True)
    def deletions() -> list[dict[str, Any]] | None:
        rows = [r for r in held_rows(a) if r["kind"] == "deleted"]
        return rows if len(rows) >= 12 else None

    rows = wait_until(deletions, timeout=30, what="the brake to hold the rm")
    assert sorted(r["path"] for r in rows) == GONE
    assert {(r["target"], r["source"]) for r in rows} == {("attachment", "disk")}
    # The person's edits of the papers were in the same window: held with the burst (revert
    # would bring their bytes back), never git's stash or pop.
    assert {r["path"] for r in held_rows(a)} - set(GONE) <= set(REWRITTEN)
    assert {r["source"] for r in held_rows(a)} == {"disk"}
    assert all(attachments(vb)[p] == (main[p], False) for p in GONE)
