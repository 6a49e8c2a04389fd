"""``stet doctor``: check what a working Stet needs, and say how to fix what is wrong.

One line per check (``✓`` ok, ``!`` a warning that does not stop sync, ``✗`` a failure,
``-`` not applicable; ASCII where the terminal cannot show those), each failure or warning
with the sentence that fixes it; ``--json`` prints the same as data. Exit 0 when nothing
failed (warnings included), 1 otherwise.

Checks: config.toml, the home, the daemon (reachable, same version; its tasks not failing:
``health``), the API and peer ports
(free, or held by our daemon), the keyring backend (and whether the 0600 file fallback holds
the owner token / device key), the clock (year, file-system time, changes dated in the
future), the inotify watch limit against the vaults' folder count (Linux), each vault folder
(readable and writable), and each store (``PRAGMA integrity_check`` on a read-only
connection). Nothing here writes to a store or a note; the only files made are a temp file
in the home and one in each vault folder (``.stet-doctor-*.tmp``, ignored by the daemon),
removed at once.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from stet.sync.errors import StetError
from stet.sync.home import HomeRegistry, VaultEntry
from stet.sync.home_layout import HomeLayout

from .cli import Ctx, cli, emit_json
from .daemon_link import DaemonClient, DaemonInfo, read_daemon_info, read_owner_token
from .store_reader import DatabaseError, integrity_problems, latest_change

if TYPE_CHECKING:  # imported where used: `stet --help` imports this module
    from stet.sync.config import Config

INOTIFY_DIR = Path("/proc/sys/fs/inotify")
MIN_YEAR = 2024
FS_CLOCK_TOLERANCE_S = 5.0
FUTURE_TOLERANCE_S = 300.0

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
SYMBOLS = {OK: "✓", WARN: "!", FAIL: "✗", SKIP: "-"}
ASCII_SYMBOLS = {OK: "[ok]  ", WARN: "[warn]", FAIL: "[FAIL]", SKIP: "[--]  "}


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


# -- the checks ------------------------------------------------------------------------------


def check_config(layout: HomeLayout) -> tuple[Check, Config]:
    import tomllib

    from stet.sync.config import Config, parse_config

    path = layout.config_file
    if not path.exists():
        return Check("config", OK, f"no {path.name}: every setting has its default"), Config()
    try:
        config = parse_config(tomllib.loads(path.read_text(encoding="utf-8")))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return Check("config", FAIL, f"{path} is not valid TOML ({exc})",
                     "correct the line named (keys and defaults: docs/cli.md, SPEC §8)"), Config()
    except StetError as exc:
        return Check("config", FAIL, f"{path}: {exc.message}",
                     "correct or remove that key (every key has a default)"), Config()
    except OSError as exc:
        return Check("config", FAIL, f"cannot read {path} ({exc.strerror})",
                     f"give your user read access to {path}"), Config()
    return Check("config", OK, f"{path} is valid"), config


def check_home(layout: HomeLayout) -> Check:
    root = layout.root
    if not root.exists():
        return Check("home", WARN, f"{root} does not exist yet",
                     "run `stet init PATH` to make it and register a folder")
    if not root.is_dir():
        return Check("home", FAIL, f"{root} is not a folder", "pass another --home (or STET_HOME)")
    try:
        import tempfile

        fd, name = tempfile.mkstemp(prefix=".stet-doctor-", dir=root)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        return Check("home", FAIL, f"cannot write in {root} ({exc.strerror})",
                     f"give your user write access to {root} (`chmod u+rwx {root}`)")
    mode = stat.S_IMODE(root.stat().st_mode)
    if mode & 0o077:
        return Check("home", WARN, f"{root} is open to other users (mode {mode:o}); it holds the stores",
                     f"`chmod 700 {root}`")
    return Check("home", OK, f"{root} is writable and private")


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stet")
    except PackageNotFoundError:
        return ""


def check_daemon(layout: HomeLayout) -> tuple[Check, DaemonInfo | None]:
    info = read_daemon_info(layout)
    if info is None:
        stale = " (daemon.json was left by a daemon that died)" if layout.daemon_json.exists() else ""
        return Check("daemon", FAIL, f"not running for {layout.root}{stale}",
                     "`stet start`, or `stet service install` to run it as a background service"), None
    token = read_owner_token(layout)
    if token is None:
        return Check("daemon", FAIL, f"running (pid {info.pid}) but no owner token is readable",
                     f"restart it (`stet stop && stet start`): it writes the token to the keyring or "
                     f"{layout.owner_token_file}"), info
    try:
        status = DaemonClient(info.api_url, token, timeout=10).status()
    except StetError as exc:
        log = layout.log_dir / "daemon.log"
        return Check("daemon", FAIL, f"pid {info.pid} does not answer at {info.api_url} ({exc.message})",
                     f"restart it (`stet stop && stet start`); its log is {log}"), info
    theirs, ours = str(status.get("version", "")), _installed_version()
    detail = f"running (pid {info.pid}, {info.api_url}, version {theirs or '?'})"
    if ours and theirs and ours != theirs:
        return Check("daemon", WARN, f"{detail}, but this CLI is version {ours}",
                     "restart the daemon to run the installed version (`stet stop && stet start`, or "
                     "`systemctl --user restart stet`)"), info
    return Check("daemon", OK, detail), info


def check_health(layout: HomeLayout, info: DaemonInfo | None) -> Check:
    """The daemon's own word on its tasks (``health`` of ``/v1/status``): a task that keeps
    failing (an attachment pass raising at every try) fails this check, with its last error."""
    from .status_view import health_problems

    token = read_owner_token(layout) if info is not None else None
    if info is None or token is None:
        return Check("health", SKIP, "the daemon is not running")
    status = DaemonClient(info.api_url, token, timeout=10).status()
    problems = health_problems(status)
    if problems:
        log = layout.log_dir / "daemon.log"
        return Check("health", FAIL, "; ".join(problems),
                     f"its log ({log}) has the traceback; it is retried by itself, and `stet stop && "
                     "stet start` starts it afresh")
    return Check("health", OK, "every task of the daemon works")


def _port_from_url(url: str) -> int | None:
    try:
        return int(url.rsplit(":", 1)[1].split("/", 1)[0])
    except (IndexError, ValueError):
        return None


def probe_port(host: str, port: int) -> OSError | None:
    """Try to listen where the daemon would (asyncio sets SO_REUSEADDR on Unix too)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        return exc
    try:
        if os.name != "nt":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1)
    except OSError as exc:
        return exc
    finally:
        sock.close()
    return None


