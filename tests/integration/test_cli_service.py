"""`stet service install|uninstall|status` through the real CLI, against fake service
managers (never the machine's own systemd or launchd), and the generated files' command
started for real: it must bring up a working daemon on the home, paths with spaces and all."""

from __future__ import annotations

import json
import os
import plistlib
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from stet.client import cli_service as svc
from tests.harness import KEYRING_ENV, run_stet, wait_until
from tests.service_fakes import calls, install_fakes, service_env, state

QUIET_CONFIG = "[api]\nport = 0\n[peer]\nport = 0\nmdns = false\n"


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = install_fakes(tmp_path / "fakebin")
    for key, value in service_env(bin_dir, tmp_path / "units", "ok").items():
        monkeypatch.setenv(key, value)
    return bin_dir


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


def _one_line_error(proc: subprocess.CompletedProcess[bytes]) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == 1, (proc.returncode, err)
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_install_enable_status_uninstall_with_a_user_systemd(tmp_path: Path, fakes: Path) -> None:
    home = tmp_path / "home"
    first = run_stet(home, "service", "install").stdout.decode()
    assert "Enabled and (re)started the user service stet.service" in first
    assert "loginctl enable-linger" in first
    unit = _files(tmp_path / "units")
    assert list(unit) == ["stet.service"]
    assert state(fakes)["enabled"] is True

    again = run_stet(home, "service", "install").stdout.decode()
    assert again.startswith("Unchanged:")
    assert _files(tmp_path / "units") == unit

    status = json.loads(run_stet(home, "service", "status", "--json").stdout)
    assert status["installed"] is True
    assert status["upToDate"] is True
    assert (status["enabled"], status["active"], status["linger"]) == (True, True, False)
    text = run_stet(home, "service", "status").stdout.decode()
    assert "(up to date)" in text
    assert "State: enabled, running" in text

    assert "Removed" in run_stet(home, "service", "uninstall").stdout.decode()
    assert _files(tmp_path / "units") == {}
    assert "nothing to do" in run_stet(home, "service", "uninstall").stdout.decode()
    assert ["systemctl", "--user", "disable", "--now", "stet.service"] in calls(fakes)


def test_install_without_a_user_systemd_writes_the_unit_and_exits_1_saying_what_to_run(
        tmp_path: Path, fakes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SERVICE_MODE", "nobus")
    home = tmp_path / "home"
    line = _one_line_error(run_stet(home, "service", "install", check=False))
    assert "no user systemd" in line
    assert "stet start" in line
    unit = _files(tmp_path / "units")
    line2 = _one_line_error(run_stet(home, "service", "install", check=False))
    assert line2 == line
    assert _files(tmp_path / "units") == unit
    assert "no user systemd" in run_stet(home, "service", "status").stdout.decode()
    run_stet(home, "service", "uninstall")
    run_stet(home, "service", "uninstall")
    assert _files(tmp_path / "units") == {}


def test_install_where_systemctl_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("STET_SERVICE_DIR", str(tmp_path / "units"))
    line = _one_line_error(run_stet(tmp_path / "home", "service", "install", "--manager", "systemd",
                                    check=False))
    assert "systemctl is not installed" in line
    assert (tmp_path / "units" / "stet.service").exists()


def test_launchd_agent_install_twice_and_uninstall_twice(tmp_path: Path, fakes: Path) -> None:
    home = tmp_path / "home"
    run_stet(home, "service", "install", "--manager", "launchd")
    files = _files(tmp_path / "units")
    plist = plistlib.loads(files["dev.stet.daemon.plist"])
    assert plist["ProgramArguments"][1:] == ["-m", "stet.daemon", "--home", str(home.resolve())]
    run_stet(home, "service", "install", "--manager", "launchd")
    assert _files(tmp_path / "units") == files
    assert state(fakes)["bootstraps"] == 1
    status = json.loads(run_stet(home, "service", "status", "--manager", "launchd", "--json").stdout)
    assert (status["installed"], status["enabled"], status["pid"]) == (True, True, 4242)
    run_stet(home, "service", "uninstall", "--manager", "launchd")
    run_stet(home, "service", "uninstall", "--manager", "launchd")
    assert _files(tmp_path / "units") == {}


def test_a_bad_config_is_refused_before_installing(tmp_path: Path, fakes: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("[api]\nport = 'x'\n")
    assert "port" in _one_line_error(run_stet(home, "service", "install", check=False))
    assert _files(tmp_path / "units") == {}


# -- the generated command starts a real daemon ----------------------------------------------------


def _exec_start_argv(unit: str) -> list[str]:
    """ExecStart= as systemd would split it (our escapes only: quotes, backslashes, %%, $$)."""
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    words = shlex.split(line.removeprefix("ExecStart="))
    return [w.replace("%%", "%") for w in words[:1]] + [w.replace("%%", "%").replace("$$", "$")
                                                        for w in words[1:]]


def _run_until_ready(argv: list[str], home: Path) -> None:
    """Start ``argv`` with the bare environment a service manager gives; wait until the daemon
    it starts is ready on ``home``; stop it with SIGTERM (as systemd and launchd do)."""
    env = {"HOME": os.environ.get("HOME", "/"), "PATH": "/usr/bin:/bin", **KEYRING_ENV}
    log = open(home / "service-test.out", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    try:
        def ready() -> bool:
            assert proc.poll() is None, (home / "service-test.out").read_text()
            try:
                return bool(json.loads((home / "daemon.json").read_text())["pid"] == proc.pid)
            except (FileNotFoundError, ValueError):
                return False

        wait_until(ready, timeout=30, what="the service's daemon to be ready")
        data = json.loads(run_stet(home, "status", "--json").stdout)
        assert data["running"] is True
        assert data["home"] == str(home)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("manager", ["systemd", "launchd"])
def test_the_generated_command_starts_the_daemon_on_an_odd_home(
        tmp_path: Path, fakes: Path, manager: str) -> None:
    home = (tmp_path / "my notes 100% $x").resolve()
    home.mkdir()
    (home / "config.toml").write_text(QUIET_CONFIG)
    run_stet(home, "service", "install", "--manager", manager)
    if manager == "systemd":
        argv = _exec_start_argv((tmp_path / "units" / svc.UNIT_NAME).read_text())
    else:
        argv = plistlib.loads((tmp_path / "units" / svc.PLIST_NAME).read_bytes())["ProgramArguments"]
    assert argv[-1] == str(home)
    _run_until_ready(argv, home)
