"""The attachment transfers' threads run below the loop (P1 during P9, issue 14): on 2
busy cores a note saved while a gigabyte moves gets a core before the chunks do.

Counted, not timed: each pool's thread and the blob channel's thread report their nice
value, ``BLOB_NICE`` above the process's (Linux only)."""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from stet.daemon.base import thread_priority
from stet.daemon.peers.blobs.channel import ChannelReaders, InboundChannel
from stet.daemon.peers.blobs.transfer import BlobTransfers
from stet.sync.blob_store import BlobStore

T = TypeVar("T")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _in_each_pool(tmp_path: Path, fn: Callable[[], T]) -> dict[str, T]:
    """``fn()``'s answer in a thread of each of the transfers' pools."""
    transfers = BlobTransfers(BlobStore(tmp_path / "blobs"), lambda vault, sha: False)
    pools = {"disk": transfers._disk, "land": transfers._land, "hash": transfers._hash,
             "read": transfers.read_pool}
    try:
        return {name: pool.submit(fn).result(10) for name, pool in pools.items()}
    finally:
        for pool in pools.values():
            pool.shutdown(wait=True)


def test_every_transfer_pool_runs_below_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STET_BLOB_NICE", raising=False)
    monkeypatch.delenv("STET_WORKER_NICE", raising=False)
    base = _nice()
    seen = _in_each_pool(tmp_path, _nice)
    want = min(19, base + thread_priority.BLOB_NICE)
    assert thread_priority.BLOB_NICE > 0
    assert seen == dict.fromkeys(seen, want)
    assert set(seen) == {"disk", "land", "hash", "read"}
    assert _nice() == base  # the caller (the loop's thread) unchanged


def test_the_blob_channel_thread_runs_below_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STET_BLOB_NICE", raising=False)
    monkeypatch.delenv("STET_WORKER_NICE", raising=False)
    base = _nice()
    seen: list[int] = []

    def dial(self: InboundChannel, addresses: list[str], path: str, ctx: object) -> None:
        seen.append(_nice())  # in the channel's own thread, before any socket
        return None

    monkeypatch.setattr(InboundChannel, "_dial", dial)

    async def run() -> bool:
        readers = ChannelReaders()
        readers.start()
        try:
            channel = InboundChannel(readers, "D" * 56, lambda f, s: None, lambda why: None)
            return await channel.open(["127.0.0.1:1"], ssl.create_default_context(), initiated=True)
        finally:
            await readers.stop()

    assert asyncio.run(run()) is False
    assert seen == [min(19, base + thread_priority.BLOB_NICE)]
    assert _nice() == base


def test_turned_off_with_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STET_BLOB_NICE", "0")
    monkeypatch.delenv("STET_WORKER_NICE", raising=False)
    base = _nice()
    transfers = BlobTransfers(BlobStore(tmp_path / "blobs"), lambda vault, sha: False)
    try:
        assert transfers._disk.submit(_nice).result(10) == base
    finally:
        transfers._disk.shutdown(wait=True)


def _io_class_now() -> int | None:
    return thread_priority.io_class()


def test_every_transfer_pool_asks_the_disk_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The transfers' threads' disk requests are in the idle I/O class: a note's write and
    fsync are served first on a scheduler that keeps classes apart (mq-deadline, BFQ)."""
    monkeypatch.delenv("STET_BLOB_IOPRIO", raising=False)
    before = _io_class_now()
    if before is None:
        pytest.skip("no ioprio_get here")
    seen = _in_each_pool(tmp_path, _io_class_now)
    assert seen == dict.fromkeys(("disk", "land", "hash", "read"), thread_priority.IOPRIO_CLASS_IDLE)
    assert _io_class_now() == before  # the caller (the loop's thread) unchanged


def test_the_idle_io_class_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STET_BLOB_IOPRIO", "0")
    before = _io_class_now()
    if before is None:
        pytest.skip("no ioprio_get here")
    transfers = BlobTransfers(BlobStore(tmp_path / "blobs"), lambda vault, sha: False)
    try:
        assert transfers._disk.submit(_io_class_now).result(10) == before
    finally:
        transfers._disk.shutdown(wait=True)
