"""Progress bars for long work a person waits on (SPEC §7): the import of `stet init`,
the first sync of `stet join`, the rescan a starting daemon makes. Shown on stderr when
it is a terminal, never in ``--json`` output; every figure comes from the daemon
(``GET /v1/status``) or, while it starts, from its ``starting.json``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from stet.sync.errors import StetError

from .daemon_link import DaemonClient, DaemonNotRunning

Update = Callable[[int, int | None, str], None]
"""update(done, total or None if not known yet, label)."""

POLL_S = 0.2  # how often the daemon is asked (a local HTTP call)
SHOWN_PENDING_WRITES = 100  # fewer pending writes than this is everyday work, not a sync


@contextmanager
def progress_bar(label: str, *, enabled: bool = True) -> Iterator[Update]:
    """A transient bar on stderr (only if it is a terminal and ``enabled``)."""
    from rich.console import Console  # imported here: most commands never draw a bar
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True, disable=not enabled or not sys.stderr.isatty(),
    ) as progress:
        task = progress.add_task(label, total=None)

        def update(done: int, total: int | None, text: str = label) -> None:
            progress.update(task, completed=done, total=total, description=text)

        yield update


def sync_progress(vault: dict[str, Any]) -> tuple[int, int] | None:
    """(notes on disk, notes the vault's index lists) while a vault is still filling up
    (a first sync, a large intake from a peer); None when it is in step."""
    try:
        expected = int(vault.get("indexedNotes") or 0)
        notes = int(vault.get("notes") or 0)
        pending = int(vault.get("pendingWrites") or 0)
    except (TypeError, ValueError):
        return None
    if expected <= 0 or (notes >= expected and pending < SHOWN_PENDING_WRITES):
        return None
    return max(0, min(expected, notes - pending)), expected


MIB = 1 << 20  # an attachment MiB counts as one step of the join bar, like one note


def _vault(client: DaemonClient, vault_id: str) -> tuple[dict[str, Any] | None, dict[str, int]]:
    """The vault's status, and the home's attachment transfers (``files``, ``bytes``, ``done``)."""
    status = client.status()
    found = status.get("transfers")
    moving: dict[str, Any] = found if isinstance(found, dict) else {}
    transfers = {k: int(moving.get(k) or 0) for k in ("files", "bytes", "done", "landedFiles", "landedBytes")}
    for v in status.get("vaults", []):
        if v.get("id") == vault_id:
            return dict(v), transfers
    return None, transfers


def join_steps(v: dict[str, Any], transfers: dict[str, int]) -> tuple[int, int, bool]:
    """(done, total, finished) of a first sync: notes on disk of those the index lists,
    plus the attachment bytes arriving (one step per MiB); finished once the attachments
    the index shows are in place too (``toPlace``)."""
    notes, pending = int(v.get("notes") or 0), int(v.get("pendingWrites") or 0)
    expected = int(v.get("indexedNotes") or 0)
    att = v.get("attachments")
    to_place = int(att.get("toPlace") or 0) if isinstance(att, dict) else 0
    notes_done = max(0, min(expected, notes - pending))
    landing = files_landing(v, transfers)
    if landing is not None:
        # What lands in the folder (issue 37: the unique blobs said "+265, 9 MiB" while
        # 4,647 files, 220 MB, landed): every file's bytes, counted once it is in place.
        steps = -(-landing["bytes"] // MIB)
        att_done = steps if landing["done"] >= landing["bytes"] else landing["done"] // MIB
        finished = notes >= expected and pending == 0 and expected > 0 and to_place == 0
        return notes_done + att_done, expected + steps, finished
    steps = -(-transfers["bytes"] // MIB)  # an older daemon: the blobs wanted
    done = notes_done + min(steps, transfers["done"] // MIB)
    finished = (notes >= expected and pending == 0 and expected > 0 and transfers["files"] == 0
                and to_place == 0)
    return done, expected + steps, finished


def files_landing(v: dict[str, Any], transfers: dict[str, int]) -> dict[str, int] | None:
    """The vault's attachment files as they land: ``files``/``bytes`` the index shows,
    ``placed`` files in place, ``done`` bytes (in place, plus what is arriving now); None
    when the daemon does not say (no ``placedBytes``)."""
    att = v.get("attachments")
    if not isinstance(att, dict) or "placedBytes" not in att:
        return None
    total, placed = int(att.get("bytes") or 0), int(att.get("placedBytes") or 0)
    return {"files": int(att.get("count") or 0), "bytes": total, "placed": int(att.get("placedFiles") or 0),
            "done": min(total, placed + transfers.get("done", 0))}


def landed_so_far(client: DaemonClient) -> tuple[int, int] | None:
    """The home's blobs landed so far (files, bytes): taken before a join is asked for, so
    that what lands before the bar's first look still counts (``JoinBytes``); None if the
    daemon cannot say."""
    try:
        _v, transfers = _vault(client, "")
    except StetError:  # (DaemonNotRunning is one)
        return None
    return transfers["landedFiles"], transfers["landedBytes"]


class JoinBytes:
    """The attachment bytes of one join, counted from its start: a blob leaves the home's
    ``transfers`` (``files``/``bytes``/``done``: wanted now) once landed, into ``landedFiles``/
    ``landedBytes``, so the bar's total stays the whole and its done reaches it.

    ``start``: the landed counts before the join was asked for (``landed_so_far``). Without
    it the first look is the start -- and a few MB that landed before it (the folder side asks
    for the blobs as soon as the peer's index comes) were left out of the bar altogether."""

    def __init__(self, start: tuple[int, int] | None = None) -> None:
        self._start: tuple[int, int] | None = start

    def __call__(self, transfers: dict[str, int]) -> dict[str, int]:
        landed = (transfers.get("landedFiles", 0), transfers.get("landedBytes", 0))
        if self._start is None:
            self._start = landed
        files, size = landed[0] - self._start[0], landed[1] - self._start[1]
        total, done = transfers["bytes"] + size, transfers["done"] + size
        return {"files": transfers["files"], "bytes": total, "done": done, "seen": transfers["files"] + files}


def _mib(done: int, total: int) -> str:
    """``"3 of 6 MiB"`` (whole MiB; all of it once every byte is in)."""
    whole = -(-total // MIB)
    return f"{whole if done >= total else done // MIB} of {whole} MiB"


def wait_for_first_sync(client: DaemonClient, vault_id: str, name: str, *, quiet_s: float,
                        show: bool = True, landed_before: tuple[int, int] | None = None) -> bool:
    """Follow the first sync of a joined vault until its folder holds every note its index
    lists, all written (True), or nothing has moved for ``quiet_s`` seconds (False: it
    goes on in the background). A stopped daemon or Ctrl-C ends the wait, not the sync."""
    last: tuple[int, int, int, int] | None = None
    moved_at = time.monotonic()
    since_start = JoinBytes(landed_before)
    with progress_bar(f"syncing {name}", enabled=show) as update:
        while True:
            try:
                v, now = _vault(client, vault_id)
            except DaemonNotRunning:
                return False
            except StetError:
                v = None
            if v is not None:
                transfers = since_start(now)
                done, total, finished = join_steps(v, now if files_landing(v, now) is not None else transfers)
                state = (int(v.get("notes") or 0), int(v.get("pendingWrites") or 0), done, total)
                if state != last:
                    last, moved_at = state, time.monotonic()
                label = f"syncing {name}"
                landing = files_landing(v, now)
                if landing is not None and landing["files"]:
                    label += (f" (+{landing['placed']:,} of {landing['files']:,} attachments, "
                              f"{_mib(landing['done'], landing['bytes'])})")
                elif landing is None and transfers["seen"]:
                    label += (f" (+{transfers['seen']} attachment{'s' if transfers['seen'] != 1 else ''}, "
                              f"{_mib(transfers['done'], transfers['bytes'])})")
                update(total if finished else done, total or None, label)
                if finished:
                    return True
            if time.monotonic() - moved_at > quiet_s:
                return False
            time.sleep(POLL_S)  # poll the daemon's status


def describe_activity(activity: list[dict[str, Any]]) -> list[str]:
    """One line per piece of long work a daemon reports (`stet status`, `stet start`)."""
    lines = []
    for a in activity:
        done, total = a.get("done"), a.get("total")
        if isinstance(done, int) and isinstance(total, int) and total:
            lines.append(f"{a.get('kind', 'work')} of {a.get('vault', '?')}: {done:,} of {total:,} files")
    return lines
