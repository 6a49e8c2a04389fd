"""Worker threads may run below the event loop's priority (``STET_WORKER_NICE``)."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from stet.daemon.base.thread_priority import lower_this_thread, worker_nice


def _nice_of_this_thread() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_a_worker_thread_runs_lower_and_the_loop_thread_keeps_its_priority(
        monkeypatch: pytest.MonkeyPatch) -> None:
    base = _nice_of_this_thread()
    monkeypatch.setenv("STET_WORKER_NICE", "3")
    assert worker_nice() == 3
    with ThreadPoolExecutor(1, initializer=lower_this_thread) as pool:
        assert pool.submit(_nice_of_this_thread).result() == min(19, base + 3)
    assert _nice_of_this_thread() == base
    monkeypatch.setenv("STET_WORKER_NICE", "0")
    with ThreadPoolExecutor(1, initializer=lower_this_thread) as pool:
        assert pool.submit(_nice_of_this_thread).result() == base
    monkeypatch.setenv("STET_WORKER_NICE", "not a number")
    assert worker_nice() == 0
