"""First contact (issue 37 item 9), through the real CLI and real daemons: the README's first
command works on a fresh machine as written; `stet init` reports the attachments it found
beside the notes; the `stet join` bar counts the files and bytes that land in the folder (not
the unique blobs behind them) and reaches its total; `stet status` says "syncing", not
"healthy", until the attachments are in, and explains its OTHER column."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.harness import DaemonProcess, env_for, run_stet, wait_until
from tests.integration.attachment_cut_pair import cut_pair
from tests.integration.attachment_pairs import recorded_daemon
from tests.integration.attachment_support import attachments, wait_recorded
from tests.integration.link_proxy import LinkProxies
from tests.integration.peer_support import invite, start_daemon
from tests.integration.test_join_bar_attachments import _join_on_a_terminal

README = Path(__file__).resolve().parents[2] / "README.md"
MIB = 1 << 20
RATE = 1 << 20  # bytes/s while the attachments are held back


def _readme_init_command() -> list[str]:
    """The `stet init ...` of the README's first shell block, as a person would type it."""
    block = re.search(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert block is not None
    for part in block.group(1).split("&&"):
        words = shlex.split(part.strip())
        if words[:2] == ["stet", "init"]:
            return words[1:]
    raise AssertionError(f"no `stet init` in the README's first block: {block.group(1)!r}")


def test_the_readmes_first_command_works_on_a_fresh_machine(tmp_path: Path) -> None:
    args = _readme_init_command()
    fresh_user = tmp_path / "user"  # a new machine: no ~/notes yet
    fresh_user.mkdir()
    env = env_for(tmp_path / "home") | {"HOME": str(fresh_user)}
    expanded = [os.path.expanduser(a) if a.startswith("~") else a for a in args]  # the shell's ~
    expanded = [a.replace(os.path.expanduser("~"), str(fresh_user), 1) if a.startswith("/") else a
                for a in expanded]
    proc = subprocess.run([sys.executable, "-c", "from stet.client.cli import main; main()", *expanded],
                          env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, (args, proc.stderr.decode())
    assert (fresh_user / "notes").is_dir()
    assert "Vault 'notes'" in proc.stdout.decode()


def test_init_reports_the_attachments_beside_the_notes(tmp_path: Path) -> None:
    vault = tmp_path / "v"
    (vault / "img").mkdir(parents=True)
    for i in range(3):
        (vault / f"n{i}.md").write_text(f"note {i}\n")
    for i in range(4):
        (vault / "img" / f"p{i}.png").write_bytes(b"\x89PNG" + bytes(250_000))
    out = run_stet(tmp_path / "home", "init", str(vault)).stdout.decode()
    assert "3 notes imported" in out, out
    assert "4 attachments (1.0 MB)" in out, out


def test_the_join_bar_counts_files_that_land_and_status_says_syncing_until_they_are_in(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    # 12 files on disk, two unique blobs behind them: 12 files and 18 MiB land on B.
    blobs = [os.urandom(3 * MIB // 2), os.urandom(3 * MIB // 2)]
    files = {f"img/copy-{i:02d}.jpg": blobs[i % 2] for i in range(12)}
    notes = {f"n{i}.md": f"# note {i}\n".encode() for i in range(3)}
    a = recorded_daemon(tmp_path / "ha", tmp_path / "a", files | notes, daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)

    out, screen = _join_on_a_terminal(b.home, invite(a), tmp_path / "b")
    assert "is in sync" in out, (out, screen)
    assert attachments(tmp_path / "b") == {p: (d, False) for p, d in files.items()}
    shown = re.findall(r"(\d+) of (\d+) attachments?, (\d+) of (\d+) MiB", screen)
    assert shown, screen
    assert shown[-1] == ("12", "12", "18", "18"), shown
    frames = [(int(d), int(t)) for d, t in re.findall(r"(\d+)/(\d+)", screen)]
    assert frames, screen
    assert frames[-1] == (3 + 18, 3 + 18), frames  # the bar reached its total

    status = run_stet(b.home, "status").stdout.decode()
    assert "Sync: healthy" in status, status
    assert "OTHER:" in status, status  # the column is explained where it is shown


def test_status_says_syncing_while_attachments_are_still_to_land(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    proxies = LinkProxies()
    try:
        pair = cut_pair(tmp_path, daemon_factory, proxies, {"seed.bin": b"\x00 a first attachment\n"})
        proxies.throttle(pair.a_id, pair.b_id, RATE)  # the bytes take a while: ~8 s
        big = {f"img/big-{i}.bin": os.urandom(MIB) for i in range(8)}
        for path, data in big.items():
            (pair.va / path).parent.mkdir(parents=True, exist_ok=True)
            (pair.va / path).write_bytes(data)
        for path in big:
            wait_recorded(pair.a.home, path, None, timeout=60)

        def landing() -> str | None:
            text = run_stet(pair.b.home, "status").stdout.decode()
            v = json.loads(run_stet(pair.b.home, "status", "--json").stdout)["vaults"][0]
            known = v["attachments"]["count"] == len(big) + 1  # and the seed
            return text if known and not all((pair.vb / p).exists() for p in big) else None

        text = wait_until(landing, timeout=60, what="B to know of the files before they are all in")
        first = text.splitlines()[1]
        assert first.startswith("Sync: syncing"), text
        assert "attachments in place" in first, text
        proxies.throttle(pair.a_id, pair.b_id, None)
        wait_until(lambda: all((pair.vb / p).is_file() and (pair.vb / p).read_bytes() == d
                               for p, d in big.items()), timeout=120, what="every file on B")
        wait_until(lambda: "Sync: healthy" in run_stet(pair.b.home, "status").stdout.decode(), timeout=30,
                   what="B healthy once they are in")
    finally:
        proxies.close()
