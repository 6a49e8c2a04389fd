"""A blob asked for at the moment the link is cut still arrives once the link is back
(issue 14: a winner's bytes that never reached one daemon). Real daemons over TLS, B dialling
A through a cuttable proxy: A gets a new 48 MB file; the link is cut as soon as B wants its
blob (its status counts it: the ask is going out, or on its way); after the link is back the
file reaches B whole, and never partly at its path meanwhile."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, wait_until
from tests.integration.attachment_cut_pair import CutPair, cut_pair
from tests.integration.attachment_support import wait_recorded
from tests.integration.link_proxy import LinkProxies
from tests.integration.test_attachments_offline import V0, sha

BIG = 48 * 1024 * 1024


@pytest.fixture
def pair(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> Iterator[CutPair]:
    proxies = LinkProxies()
    try:
        yield cut_pair(tmp_path, daemon_factory, proxies, {"img/first.png": V0})
    finally:
        proxies.close()


@pytest.mark.timeout(300)
def test_a_blob_asked_for_as_the_link_is_cut_arrives_after_it_is_back(pair: CutPair) -> None:
    data = os.urandom(BIG)
    tmp = pair.va / "big.tmp"
    tmp.write_bytes(data)
    tmp.rename(pair.va / "big.bin")  # whole at once
    wait_recorded(pair.a.home, "big.bin", sha(data), timeout=120)
    wait_until(lambda: pair.b.client.status()["transfers"]["files"] >= 1, timeout=120, interval=0.01,
               what="B asking for the new blob")
    pair.proxies.cut(pair.a_id, pair.b_id, 600.0)
    landed_at_cut = pair.b.client.status()["transfers"]["landedFiles"]
    wait_until(lambda: not any(p["device"] == pair.a_id for p in pair.b.client.status()["peers"]),
               timeout=30, what="the link down on B")
    target = pair.vb / "big.bin"
    assert not target.exists() or target.read_bytes() == data  # never partly at its path
    pair.heal()
    wait_until(lambda: target.is_file() and target.stat().st_size == BIG and target.read_bytes() == data,
               timeout=180, interval=0.2, what="the file whole on B after the cut")
    print(f"blobs landed on B when the link was cut: {landed_at_cut}")
