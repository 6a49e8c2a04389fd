"""Which home manages a folder: so a second home cannot ``stet init`` a folder (or a folder
inside or around one) that another home already syncs (two daemons writing one folder fight).

Each ``stet init`` leaves a small claim file in a per-user directory (``$STET_CLAIMS_DIR``,
else the platform state dir, e.g. ``~/.local/state/stet/folders``) naming the folder and the
home. Nothing is written into the folder itself. A claim counts only while the home it names
still lists the folder in its ``home.db``, so a deleted home or a `stet vaults remove` never
blocks anyone (stale claims are simply overwritten or ignored).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from stet.sync.errors import AlreadyExists


@dataclass(frozen=True, slots=True)
class Claim:
    folder: Path
    home: Path


def claims_dir() -> Path:
    override = os.environ.get("STET_CLAIMS_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_state_dir("stet", appauthor=False)) / "folders"


def _claim_file(folder: Path) -> Path:
    return claims_dir() / (hashlib.sha256(str(folder).encode()).hexdigest()[:32] + ".json")


def _live_vault(home: Path, folder: Path) -> str | None:
    """The name of the vault the home ``home`` has at ``folder``, or None (a stale claim)."""
    from .store_reader import vault_name_at  # read-only

    return vault_name_at(home / "home.db", folder)


def _claims() -> list[Claim]:
    try:
        files = sorted(claims_dir().glob("*.json"))
    except OSError:
        return []
    out = []
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
            out.append(Claim(Path(data["folder"]), Path(data["home"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def check_unclaimed(folder: Path, home: Path) -> None:
    """Refuse ``folder`` if another, live home manages it, a folder inside it or around it."""
    for claim in _claims():
        if claim.home == home:
            continue
        if not (claim.folder == folder or folder.is_relative_to(claim.folder)
                or claim.folder.is_relative_to(folder)):
            continue
        vault = _live_vault(claim.home, claim.folder)
        if vault is None:
            continue
        where = ("is" if claim.folder == folder else
                 "lies inside" if folder.is_relative_to(claim.folder) else "holds")
        raise AlreadyExists(
            f"{folder} {where} the vault {vault!r} at {claim.folder} of another Stet home "
            f"({claim.home}): two daemons must not sync one folder; use that home "
            f"(`stet --home {claim.home} ...`), or free the folder there with "
            f"`stet --home {claim.home} vaults remove {vault}`"
        )


def record_claim(folder: Path, home: Path) -> None:
    """Note that ``home`` manages ``folder`` (best effort: a failure only weakens the check)."""
    target = _claim_file(folder)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"folder": str(folder), "home": str(home)}), encoding="utf-8")
        os.replace(tmp, target)
    except OSError:
        pass


def drop_claim(folder: Path, home: Path) -> None:
    target = _claim_file(folder)
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
        if Path(data.get("home", "")) == home:
            target.unlink()
    except (OSError, ValueError, AttributeError):
        pass
