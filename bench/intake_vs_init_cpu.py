#!/usr/bin/env python3
"""Per-note CPU of the folder's bulk intake beside `stet init`'s import, without a loop
or sockets (issue 11 P8), in CPU seconds of this process:

    python bench/intake_vs_init_cpu.py [NOTES] [--profile]

The same generated notes (bench/generate_vault.py) are imported by ``import_folder``
(P3's path) into one store, and taken in by the bridge's drain into another, composed as
the daemon composes a vault for it (the versions keeper, the brake and the records keeper
listening in the unit; a listener after the commit). Files are read on the calling thread
here (the daemon reads them ahead in a worker). ``--profile`` prints cProfile's top.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_vault import generate_vault  # noqa: E402

from stet.daemon.folder.bridge import FileBridge  # noqa: E402
from stet.daemon.notes.event_bus import EventBus  # noqa: E402
from stet.daemon.notes.records import RecordsKeeper  # noqa: E402
from stet.daemon.notes.service import NotesService  # noqa: E402
from stet.daemon.safety.brake import Brake  # noqa: E402
from stet.daemon.safety.versions_keeper import VersionsKeeper  # noqa: E402
from stet.sync.brake import BrakePolicy  # noqa: E402
from stet.sync.config import Config  # noqa: E402
from stet.sync.store import VaultStore  # noqa: E402
from stet.sync.vault_import import import_folder  # noqa: E402
from stet.sync.versions import VersionPolicy  # noqa: E402


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    notes = int(args[0]) if args else 2000
    profile = "--profile" in sys.argv
    tmp = Path(tempfile.mkdtemp())
    root = tmp / "v"
    root.mkdir()
    generate_vault(root, notes=notes, seed=3)
    cfg = Config()
    init_store = VaultStore(tmp / "i.db", auto_checkpoint=False)
    t = time.process_time()
    import_folder(init_store, root, extensions=(".md",), max_bytes=1 << 20)
    init_cpu = time.process_time() - t
    store = VaultStore(tmp / "v.db", auto_checkpoint=False)
    service = NotesService("v", store, device_id="dev")
    events = EventBus()
    keeper = VersionsKeeper(service, events, VersionPolicy.from_config(cfg.versions))
    Brake(service, events, keeper, BrakePolicy.from_config(cfg.brake))
    records = RecordsKeeper(service, events)
    heard: list[object] = []
    service.subscribe(heard.append)
    bridge = FileBridge(root, service, extensions=(".md",), max_bytes=1 << 20)
    for p in sorted(p.relative_to(root).as_posix() for p in root.rglob("*.md")):
        bridge._enqueue(p)
    prof = cProfile.Profile() if profile else None
    t = time.process_time()
    if prof is not None:
        prof.enable()
    while bridge._ready:
        bridge.drain(0.02)
    if prof is not None:
        prof.disable()
    intake = time.process_time() - t
    taken = store.count_live()
    print(f"stet init {init_cpu:.2f} s CPU ({init_cpu / notes * 1e6:.0f} us/note); intake {intake:.2f} s CPU "
          f"({intake / notes * 1e6:.0f} us/note, {intake / init_cpu:.2f}x); {taken} notes; "
          f"{store.commits} commits")
    records.close()
    bridge.close()
    if prof is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
