"""The ``stet`` command line.

Talks to a running daemon over HTTP only (``daemon_link``); the few commands that
must work without a daemon (``init``; later ``join`` and ``token``) work on the home
directly through ``stet.sync``. ``stet daemon`` and ``stet start`` run the daemon as
its own process (``python -m stet.daemon``). Errors are one sentence and exit 1.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from stet.sync.errors import StetError
from stet.sync.home_layout import HomeLayout

if TYPE_CHECKING:
    from stet.sync.config import Config

from .daemon_link import (
    DaemonClient,
    DaemonNotRunning,
    home_path_from,
    pid_alive,
    read_daemon_info,
    read_starting,
)


class Ctx:
    def __init__(self, home: Path) -> None:
        self.layout = HomeLayout(home)

    def config(self) -> Config:
        import tomllib

        from stet.sync.config import Config, parse_config

        path = self.layout.config_file
        if not path.exists():
            return Config()
        try:
            return parse_config(tomllib.loads(path.read_text(encoding="utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise StetError(f"{path} is not valid TOML: {exc}") from None

    def client(self) -> DaemonClient:
        return DaemonClient.for_home(self.layout)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


_OPTIONS = {"verbose": False}


def _verbose() -> bool:
    return _OPTIONS["verbose"] or bool(os.environ.get("STET_DEBUG"))


# Where each command lives (``_register_command_modules`` imports them all). A command runs
# after importing only its own module: most of the CLI's start time was importing every
# module (P10). A name missing here still works (all modules are imported to find it), and
# tests/integration/test_cli_start.py checks the table against the registered commands.
COMMAND_MODULES: dict[str, str] = {
    **dict.fromkeys(("token", "append", "write", "edit", "section", "tick", "links", "frontmatter",
                     "context", "log", "search"),
                    "cli_agents"),
    "conflicts": "cli_conflicts",  # the group is in cli_agents; show/apply register here
    "doctor": "cli_doctor",
    **dict.fromkeys(("mcp", "mcp-config"), "cli_mcp"),
    **dict.fromkeys(("invite", "join", "devices"), "cli_peers"),
    "service": "cli_service",
    "ui": "cli_ui",
    "vaults": "cli_vaults",
    **dict.fromkeys(("versions", "show", "diff", "restore", "held", "release", "revert"), "cli_versions"),
}


class LazyGroup(click.Group):
    """The ``stet`` group: imports a command's module when that command is asked for."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            module = COMMAND_MODULES.get(cmd_name)
            if module is not None:
                importlib.import_module(f"{__package__}.{module}")
            if cmd_name not in self.commands:
                _register_command_modules()
        return self.commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        _register_command_modules()  # `stet --help` lists every command with its summary
        return sorted(self.commands)


@click.group(cls=LazyGroup)
@click.option("--home", type=click.Path(path_type=Path), default=None,
              help="State directory (default: $STET_HOME, else the platform data dir).")
@click.option("--verbose", "-v", is_flag=True,
              help="Debug logs, and a traceback with any error (like STET_DEBUG=1).")
@click.pass_context
def cli(ctx: click.Context, home: Path | None, verbose: bool) -> None:
    """Stet: local-first sync for folders of markdown notes."""
    if verbose:
        import logging

        _OPTIONS["verbose"] = True
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                            format="%(levelname)s %(name)s: %(message)s")
    ctx.obj = Ctx(home_path_from(home))


# -- init -------------------------------------------------------------------------