def check_port(label: str, section: str, host: str, port: int, daemon_port: int | None,
               info: DaemonInfo | None, config_file: Path) -> Check:
    name = f"{label} port"
    if info is not None and daemon_port:
        return Check(name, OK, f"{daemon_port} is our daemon's (pid {info.pid})")
    if port == 0:
        return Check(name, OK, f"[{section}] port = 0: the daemon takes any free port at start")
    error = probe_port(host, port)
    if error is None:
        return Check(name, OK, f"{host}:{port} is free")
    if error.errno == errno.EADDRINUSE:
        return Check(name, FAIL, f"{host}:{port} is taken by another program",
                     f"stop it (`lsof -iTCP:{port} -sTCP:LISTEN` names it), or set [{section}] port in "
                     f"{config_file} to a free port (0 = any)")
    if error.errno == errno.EACCES:
        return Check(name, FAIL, f"not allowed to listen on {host}:{port}",
                     f"set [{section}] port in {config_file} above 1023")
    if error.errno == errno.EADDRNOTAVAIL:
        return Check(name, FAIL, f"{host} is not an address of this machine",
                     f"set [{section}] host in {config_file} to one of its addresses (e.g. 127.0.0.1)")
    return Check(name, FAIL, f"cannot listen on {host}:{port} ({error.strerror or error})",
                 f"set [{section}] port in {config_file} to a free port (0 = any)")


def _backend_usable(backend: Any) -> bool:
    try:
        if type(backend).__module__ in ("keyring.backends.fail", "keyring.backends.null"):
            return False
        if hasattr(backend, "backends") and not backend.backends:  # an empty chainer
            return False
        return float(backend.priority) > 0
    except Exception:
        return False


