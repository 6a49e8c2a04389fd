"""``stet service install|uninstall|status``: the daemon as a per-user background service.

Linux: a systemd *user* unit (``~/.config/systemd/user/stet.service``), enabled and started
with ``systemctl --user``; it runs while the user has a session, and across logout and at
boot once ``loginctl enable-linger $USER`` was run (install says so when it is off).
macOS: a launchd agent (``~/Library/LaunchAgents/dev.stet.daemon.plist``) loaded with
``launchctl bootstrap gui/$UID``; it starts at login.

Both run ``<this Python> -m stet.daemon --home <home>`` and restart it when it fails. The
templates are ``packaging/stet.service`` and ``packaging/dev.stet.daemon.plist`` (kept equal
to the copies below by a test; the wheel ships only the package, so the CLI carries them).

Install and uninstall are idempotent. Where there is no user systemd (containers, CI, WSL
without systemd: ``systemctl --user`` cannot reach a bus) install still writes the unit and
then fails (exit 1) with one sentence saying what to run instead: the unit is not running,
and a script that installs a service must learn that. Uninstall there just removes the file.

Seams for tests (and for packagers): ``STET_SERVICE_DIR`` replaces the directory the unit or
plist is written to; ``systemctl``, ``loginctl`` and ``launchctl`` are looked up on ``PATH``;
``--manager`` picks systemd or launchd regardless of the platform.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from stet.sync.errors import StetError
from stet.sync.home_layout import HomeLayout

from .cli import Ctx, cli, emit_json
from .daemon_link import read_daemon_info

UNIT_NAME = "stet.service"
LAUNCHD_LABEL = "dev.stet.daemon"
PLIST_NAME = f"{LAUNCHD_LABEL}.plist"
MANAGERS = ("systemd", "launchd")

# Equal to packaging/stet.service (tests/unit/test_service.py checks it).
SYSTEMD_TEMPLATE = """\
# Stet as a systemd user service.
#
# `stet service install` fills in @PYTHON@ (the Python that has Stet installed, e.g. a
# venv's bin/python) and @HOME@ (the Stet home), writes the result to
# ~/.config/systemd/user/stet.service and runs
#   systemctl --user daemon-reload && systemctl --user enable stet && systemctl --user restart stet
# To keep it running after logout and start it at boot (without logging in):
#   loginctl enable-linger $USER
# Logs: `journalctl --user -u stet` and <home>/logs/daemon.log (rotating).

[Unit]
Description=Stet: local-first sync of markdown notes
# The daemon dials peers with backoff and re-announces itself, so it needs no network target.

[Service]
Type=simple
ExecStart=@PYTHON@ -m stet.daemon --home @HOME@
Environment=PYTHONUNBUFFERED=1
Restart=on-failure
RestartSec=5
# Exit status 2 is a bad config.toml: restarting cannot fix it (`stet doctor` explains).
RestartPreventExitStatus=2
# SIGTERM flushes pending writes to disk before the daemon exits.
TimeoutStopSec=60

