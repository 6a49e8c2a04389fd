"""A rename and a concurrent change of one attachment's bytes compose (issue 14, found by
the mixed R1 run: 4 of 16 long runs): one side renames the file while the other, cut off
from it, changes its bytes. After healing the file is at the new path WITH the changed bytes
on both daemons, whichever of the two changes is the later by the clock -- as an edit follows
a renamed note. Before, the later of the two took path and bytes together: a later rename
put the old bytes at the new path (the change lost from the path, kept only as a version),
and a later change put the new bytes back at the old path (the rename lost).

Real daemons, real folders; every folder starts with a copy of every byte string the test
uses (as ``test_attachments_offline.py``), so no blob transfer is needed between them. A move
that composes with a change is no conflict: nothing is listed in ``stet conflicts``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_cut_pair import CutPair, cut_pair
from tests.integration.attachment_support import live, versions, wait_recorded, wait_same_attachments
from tests.integration.link_proxy import LinkProxies
from tests.integration.test_attachments_offline import V0, X1, X2, sha

FILES = {"img/shared.png": V0, "seeds/x1.bin": X1, "seeds/x2.bin": X2}


@pytest.fixture
def pair(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> Iterator[CutPair]:
    proxies = LinkProxies()
    try:
        yield cut_pair(tmp_path, daemon_factory, proxies, FILES)
    finally:
        proxies.close()


def _check_composed(p: CutPair, new_path: str, data: bytes) -> None:
    final = wait_same_attachments(p.va, p.vb)
    assert final.get(new_path) == (data, False), f"{new_path}: {final.get(new_path)!r:.80}"
    assert "img/shared.png" not in final  # one file: the moved one
    for home in (p.a.home, p.b.home):
        assert live(home)[new_path].sha256 == sha(data)
        assert "img/shared.png" not in live(home)
        assert [v for v in versions(home) if v["kind"] == "concurrent"] == []  # no conflict


def _rename_on_b(p: CutPair) -> None:
    (p.vb / "pics").mkdir()
    (p.vb / "img" / "shared.png").rename(p.vb / "pics" / "moved.png")
    wait_recorded(p.b.home, "pics/moved.png", sha(V0))


def test_a_later_rename_keeps_the_concurrent_change_of_the_bytes(pair: CutPair) -> None:
    pair.cut()
    (pair.va / "img" / "shared.png").write_bytes(X1)  # A changes the bytes
    wait_recorded(pair.a.home, "img/shared.png", sha(X1))
    _rename_on_b(pair)  # B renames, later by the clock
    pair.heal()
    _check_composed(pair, "pics/moved.png", X1)
    # The old bytes were replaced knowingly (by A's change): a before-overwrite version on B.
    wait_until(lambda: any(v["sha256"] == sha(V0) and v["kind"] == "before-overwrite"
                           for v in versions(pair.b.home)), timeout=30, what="B keeps the bytes it replaced")


def test_a_later_change_of_the_bytes_follows_the_concurrent_rename(pair: CutPair) -> None:
    pair.cut()
    _rename_on_b(pair)  # B renames first
    (pair.va / "img" / "shared.png").write_bytes(X2)  # A changes the bytes, later by the clock
    wait_recorded(pair.a.home, "img/shared.png", sha(X2))
    pair.heal()
    _check_composed(pair, "pics/moved.png", X2)


def test_two_concurrent_changes_of_the_bytes_still_have_one_winner(pair: CutPair) -> None:
    """Beside a rename: the later change of the bytes wins at the moved path, the other's
    bytes a concurrent version listed on both."""
    pair.cut()
    _rename_on_b(pair)
    (pair.vb / "pics" / "moved.png").write_bytes(X1)  # B: rename, then a change of the bytes
    wait_recorded(pair.b.home, "pics/moved.png", sha(X1))
    (pair.va / "img" / "shared.png").write_bytes(X2)  # A: a change of the bytes, later
    wait_recorded(pair.a.home, "img/shared.png", sha(X2))
    pair.heal()
    final = wait_same_attachments(pair.va, pair.vb)
    assert final.get("pics/moved.png") == (X2, False)
    assert "img/shared.png" not in final
    for home in (pair.a.home, pair.b.home):
        wait_until(lambda h=home: [(v["kind"], v["sha256"]) for v in versions(h)
                                   if v["kind"] == "concurrent"] == [("concurrent", sha(X1))],
                   timeout=30, what="B's bytes kept as one concurrent version")
        rows = json.loads(run_stet(home, "conflicts", "--json").stdout)
        assert [r["attempted"]["sha256"] for r in rows if r.get("target") == "attachment"] == [sha(X1)]