def check_keyring(layout: HomeLayout) -> Check:
    import keyring

    from .daemon_link import OWNER_TOKEN_USER

    try:
        backend = keyring.get_keyring()
        name = str(getattr(backend, "name", "") or type(backend).__name__)
    except Exception as exc:
        return Check("keyring", FAIL, f"the keyring library fails to load a backend ({exc})",
                     "set PYTHON_KEYRING_BACKEND=keyring.backends.fail.Keyring to keep secrets in "
                     "0600 files in the home instead")
    usable = _backend_usable(backend)
    files = [p for p in (layout.owner_token_file, layout.root / "device.key") if p.exists()]
    loose = [p for p in files if stat.S_IMODE(p.stat().st_mode) & 0o077]
    if loose:
        return Check("keyring", FAIL, f"{', '.join(str(p) for p in loose)} can be read by other users",
                     f"`chmod 600 {' '.join(str(p) for p in loose)}`")
    in_keyring = False
    if usable:
        try:
            in_keyring = bool(keyring.get_password(layout.keyring_service, OWNER_TOKEN_USER))
        except Exception as exc:
            return Check("keyring", FAIL, f"the keyring ({name}) fails: {exc}",
                         "unlock the keyring (log in to the desktop session), or set "
                         "PYTHON_KEYRING_BACKEND=keyring.backends.fail.Keyring for 0600 files in the home")
    names = " and ".join(p.name for p in files)
    if not usable:
        if files:
            return Check("keyring", WARN, f"no keyring backend ({name}): the file fallback is in use "
                         f"({names} in {layout.root}, mode 0600)",
                         "fine for a single-user machine: keep the home private (mode 700); for the OS "
                         "keychain, run Stet in a desktop session with a Secret Service (GNOME Keyring, "
                         "KWallet)")
        return Check("keyring", WARN, f"no keyring backend ({name}): the daemon will keep its owner token "
                     f"and device key in 0600 files in {layout.root}",
                     "fine for a single-user machine; for the OS keychain, run Stet in a desktop session "
                     "with a Secret Service (GNOME Keyring, KWallet)")
    if files:
        where = "the owner token in the keyring, " if in_keyring else ""
        return Check("keyring", OK, f"{name}; {where}{names} in 0600 files (made when no keyring worked; "
                     "they stay in use)")
    if in_keyring:
        return Check("keyring", OK, f"{name} holds the owner token and device key")
    return Check("keyring", OK, f"{name}; no secrets yet (the daemon makes them at its first start)")


def _latest_change(db_path: Path) -> float | None:
    return latest_change(db_path)


def check_clock(layout: HomeLayout, stores: list[tuple[str, Path]],
                now: Callable[[], float] = time.time) -> Check:
    t = now()
    when = datetime.fromtimestamp(t, UTC)
    set_clock = ("set the date and time (`sudo timedatectl set-ntp true`; on a Mac: System Settings > "
                 "Date & Time)")
    if when.year < MIN_YEAR:
        return Check("clock", FAIL, f"the system clock says {when:%Y-%m-%d %H:%M} UTC", set_clock)
    import tempfile

    where = layout.root if layout.root.is_dir() else Path(tempfile.gettempdir())
    try:
        fd, name = tempfile.mkstemp(prefix=".stet-doctor-", dir=where)
        try:
            os.write(fd, b"x")
            mtime = os.fstat(fd).st_mtime
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError:
        mtime = t
    skew = mtime - now()
    if abs(skew) > FS_CLOCK_TOLERANCE_S:
        return Check("clock", FAIL, f"files written in {where} are dated {skew:+.0f} s from the system clock "
                     "(a network file system with its own clock?)",
                     "synchronise both machines' clocks (NTP), or keep the home on a local disk")
    for label, path in stores:
        latest = _latest_change(path)
        if latest is not None and latest - t > FUTURE_TOLERANCE_S:
            ahead = latest - t
            return Check("clock", WARN, f"vault {label} has a change dated {ahead / 60:.0f} min in the "
                         "future: the clock was set back (or was wrong when it was made)",
                         f"{set_clock}; nothing is lost (changes are ordered by sequence, not time), but "
                         "idle versions and held-change timeouts use the clock")
    return Check("clock", OK, f"{when:%Y-%m-%d %H:%M} UTC; files get the same time")