[Install]
WantedBy=default.target
"""

# Equal to packaging/dev.stet.daemon.plist (tests/unit/test_service.py checks it).
LAUNCHD_TEMPLATE = """\
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!--
  Stet as a launchd user agent (macOS).

  `stet service install` fills in @PYTHON@ (the Python that has Stet installed, e.g. a
  venv's bin/python) and @HOME@ (the Stet home), writes the result to
  ~/Library/LaunchAgents/dev.stet.daemon.plist and runs
    launchctl enable gui/$UID/dev.stet.daemon
    launchctl bootstrap gui/$UID ~/Library/LaunchAgents/dev.stet.daemon.plist
  It starts at login and is restarted when it exits with an error.
  Logs: <home>/logs/daemon.log (rotating) and <home>/logs/daemon.out (stdout and stderr).
-->
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>dev.stet.daemon</string>
  <key>ProgramArguments</key>
  <array>
    <string>@PYTHON@</string>
    <string>-m</string>
    <string>stet.daemon</string>
    <string>--home</string>
    <string>@HOME@</string>
  </array>
  <key>EnvironmentVariables</key>
  <dict>
    <key>PYTHONUNBUFFERED</key>
    <string>1</string>
  </dict>
  <key>RunAtLoad</key>
  <true/>
  <key>KeepAlive</key>
  <dict>
    <key>SuccessfulExit</key>
    <false/>
  </dict>
  <key>ThrottleInterval</key>
  <integer>5</integer>
  <key>StandardOutPath</key>
  <string>@HOME@/logs/daemon.out</string>
  <key>StandardErrorPath</key>
  <string>@HOME@/logs/daemon.out</string>
</dict>
</plist>
"""


# -- rendering ---------------------------------------------------------------------------------


def _check_path_text(what: str, value: str) -> None:
    if not value or any(ord(c) < 0x20 or c == "\x7f" for c in value):
        raise StetError(f"the {what} path {value!r} holds control characters and cannot go into a service "
                        "file: use a path without them")


def systemd_arg(value: str, *, executable: bool = False) -> str:
    """One word of a unit's command line, quoted and escaped as systemd.syntax(7) reads it:
    ``%`` starts a specifier and ``$`` a variable in arguments (both doubled; the executable gets
    no variable expansion), backslashes are C escapes, whitespace or quotes need double quotes.
    systemd refuses quotes and backslashes in the executable's path."""
    if executable:
        if any(c in value for c in "\\\"'"):
            raise StetError(f"systemd cannot run an executable whose path holds quotes or backslashes "
                            f"({value}): install Stet in a venv at a plainer path")
        value = value.replace("%", "%%")
    else:
        value = value.replace("%", "%%").replace("$", "$$")
    if not any(c in value for c in " \t\"'\\;"):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _fill(template: str, values: dict[str, str], *, in_line: str) -> str:
    """Replace the ``@NAME@`` placeholders on the lines containing ``in_line`` (not in comments)."""
    out = []
    for line in template.splitlines(keepends=True):
        if in_line in line:
            for key, value in values.items():
                line = line.replace(f"@{key}@", value)
        out.append(line)
    return "".join(out)


def render_systemd_unit(python: str, home: Path) -> str:
    _check_path_text("Python", python)
    _check_path_text("home", str(home))
    values = {"PYTHON": systemd_arg(python, executable=True), "HOME": systemd_arg(str(home))}
    return _fill(SYSTEMD_TEMPLATE, values, in_line="ExecStart=")


def render_launchd_plist(python: str, home: Path) -> str:
    _check_path_text("Python", python)
    _check_path_text("home", str(home))
    from xml.sax.saxutils import escape as xml_escape  # it imports urllib.request: not at start

    return _fill(LAUNCHD_TEMPLATE, {"PYTHON": xml_escape(python), "HOME": xml_escape(str(home))},
                 in_line="<string>")


# -- where and what ----------------------------------------------------------------------------


def default_manager() -> str:
    return "launchd" if sys.platform == "darwin" else "systemd"


def service_dir(manager: str) -> Path:
    """Where the unit or plist goes; ``STET_SERVICE_DIR`` replaces it (tests, packagers)."""
    override = os.environ.get("STET_SERVICE_DIR")
    if override:
        return Path(override).expanduser()
    if manager == "launchd":
        return Path.home() / "Library" / "LaunchAgents"
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config"
    return base / "systemd" / "user"


@dataclass(frozen=True, slots=True)
class ServiceFile:
    manager: str
    path: Path
    content: str

    @property
    def installed(self) -> bool:
        return self.path.exists()

    def current(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise StetError(f"cannot read {self.path}: {exc}") from None

    def ours(self, text: str) -> bool:
        return "-m stet.daemon" in text or "<string>stet.daemon</string>" in text


def service_file(manager: str, layout: HomeLayout, python: str | None = None) -> ServiceFile:
    python = python or sys.executable
    if not python or not os.path.isabs(python):
        raise StetError("cannot tell which Python runs Stet (sys.executable is empty): "
                        "run `stet service install` with the Python that has Stet installed")
    home = layout.root
    if manager == "launchd":
        return ServiceFile(manager, service_dir(manager) / PLIST_NAME, render_launchd_plist(python, home))
    return ServiceFile(manager, service_dir(manager) / UNIT_NAME, render_systemd_unit(python, home))


def _write(target: ServiceFile) -> bool:
    """Write the file if its content differs; True if it changed. Refuses a foreign file."""
    old = target.current()
    if old == target.content:
        return False
    if old is not None and not target.ours(old):
        raise StetError(f"{target.path} exists and is not Stet's: move it away, then run this again")
    target.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.path.with_name(f".{target.path.name}.tmp")
    tmp.write_text(target.content, encoding="utf-8")
    os.replace(tmp, target.path)
    return True


# -- running the service managers -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    def why(self) -> str:
        text = (self.err or self.out).strip().splitlines()
        return text[0].strip() if text else f"exit status {self.code}"


def _run(argv: list[str]) -> Ran:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Ran(124, "", f"{' '.join(argv[:3])} did not answer within 60 s")
    except OSError as exc:
        return Ran(127, "", f"{argv[0]}: {exc.strerror or exc}")
    return Ran(proc.returncode, proc.stdout, proc.stderr)


class NoServiceManager(StetError):
    """The file is written but no service manager can run it here."""


def _systemctl() -> str | None:
    import shutil

    return shutil.which("systemctl")


def _user_systemd(systemctl: str | None) -> tuple[bool, str]:
    """Whether ``systemctl --user`` reaches a user manager (and why not)."""
    if systemctl is None:
        return False, "systemctl is not installed"
    ran = _run([systemctl, "--user", "show", "--property=Version"])  # a query: changes nothing
    if ran.ok:
        return True, ""
    return False, f"systemctl --user: {ran.why()}"


def _linger() -> str | None:
    """``yes``/``no`` for the current user, or None when loginctl cannot tell."""
    import getpass
    import shutil

    loginctl = shutil.which("loginctl")
    if loginctl is None:
        return None
    ran = _run([loginctl, "show-user", getpass.getuser(), "--property=Linger", "--value"])
    value = ran.out.strip()
    return value if ran.ok and value in ("yes", "no") else None


def _systemd_main_pid(systemctl: str) -> int | None:
    ran = _run([systemctl, "--user", "show", UNIT_NAME, "--property=MainPID", "--value"])
    try:
        pid = int(ran.out.strip()) if ran.ok else 0
    except ValueError:
        pid = 0
    return pid or None


def _foreign_daemon_note(layout: HomeLayout, service_pid: int | None) -> str | None:
    info = read_daemon_info(layout)
    if info is None or info.pid == service_pid:
        return None
    return (f"A daemon not started by the service runs for this home (pid {info.pid}); the service "
            "takes over within 5 s of `stet stop`.")


def install_systemd(target: ServiceFile, layout: HomeLayout) -> list[str]:
    changed = _write(target)
    lines = [f"{'Wrote' if changed else 'Unchanged:'} {target.path}"]
    systemctl = _systemctl()
    ok, why = _user_systemd(systemctl)
    if not ok:
        raise NoServiceManager(
            f"{target.path} is written but not running: there is no user systemd here ({why}); "
            "run the daemon with `stet start` instead, or, where systemd runs, "
            "`systemctl --user enable --now stet` and `loginctl enable-linger $USER`"
        )
    assert systemctl is not None
    service_pid = _systemd_main_pid(systemctl)
    foreign = _foreign_daemon_note(layout, service_pid)
    for verb in ("daemon-reload", "enable", "restart" if changed else "start"):
        argv = [systemctl, "--user", verb] + ([] if verb == "daemon-reload" else [UNIT_NAME])
        ran = _run(argv)
        if not ran.ok:
            raise StetError(f"`{' '.join(['systemctl', *argv[1:]])}` failed: {ran.why()} "
                            f"(see `journalctl --user -u stet`)")
    lines.append(f"Enabled and {'(re)started' if changed else 'started'} the user service {UNIT_NAME} "
                 f"for the home {layout.root}.")
    if foreign:
        lines.append(foreign)
    if _linger() == "no":
        lines.append("It runs while you are logged in; to keep it running after logout and start it at "
                     "boot, run `loginctl enable-linger $USER`.")
    return lines


def uninstall_systemd(target: ServiceFile) -> list[str]:
    old = target.current()
    if old is not None and not target.ours(old):
        raise StetError(f"{target.path} is not Stet's unit: left as it is")
    systemctl = _systemctl()
    ok, _why = _user_systemd(systemctl)
    lines = []
    if ok:
        assert systemctl is not None
        enabled = _run([systemctl, "--user", "is-enabled", UNIT_NAME]).out.strip()
        active = _run([systemctl, "--user", "is-active", UNIT_NAME]).out.strip()
        if enabled in ("enabled", "enabled-runtime", "linked", "linked-runtime") or active == "active":
            ran = _run([systemctl, "--user", "disable", "--now", UNIT_NAME])
            if not ran.ok and old is not None:
                raise StetError(f"`systemctl --user disable --now {UNIT_NAME}` failed: {ran.why()}")
            lines.append(f"Stopped and disabled the user service {UNIT_NAME}.")
    if old is not None:
        target.path.unlink(missing_ok=True)
        lines.append(f"Removed {target.path}.")
        if ok:
            assert systemctl is not None
            _run([systemctl, "--user", "daemon-reload"])
            _run([systemctl, "--user", "reset-failed", UNIT_NAME])
    if not lines:
        lines.append(f"Stet's service is not installed (no {target.path}): nothing to do.")
    return lines


def _launchctl() -> str | None:
    import shutil

    return shutil.which("launchctl")


def _launchd_target() -> tuple[str, str]:
    domain = f"gui/{os.getuid()}"
    return domain, f"{domain}/{LAUNCHD_LABEL}"


def _launchd_state(launchctl: str, service: str) -> tuple[bool, int | None]:
    """Whether the agent is loaded, and its pid when it runs."""
    ran = _run([launchctl, "print", service])
    pid = None
    for line in ran.out.splitlines():
        key, _, value = line.strip().partition(" = ")
        if key == "pid" and value.isdigit():
            pid = int(value)
    return ran.ok, pid


def install_launchd(target: ServiceFile, layout: HomeLayout) -> list[str]:
    layout.ensure()  # launchd opens <home>/logs/daemon.out itself, and does not make folders
    changed = _write(target)
    lines = [f"{'Wrote' if changed else 'Unchanged:'} {target.path}"]
    launchctl = _launchctl()
    domain, service = _launchd_target()
    if launchctl is None:
        raise NoServiceManager(
            f"{target.path} is written but not loaded: launchctl is not here (not macOS?); "
            f"run the daemon with `stet start` instead, or on a Mac "
            f"`launchctl bootstrap {domain} {target.path}`"
        )
    loaded, service_pid = _launchd_state(launchctl, service)
    foreign = _foreign_daemon_note(layout, service_pid)
    if loaded and changed:
        ran = _run([launchctl, "bootout", service])
        if not ran.ok:
            raise StetError(f"`launchctl bootout {service}` failed: {ran.why()}")
        loaded = False
    _run([launchctl, "enable", service])  # a disabled label cannot be bootstrapped
    if loaded:
        ran = _run([launchctl, "kickstart", service])
        verb = "started"
    else:
        ran = _run([launchctl, "bootstrap", domain, str(target.path)])
        verb = "loaded"
    if not ran.ok:
        raise StetError(f"launchctl could not start {LAUNCHD_LABEL}: {ran.why()} (over ssh there is no "
                        "gui domain: run `stet start` instead)")
    lines.append(f"Enabled and {verb} the launchd agent {LAUNCHD_LABEL} for the home {layout.root}; "
                 "it starts at every login.")
    if foreign:
        lines.append(foreign)
    return lines


def uninstall_launchd(target: ServiceFile) -> list[str]:
    old = target.current()
    if old is not None and not target.ours(old):
        raise StetError(f"{target.path} is not Stet's agent: left as it is")
    lines = []
    launchctl = _launchctl()
    _domain, service = _launchd_target()
    if launchctl is not None and _run([launchctl, "print", service]).ok:
        ran = _run([launchctl, "bootout", service])
        if not ran.ok:
            raise StetError(f"`launchctl bootout {service}` failed: {ran.why()}")
        lines.append(f"Stopped and unloaded the launchd agent {LAUNCHD_LABEL}.")
    if old is not None:
        target.path.unlink(missing_ok=True)
        lines.append(f"Removed {target.path}.")
    if not lines:
        lines.append(f"Stet's service is not installed (no {target.path}): nothing to do.")
    return lines


def service_status(target: ServiceFile, layout: HomeLayout) -> dict[str, Any]:
    current = target.current()
    data: dict[str, Any] = {
        "manager": target.manager, "file": str(target.path), "installed": current is not None,
        "upToDate": current == target.content, "enabled": None, "active": None, "pid": None,
        "linger": None, "reason": None,
    }
    if target.manager == "systemd":
        systemctl = _systemctl()
        ok, why = _user_systemd(systemctl)
        if ok:
            assert systemctl is not None
            data["enabled"] = _run([systemctl, "--user", "is-enabled", UNIT_NAME]).out.strip() == "enabled"
            data["active"] = _run([systemctl, "--user", "is-active", UNIT_NAME]).out.strip() == "active"
            data["pid"] = _systemd_main_pid(systemctl)
        else:
            data["reason"] = f"no user systemd here ({why})"
        data["linger"] = {"yes": True, "no": False}.get(_linger() or "")
    else:
        launchctl = _launchctl()
        if launchctl is None:
            data["reason"] = "launchctl is not here (not macOS?)"
        else:
            _domain, service = _launchd_target()
            loaded, data["pid"] = _launchd_state(launchctl, service)
            data["enabled"] = loaded
            data["active"] = data["pid"] is not None
    info = read_daemon_info(layout)
    data["daemon"] = None if info is None else {
        "pid": info.pid, "apiUrl": info.api_url, "byService": data["pid"] == info.pid,
    }
    return data


# -- the commands ---------------------------------------------------------------------------------


_manager_option = click.option(
    "--manager", type=click.Choice(MANAGERS), default=None,
    help="systemd (Linux) or launchd (macOS); default: this platform's.",
)


def _target(obj: Ctx, manager: str | None) -> ServiceFile:
    return service_file(manager or default_manager(), obj.layout)


@cli.group()
def service() -> None:
    """Run the daemon as a background service (systemd user unit / launchd agent)."""


@service.command("install")
@_manager_option
@click.pass_obj
def service_install(obj: Ctx, manager: str | None) -> None:
    """Write the service file for this home and enable and start it (again: no change)."""
    if obj.layout.root.exists() and not obj.layout.root.is_dir():
        raise StetError(f"the home {obj.layout.root} is not a folder: pass another --home (or STET_HOME)")
    obj.config()  # a bad config.toml would make the service fail at every start
    target = _target(obj, manager)
    if target.manager == "systemd":
        lines = install_systemd(target, obj.layout)
    else:
        lines = install_launchd(target, obj.layout)
    for line in lines:
        click.echo(line)


@service.command("uninstall")
@_manager_option
@click.pass_obj
def service_uninstall(obj: Ctx, manager: str | None) -> None:
    """Stop and disable the service and remove its file (again: nothing to do)."""
    target = _target(obj, manager)
    lines = uninstall_systemd(target) if target.manager == "systemd" else uninstall_launchd(target)
    for line in lines:
        click.echo(line)


def _yes_no(value: bool | None, yes: str, no: str) -> str:
    return "unknown" if value is None else (yes if value else no)


@service.command("status")
@_manager_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_obj
def service_status_command(obj: Ctx, manager: str | None, as_json: bool) -> None:
    """Whether the service is installed, up to date, enabled and running."""
    target = _target(obj, manager)
    data = service_status(target, obj.layout)
    if as_json:
        emit_json(data)
        return
    kind = "systemd user unit" if target.manager == "systemd" else "launchd agent"
    if not data["installed"]:
        click.echo(f"Service: not installed ({kind} {target.path}); `stet service install` installs it.")
    else:
        fresh = "up to date" if data["upToDate"] else "out of date: `stet service install` rewrites it"
        click.echo(f"Service: {kind} {target.path} ({fresh})")
    if data["reason"]:
        click.echo(f"State: unknown, {data['reason']}")
    elif data["installed"] or data["enabled"]:
        pid = f" (pid {data['pid']})" if data["pid"] else ""
        click.echo(f"State: {_yes_no(data['enabled'], 'enabled', 'disabled')}, "
                   f"{_yes_no(data['active'], 'running', 'not running')}{pid}")
    if target.manager == "systemd" and data["linger"] is not None:
        click.echo("Linger: " + ("on (runs without a login session and at boot)" if data["linger"] else
                                 "off (stops at logout): `loginctl enable-linger $USER`"))
    daemon = data["daemon"]
    if daemon is None:
        click.echo("Daemon: not running")
    else:
        by = "the service" if daemon["byService"] else "not the service (`stet start` or `stet daemon`)"
        click.echo(f"Daemon: running (pid {daemon['pid']}, {daemon['apiUrl']}), started by {by}")
