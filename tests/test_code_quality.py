"""Lint and type checks run as part of the suite, so CI enforces them.

mypy cannot follow setuptools' package-dir mapping through an editable install, so
the check builds a throwaway ``stet/`` tree of symlinks to sync/, daemon/, client/.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> list[str]:
    if shutil.which(name, path=str(Path(sys.executable).parent)):
        return [str(Path(sys.executable).parent / name)]
    return [sys.executable, "-m", name]


def test_ruff_is_clean() -> None:
    proc = subprocess.run(
        [*_tool("ruff"), "check", "sync", "daemon", "client", "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _mypy_tree() -> Path:
    """The ``stet/`` tree of symlinks, at a fixed place under the repo's ``.mypy_cache/``
    (gitignored) so the cache beside it stays warm from one run to the next: a cold strict
    check costs seconds, a warm one a fraction of a second."""
    tree = ROOT / ".mypy_cache" / "tree"
    pkg = tree / "stet"
    pkg.mkdir(parents=True, exist_ok=True)
    for name in ("sync", "daemon", "client"):
        link = pkg / name
        if not link.is_symlink() or link.resolve() != ROOT / name:
            link.unlink(missing_ok=True)
            link.symlink_to(ROOT / name, target_is_directory=True)
    return tree


def test_every_package_is_mypy_strict() -> None:
    """sync/, daemon/ and client/ all pass ``mypy --strict`` (issue 11)."""
    tree = _mypy_tree()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "-p",
            "stet.sync",
            "-p",
            "stet.daemon",
            "-p",
            "stet.client",
        ],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "forbidden", ["aiohttp", "watchdog", "zeroconf", "keyring", "stet.daemon", "stet.client"]
)
def test_sync_does_not_import_adapters(forbidden: str) -> None:
    for path in (ROOT / "sync").rglob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            assert not stripped.startswith((f"import {forbidden}", f"from {forbidden}")), f"{path}: {line}"


def test_client_does_not_import_daemon() -> None:
    for path in (ROOT / "client").rglob("*.py"):
        for line in path.read_text().splitlines():
            assert not line.strip().startswith(("import stet.daemon", "from stet.daemon")), f"{path}: {line}"
