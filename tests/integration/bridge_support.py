"""Helpers for the file-bridge integration tests (SPEC §3): vaults prepared before the
daemon starts, read-only looks into a vault's SQLite store, and replaying a note's
stored CRDT updates one at a time.

The store is opened read-only while the daemon runs (WAL lets a reader in beside the
writer); every connection is closed before the helper returns.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stet.client.daemon_link import ApiError
from stet.sync.note_doc import NoteDoc
from tests.harness import DaemonProcess, run_stet, wait_until

NOTE_SUFFIXES = (".md", ".markdown", ".txt")


def start_daemon(home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], *,
                 config: str | None = None) -> DaemonProcess:
    """``stet init`` the vault as it is now (with ``config.toml`` written first), start a daemon."""
    home.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (home / "config.toml").write_text(config, encoding="utf-8")
    run_stet(home, "init", str(vault_dir), "--name", "notes", "--json")
    return restart(home, daemon_factory)


def restart(home: Path, daemon_factory: list[DaemonProcess]) -> DaemonProcess:
    """A new daemon process on ``home`` (cleaned up by the ``daemon_factory`` fixture)."""
    d = DaemonProcess(home)
    daemon_factory.append(d)
    return d.start()


def vault_db(home: Path) -> Path:
    dbs = sorted((home / "vaults").glob("*.db"))
    assert len(dbs) == 1, f"expected one vault store in {home}, found {dbs}"
    return dbs[0]


@contextlib.contextmanager
def open_store(home: Path) -> Iterator[sqlite3.Connection]:
    """The vault's store, read-only (the daemon may be running)."""
    db = sqlite3.connect(f"file:{vault_db(home)}?mode=ro", uri=True, timeout=10)
    try:
        yield db
    finally:
        db.close()


@dataclass(frozen=True)
class StoredNote:
    id: str
    path: str
    deleted: bool


def stored_notes(home: Path) -> list[StoredNote]:
    with open_store(home) as db:
        rows = db.execute("SELECT id, path, deleted FROM notes ORDER BY path, deleted").fetchall()
    return [StoredNote(r[0], r[1], bool(r[2])) for r in rows]


def live_id(home: Path, path: str) -> str:
    ids = [n.id for n in stored_notes(home) if n.path == path and not n.deleted]
    assert len(ids) == 1, f"expected one live note at {path}, found {ids}"
    return ids[0]


def stored_updates(home: Path, note_id: str) -> list[bytes]:
    with open_store(home) as db:
        rows = db.execute(
            "SELECT data FROM updates WHERE note_id = ? ORDER BY seq", (note_id,)
        ).fetchall()
    return [bytes(r[0]) for r in rows]


def replayed_texts(home: Path, note_id: str) -> list[str]:
    """The note's text after each stored update, applied one at a time to a fresh doc."""
    doc = NoteDoc()
    texts = []
    for update in stored_updates(home, note_id):
        doc.apply_update(update)
        texts.append(doc.text)
    return texts


def api_notes(daemon: DaemonProcess) -> dict[str, str]:
    """Every live note the API lists, with its content."""
    client = daemon.client
    vault = client.resolve_vault(None)
    out: dict[str, str] = {}
    cursor = None
    for _page in range(1000):  # bounded: a test vault has a handful of notes
        page = client.list_notes(vault, cursor=cursor)
        for note in page["notes"]:
            out[note["path"]] = daemon.read(note["path"])["content"]
        cursor = page.get("nextCursor")
        if not cursor:
            return out
    raise AssertionError("note listing did not end")


def folder_notes(vault_dir: Path) -> dict[str, str]:
    """Every note file in the folder (no ignore rules needed in the tests that use this)."""
    return {
        p.relative_to(vault_dir).as_posix(): p.read_bytes().decode("utf-8")
        for p in sorted(vault_dir.rglob("*"))
        if p.is_file() and p.suffix in NOTE_SUFFIXES
    }


def status_json(home: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(run_stet(home, "status", "--json").stdout)
    return result


def skipped_in_status(home: Path) -> dict[str, str]:
    (vault,) = status_json(home)["vaults"]
    return {s["path"]: s["reason"] for s in vault["skipped"]}


def watch_while(daemon: DaemonProcess, path: str, allowed: set[str], final: str,
                work: Future[Any], *, timeout: float = 15.0) -> list[str | None]:
    """Poll ``path`` through the API until ``work`` is done and ``final`` is visible.

    Returns every content observed (None = not found); the caller asserts on them.
    """
    seen: list[str | None] = []

    def settled() -> bool:
        content = daemon.content(path)
        seen.append(content)
        if content not in allowed:
            raise RuntimeError(f"{path} held {content!r:.120} mid-save")
        return work.done() and content == final

    try:
        wait_until(settled, timeout=timeout, what=f"{path} to settle on the new text")
    finally:
        work.result(timeout=timeout)  # re-raise anything the writer hit
    return seen


# -- unsyncable files (SPEC §3.5, §3.13) ---------------------------------------------

MAX_BYTES_CONFIG = "[notes]\nmax_bytes = 1000\n"


def make_unsyncable(vault_dir: Path, outside: Path) -> dict[str, str]:
    """Files the bridge must skip; returns {path: expected word in the reason}."""
    outside.mkdir(exist_ok=True)
    (outside / "secret.md").write_text("outside the vault\n", encoding="utf-8")
    (outside / "dir").mkdir(exist_ok=True)
    inner = outside / "dir" / "inner.md"
    inner.write_text("inside a folder outside the vault\n", encoding="utf-8")
    (vault_dir / "bad-utf8.md").write_bytes(b"valid start, then \xff\xfe and \xc3\x28\n")
    (vault_dir / "big.md").write_bytes(b"# too large\n" + b"x" * 1500 + b"\n")
    (vault_dir / "link-file.md").symlink_to(outside / "secret.md")
    (vault_dir / "link-dir").symlink_to(outside / "dir", target_is_directory=True)
    (vault_dir / "a\\b.md").write_text("a backslash in the name\n", encoding="utf-8")
    return {
        "bad-utf8.md": "UTF-8",
        "big.md": "too large",
        "link-file.md": "symbolic link",
        "link-dir": "symbolic link",
        "a\\b.md": "backslash",
    }


def snapshot(*roots: Path) -> dict[Path, tuple[bytes | str, int]]:
    """Bytes (or link target) and mtime of everything under the roots, links not followed."""
    out: dict[Path, tuple[bytes | str, int]] = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            st = p.lstat()
            if p.is_symlink():
                out[p] = (os.readlink(p), st.st_mtime_ns)
            elif p.is_file():
                out[p] = (p.read_bytes(), st.st_mtime_ns)
    return out


def assert_skipped(daemon: DaemonProcess, home: Path, expected: dict[str, str]) -> None:
    skipped = skipped_in_status(home)  # through the real `stet status --json`
    for path, word in expected.items():
        assert path in skipped, f"{path} not reported as skipped: {skipped}"
        assert word.lower() in skipped[path].lower(), (path, skipped[path])
    notes = api_notes(daemon)
    assert notes == {"ok.md": "a note that syncs\n"}
    for path in [*expected, "link-dir/inner.md", "secret.md", "inner.md"]:
        assert absent(daemon, path), path


def absent(daemon: DaemonProcess, path: str) -> bool:
    """No note at ``path``: not found, or a name the API refuses outright."""
    try:
        return daemon.content(path) is None
    except ApiError as exc:
        return exc.code == "invalid_path"
