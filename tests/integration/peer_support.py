"""Helpers for tests with several real daemons paired over loopback TLS."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until


def peer_port(d: DaemonProcess) -> int:
    return int(json.loads(d.layout.daemon_json.read_text())["peer_port"])


def device_id(d: DaemonProcess) -> str:
    return str(json.loads(d.layout.daemon_json.read_text())["device_id"])


def invite(d: DaemonProcess, vault: str = "notes") -> str:
    out = run_stet(d.home, "invite", vault, "--address", f"127.0.0.1:{peer_port(d)}", "--json")
    return str(json.loads(out.stdout)["invite"])


def join(d: DaemonProcess, invite_text: str, path: Path) -> dict[str, object]:
    out = run_stet(d.home, "join", invite_text, str(path), "--json")
    result: dict[str, object] = json.loads(out.stdout)
    assert result.get("joined"), result
    return result


def linked(d: DaemonProcess, other: DaemonProcess) -> bool:
    peers = d.client.status()["peers"]
    return any(p["device"] == device_id(other) for p in peers)


def wait_linked(a: DaemonProcess, b: DaemonProcess, timeout: float = 15) -> None:
    wait_until(lambda: linked(a, b) and linked(b, a), timeout=timeout, what="the two daemons to link")


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".stet")}


def wait_same_tree(*roots: Path, timeout: float = 10) -> dict[str, bytes]:
    def same() -> dict[str, bytes] | None:
        trees = [tree(r) for r in roots]
        return trees[0] if all(t == trees[0] for t in trees[1:]) else None

    result: dict[str, bytes] = wait_until(same, timeout=timeout, what="byte-identical vaults")
    return result


PEER_TEST_CONFIG = "[peer]\ndelete_delay_seconds = 0.5\n"


def stored_texts(home: Path) -> dict[str, str]:
    """Every live note's text as its stored updates rebuild it (read-only; the daemon may run)."""
    from stet.sync.note_doc import NoteDoc
    from tests.integration.bridge_support import open_store

    with open_store(home) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        notes = db.execute("SELECT id, path FROM notes WHERE deleted = 0").fetchall()
        return {path: NoteDoc.from_updates([bytes(r[0]) for r in db.execute(
            "SELECT data FROM updates WHERE note_id = ? ORDER BY seq", (note_id,))]).text
            for note_id, path in notes}


def start_daemon(home: Path, factory: list[DaemonProcess]) -> DaemonProcess:
    """A daemon whose deletes reach peers after 0.5 s (the default waits the brake window)."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.toml"
    if not config.exists():
        config.write_text(PEER_TEST_CONFIG)
    d = DaemonProcess(home)
    factory.append(d)
    return d.start()


def linked_pair(tmp_path: Path, files: dict[str, bytes], factory: list[DaemonProcess], *,
                config: str | None = None) -> tuple[DaemonProcess, DaemonProcess, Path, Path]:
    """A (home ``tmp_path/ha``, folder ``a`` holding ``files``, ``config`` in its config.toml
    if given) and B (``hb``, folder ``b``) joined, linked, byte-identical: ``(a, b, va, vb)``."""
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    for path, data in files.items():
        (va / path).parent.mkdir(parents=True, exist_ok=True)
        (va / path).write_bytes(data)
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    if config is not None:
        (tmp_path / "ha" / "config.toml").write_text(config)
    a = start_daemon(tmp_path / "ha", factory)
    b = start_daemon(tmp_path / "hb", factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_same_tree(va, vb)
    return a, b, va, vb

