"""Folders Stet emptied are removed (issue 14 edges; the rule in docs/attachments.md).

When Stet removes or moves away a file because of a peer's (or an agent's) change -- a note
(``DiskWrites``) or an attachment (the attachment outflow) -- and that leaves the file's
folder empty, the folder goes too, and so on upwards while each folder above is left empty
by that. Never:

- the vault root;
- a folder Stet did not just empty (one you made empty yourself, or made and left empty,
  stays: only the folders above a file Stet removed are looked at);
- a folder that still holds anything, ignored files included (``os.rmdir`` refuses a
  folder that is not empty, so a file created meanwhile keeps it);
- ``.git`` or any folder inside one, a ``.stet*`` folder, or a folder the ignore rules cover.

Blocking (a few ``rmdir``/``fsync``): call it where the removal itself runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from stet.daemon.base.atomic_files import fsync_dir

logger = logging.getLogger(__name__)


def folders_above(path: str) -> list[str]:
    """The folders that hold ``path``, deepest first, the root left out; none at all if the
    path lies in ``.git`` or a ``.stet*`` folder. ``"a/b/c.png"`` → ``["a/b", "a"]``."""
    parts = path.split("/")[:-1]
    if any(p == ".git" or p.startswith(".stet") for p in parts):
        return []
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


def remove_emptied_folders(root: Path, path: str,
                           is_ignored: Callable[[str], bool] | None = None) -> list[str]:
    """Stet just removed (or moved away) the file at ``path``: remove the folders that left
    empty, deepest first. Returns the folders removed."""
    removed: list[str] = []
    for folder in folders_above(path):
        if is_ignored is not None and is_ignored(folder + "/"):
            break
        full = root / folder
        try:
            if full.is_symlink():
                break
            os.rmdir(full)
        except OSError:
            break  # not empty (or gone, or not ours to remove): the folders above are not empty
        removed.append(folder)
    if removed:
        parent = (root / removed[-1]).parent
        with contextlib.suppress(OSError):
            fsync_dir(parent)
        logger.info("removed %d folder(s) left empty by a removal: %s", len(removed), ", ".join(removed))
    return removed
