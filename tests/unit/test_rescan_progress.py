"""A rescan reports its progress (SPEC §7: the log, and ``starting.json`` for `stet start`),
and a change made while it runs is not undone by it."""

from __future__ import annotations

import json
from pathlib import Path

from stet.client.progress_display import describe_activity, sync_progress
from stet.client.status_view import Extras, render
from stet.daemon.base.activity import Activity
from stet.daemon.folder.bridge import RECONCILE_STEP, FileBridge
from stet.daemon.notes.service import NotesService
from stet.sync.store import VaultStore

EXT = (".md",)
N = RECONCILE_STEP * 2 + 50


def vault_with_notes(tmp_path: Path) -> tuple[Path, VaultStore, NotesService, FileBridge]:
    root = tmp_path / "vault"
    root.mkdir()
    for i in range(N):
        (root / f"n{i:04}.md").write_text(f"note {i}\n")
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=EXT, max_bytes=1 << 20)
    assert bridge.reconcile().created == N
    return root, store, service, bridge


def test_a_rescan_reports_progress_and_keeps_what_happened_meanwhile(tmp_path: Path) -> None:
    root, store, service, bridge = vault_with_notes(tmp_path)
    for i in range(N):  # edited while the daemon was away
        with (root / f"n{i:04}.md").open("a") as f:
            f.write("edited offline\n")
    (root / "n0001.md").unlink()  # deleted while away
    seen: list[tuple[int, int]] = []
    last = f"n{N - 1:04}.md"

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        if done == RECONCILE_STEP:
            # Something happens to a note not compared yet (a listener acting mid-rescan).
            service.delete(last, "peer:B", device="B")
            (root / last).unlink(missing_ok=True)

    report = bridge.reconcile(progress)
    assert seen[0] == (0, N - 1)  # the files there are (one was deleted while away)
    assert seen[-1] == (N - 1, N - 1)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert report.changed == N - 2  # every edit but the deleted two
    assert report.deleted == 1  # n0001, deleted while away
    assert store.note_at("n0001.md") is None
    assert store.note_at(last) is None  # the peer's delete stands; not brought back
    assert not (root / last).exists()
    assert service.read("n0002.md")[1] == "note 2\nedited offline\n"
    bridge.close()
    store.close()


def test_the_sync_rescan_is_the_same_walk(tmp_path: Path) -> None:
    root, store, service, bridge = vault_with_notes(tmp_path)
    (root / "n0003.md").write_text("changed\n")
    seen: list[tuple[int, int]] = []
    report = bridge.reconcile(lambda d, t: seen.append((d, t)))
    assert report.changed == 1
    assert seen[-1] == (N, N)
    assert service.read("n0003.md")[1] == "changed\n"
    store.close()


def test_a_starting_daemon_tells_its_progress_until_ready(tmp_path: Path) -> None:
    clock = [0.0]
    starting = tmp_path / "starting.json"
    activity = Activity(starting, clock=lambda: clock[0])
    report = activity.progress("notes", "rescan")
    report(0, 1000)
    assert json.loads(starting.read_text())["activity"][0]["done"] == 0
    clock[0] += 0.01
    report(200, 1000)  # too soon to write again
    assert json.loads(starting.read_text())["activity"][0]["done"] == 0
    clock[0] += 1.0
    report(400, 1000)
    assert json.loads(starting.read_text())["activity"][0]["done"] == 400
    assert describe_activity(activity.snapshot()) == ["rescan of notes: 400 of 1,000 files"]
    activity.finish("notes", "rescan")
    activity.mark_ready()
    assert not starting.exists()
    assert activity.snapshot() == []


def test_status_shows_a_vault_filling_up_and_work_going_on() -> None:
    vault = {"id": "x", "name": "notes", "path": "/v", "notes": 4016, "pendingWrites": 16,
             "indexedNotes": 10000, "skipped": [], "otherFiles": 0}
    assert sync_progress(vault) == (4000, 10000)
    assert sync_progress(dict(vault, notes=10000, pendingWrites=0)) is None
    assert sync_progress(dict(vault, notes=10000, pendingWrites=3)) is None  # everyday work
    data = {"running": True, "pid": 1, "apiUrl": "http://127.0.0.1:1", "home": "/h", "vaults": [vault]}
    lines = render(data, Extras(held={"notes": 0}, devices_known=True))
    assert "Working: syncing notes: 4,000 of 10,000 notes on disk." in lines
