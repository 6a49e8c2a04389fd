"""Refuse agent writes the folder would never keep (SPEC §6.3): a path an ignore rule
covers (``.git/``, ``.trash/``, ``.stet*``, ``.stetignore`` lines) or one under a
symlinked folder. The bridge neither writes nor reads such paths, so a write accepted
there would be dropped (and its delete sent to peers): it is refused up front with
``invalid_path`` and the reason, before anything is stored.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from stet.sync.errors import StetError
from stet.sync.ignore_rules import IgnoreRules


def symlinked_folder(root: Path, path: str) -> str | None:
    """The first folder of ``path`` (vault-relative) that is a symlink on disk, if any."""
    parts = path.split("/")[:-1]
    current = root
    for i, part in enumerate(parts):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None  # not there yet: the bridge will make real folders
        except OSError:
            return None
        if stat.S_ISLNK(mode):
            return "/".join(parts[: i + 1])
    return None


def check_writable(root: Path, rules: IgnoreRules, path: str) -> None:
    """Raise ``invalid_path`` (with the reason) unless the folder would keep ``path``."""
    if rules.is_ignored(path):
        raise StetError(f"{path} is ignored (the default ignore rules or .stetignore cover it): "
                        "the folder would never keep it", code="invalid_path", path=path)
    link = symlinked_folder(root, path)
    if link is not None:
        raise StetError(f"{path} is under {link}, a symlinked folder: Stet never follows symlinks, "
                        "so the note would never be written", code="invalid_path", path=path)