def count_dirs(root: Path) -> int:
    """Folders under ``root`` (itself included), not following symlinks: one inotify watch each."""
    count, stack = 0, [str(root)]
    while stack:
        top = stack.pop()
        count += 1
        try:
            with os.scandir(top) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                    except OSError:
                        continue
        except OSError:
            continue
    return count


def _suggested_limit(needed: int) -> int:
    n = 524288
    while n < needed * 4:
        n *= 2
    return n


def check_inotify(vaults: list[VaultEntry], proc_dir: Path = INOTIFY_DIR) -> Check:
    if not sys.platform.startswith("linux"):
        return Check("inotify", SKIP, "not Linux: no per-user watch limit")
    try:
        watches = int((proc_dir / "max_user_watches").read_text().strip())
        instances = int((proc_dir / "max_user_instances").read_text().strip())
    except (OSError, ValueError) as exc:
        return Check("inotify", WARN, f"cannot read the inotify limits in {proc_dir} ({exc})",
                     "check `sysctl fs.inotify.max_user_watches` by hand")
    folders = [v.path for v in vaults if v.path.is_dir()]
    if not folders:
        return Check("inotify", SKIP, f"no vault folder to watch (limit {watches} watches per user)")
    needed = sum(count_dirs(p) for p in folders)
    persist = "/etc/sysctl.d/60-stet.conf"
    if len(folders) > instances:
        return Check("inotify", FAIL, f"{len(folders)} vaults need {len(folders)} inotify instances; the "
                     f"limit is {instances}",
                     f"`sudo sysctl fs.inotify.max_user_instances={max(512, len(folders) * 4)}` (add it to "
                     f"{persist} to keep it)")
    n = _suggested_limit(needed)
    fix = (f"`sudo sysctl fs.inotify.max_user_watches={n}`, and to keep it after a reboot "
           f"`echo fs.inotify.max_user_watches={n} | sudo tee {persist}`")
    if needed > watches:
        return Check("inotify", FAIL, f"the vaults have {needed} folders but inotify allows {watches} "
                     "watches per user: edits in the others are only seen by the hourly rescan", fix)
    if needed * 2 > watches:
        return Check("inotify", WARN, f"the vaults have {needed} folders; the limit is {watches} watches per "
                     "user, shared with editors and other sync tools", fix)
    return Check("inotify", OK, f"{needed} folder{'s' if needed != 1 else ''} to watch; limit {watches} "
                 "watches per user")


def check_vault_folder(entry: VaultEntry) -> Check:
    name, path = f"vault {entry.name}", entry.path
    perms = f"give your user read and write access (`chmod u+rwX {path}`, or fix its owner)"
    if not path.exists():
        return Check(name, FAIL, f"the folder {path} is missing",
                     "restore or mount it, then restart the daemon (`stet stop && stet start`)")
    if not path.is_dir():
        return Check(name, FAIL, f"{path} is not a folder",
                     "move the file away and put the vault folder back, then restart the daemon")
    try:
        os.listdir(path)
    except OSError as exc:
        return Check(name, FAIL, f"cannot read {path} ({exc.strerror})", perms)
    import secrets

    probe = path / f".stet-doctor-{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        how = "remount it read-write" if exc.errno == errno.EROFS else perms
        return Check(name, FAIL, f"cannot write in {path} ({exc.strerror}): edits from agents and peers "
                     "cannot reach the files", how)
    return Check(name, OK, f"{path} is readable and writable")


def check_store(label: str, path: Path) -> Check:
    name = f"store {label}"
    recover = (f"stop the daemon, copy {path} somewhere safe, then `sqlite3 {path} .recover | "
               f"sqlite3 {path}.recovered` and move the recovered file into place (the note files "
               "themselves are not affected)")
    try:
        problems = integrity_problems(path)
    except DatabaseError as exc:
        return Check(name, FAIL, f"cannot open or check {path} read-only ({exc})", recover)
    if problems:
        return Check(name, FAIL, f"{path} fails its integrity check ({len(problems)} problem(s); first: "
                     f"{problems[0]})", recover)
    return Check(name, OK, f"{path.name} passes PRAGMA integrity_check")


