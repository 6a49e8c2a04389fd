"""A blob sender stopped mid-blob closes the blob's file (issue 14; found by CI).

A link that ends stops its ``BlobSender``, which cancels the task sending a blob. The file
is opened, and closed again, in a worker thread. The task's cancellation used to cancel
those jobs too when they had not started yet, so a file opened for the blob was never
closed (an unclosed-file warning at the garbage collector's next pass, seen in CI as an
error in an unrelated test). The worker pool here has one thread that the test holds, so
the close (or the open) is still waiting when the sender stops -- the window, made wide.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from stet.daemon.peers.blobs.serving import BlobSender
from stet.daemon.peers.blobs.transfer import LinkPort
from stet.sync import attachment_protocol as ap
from stet.sync.blob_store import BlobStore

from .test_blob_transfer import VAULT, referenced_by, wait_for

MiB = 1 << 20


class HeldPool(ThreadPoolExecutor):
    """One worker; ``hold()`` makes it wait until ``release()``, so jobs submitted after
    the hold queue behind it, not started. Records every job's function."""

    def __init__(self) -> None:
        super().__init__(1)
        self.submitted: list[Callable[..., Any]] = []
        self._gate = threading.Event()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted.append(fn)
        return super().submit(fn, *args, **kwargs)

    def hold(self) -> None:
        super().submit(self._gate.wait, 30)

    def release(self) -> None:
        self._gate.set()


def _opened_files(blobs: BlobStore, monkeypatch: pytest.MonkeyPatch) -> list[BinaryIO]:
    files: list[BinaryIO] = []
    real = blobs.open

    def counted(sha256: str) -> BinaryIO:
        f = real(sha256)
        files.append(f)
        return f

    monkeypatch.setattr(blobs, "open", counted)
    return files


def _closing(files: list[BinaryIO]) -> list[bool]:
    """Whether each file was closed; then closes them (a failing run leaks nothing)."""
    closed = [f.closed for f in files]
    for f in files:
        f.close()
    return closed


def _one_blob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[BlobStore, str, list[BinaryIO]]:
    """A store holding one 1 MiB blob; its sha256; every file the store opens from now on."""
    blobs = BlobStore(tmp_path / "a")
    sha = blobs.put_bytes(os.urandom(MiB)).sha256
    return blobs, sha, _opened_files(blobs, monkeypatch)


def test_a_sender_stopped_while_its_blob_file_closes_still_closes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blobs, sha, files = _one_blob(tmp_path, monkeypatch)
    pool = HeldPool()
    sent: list[int] = []

    async def run() -> None:
        async def send_bulk(frame: bytes | bytearray) -> None:
            pool.hold()  # the close submitted after this last chunk waits behind the hold
            sent.append(len(frame))

        port = LinkPort("peer", lambda: {VAULT}, lambda frame: None, send_bulk)
        sender = BlobSender(blobs, port, referenced_by({sha}), pool=pool)
        sender.start()
        sender.request(ap.decode(ap.encode_request(VAULT, sha, 0, MiB)))  # type: ignore[arg-type]
        await wait_for(lambda: any(getattr(fn, "__name__", "") == "close" for fn in pool.submitted))
        sender.stop()  # the link ends: its sending task is cancelled, the close not run yet
        await asyncio.sleep(0)
        pool.release()

    try:
        asyncio.run(run())
    finally:
        pool.release()
        pool.shutdown(wait=True)
    assert sent
    assert len(files) == 1
    assert _closing(files) == [True]


def test_a_sender_stopped_while_its_blob_file_opens_closes_it_once_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blobs, sha, files = _one_blob(tmp_path, monkeypatch)
    real = blobs.open
    proceed = threading.Event()

    def slow_open(sha256: str) -> BinaryIO:
        f = real(sha256)  # opened (and counted): the job is under way in its thread
        proceed.wait(30)
        return f

    monkeypatch.setattr(blobs, "open", slow_open)
    pool = HeldPool()

    async def run() -> None:
        async def send_bulk(frame: bytes | bytearray) -> None:
            raise AssertionError("nothing is sent: the sender stops first")

        port = LinkPort("peer", lambda: {VAULT}, lambda frame: None, send_bulk)
        sender = BlobSender(blobs, port, referenced_by({sha}), pool=pool)
        sender.start()
        sender.request(ap.decode(ap.encode_request(VAULT, sha, 0, MiB)))  # type: ignore[arg-type]
        await wait_for(lambda: len(files) == 1)
        sender.stop()  # the link ends while the file is being opened
        await asyncio.sleep(0)
        proceed.set()
        async with asyncio.timeout(5):  # the open ends at once now: its file is closed then
            while not files[0].closed:  # noqa: ASYNC110 - a worker thread's result, under a deadline
                await asyncio.sleep(0.005)

    try:
        asyncio.run(run())
    finally:
        proceed.set()
        pool.shutdown(wait=True)
    assert _closing(files) == [True]
