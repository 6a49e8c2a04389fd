#!/usr/bin/env python3
"""The folder side's CPU without a loop or sockets (issue 11 P8), in CPU seconds of this
process (all its threads), three runs:

    python bench/folder_side_cpu.py [--loop-share]

- intake: 2,000 new files (bench/generate_vault.py) taken in by the bridge's drain (read,
  compared with the store, applied), as after an unzip;
- flush: the same 2,000 notes, made by a peer, written out by the writer (planned,
  recorded as begun, temp files written and fsynced, renamed, recorded in sync).

``--loop-share``: also the flush's CPU on the calling thread alone (the daemon's loop),
per note, with ``make_durable`` (a worker thread's job in the daemon) left out.

A machine shared with other work changes wall times far more than CPU seconds.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_vault import generate_vault  # noqa: E402

from stet.daemon.folder.bridge import FileBridge  # noqa: E402
from stet.daemon.folder.writer import disk_writes  # noqa: E402
from stet.daemon.notes.service import NotesService  # noqa: E402
from stet.sync.store import VaultStore  # noqa: E402


def once(seed: int) -> tuple[float, float, int, float]:
    tmp = Path(tempfile.mkdtemp())
    root = tmp / "v"
    root.mkdir()
    generate_vault(root, notes=2000, seed=seed)
    store = VaultStore(tmp / "v.db", auto_checkpoint=False)
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=(".md",), max_bytes=1 << 20)
    for p in sorted(p.relative_to(root).as_posix() for p in root.rglob("*.md")):
        bridge._enqueue(p)
    t = time.process_time()
    while bridge._ready:
        bridge.drain(0.02)
    intake = time.process_time() - t
    root2 = tmp / "w"
    root2.mkdir()
    store2 = VaultStore(tmp / "w.db", auto_checkpoint=False)
    service2 = NotesService("w", store2)
    bridge2 = FileBridge(root2, service2, extensions=(".md",), max_bytes=1 << 20)
    with service2.write("peer:x"):
        for row in store.live_notes():
            service2.write_text(row.path, service.read(row.path)[1], "peer:x")
    durable = [0.0]  # the calling thread's CPU inside make_durable (a worker's, in the daemon)
    make_durable = disk_writes.make_durable

    def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.thread_time()
        try:
            return make_durable(*args, **kwargs)
        finally:
            durable[0] += time.thread_time() - start

    disk_writes.make_durable = timed  # type: ignore[assignment]
    t, thread_t = time.process_time(), time.thread_time()
    try:
        n = bridge2.flush_writes()
    finally:
        disk_writes.make_durable = make_durable  # type: ignore[assignment]
    flush = time.process_time() - t
    loop_share = time.thread_time() - thread_t - durable[0]
    bridge.close()
    bridge2.close()
    return intake, flush, n, loop_share


def main() -> int:
    res = [once(s) for s in (3, 4, 5)]
    print("intake CPU s per 2,000:", " ".join(f"{r[0]:.2f}" for r in res),
          " flush CPU s per 2,000:", " ".join(f"{r[1]:.2f}" for r in res), "written", res[0][2])
    if "--loop-share" in sys.argv[1:]:
        print("flush on the calling thread, make_durable left out, us a note:",
              " ".join(f"{r[3] / r[2] * 1e6:.0f}" for r in res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
