"""The `stet join` bar covers attachment bytes (SPEC §7, §3.14; issue 14 edges: only
unit-tested before), through the real CLI on a terminal and two real daemons: a vault with a
few MB of attachments; the bar B's `stet join` draws counts their MiB in its total and its
done figure reaches that total, and the join ends in sync with every byte on disk."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.harness import DaemonProcess, env_for
from tests.integration.attachment_pairs import recorded_daemon
from tests.integration.attachment_support import attachments
from tests.integration.peer_support import invite, start_daemon

MIB = 1 << 20
NOTES = 5
FILES = {f"img/photo-{i}.jpg": os.urandom(3 * MIB // 2) for i in range(4)}  # 6 MiB
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _join_on_a_terminal(home: Path, invite_text: str, path: Path, timeout: float = 180) -> tuple[str, str]:
    """`stet join` with stderr on a pseudo-terminal 200 columns wide (the bar is drawn only
    on a terminal): (stdout, what the terminal received, escape codes removed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = env_for(home) | {"COLUMNS": "200", "TERM": "xterm-256color"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from stet.client.cli import main; main()", "--home", str(home),
         "join", invite_text, str(path)],
        env=env, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    screen = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the terminal closed: the command ended
                    break
                if not chunk:
                    break
                screen += chunk
            elif proc.poll() is not None:
                break
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert proc.returncode == 0, (proc.returncode, bytes(screen).decode(errors="replace"))
    return out.decode(), ANSI.sub(b"", bytes(screen)).decode(errors="replace")


def test_the_join_bar_counts_attachment_bytes_up_to_the_total(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    vb = tmp_path / "b"
    notes = {f"n{i}.md": f"# note {i}\n".encode() for i in range(NOTES)}
    a = recorded_daemon(tmp_path / "ha", tmp_path / "a", FILES | notes, daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)

    out, screen = _join_on_a_terminal(b.home, invite(a), vb)
    assert "is in sync" in out, (out, screen)
    assert attachments(vb) == {p: (d, False) for p, d in FILES.items()}

    mib = len(FILES) * 3 // 2  # 6 MiB: six steps of the bar beside the notes
    frames = [(int(d), int(t)) for d, t in re.findall(r"(\d+)/(\d+)", screen)]
    assert frames, screen
    assert max(t for _d, t in frames) >= NOTES + mib, frames
    assert frames[-1] == (NOTES + mib, NOTES + mib), frames  # the bar reached its total
    shown = re.findall(r"(\d+) attachments?, (\d+) of (\d+) MiB", screen)
    assert shown, screen
    assert shown[-1] == (str(len(FILES)), str(mib), str(mib)), shown
