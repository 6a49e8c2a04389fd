"""An attachment moved by a peer's winning change is never absent from the folder (issue 14,
found last session). A renames a file and then changes its bytes while B, cut off from it,
changes the same file: A's change wins (later by the clock), so on B the attachment goes to
A's path with A's bytes. While those bytes are on their way (the link throttled: the index
update crosses at once, the bytes slowly), B's folder shows the file at the old path with
B's bytes -- never at neither path, never a partial file at the new one. Once they land:
only the new path, A's bytes, B's bytes a ``concurrent`` version listed by ``stet
conflicts``. Before, B removed its file in the pass that asked for A's bytes, and the
folder held the attachment nowhere for the whole transfer.

Real daemons, real TLS on loopback, B dialling A through a cuttable, throttleable proxy
(``attachment_cut_pair``)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_cut_pair import CutPair, cut_pair
from tests.integration.attachment_support import (
    blob_path,
    live,
    versions,
    wait_recorded,
    wait_same_attachments,
)
from tests.integration.link_proxy import LinkProxies
from tests.integration.versions_support import stet_json

V0 = b"\x00\x01 the bytes both had \xff" * 50
MINE = b"\x89PNG B's concurrent change \x00" * 40
WIN = os.urandom(32 << 20)  # A's bytes: 32 MiB, ~32 s at the throttled rate
RATE = 1 << 20  # bytes/s each way while the bytes are held back
OLD, NEW = "img/shared.png", "pics/moved.png"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def pair(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> Iterator[CutPair]:
    proxies = LinkProxies()
    try:
        yield cut_pair(tmp_path, daemon_factory, proxies, {OLD: V0})
    finally:
        proxies.close()


class FolderWatch:
    """Looks at B's two paths every few milliseconds in a thread: the old one first, then
    the new one (B writes the new path before removing the old), and records every look
    that found the attachment at neither, or a file at the new path that is not whole."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bad: list[str] = []
        self.looks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="folder-watch", daemon=True)

    def __enter__(self) -> FolderWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        for _ in range(1_000_000):  # bounded; ends when the test is done
            if self._stop.wait(0.005):
                return
            self.looks += 1
            old = (self.root / OLD).exists()
            try:
                new_size: int | None = (self.root / NEW).stat().st_size
            except FileNotFoundError:
                new_size = None
            if not old and new_size is None:
                self.bad.append("the attachment at neither path")
            elif new_size is not None and new_size != len(WIN):
                self.bad.append(f"{new_size} bytes at {NEW}")


def test_the_loser_stays_at_the_old_path_until_the_winners_bytes_land(pair: CutPair) -> None:
    pair.cut()
    (pair.vb / OLD).write_bytes(MINE)  # B changes the file (earlier by the clock)
    wait_recorded(pair.b.home, OLD, sha(MINE))
    (pair.va / "pics").mkdir()
    (pair.va / OLD).rename(pair.va / NEW)  # A moves it, then changes its bytes: A's wins
    wait_recorded(pair.a.home, NEW, sha(V0))
    (pair.va / NEW).write_bytes(WIN)
    wait_recorded(pair.a.home, NEW, sha(WIN), timeout=120)

    with FolderWatch(pair.vb) as watch:
        pair.proxies.throttle(pair.a_id, pair.b_id, RATE)  # the bytes are held back, not the index
        pair.heal()
        wait_recorded(pair.b.home, NEW, sha(WIN), timeout=60)  # B knows A's change won
        # B asked for A's bytes (its pass after the index update is done) ...
        wait_until(lambda: stet_json(pair.b.home, "status")["transfers"]["bytes"] >= len(WIN), timeout=60,
                   what="B waiting for A's bytes")
        # ... which are still on their way: the folder shows B's file where it was.
        assert not blob_path(pair.b.home, sha(WIN)).exists(), "the throttle let the bytes through too soon"
        assert (pair.vb / OLD).read_bytes() == MINE
        assert not (pair.vb / NEW).exists()
        pair.proxies.throttle(pair.a_id, pair.b_id, None)  # the bytes arrive
        final = wait_same_attachments(pair.va, pair.vb, timeout=120)
    assert watch.looks > 0
    assert watch.bad == [], watch.bad[:5]
    assert final == {NEW: (WIN, False)}  # only the new path, A's bytes
    for home in (pair.a.home, pair.b.home):
        assert list(live(home)) == [NEW]
        wait_until(lambda h=home: [v["sha256"] for v in versions(h) if v["kind"] == "concurrent"]
                   == [sha(MINE)], timeout=60, what="B's bytes kept as one concurrent version")
        rows = json.loads(run_stet(home, "conflicts", "--json").stdout)
        assert [r["attempted"]["sha256"] for r in rows if r.get("target") == "attachment"] == [sha(MINE)]
