"""Helpers for tests with a real git repository as the vault (SPEC §3.16)."""

from __future__ import annotations

import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

from stet.sync.git_activity import SLACK_S
from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.versions_support import stet_json

GIT_CONFIG = ("-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main",
              "-c", "advice.detachedHead=false")


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *GIT_CONFIG, *args], cwd=cwd, check=True, capture_output=True)
    return out.stdout.decode()


def note_text(name: str, flavour: str) -> str:
    """A note of 240 characters (so its deletion keeps a version), made of letters no
    other flavour uses (so replacing one flavour by another is an overwrite: nothing of
    the old text is left), different for every name."""
    letters = {"main": "abcdef", "other": "ghijkl", "feature": "mnopqr"}[flavour]
    seed = zlib.crc32(name.encode())
    return "".join(
        "".join(letters[(seed >> (j % 24) ^ (i * 7 + j * 3)) % 6] for j in range(59)) + "\n"
        for i in range(4))


def tree(root: Path) -> dict[str, bytes]:
    """The notes of a vault folder, `.git` and our own files left out."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.md"))
            if p.is_file() and ".git" not in p.relative_to(root).parts and not p.name.startswith(".stet")}


def wait_same_notes(a: Path, b: Path, timeout: float = 30) -> dict[str, bytes]:
    def same() -> dict[str, bytes] | None:
        ta, tb = tree(a), tree(b)
        return ta if ta == tb else None

    result: dict[str, bytes] = wait_until(same, timeout=timeout, what="the peer to follow")
    return result


def held_rows(d: DaemonProcess) -> list[dict[str, Any]]:
    """What `stet held` lists (over the API: polled often, a CLI start each time is slow)."""
    return list(d.client.request("GET", "/v1/vaults/notes/held")["held"])


def nothing_held(*daemons: DaemonProcess) -> None:
    for d in daemons:
        data = d.client.request("GET", "/v1/vaults/notes/held")
        assert data == {"held": [], "engaged": []}, f"held on {d.home.name}: {data}"


def log_sources(home: Path, limit: int = 1000) -> list[tuple[str, str, str]]:
    """(source, kind, path) of the newest changes in `stet log`."""
    return [(c["source"], c["kind"], c["path"]) for c in stet_json(home, "log", "--limit", str(limit))]


def wait_git_quiet(repo: Path) -> None:
    """Wait until git's last write to the index or HEAD is older than the window in which a
    change counts as git's: what a person then does is theirs again. A scenario pause,
    bounded: it waits on the files' mtimes, not on a fixed time."""
    def quiet() -> bool:
        newest = max((repo / ".git" / n).stat().st_mtime for n in ("index", "HEAD"))
        return time.time() - newest > SLACK_S + 0.5

    wait_until(quiet, timeout=SLACK_S + 15, what="git's last write to age past the window")


def stet_log_text(home: Path) -> str:
    return run_stet(home, "log", "--limit", "1000").stdout.decode()
