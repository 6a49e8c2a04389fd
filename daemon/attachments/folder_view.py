"""What the folder's attachments are, as a pass sees them (SPEC §3.14): a stat-only walk in
a thread (``sync/attachment_scan``; files over ``attachments.max_bytes`` skipped and counted).

A pass woken only by blobs landing (and the watcher's echo of our own writes) does not walk
the folder: the last walk's files, with what this replica wrote since, are what the folder
holds unless an event named a path we did not write (then, and at start, every periodic
pass, any other wake, a folder's event, a retry: a walk). While 200 blobs landed, each pass
walked the folder again (P9, issue 14).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from stet.sync.attachment_plan import OnDisk
from stet.sync.attachment_scan import on_disk, scan_attachments
from stet.sync.ignore_rules import IgnoreRules

logger = logging.getLogger(__name__)


class FolderView:
    """One vault folder's attachments: the last walk, and this replica's writes since."""

    def __init__(self, root: Path, extensions: tuple[str, ...], max_bytes: int) -> None:
        self.root = root
        self.extensions = extensions
        self.max_bytes = max_bytes
        self._walk = True
        self._walked: dict[str, OnDisk] | None = None  # the last walk's files, and our writes since
        self._walked_rules: IgnoreRules | None = None
        self._ours: dict[str, OnDisk | None] = {}  # path -> what we left there since that walk
        self._dirty: set[str] = set()  # paths events named since the last pass
        self.too_large: dict[str, int] = {}  # path -> size: skipped, over attachments.max_bytes

    def walk_next(self) -> None:
        """The next pass walks."""
        self._walk = True

    def looked_at(self, paths: Iterable[str | None]) -> None:
        """Events named these paths: the next pass looks at them."""
        self._dirty.update(p for p in paths if p)

    def forget(self) -> None:
        """What the folder holds is not known (a step failed, a file was read or written
        outside the outflow): the next pass walks."""
        self._walked = None

    async def folder(self, rules: IgnoreRules, walk: bool) -> dict[str, OnDisk]:
        """The folder's attachments now: a walk, or (``walk`` False, nothing but our own
        writes named by events since the last one) that walk's files with our writes."""
        dirty, self._dirty = self._dirty, set()
        if (not walk and not self._walk and self._walked is not None
                and _same_rules(rules, self._walked_rules)
                and await asyncio.to_thread(self._only_ours, dirty)):
            return dict(self._walked)
        self._walk = False
        scan = await asyncio.to_thread(scan_attachments, self.root, rules, self.extensions, self.max_bytes)
        if scan.too_large.keys() != self.too_large.keys():
            for path, size in sorted(scan.too_large.items()):
                if path not in self.too_large:
                    logger.warning("attachment %s skipped: %d bytes, over attachments.max_bytes (%d)",
                                   path, size, self.max_bytes)
        self.too_large = scan.too_large
        self._walked, self._walked_rules, self._ours = dict(scan.files), rules, {}
        return scan.files

    def _only_ours(self, paths: set[str]) -> bool:
        """Whether each path holds just what this replica left there since the last walk
        (a file it wrote, nothing where it removed one). In a worker thread."""
        for path in paths:
            if path not in self._ours:
                return False
            ours = self._ours[path]
            try:
                st = os.lstat(self.root / path)
            except FileNotFoundError:
                if ours is not None:
                    return False
                continue
            except OSError:
                return False
            if (ours is None or not stat.S_ISREG(st.st_mode) or st.st_size > self.max_bytes
                    or on_disk(st) != ours):
                return False
        return True

    def wrote(self, path: str, st: OnDisk | None) -> None:
        """The outflow left ``st`` at ``path`` (None: removed it)."""
        self._ours[path] = st
        if self._walked is not None:
            if st is None:
                self._walked.pop(path, None)
            else:
                self._walked[path] = st

    async def scan(self, rules: IgnoreRules) -> dict[str, OnDisk]:
        """A walk of the folder, outside the passes' bookkeeping (after a write-back)."""
        scan = await asyncio.to_thread(scan_attachments, self.root, rules, self.extensions,
                                       self.max_bytes)
        return scan.files


def _same_rules(rules: IgnoreRules, walked: IgnoreRules | None) -> bool:
    """The rules of the last walk: the same object, or the same patterns loaded again (the
    notes' side reloads them at each rescan; the new object made the next pass walk)."""
    return walked is not None and (rules is walked or rules.user_patterns == walked.user_patterns)
