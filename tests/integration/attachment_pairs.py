"""A vault of attachments on a daemon, and a peer joined to it (SPEC §3.14): the setup the
attachment edge tests share (real daemons over TLS on loopback, `stet init`/`invite`/`join`)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import wait_recorded
from tests.integration.peer_support import invite, join, start_daemon, wait_linked


def write_files(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


def recorded_daemon(home: Path, vault: Path, files: dict[str, bytes], factory: list[DaemonProcess], *,
                    config: str | None = None) -> DaemonProcess:
    """``vault`` with ``files`` (bytes) in it, `stet init`ed on ``home`` (``config.toml``
    first, if given), a daemon started and every file recorded in its attachment index."""
    write_files(vault, files)
    run_stet(home, "init", str(vault), "--name", "notes")
    if config is not None:
        (home / "config.toml").write_text(config, encoding="utf-8")
    d = start_daemon(home, factory)
    for path in files:
        if not path.endswith(".md"):
            wait_recorded(d.home, path)
    return d


def paired(tmp_path: Path, files: dict[str, bytes], factory: list[DaemonProcess], *,
           config: str | None = None) -> tuple[DaemonProcess, DaemonProcess, Path, Path]:
    """A (``tmp_path/ha``, folder ``a``) with ``files``; B (``hb``, folder ``b``) joined,
    linked, and holding every file: ``(a, b, va, vb)``."""
    va, vb = tmp_path / "a", tmp_path / "b"
    a = recorded_daemon(tmp_path / "ha", va, files, factory, config=config)
    b = start_daemon(tmp_path / "hb", factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_until(lambda: all((vb / p).is_file() and (vb / p).read_bytes() == d for p, d in files.items()),
               timeout=60, what="every file on B")
    return a, b, va, vb
