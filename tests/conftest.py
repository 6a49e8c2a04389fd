from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import KEYRING_ENV, DaemonProcess, run_stet

os.environ.update(KEYRING_ENV)
# `stet init` records which home manages a folder (client/folder_claims.py): keep the test
# homes' claims out of the user's own state directory.
os.environ.setdefault("STET_CLAIMS_DIR", tempfile.mkdtemp(prefix="stet-claims-"))


TESTS = Path(__file__).resolve().parent
# Modules that drive Node besides those using live_support's stock Yjs clients.
NODE_MODULES = {"test_mcp_inspector"}  # the MCP Inspector CLI (npm)


def _families(item: pytest.Item) -> list[str]:
    """The families a test belongs to, from where it lives and what it uses: ``integration``
    (tests/integration/: real daemon processes), ``browser`` (chromium through Playwright),
    ``node`` (stock Yjs clients or other npm tools)."""
    out = []
    path = Path(str(item.path))
    if TESTS / "integration" in path.parents:
        out.append("integration")
    module = getattr(item, "module", None)
    names = vars(module) if module is not None else {}
    if "browser" in getattr(item, "fixturenames", ()) or "signed_in" in names:
        out.append("browser")
    if "js_clients" in names or path.stem in NODE_MODULES:
        out.append("node")
    return out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its families (``-m integration``, ``-m "not browser"``...), and
    skip ``slow`` suites unless asked for (``-m slow``), as the marker says."""
    for item in items:
        for family in _families(item):
            item.add_marker(getattr(pytest.mark, family))
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.fixture
def vault_dir(tmp_path: Path) -> Path:
    v = tmp_path / "vault"
    v.mkdir()
    return v


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[list[DaemonProcess]]:
    """Start real daemons; every one still running at the end is stopped."""
    started: list[DaemonProcess] = []
    yield started
    for d in started:
        if d.proc is not None and d.proc.poll() is None:
            d.kill9()


@pytest.fixture
def daemon(home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> DaemonProcess:
    """A daemon serving one vault (``vault_dir``), initialised empty."""
    run_stet(home, "init", str(vault_dir), "--name", "notes", "--json")
    d = DaemonProcess(home)
    daemon_factory.append(d)
    return d.start()