@cli.command()
@click.argument("path", type=click.Path(path_type=Path, file_okay=False))
@click.option("--name", default=None, help="Vault name (default: the folder's name).")
@click.option("--create", is_flag=True, help="Create PATH if it does not exist.")
@click.option("--device-name", default=None,
              help="This device's name, as the other devices show its changes (default: the host's name).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def init(obj: Ctx, path: Path, name: str | None, create: bool, device_name: str | None,
         as_json: bool) -> None:
    """Register PATH as a vault and import its notes (PATH must exist, unless --create)."""
    from stet.sync.device_name import check_device_name, write_device_name
    from stet.sync.vault_import import import_new_vault

    from .folder_claims import check_unclaimed, record_claim
    from .progress_display import progress_bar

    path = path.expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise StetError(f"{path} is not a folder")
    if not path.exists() and not create:
        raise StetError(f"{path} does not exist: check the path, or pass --create to make a new, empty vault")
    from stet.sync.home import HomeRegistry

    config = obj.config()
    vault_name = name or path.name or "vault"
    if device_name is not None:
        device_name = check_device_name(device_name)  # refused before anything is made
    check_unclaimed(path, obj.layout.root)
    obj.layout.ensure()
    if device_name is not None:
        write_device_name(obj.layout.root, device_name)
    registry = HomeRegistry(obj.layout)
    try:
        registry.check_new(vault_name, path)
        path.mkdir(parents=True, exist_ok=True)
        entry = registry.add(vault_name, path)
    finally:
        registry.close()
    record_claim(path, obj.layout.root)
    started = time.monotonic()
    with progress_bar("importing", enabled=not as_json) as update:

        def on_progress(done: int, total: int) -> None:
            update(done, total, "importing")

        report = import_new_vault(
            obj.layout.vault_db(entry.id), path, synchronous=config.store.synchronous,
            extensions=config.notes.extensions, max_bytes=config.notes.max_bytes, progress=on_progress,
            blobs_dir=obj.layout.root / "blobs", attachment_max_bytes=config.attachments.max_bytes,
        )
    elapsed = time.monotonic() - started
    reloaded = False
    if read_daemon_info(obj.layout) is not None:
        try:
            obj.client().reload()
            reloaded = True
        except StetError:
            reloaded = False
    result = {
        "vault": entry.name, "id": entry.id, "path": str(path), "imported": report.imported,
        "bytes": report.bytes, "skipped": report.skipped, "otherFiles": report.other_files,
        "otherBytes": report.other_bytes,
        "attachments": report.attachments, "attachmentBytes": report.attachment_bytes,
        "seconds": round(elapsed, 3), "daemonReloaded": reloaded,
    }
    if as_json:
        emit_json(result)
        return
    click.echo(f"Vault {entry.name!r} at {path}: {report.imported} notes imported "
               f"({report.bytes / 1e6:.1f} MB) and {report.attachments} attachments "
               f"({report.attachment_bytes / 1e6:.1f} MB) in {elapsed:.1f}s.")
    for p, reason in sorted(report.skipped.items()):
        click.echo(f"  skipped {p}: {reason}")
    if reloaded:
        click.echo("The running daemon has taken the vault up.")
    else:
        click.echo("Run `stet start` (background) or `stet daemon` (foreground) to keep it in sync.")


# -- daemon lifecycle ----------------------------------------------------------------


def _daemon_argv(obj: Ctx, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "stet.daemon", "--home", str(obj.layout.root), *extra]


def _forwarded(api_port: int | None, peer_port: int | None, peers: tuple[str, ...],
               no_mdns: bool, verbose: bool) -> list[str]:
    args: list[str] = []
    if api_port is not None:
        args += ["--api-port", str(api_port)]
    if peer_port is not None:
        args += ["--peer-port", str(peer_port)]
    for p in peers:
        args += ["--peer", p]
    if no_mdns:
        args.append("--no-mdns")
    if verbose:
        args.append("--verbose")
    return args


_daemon_options = [
    click.option("--api-port", type=click.IntRange(0, 65535), default=None,
                 help="HTTP API port (0: any free port)."),
    click.option("--peer-port", type=click.IntRange(0, 65535), default=None,
                 help="Peer port (0: any free port)."),
    click.option("--peer", "peers", multiple=True, metavar="HOST:PORT", help="A peer to dial (repeatable)."),
    click.option("--no-mdns", is_flag=True, help="Do not announce or discover peers by mDNS."),
    click.option("--verbose", "-v", is_flag=True, help="Debug logging."),
]


