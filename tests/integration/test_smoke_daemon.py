from __future__ import annotations

from pathlib import Path

from tests.harness import DaemonProcess


def test_daemon_ingests_a_saved_file(daemon: DaemonProcess, vault_dir: Path) -> None:
    (vault_dir / "a.md").write_bytes("hello 😀\r\nworld".encode())
    daemon.wait_content("a.md", "hello 😀\r\nworld")
    assert daemon.stop() == 0
