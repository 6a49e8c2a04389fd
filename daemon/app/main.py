"""The daemon's entry point: the one place (with the CLI) that reads configuration,
environment and flags, sets up logging and signals, and runs the ``Daemon``.

Run as ``python -m stet.daemon [--home H] [--api-port N] [--peer-port N]
[--peer HOST:PORT]... [--no-mdns] [--verbose]``; ``stet daemon`` execs exactly this.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.handlers
import os
import queue
import signal
import sys
import tomllib
from pathlib import Path

from stet.daemon.app.runtime import Daemon
from stet.daemon.base import loop_holds, memory_probe
from stet.daemon.base.memory import limit_arenas
from stet.sync.config import Config, parse_config, replace_section
from stet.sync.errors import StetError
from stet.sync.home import create_private
from stet.sync.home_layout import HomeLayout

logger = logging.getLogger("stet.daemon")


def default_home() -> Path:
    env = os.environ.get("STET_HOME")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("stet", appauthor=False))


def load_config(layout: HomeLayout) -> Config:
    path = layout.config_file
    if not path.exists():
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise StetError(f"{path} is not valid TOML: {exc}") from None
    return parse_config(data)


class PrivateRotatingLog(logging.handlers.RotatingFileHandler):
    """The daemon's log, created 0600 like everything in the home (after a rollover too)."""

    def _open(self):  # type: ignore[no-untyped-def]
        create_private(Path(self.baseFilename))
        return super()._open()


def setup_logging(layout: HomeLayout, *, verbose: bool) -> logging.handlers.QueueListener:
    """The daemon's log: ``<home>/logs/daemon.log`` (rotated) and stderr, written by a thread
    of their own. A record is queued where it is made and the listener's thread writes it:
    the event loop never waits for the log's disk (a write() behind heavy writeback blocked
    B's loop for milliseconds per landed attachment during P9's 200 x 5 MB, bench/history/rounds.md).
    The caller stops the listener at exit (``stop`` writes what is still queued)."""
    layout.ensure()
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    file_handler = PrivateRotatingLog(
        layout.log_dir / "daemon.log", maxBytes=5 * 1024 * 1024, backupCount=3, encoding="utf-8"
    )
    file_handler.setFormatter(fmt)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(fmt)
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    root.addHandler(logging.handlers.QueueHandler(records))
    listener = logging.handlers.QueueListener(records, file_handler, stderr, respect_handler_level=True)
    listener.start()
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("watchdog").setLevel(logging.WARNING)
    return listener


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="stet daemon", description="Run the Stet daemon in the foreground.")
    p.add_argument("--home", type=Path, default=None)
    p.add_argument("--api-port", type=int, default=None)
    p.add_argument("--peer-port", type=int, default=None)
    p.add_argument("--peer", action="append", default=[], metavar="HOST:PORT")
    p.add_argument("--no-mdns", action="store_true")
    p.add_argument("--verbose", "-v", action="store_true")
    return p.parse_args(argv)


def build_config(layout: HomeLayout, args: argparse.Namespace) -> Config:
    config = load_config(layout)
    if args.api_port is not None:
        config = replace_section(config, "api", port=args.api_port)
    if args.peer_port is not None:
        config = replace_section(config, "peer", port=args.peer_port)
    if args.peer:
        config = replace_section(config, "peer", addresses=tuple(config.peer.addresses) + tuple(args.peer))
    if args.no_mdns:
        config = replace_section(config, "peer", mdns=False)
    return config


async def _run(daemon: Daemon) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, daemon.stop)
    holds = loop_holds.from_environment()  # STET_LOOP_HOLDS=DIR: the loop's long steps (bench)
    if holds is not None:
        holds.install()
    probe = memory_probe.from_environment()  # STET_MEMORY_PROBE=DIR: where the memory is (bench)
    if probe is not None:
        probe.extras.append(lambda: memory_probe.daemon_counts(daemon))
        probe.install()
    try:
        await daemon.run()
    finally:
        if holds is not None:
            holds.stop()
        if probe is not None:
            probe.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    layout = HomeLayout((args.home or default_home()).expanduser().resolve())
    try:
        config = build_config(layout, args)
    except StetError as exc:
        print(f"stet daemon: {exc.message}", file=sys.stderr)
        return 2
    listener = setup_logging(layout, verbose=args.verbose)
    limit_arenas()
    try:
        asyncio.run(_run(Daemon(layout, config)))
    except StetError as exc:
        logger.error("%s", exc.message)
        return 1
    except OSError as exc:
        logger.error("cannot start: %s", exc)
        return 1
    finally:
        listener.stop()  # every queued line written before the process ends
    return 0
