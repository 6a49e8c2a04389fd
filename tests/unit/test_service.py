"""`stet service`: the generated systemd unit and launchd plist, and idempotent install /
uninstall against fake service managers (tests/service_fakes.py; never the real ones)."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from stet.client import cli_service as svc
from stet.sync.errors import StetError
from stet.sync.home import HomeLayout
from tests.service_fakes import calls, install_fakes, service_env, state

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# A home whose path needs every kind of escaping: spaces, %, $, quotes, a backslash, XML, "--".
ODD = "my notes/100% $HOME \"q\" 'a' back\\slash <&> --x"


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = install_fakes(tmp_path / "fakebin")
    for key, value in service_env(bin_dir, tmp_path / "units", "ok").items():
        monkeypatch.setenv(key, value)
    return bin_dir


# -- the templates ------------------------------------------------------------------------------


def test_packaging_templates_are_the_ones_the_cli_writes() -> None:
    assert (ROOT / "packaging" / "stet.service").read_text(encoding="utf-8") == svc.SYSTEMD_TEMPLATE
    assert (ROOT / "packaging" / "dev.stet.daemon.plist").read_text(encoding="utf-8") == svc.LAUNCHD_TEMPLATE


def test_unit_runs_this_python_on_the_home_and_restarts_on_failure(tmp_path: Path) -> None:
    unit = svc.render_systemd_unit(PYTHON, tmp_path / "home")
    lines = unit.splitlines()
    assert f"ExecStart={PYTHON} -m stet.daemon --home {tmp_path / 'home'}" in lines
    for line in ("Restart=on-failure", "RestartPreventExitStatus=2", "WantedBy=default.target",
                 "Type=simple"):
        assert line in lines
    assert "@" not in "".join(x for x in lines if not x.startswith("#"))


@pytest.mark.parametrize(("raw", "quoted"), [
    ("/usr/bin/python3", "/usr/bin/python3"),
    ("/a b/c", '"/a b/c"'),
    ("/100%/x", "/100%%/x"),
    ("/$HOME/x", "/$$HOME/x"),
    ('/a"b', '"/a\\"b"'),
    ("/a\\b", '"/a\\\\b"'),
    ("/a;b", '"/a;b"'),
])
def test_systemd_arguments_are_quoted_as_systemd_reads_them(raw: str, quoted: str) -> None:
    assert svc.systemd_arg(raw) == quoted


def _systemd_verify(unit_dir: Path) -> subprocess.CompletedProcess[str]:
    # A short runtime folder of its own, not under tmp_path: systemd reads the user's socket
    # units (gpg-agent's) with paths under it, and a socket path has at most 108 bytes --
    # tmp_path under pytest-xdist (.../popen-gw1/...) is too long and the check fails.
    with tempfile.TemporaryDirectory(prefix="xdg-") as runtime:
        os.chmod(runtime, 0o700)
        env = dict(os.environ, XDG_RUNTIME_DIR=runtime, SYSTEMD_LOG_LEVEL="warning")
        return subprocess.run(["systemd-analyze", "--user", "verify", str(unit_dir / svc.UNIT_NAME)],
                              capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("odd", [False, True], ids=["plain", "odd-paths"])
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path, odd: bool) -> None:
    python, home = PYTHON, tmp_path / "home"
    if odd:  # an executable and a home whose paths need quoting and escaping
        odd_dir = tmp_path / "py 100% $x"  # systemd refuses quotes and backslashes here
        odd_dir.mkdir()
        (odd_dir / "python").symlink_to(PYTHON)
        python, home = str(odd_dir / "python"), tmp_path / ODD
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    (unit_dir / svc.UNIT_NAME).write_text(svc.render_systemd_unit(python, home))
    proc = _systemd_verify(unit_dir)
    # verify exits 0 even for lines it ignores, so its warnings must be absent too.
    assert proc.returncode == 0, proc.stderr
    assert not proc.stderr.strip(), proc.stderr
    assert not proc.stdout.strip(), proc.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_notices_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a unit naming a missing executable does not pass."""
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    (unit_dir / svc.UNIT_NAME).write_text(svc.render_systemd_unit("/nonexistent/python", tmp_path))
    proc = _systemd_verify(unit_dir)
    assert proc.returncode != 0 or proc.stderr.strip()


@pytest.mark.parametrize("home_name", ["home", ODD])
def test_plist_parses_with_the_right_program_keepalive_and_runatload(tmp_path: Path, home_name: str) -> None:
    home = tmp_path / home_name
    data = plistlib.loads(svc.render_launchd_plist(PYTHON, home).encode("utf-8"))
    assert data["Label"] == "dev.stet.daemon"
    assert data["ProgramArguments"] == [PYTHON, "-m", "stet.daemon", "--home", str(home)]
    assert data["RunAtLoad"] is True
    assert data["KeepAlive"] == {"SuccessfulExit": False}  # restarted when it fails, like on-failure
    assert data["StandardErrorPath"] == f"{home}/logs/daemon.out"
    assert data["EnvironmentVariables"] == {"PYTHONUNBUFFERED": "1"}


def test_an_executable_path_systemd_cannot_run_is_refused_in_one_sentence(tmp_path: Path) -> None:
    assert svc.systemd_arg("/a $b/python", executable=True) == '"/a $b/python"'
    with pytest.raises(StetError, match="quotes or backslashes"):
        svc.render_systemd_unit('/opt/"q"/python', tmp_path)


def test_control_characters_in_a_path_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StetError, match="control characters"):
        svc.render_systemd_unit(PYTHON, tmp_path / "a\nb")
    with pytest.raises(StetError, match="control characters"):
        svc.render_launchd_plist(PYTHON, tmp_path / "a\x01b")


