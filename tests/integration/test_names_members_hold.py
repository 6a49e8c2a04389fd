"""Names (issue 37 item 6), on real daemons: every name the members' file systems can hold
syncs -- a `"` in a Hebrew note's name is fine on Linux (only Windows cannot hold `"<>:|?*`),
so it syncs between two Linux homes, and so does an attachment named so; a case-clash skip
leaves `stet status` as soon as the clash is gone, without a restart; a member that joined
declaring Windows is named in `stet status` beside each name it cannot hold, and why, until
the name is changed. (That member is this test's own join through the real join port with
``platform="win32"``: what a Windows Stet sends. Untested on a real Windows machine.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.bridge_support import start_daemon as start_one
from tests.integration.peer_support import invite, linked_pair, start_daemon
from tests.integration.versions_support import stet_json

HEBREW = 'he/רישיונות ותשלום/הנחות לחינוך ולמלכ"רים.md'
TEXT = "הנחה של 50% למלכ\"רים ולמוסדות חינוך.\n"
QUOTED_FILE = 'he/קבלה "2024".pdf'


def _skip_lines(home: Path) -> list[str]:
    """The lines of `stet status` that name a skipped file."""
    return [line for line in run_stet(home, "status").stdout.decode().splitlines()
            if line.startswith("  skipped ")]


def test_a_name_with_a_quote_syncs_between_two_linux_homes(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    a, b, va, vb = linked_pair(tmp_path, {"n.md": b"a note\n"}, daemon_factory)
    (va / HEBREW).parent.mkdir(parents=True)
    (va / HEBREW).write_text(TEXT, encoding="utf-8")
    (va / QUOTED_FILE).write_bytes(b"%PDF-1.4 \x00\x01 a receipt")
    wait_until(lambda: (vb / HEBREW).is_file() and (vb / HEBREW).read_text(encoding="utf-8") == TEXT,
               timeout=30, what="the note with a quote in its name on B")
    wait_until(lambda: (vb / QUOTED_FILE).is_file(), timeout=30, what="the attachment with quotes on B")
    for d in (a, b):  # each member declared its platform, and each side knows both
        wait_until(lambda d=d: [m.get("platform") for m in stet_json(d.home, "devices")["devices"]]
                   == ["linux", "linux"], timeout=30, what=f"both members' platforms on {d.home.name}")
    for d in (a, b):
        skipped = [s["path"] for v in stet_json(d.home, "status")["vaults"] for s in v["skipped"]]
        assert skipped == [], (d.home.name, skipped)
        assert _skip_lines(d.home) == []
        # Both members are Linux: no member is named as unable to hold a name.
        refused = [r for v in stet_json(d.home, "status")["vaults"] for r in v["membersCannotHold"]]
        assert refused == [], (d.home.name, refused)
        assert "not on " not in run_stet(d.home, "status").stdout.decode()
    # And back: B's edit reaches A under the same name.
    with open(vb / HEBREW, "a", encoding="utf-8") as f:
        f.write("עודכן ב-B\n")
    a.wait_content(HEBREW, TEXT + "עודכן ב-B\n", timeout=30)


def test_a_case_clash_skip_goes_when_the_clash_is_gone(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    (vault / "plans").mkdir(parents=True)
    (vault / "plans" / "Trip.md").write_text("the first one\n", encoding="utf-8")
    d = start_one(home, vault, daemon_factory)
    d.wait_content("plans/Trip.md", "the first one\n", timeout=30)
    (vault / "plans" / "trip.md").write_text("the second one\n", encoding="utf-8")

    def skips() -> list[dict[str, str]]:
        return [s for v in stet_json(home, "status")["vaults"] for s in v["skipped"]]

    found = wait_until(lambda: s if (s := skips()) else None, timeout=30, what="the case clash skipped")
    assert found == [{"path": "plans/trip.md", "reason": "differs only by case from plans/Trip.md"}]
    assert "skipped notes/plans/trip.md: differs only by case" in run_stet(home, "status").stdout.decode()

    (vault / "plans" / "Trip.md").unlink()  # the clash is gone
    wait_until(lambda: skips() == [], timeout=30, what="the skip to leave stet status")
    d.wait_content("plans/trip.md", "the second one\n", timeout=30)  # and the file is a note now
    assert _skip_lines(home) == []


def test_a_skipped_name_goes_from_status_once_renamed(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    """A name no file system here may hold as a note (a backslash: a separator on Windows)
    is skipped with its reason; once the person renames the file, the skip leaves
    `stet status` (text and --json) and the note syncs under its new name."""
    a, b, va, vb = linked_pair(tmp_path, {"n.md": b"a note\n"}, daemon_factory)
    bad, good = "plans\\2024.md", "plans-2024.md"
    (va / bad).write_text("renamed soon\n", encoding="utf-8")

    def skips() -> list[dict[str, str]]:
        return [s for v in stet_json(a.home, "status")["vaults"] for s in v["skipped"]]

    found = wait_until(lambda: s if (s := skips()) else None, timeout=30, what="the name skipped")
    assert [s["path"] for s in found] == [bad], found
    assert "backslash" in found[0]["reason"], found
    assert any("backslash" in line for line in _skip_lines(a.home)), _skip_lines(a.home)
    (va / bad).rename(va / good)
    wait_until(lambda: (vb / good).is_file(), timeout=30, what="the renamed note on B")
    wait_until(lambda: skips() == [], timeout=30, what="the skip to leave A's status")
    assert _skip_lines(a.home) == []


_JOIN_DECLARING = """
import asyncio, sys
from pathlib import Path
import aiohttp
from stet.daemon.identity.device_identity import generate_identity
from stet.daemon.peers.joins import join