def daemon_options(f: Any) -> Any:
    for option in reversed(_daemon_options):
        f = option(f)
    return f


@cli.command()
@daemon_options
@click.pass_obj
def daemon(obj: Ctx, api_port: int | None, peer_port: int | None, peers: tuple[str, ...],
           no_mdns: bool, verbose: bool) -> None:
    """Run the daemon in the foreground (what services run)."""
    if read_daemon_info(obj.layout) is not None:
        raise StetError(f"a daemon is already running for {obj.layout.root}")
    obj.config()  # a bad config.toml fails here, in one sentence naming the key
    argv = _daemon_argv(obj, _forwarded(api_port, peer_port, peers, no_mdns, verbose))
    os.execv(sys.executable, argv)


@cli.command()
@daemon_options
@click.option("--wait", "wait_s", type=float, default=30.0, help="Seconds to wait for readiness.")
@click.pass_obj
def start(obj: Ctx, api_port: int | None, peer_port: int | None, peers: tuple[str, ...],
          no_mdns: bool, verbose: bool, wait_s: float) -> None:
    """Start the daemon in the background."""
    from .progress_display import progress_bar

    info = read_daemon_info(obj.layout)
    if info is not None:
        click.echo(f"The daemon is already running (pid {info.pid}, {info.api_url}).")
        return
    # Check config.toml here: the child reports a bad one only on its stderr, before its
    # log exists, and `stet start` would just say "exited at start".
    obj.config()
    obj.layout.ensure()
    argv = _daemon_argv(obj, _forwarded(api_port, peer_port, peers, no_mdns, verbose))
    out = open(obj.layout.log_dir / "daemon.out", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    out.close()
    deadline = time.monotonic() + wait_s
    seen: list[dict[str, object]] = []
    with progress_bar("starting") as update:
        while time.monotonic() < deadline:
            info = read_daemon_info(obj.layout)
            if info is not None and info.pid == proc.pid:
                click.echo(f"Started the daemon (pid {info.pid}, {info.api_url}).")
                return
            if proc.poll() is not None:
                raise StetError(
                    f"the daemon exited at start (code {proc.returncode}); "
                    f"see {obj.layout.log_dir / 'daemon.log'}"
                )
            activity = read_starting(obj.layout)
            if activity and activity != seen:
                # A long rescan (many files changed while it was stopped): it is working,
                # so the wait goes on as long as it makes progress.
                seen = activity
                deadline = time.monotonic() + wait_s
                a = activity[0]
                update(int(a.get("done") or 0), int(a.get("total") or 0) or None,
                       f"{a.get('kind', 'rescan')} of {a.get('vault', '?')}")
            time.sleep(0.05)  # poll
    raise StetError(f"the daemon did not become ready within {wait_s:.0f}s; see {obj.layout.log_dir}")


@cli.command()
@click.option("--wait", "wait_s", type=float, default=30.0, help="Seconds to wait for it to exit.")
@click.pass_obj
def stop(obj: Ctx, wait_s: float) -> None:
    """Stop the background daemon (it flushes pending writes first)."""
    info = read_daemon_info(obj.layout)
    if info is None:
        click.echo("The daemon is not running.")
        return
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not pid_alive(info.pid):
            click.echo(f"Stopped the daemon (pid {info.pid}).")
            return
        time.sleep(0.05)  # poll
    raise StetError(f"the daemon (pid {info.pid}) did not stop within {wait_s:.0f}s")


# -- status ---------------------------------------------------------------------------


def _offline_status(obj: Ctx) -> dict[str, Any]:
    vaults = []
    if obj.layout.home_db.exists():
        from stet.sync.home import HomeRegistry

        registry = HomeRegistry(obj.layout)
        try:
            entries = registry.vaults()
        finally:
            registry.close()
        from .store_reader import DatabaseError, vault_summary  # read-only: no daemon runs

        for entry in entries:
            try:
                notes, skipped = vault_summary(obj.layout.vault_db(entry.id))
            except DatabaseError:
                notes, skipped = 0, {}  # no store yet, or one `stet doctor` reports on
            vaults.append({
                "id": entry.id, "name": entry.name, "path": str(entry.path),
                "notes": notes,
                "skipped": [{"path": p, "reason": r} for p, r in skipped.items()],
                "pendingWrites": 0,
            })
    return {"running": False, "home": str(obj.layout.root), "vaults": vaults}


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_obj
def status(obj: Ctx, as_json: bool) -> None:
    """Vaults, notes, pending writes, held changes, skipped files, peers and agent tokens."""
    from .status_view import gather, render

    data: dict[str, Any]
    client: DaemonClient | None
    try:
        client = obj.client()
        data = client.status()
        data["running"] = True
    except DaemonNotRunning:
        client = None
        data = _offline_status(obj)
    if as_json:
        emit_json(data)
        return
    for line in render(data, gather(obj.layout, data, client)):
        click.echo(line)


# -- notes through the API ----------------------------------------------------------------


@cli.command()
@click.argument("path")
@click.option("--vault", default=None, help="Vault name (optional with one vault).")
@click.option("--json", "as_json", is_flag=True, help="Print {path, content, revision}.")
@click.pass_obj
def read(obj: Ctx, path: str, vault: str | None, as_json: bool) -> None:
    """Print a note exactly as stored (through the API, as an agent would read it)."""
    client = obj.client()
    note = client.read_note(client.resolve_vault(vault), path)
    if as_json:
        emit_json(note)
        return
    sys.stdout.buffer.write(note["content"].encode("utf-8"))
    sys.stdout.flush()


@cli.command(name="ls")
@click.argument("prefix", default="")
@click.option("--vault", default=None, help="Vault name (optional with one vault).")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.pass_obj
def list_notes(obj: Ctx, prefix: str, vault: str | None, as_json: bool) -> None:
    """List notes (path, size, revision)."""
    client = obj.client()
    name = client.resolve_vault(vault)
    notes: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = client.list_notes(name, prefix=prefix, cursor=cursor)
        notes += page["notes"]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    if as_json:
        emit_json(notes)
        return
    for n in notes:
        click.echo(f"{n['revision'][:12]}  {n['size']:>9}  {n['path']}")


def _register_command_modules() -> None:
    """Commands live in modules by concern; importing one registers it on ``cli``."""
    from . import (  # noqa: F401
        cli_agents,
        cli_conflicts,
        cli_doctor,
        cli_mcp,
        cli_peers,
        cli_service,
        cli_ui,
        cli_vaults,
        cli_versions,
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _usage_line(exc: click.UsageError) -> str:
    """Click's usage error as one line: what is wrong and where the help is."""
    where = exc.ctx.command_path if exc.ctx is not None else "stet"
    message = _one_line(exc.format_message()).rstrip(".")
    if message[:2].istitle():
        message = message[0].lower() + message[1:]
    return f"{where}: {message} (see `{where} --help`)"


def _traceback_if_verbose() -> None:
    if _verbose():
        import traceback

        traceback.print_exc()


def main() -> None:
    try:
        cli.main(prog_name="stet", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:  # `stet`, `stet token`: the help is the answer
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        click.echo(_usage_line(exc), err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"stet: {_one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    except StetError as exc:
        _traceback_if_verbose()
        click.echo(f"stet: {exc.message}", err=True)
        sys.exit(1)
    except OSError as exc:
        _traceback_if_verbose()
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"stet: {where}{exc.strerror or exc}", err=True)
        sys.exit(1)
    except Exception as exc:
        if _verbose():
            raise
        click.echo(f"stet: unexpected error ({type(exc).__name__}: {exc}); "
                   "run it again with `stet --verbose ...` for details and please report it", err=True)
        sys.exit(1)
