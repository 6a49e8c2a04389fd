"""`stet doctor`'s checks, each made to fail on purpose: the verdict and the fix it gives."""

from __future__ import annotations

import os
import socket
import sqlite3
import sys
from pathlib import Path

import pytest

from stet.client import cli_doctor as doc
from stet.sync.home import HomeLayout, HomeRegistry, VaultEntry
from stet.sync.store import VaultStore


def _vault(tmp_path: Path, name: str = "notes", dirs: int = 0) -> VaultEntry:
    folder = tmp_path / name
    folder.mkdir()
    for i in range(dirs):
        (folder / f"d{i}" / "sub").mkdir(parents=True)
    return VaultEntry("v" * 20, name, folder, 0.0)


def _limits(tmp_path: Path, watches: int, instances: int = 128) -> Path:
    proc = tmp_path / "inotify"
    proc.mkdir(parents=True)
    (proc / "max_user_watches").write_text(f"{watches}\n")
    (proc / "max_user_instances").write_text(f"{instances}\n")
    return proc


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_inotify_limit_against_the_folder_count(tmp_path: Path) -> None:
    vault = _vault(tmp_path, dirs=10)  # 1 + 10 + 10 folders
    assert doc.count_dirs(vault.path) == 21
    ok = doc.check_inotify([vault], _limits(tmp_path / "a", 8192))
    assert ok.status == doc.OK
    assert "21 folders" in ok.detail
    tight = doc.check_inotify([vault], _limits(tmp_path / "b", 30))
    assert tight.status == doc.WARN
    low = doc.check_inotify([vault], _limits(tmp_path / "c", 20))
    assert low.status == doc.FAIL
    assert "fs.inotify.max_user_watches=524288" in low.fix
    assert "/etc/sysctl.d/" in low.fix
    few = doc.check_inotify([vault, _vault(tmp_path, "other")], _limits(tmp_path / "d", 8192, instances=1))
    assert few.status == doc.FAIL
    assert "max_user_instances" in few.fix
    assert doc.check_inotify([], _limits(tmp_path / "e", 8192)).status == doc.SKIP


def test_count_dirs_does_not_follow_symlinks(tmp_path: Path) -> None:
    (tmp_path / "v" / "a").mkdir(parents=True)
    (tmp_path / "v" / "loop").symlink_to(tmp_path / "v", target_is_directory=True)
    assert doc.count_dirs(tmp_path / "v") == 2


def test_a_port_in_use_fails_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        check = doc.check_port("API", "api", "127.0.0.1", port, None, None, tmp_path / "config.toml")
    assert check.status == doc.FAIL
    assert "taken by another program" in check.detail
    assert "[api] port" in check.fix
    assert f"lsof -iTCP:{port}" in check.fix
    free = doc.check_port("API", "api", "127.0.0.1", port, None, None, tmp_path / "config.toml")
    assert free.status == doc.OK
    assert doc.check_port("peer", "peer", "0.0.0.0", 0, None, None, tmp_path).status == doc.OK


def test_a_clock_before_2024_fails(tmp_path: Path) -> None:
    layout = HomeLayout(tmp_path)
    check = doc.check_clock(layout, [], now=lambda: 0.0)
    assert check.status == doc.FAIL
    assert "1970-01-01" in check.detail
    assert "timedatectl" in check.fix
    assert doc.check_clock(layout, []).status == doc.OK


def test_a_change_dated_in_the_future_is_a_warning(tmp_path: Path) -> None:
    store_path = tmp_path / "v.db"
    VaultStore(store_path).close()
    db = sqlite3.connect(store_path)
    db.execute("INSERT INTO notes (id, path, deleted, revision, size, created_at, updated_at, updated_by, "
               "update_count) VALUES ('n', 'a.md', 0, 'r', 0, 0, 4102444800, 'disk', 0)")  # in 2100
    db.commit()
    db.close()
    check = doc.check_clock(HomeLayout(tmp_path), [("notes", store_path)])
    assert check.status == doc.WARN
    assert "in the future" in check.detail


def test_a_missing_vault_folder_fails(tmp_path: Path) -> None:
    entry = VaultEntry("x" * 20, "gone", tmp_path / "gone", 0.0)
    check = doc.check_vault_folder(entry)
    assert check.status == doc.FAIL
    assert "missing" in check.detail
    assert "restart the daemon" in check.fix
    assert doc.check_vault_folder(_vault(tmp_path)).status == doc.OK
    assert not list((tmp_path / "notes").iterdir())  # the probe file is gone


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any permission")
def test_a_read_only_vault_folder_fails(tmp_path: Path) -> None:
    entry = _vault(tmp_path)
    entry.path.chmod(0o500)
    try:
        check = doc.check_vault_folder(entry)
    finally:
        entry.path.chmod(0o700)
    assert check.status == doc.FAIL
    assert "cannot write" in check.detail


def test_a_corrupt_store_fails_its_integrity_check(tmp_path: Path) -> None:
    good = tmp_path / "good.db"
    VaultStore(good).close()
    assert doc.check_store("good", good).status == doc.OK
    bad = tmp_path / "bad.db"
    data = bytearray(good.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)  # everything after the header: garbage
    bad.write_bytes(bytes(data))
    check = doc.check_store("bad", bad)
    assert check.status == doc.FAIL
    assert ".recover" in check.fix
    assert good.read_bytes()  # opened read-only: nothing written


def test_secrets_readable_by_others_fail(tmp_path: Path) -> None:
    layout = HomeLayout(tmp_path)
    layout.owner_token_file.write_text("stet_owner_x\n")
    layout.owner_token_file.chmod(0o644)
    check = doc.check_keyring(layout)
    assert check.status == doc.FAIL
    assert f"chmod 600 {layout.owner_token_file}" in check.fix
    layout.owner_token_file.chmod(0o600)
    fallback = doc.check_keyring(layout)  # the tests' keyring backend is keyring.backends.fail
    assert fallback.status == doc.WARN
    assert "file fallback" in fallback.detail


def test_a_bad_config_fails_and_the_rest_still_runs(tmp_path: Path) -> None:
    layout = HomeLayout(tmp_path)
    layout.ensure()
    layout.config_file.write_text("[api]\nport = 'x'\n")
    checks = doc.run_checks(layout)
    assert checks[0].name == "config"
    assert checks[0].status == doc.FAIL
    assert "port" in checks[0].detail
    assert {c.name for c in checks} >= {"daemon", "API port", "peer port", "keyring", "clock", "inotify"}


def test_run_checks_covers_every_vault_and_store(tmp_path: Path) -> None:
    layout = HomeLayout(tmp_path / "home")
    registry = HomeRegistry(layout)
    entry = registry.add("notes", _vault(tmp_path).path)
    registry.close()
    VaultStore(layout.vault_db(entry.id)).close()
    names = [c.name for c in doc.run_checks(layout)]
    assert "vault notes" in names
    assert "store notes" in names
    assert "store home" in names


def test_ascii_fallback_and_fix_sentences() -> None:
    checks = [doc.Check("daemon", doc.FAIL, "not running", "`stet start`"),
              doc.Check("clock", doc.OK, "fine", "never shown")]
    lines = doc.format_checks(checks, doc.ASCII_SYMBOLS)
    assert lines == ["[FAIL] daemon  not running. Fix: `stet start`", "[ok]   clock   fine"]
    assert all(line.isascii() for line in lines)
    assert doc.format_checks(checks, doc.SYMBOLS)[0].startswith("✗ daemon")