def _guarded(name: str, fn: Callable[[], Check]) -> Check:
    """A check that crashes is a failed check with its reason, never a traceback."""
    try:
        return fn()
    except Exception as exc:
        return Check(name, FAIL, f"could not be checked ({type(exc).__name__}: {exc})",
                     "run `stet --verbose doctor` and report the error")


def run_checks(layout: HomeLayout) -> list[Check]:
    checks: list[Check] = []
    config_check, config = check_config(layout)
    checks.append(config_check)
    checks.append(_guarded("home", lambda: check_home(layout)))
    daemon_check: Check
    info: DaemonInfo | None
    try:
        daemon_check, info = check_daemon(layout)
    except Exception as exc:
        daemon_check, info = Check("daemon", FAIL, f"could not be checked ({exc})", "`stet start`"), None
    checks.append(daemon_check)
    if daemon_check.status != FAIL:
        checks.append(_guarded("health", lambda: check_health(layout, info)))
    raw = info.raw if info is not None else {}
    api_port = _port_from_url(info.api_url) if info is not None else None
    peer_port = raw.get("peer_port") if isinstance(raw.get("peer_port"), int) else None
    cf = layout.config_file
    checks.append(_guarded("API port", lambda: check_port(
        "API", "api", config.api.host, config.api.port, api_port, info, cf)))
    checks.append(_guarded("peer port", lambda: check_port(
        "peer", "peer", config.peer.host, config.peer.port, peer_port, info, cf)))
    checks.append(_guarded("keyring", lambda: check_keyring(layout)))

    vaults: list[VaultEntry] = []
    if layout.home_db.exists():
        try:
            registry = HomeRegistry(layout)
            try:
                vaults = registry.vaults()
            finally:
                registry.close()
        except (StetError, DatabaseError) as exc:
            message = exc.message if isinstance(exc, StetError) else str(exc)
            checks.append(Check("vaults", FAIL, f"cannot read {layout.home_db} ({message})",
                                "see the store check below; `stet --verbose doctor` shows more"))
    names = {v.id: v.name for v in vaults}
    stores: list[tuple[str, Path]] = []
    if layout.vaults_dir.is_dir():
        for db in sorted(layout.vaults_dir.glob("*.db")):
            stores.append((names.get(db.stem, f"{db.stem} (no vault registered)"), db))
    checks.append(_guarded("clock", lambda: check_clock(layout, stores)))
    checks.append(_guarded("inotify", lambda: check_inotify(vaults)))
    if not vaults:
        checks.append(Check("vaults", SKIP, "no vault registered yet", "`stet init PATH`"))
    for entry in vaults:
        checks.append(_guarded(f"vault {entry.name}", functools.partial(check_vault_folder, entry)))
    if layout.home_db.exists():
        checks.append(_guarded("store home", lambda: check_store("home", layout.home_db)))
    for label, db in stores:
        checks.append(_guarded(f"store {label}", functools.partial(check_store, label, db)))
    return checks


# -- the command -------------------------------------------------------------------------------


def _symbols() -> dict[str, str]:
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "".join(SYMBOLS.values()).encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return ASCII_SYMBOLS
    return SYMBOLS


def format_checks(checks: list[Check], symbols: dict[str, str]) -> list[str]:
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        line = f"{symbols[c.status]} {c.name:<{width}}  {c.detail}"
        if c.fix and c.status in (FAIL, WARN):
            line += f". Fix: {c.fix}"
        lines.append(line)
    return lines


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_obj
def doctor(obj: Ctx, as_json: bool) -> None:
    """Check the setup (daemon, ports, keyring, clock, inotify, folders, stores) and say how to fix it."""
    checks = run_checks(obj.layout)
    failed = [c for c in checks if c.status == FAIL]
    if as_json:
        emit_json({"ok": not failed, "home": str(obj.layout.root), "checks": [c.to_json() for c in checks]})
    else:
        for line in format_checks(checks, _symbols()):
            click.echo(line)
        warned = sum(c.status == WARN for c in checks)
        if failed:
            click.echo(f"{len(failed)} of {len(checks)} checks failed.")
        else:
            click.echo("All checks passed" + (f" ({warned} warning{'s' if warned > 1 else ''})." if warned
                                               else "."))
    if failed:
        sys.exit(1)
