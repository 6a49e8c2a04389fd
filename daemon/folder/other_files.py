"""Keeps ``stet status``'s OTHER column (files in a vault that are not notes) current between
rescans: the full rescan that counts them runs at start and then hourly, so an attachment
added or removed meanwhile used to show only after a restart (issue 13).

The bridge pokes the counter when a path that is not a note appears, moves or goes; the
counter waits a moment (a burst of such events costs one count), then counts in a thread
with the folder scan the rescan uses (read-only: the loop, notes and store are untouched).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from stet.sync.folder_scan import scan_folder

if TYPE_CHECKING:
    from stet.daemon.folder.bridge import FileBridge, ReconcileReport

logger = logging.getLogger(__name__)

COALESCE_S = 0.5  # events within this long of the first one are counted together


class OtherFilesCount:
    def __init__(self, bridge: FileBridge) -> None:
        self.bridge = bridge
        self.count: int | None = None  # None until the first event: the rescan's number holds
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def poke(self) -> None:
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._recount(), name="other-files")

    async def _recount(self) -> None:
        while True:
            self._again = False
            await asyncio.sleep(COALESCE_S)  # debounce: let the burst finish
            b = self.bridge
            try:
                scan = await asyncio.to_thread(scan_folder, b.root, b.rules, b.extensions, b.max_bytes)
                self.count = scan.other_files
            except Exception:
                logger.exception("counting the other files of %s failed", b.root)
            if not self._again:
                return

    def current(self, report: ReconcileReport | None) -> int:
        if self.count is not None:
            return self.count
        return report.other_files if report is not None else 0


def watch_other_files(bridge: FileBridge) -> OtherFilesCount:
    counter = OtherFilesCount(bridge)
    bridge.on_other_files = counter.poke
    return counter
