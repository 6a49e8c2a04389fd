"""Names (issue 37 item 6), on real daemons: every name the members' file systems can hold
syncs -- a `"` in a Hebrew note's name is fine on Linux (only Windows cannot hold `"<>:|?*`),
so it syncs between two Linux homes, and so does an attachment named so; a case-clash skip
leaves `stet status` as soon as the clash is gone, without a restart."""

from __future__ import annotations

from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.bridge_support import start_daemon as start_one
from tests.integration.peer_support import linked_pair
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
    for d in (a, b):
        skipped = [s["path"] for v in stet_json(d.home, "status")["vaults"] for s in v["skipped"]]
        assert skipped == [], (d.home.name, skipped)
        assert _skip_lines(d.home) == []
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
