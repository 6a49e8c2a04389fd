#!/usr/bin/env python3
"""The loop's CPU for an unzip's file events, without watchdog (issue 11 P8):

    python bench/folder_events_cpu.py [NOTES] [--profile]

Each generated note (bench/generate_vault.py) gets the three events an unzip makes of a
new file -- created, modified, closed -- handed to the bridge as the watcher's delivery
does (``FileBridge.on_fs_event``); its timers are set far off, so this measures the
events' own handling (the path's checks, the ignore rules, the scheduling), not the
intake they lead to. Prints CPU seconds of this process per event and per file.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_vault import generate_vault  # noqa: E402

from stet.daemon.folder.bridge import FileBridge  # noqa: E402
from stet.daemon.folder.watcher import FsEvent  # noqa: E402
from stet.daemon.notes.service import NotesService  # noqa: E402
from stet.sync.store import VaultStore  # noqa: E402


async def run(notes: int, profile: bool) -> None:
    tmp = Path(tempfile.mkdtemp())
    root = tmp / "v"
    root.mkdir()
    generate_vault(root, notes=notes, seed=3)
    store = VaultStore(tmp / "v.db", auto_checkpoint=False)
    bridge = FileBridge(root, NotesService("v", store, device_id="dev"), extensions=(".md",),
                        max_bytes=1 << 20)
    bridge.settle_s = bridge.unclosed_write_s = 3600.0  # the events only, no intake
    paths = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.md"))
    events = [FsEvent(kind, p) for p in paths for kind in ("created", "modified", "closed")]
    prof = cProfile.Profile() if profile else None
    started = time.process_time()
    if prof is not None:
        prof.enable()
    for event in events:
        bridge.on_fs_event(event)
    if prof is not None:
        prof.disable()
    cpu = time.process_time() - started
    print(f"{len(events)} events of {len(paths)} new files: {cpu:.3f} CPU-s, "
          f"{cpu / len(events) * 1e6:.1f} us an event, {cpu / len(paths) * 1e6:.0f} us a file")
    bridge.close()
    store.close()
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    asyncio.run(run(int(args[0]) if args else 10_000, "--profile" in sys.argv))


if __name__ == "__main__":
    main()
