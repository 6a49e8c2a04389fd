"""The daemon's log is written by a thread of its own (``daemon/main.setup_logging``): a line
logged on the event loop's thread never waits for the log file's disk, and every line logged
is in the file once the listener stops (the daemon's exit)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from stet.daemon.app.main import PrivateRotatingLog, setup_logging
from stet.sync.home_layout import HomeLayout


@pytest.fixture
def root_handlers() -> Iterator[None]:
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in before:
            root.removeHandler(h)
    root.setLevel(level)


def test_a_line_logged_never_waits_for_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 root_handlers: None) -> None:
    disk = threading.Event()  # the log file's disk, held until the test lets it go
    emitting = threading.Event()
    real_emit = PrivateRotatingLog.emit

    def slow_emit(self: PrivateRotatingLog, record: logging.LogRecord) -> None:
        emitting.set()
        assert disk.wait(30)
        real_emit(self, record)

    monkeypatch.setattr(PrivateRotatingLog, "emit", slow_emit)
    layout = HomeLayout(tmp_path / "home")
    listener = setup_logging(layout, verbose=False)
    log = logging.getLogger("stet.test.queue")
    try:
        log.info("first line")
        assert emitting.wait(10)  # the listener's thread is inside the file's write now
        done = threading.Event()

        def more() -> None:  # what the loop would do meanwhile: log, and go on
            for i in range(100):
                log.info("line %d while the disk is held", i)
            done.set()

        threading.Thread(target=more).start()
        assert done.wait(10), "logging waited for the log file"
    finally:
        disk.set()
        listener.stop()
        for handler in listener.handlers:
            handler.close()
    text = (layout.log_dir / "daemon.log").read_text(encoding="utf-8")
    assert "first line" in text
    assert all(f"line {i} while the disk is held" in text for i in range(100))