# -- where files go ------------------------------------------------------------------------------


def test_service_dir_defaults_and_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("STET_SERVICE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert svc.service_dir("systemd") == tmp_path / "h" / ".config" / "systemd" / "user"
    assert svc.service_dir("launchd") == tmp_path / "h" / "Library" / "LaunchAgents"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert svc.service_dir("systemd") == tmp_path / "xdg" / "systemd" / "user"
    monkeypatch.setenv("STET_SERVICE_DIR", str(tmp_path / "units"))
    assert svc.service_dir("systemd") == svc.service_dir("launchd") == tmp_path / "units"


# -- install / uninstall against the fakes -------------------------------------------------------------


def _systemctl_calls(bin_dir: Path) -> list[list[str]]:
    return [c for c in calls(bin_dir) if c[0] == "systemctl"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


def test_systemd_install_twice_is_one_unit_and_uninstall_twice_is_fine(fakes: Path, tmp_path: Path) -> None:
    layout = HomeLayout(tmp_path / "home")
    target = svc.service_file("systemd", layout)
    first = svc.install_systemd(target, layout)
    files = _snapshot(tmp_path / "units")
    assert list(files) == [svc.UNIT_NAME]
    assert first[0].startswith("Wrote ")
    assert state(fakes)["enabled"] is True
    assert state(fakes)["active"] is True
    assert ["systemctl", "--user", "restart", svc.UNIT_NAME] in calls(fakes)
    # The linger hint: the fake loginctl says it is off.
    assert any("loginctl enable-linger" in line for line in first)

    second = svc.install_systemd(svc.service_file("systemd", layout), layout)
    assert _snapshot(tmp_path / "units") == files
    assert second[0].startswith("Unchanged:")
    assert _systemctl_calls(fakes)[-1] == ["systemctl", "--user", "start", svc.UNIT_NAME]  # no restart

    out = svc.uninstall_systemd(target)
    assert not target.path.exists()
    assert state(fakes)["enabled"] is False
    assert state(fakes)["active"] is False
    assert any(line.startswith("Removed ") for line in out)
    again = svc.uninstall_systemd(target)
    assert again == [f"Stet's service is not installed (no {target.path}): nothing to do."]


def test_systemd_install_without_a_user_manager_writes_the_unit_and_says_what_to_run(
        fakes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SERVICE_MODE", "nobus")
    layout = HomeLayout(tmp_path / "home")
    target = svc.service_file("systemd", layout)
    for _ in range(2):
        with pytest.raises(svc.NoServiceManager) as info:
            svc.install_systemd(target, layout)
        assert target.path.read_text() == target.content
        message = info.value.message
        assert "no user systemd" in message
        assert "stet start" in message
        assert "enable-linger" in message
        assert "\n" not in message
    assert svc.uninstall_systemd(target) == [f"Removed {target.path}."]
    assert svc.uninstall_systemd(target)[0].startswith("Stet's service is not installed")


def test_a_changed_unit_is_rewritten_and_restarted(fakes: Path, tmp_path: Path) -> None:
    layout = HomeLayout(tmp_path / "home")
    svc.install_systemd(svc.service_file("systemd", layout), layout)
    other_python = svc.service_file("systemd", layout, python="/opt/other/bin/python3")
    lines = svc.install_systemd(other_python, layout)
    assert lines[0].startswith("Wrote ")
    assert other_python.path.read_text() == other_python.content
    assert _systemctl_calls(fakes)[-1] == ["systemctl", "--user", "restart", svc.UNIT_NAME]


def test_a_foreign_unit_is_neither_overwritten_nor_removed(fakes: Path, tmp_path: Path) -> None:
    layout = HomeLayout(tmp_path / "home")
    target = svc.service_file("systemd", layout)
    target.path.parent.mkdir(parents=True)
    target.path.write_text("[Service]\nExecStart=/usr/bin/something-else\n")
    with pytest.raises(StetError, match="not Stet's"):
        svc.install_systemd(target, layout)
    with pytest.raises(StetError, match="not Stet's"):
        svc.uninstall_systemd(target)
    assert "something-else" in target.path.read_text()


def test_launchd_install_twice_and_uninstall_twice(fakes: Path, tmp_path: Path) -> None:
    layout = HomeLayout(tmp_path / "home")
    target = svc.service_file("launchd", layout)
    svc.install_launchd(target, layout)
    files = _snapshot(tmp_path / "units")
    assert list(files) == [svc.PLIST_NAME]
    assert plistlib.loads(files[svc.PLIST_NAME])["ProgramArguments"][-1] == str(layout.root)
    assert (layout.log_dir).is_dir()  # launchd opens logs/daemon.out but makes no folders
    assert state(fakes)["loaded"] is True

    svc.install_launchd(svc.service_file("launchd", layout), layout)
    assert _snapshot(tmp_path / "units") == files
    assert state(fakes)["bootstraps"] == 1  # loaded once; the second install only kickstarts
    assert calls(fakes)[-1][:2] == ["launchctl", "kickstart"]

    svc.uninstall_launchd(target)
    assert not target.path.exists()
    assert state(fakes)["loaded"] is False
    assert svc.uninstall_launchd(target)[0].startswith("Stet's service is not installed")


def test_launchd_without_launchctl_writes_the_plist_and_says_what_to_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("STET_SERVICE_DIR", str(tmp_path / "units"))
    layout = HomeLayout(tmp_path / "home")
    target = svc.service_file("launchd", layout)
    with pytest.raises(svc.NoServiceManager, match="stet start"):
        svc.install_launchd(target, layout)
    assert target.path.read_text() == target.content
