"""Attachments are known from the first moment (issue 37, item 10): `stet init` takes the
folder's attachments in (their bytes into the home's blob store) as it imports the notes, and
says how many. Deleted right after `stet start` returns -- before the daemon's first pass
has looked at the folder -- they are deletions: 12 at once are held by the brake (a person's
burst); 3 are kept as versions and wait the delete delay. Before, such files were never
known (the delete won the race with the first pass in 5 of 6 runs) and nothing was kept.

Real daemon processes, the real CLI, real files; each case runs three times (the race it
is about was lost 1 time in 6)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import blob_path, live, versions
from tests.integration.git_support import held_rows


def _files(n: int) -> dict[str, bytes]:
    return {f"img/pic{i:02d}.png": b"\x89PNG\r\n\x1a\n\x00" + bytes([i]) * 700 + b"\x00end" for i in range(n)}


def _init(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, Path, str]:
    home, vault = tmp_path / "home", tmp_path / "vault"
    (vault / "img").mkdir(parents=True)
    (vault / "readme.md").write_text("a note beside the pictures\n")
    for path, data in files.items():
        (vault / path).write_bytes(data)
    home.mkdir()
    (home / "config.toml").write_text("[peer]\ndelete_delay_seconds = 300\n")
    out = run_stet(home, "init", str(vault), "--name", "notes").stdout.decode()
    return home, vault, out


@pytest.mark.parametrize("run", range(3))
def test_twelve_attachments_deleted_right_after_the_start_are_held(
        tmp_path: Path, daemon_factory: list[DaemonProcess], run: int) -> None:
    files = _files(12)
    home, vault, out = _init(tmp_path, files)
    size_mb = sum(map(len, files.values())) / 1e6
    assert f"1 notes imported (0.0 MB) and 12 attachments ({size_mb:.1f} MB)" in out
    d = DaemonProcess(home)
    daemon_factory.append(d)
    d.start()
    for path in files:
        (vault / path).unlink()

    def held_deletions() -> list[dict[str, object]] | None:
        rows = [x for x in held_rows(d) if x["kind"] == "deleted"]
        return rows if len(rows) >= 12 else None

    rows = wait_until(held_deletions, timeout=30, what="the brake to hold the 12 deletions")
    assert sorted(r["path"] for r in rows) == sorted(files)
    assert {(r["target"], r["source"]) for r in rows} == {("attachment", "disk")}
    assert set(files) <= set(live(home))  # recorded as created, the deletions held: peers keep them
    assert "12" in run_stet(home, "held").stdout.decode()
    assert not any((vault / p).exists() for p in files)  # and nothing written back meanwhile
    for data in files.values():  # the bytes are in this home: a revert can bring them back
        assert blob_path(home, hashlib.sha256(data).hexdigest()).read_bytes() == data


@pytest.mark.parametrize("run", range(3))
def test_three_attachments_deleted_right_after_the_start_keep_their_versions(
        tmp_path: Path, daemon_factory: list[DaemonProcess], run: int) -> None:
    files = _files(3)
    home, vault, out = _init(tmp_path, files)
    assert "and 3 attachments" in out
    assert json.loads(run_stet(tmp_path / "other", "init", str(tmp_path / "empty"), "--create",
                               "--json").stdout)["attachments"] == 0
    d = DaemonProcess(home)
    daemon_factory.append(d)
    d.start()
    for path in files:
        (vault / path).unlink()

    def kept() -> set[str] | None:
        got = {str(v["path"]) for v in versions(home) if v["kind"] == "before-deletion"}
        return got if got >= set(files) else None

    assert wait_until(kept, timeout=30, what="a before-deletion version of each") == set(files)
    (vault_status,) = d.client.status()["vaults"]
    assert vault_status["pendingDeletes"]["count"] == 3  # waiting the delete delay, as the spec says
    assert not any((vault / p).exists() for p in files)
