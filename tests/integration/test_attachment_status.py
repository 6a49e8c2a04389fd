"""`stet status` counts a vault's attachments and names the files skipped for being over
`attachments.max_bytes` (SPEC §3.14, §7), through a real daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import wait_recorded
from tests.integration.bridge_support import start_daemon
from tests.integration.versions_support import stet_json

CONFIG = "[attachments]\nmax_bytes = 65536\n"


def test_status_counts_attachments_and_names_skipped_ones(tmp_path: Path,
                                                          daemon_factory: list[DaemonProcess]) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    (vault / "img").mkdir(parents=True)
    files = {"img/a.png": b"\x89PNG\x00" * 1000, "img/b.jpg": b"\xff\xd8\x00" * 3000, "c.pdf": b"%PDF\x00"}
    for path, data in files.items():
        (vault / path).write_bytes(data)
    (vault / "huge.bin").write_bytes(b"\x01" * 70_000)  # over max_bytes
    (vault / "n.md").write_text("a note\n", encoding="utf-8")
    start_daemon(home, vault, daemon_factory, config=CONFIG)
    for path in files:
        wait_recorded(home, path)

    def counted() -> dict[str, Any] | None:
        v: dict[str, Any] = stet_json(home, "status")["vaults"][0]
        return v if v["attachments"]["count"] == len(files) else None

    v = wait_until(counted, timeout=30, what="the attachments counted in stet status")
    assert v["attachments"]["bytes"] == sum(len(d) for d in files.values())
    assert v["attachments"]["skipped"] == 1
    assert v["attachments"]["tooLarge"] == [{"path": "huge.bin", "size": 70_000}]
    assert stet_json(home, "status")["transfers"] == {"files": 0, "bytes": 0, "done": 0, "landedFiles": 0,
                                                      "landedBytes": 0}
    assert v["attachments"]["toPlace"] == 0  # every file the index shows is in place
    text = run_stet(home, "status").stdout.decode()
    assert "ATTACHMENTS" in text
    assert "skipped notes/huge.bin: 68.4 KB, over [attachments] max_bytes" in text
