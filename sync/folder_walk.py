"""One stat-only walk of a vault folder, for the note scan (``folder_scan``) and the
attachment scan (``attachment_scan``): every entry that no ignore rule covers, without
following a symbolic link or opening a file. Folders are descended into; every other
entry (regular files, links, sockets...) is handed to ``on_entry`` with its ``lstat``.

Blocking file I/O: callers run it in a worker thread.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from .ignore_rules import IgnoreRules


def walk_folder(root: Path, rules: IgnoreRules, on_entry: Callable[[str, os.stat_result], None], *,
                on_unreadable: Callable[[str, OSError], None] | None = None, sort: bool = False,
                descend: Callable[[str], bool] | None = None) -> None:
    """``on_entry(rel_path, lstat)`` for each non-folder entry; ``on_unreadable(rel_dir,
    error)`` for a folder that cannot be listed (``""`` is the root); ``sort``: by name
    within each folder (a deterministic order); ``descend(rel_dir)``: whether to look into
    a folder (default: every one)."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            found = os.scandir(root / rel_dir if rel_dir else root)
            entries = sorted(found, key=lambda e: e.name) if sort else list(found)
        except OSError as exc:
            if on_unreadable is not None:
                on_unreadable(rel_dir, exc)
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # vanished while scanning
            is_dir = stat.S_ISDIR(st.st_mode)
            if rules.is_ignored(rel, is_dir=is_dir):
                continue
            if is_dir:
                if descend is None or descend(rel):
                    stack.append(rel)
                continue
            on_entry(rel, st)