async def run() -> None:
    async with aiohttp.ClientSession() as session:
        await join(session, generate_identity(Path(sys.argv[4])), sys.argv[1], sys.argv[2],
                   lambda _device, _address: None, sys.argv[3])

asyncio.run(run())
"""


def _join_declaring(invite_text: str, name: str, platform: str, scratch: Path) -> None:
    """Join through the inviter's real join port, from a process of its own, as a device
    that declares ``platform``."""
    subprocess.run([sys.executable, "-c", _JOIN_DECLARING, invite_text, name, platform, str(scratch)],
                   check=True, timeout=60, capture_output=True)


def test_status_names_the_member_that_cannot_hold_a_name_and_why(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va = tmp_path / "a"
    (va / "meetings").mkdir(parents=True)
    (va / "ok.md").write_text("a name every member holds\n", encoding="utf-8")
    (va / "meetings" / "10:30 standup.md").write_text("agenda\n", encoding="utf-8")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    (tmp_path / "scratch").mkdir()
    _join_declaring(invite(a), "office-pc", "win32", tmp_path / "scratch")

    def refused() -> list[dict[str, str]]:
        return [r for v in stet_json(a.home, "status")["vaults"] for r in v["membersCannotHold"]]

    found = wait_until(lambda: r if (r := refused()) else None, timeout=30, what="the refusal named")
    assert found == [{"path": "meetings/10:30 standup.md", "device": found[0]["device"],
                      "member": "office-pc", "platform": "Windows",
                      "reason": "path contains a forbidden character ':'"}], found
    text = run_stet(a.home, "status").stdout.decode()
    assert ("not on office-pc (Windows) notes/meetings/10:30 standup.md: "
            "path contains a forbidden character ':'") in text, text
    assert "ok.md" not in text
    # The person renames it to a name Windows holds: the line goes (nothing stale left).
    (va / "meetings" / "10:30 standup.md").rename(va / "meetings" / "10-30 standup.md")
    wait_until(lambda: refused() == [], timeout=30, what="the refusal to leave A's status")
    assert "not on " not in run_stet(a.home, "status").stdout.decode()
