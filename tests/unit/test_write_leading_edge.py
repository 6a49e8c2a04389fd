"""The writer's delay counts from the end of its last flush, not from each change (P1
during P9): the first change after a quiet spell is written at once; a change soon after
a flush still waits for the rest of ``write_delay_s``, so a burst gets spaced flushes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from stet.daemon.folder.bridge import FileBridge
from stet.daemon.notes.service import NotesService
from stet.sync.store import VaultStore

DEADLINE_S = 10.0
LONG_DELAY_S = 60.0  # far beyond the deadline: a write that waited for it fails the test


async def _until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)  # poll interval, not synchronisation: the check decides


def _rig(tmp_path: Path) -> tuple[Path, VaultStore, NotesService, FileBridge]:
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store, device_id="B")
    bridge = FileBridge(root, service, extensions=(".md",), max_bytes=1 << 20,
                        write_delay_s=LONG_DELAY_S)
    return root, store, service, bridge


async def test_the_first_change_after_a_quiet_spell_is_written_at_once(tmp_path: Path) -> None:
    root, store, service, bridge = _rig(tmp_path)
    try:
        service.write_text("n.md", "from an agent\n", "agent:bot")
        await _until(lambda: (root / "n.md").exists() and (root / "n.md").read_text() == "from an agent\n",
                     "the note on disk well before the write delay")
    finally:
        await bridge.writer.wait_flushed()
        bridge.close()
        store.close()


async def test_a_change_right_after_a_flush_waits_for_the_rest_of_the_delay(tmp_path: Path) -> None:
    root, store, service, bridge = _rig(tmp_path)
    writer = bridge.writer
    try:
        service.write_text("n.md", "one\n", "agent:bot")
        await _until(lambda: (root / "n.md").exists() and not writer._flusher.running
                     and writer._write_timer is None, "the first flush over")
        service.write_text("m.md", "two\n", "agent:bot")
        timer = writer._write_timer
        assert timer is not None
        left = timer.when() - asyncio.get_running_loop().time()
        assert left > LONG_DELAY_S - 5, f"the next flush in {left:.1f} s, not after the delay"
        assert not (root / "m.md").exists()
    finally:
        if writer._write_timer is not None:
            writer._write_timer.cancel()
            writer._write_timer = None
        bridge.close()
        store.close()
