"""The CLI's rough edges a new user hit (issue 13, item 7), against a real daemon: ``--since``
in the CLI's words, ``stet log`` saying it stopped at its limit, the OTHER column of
``stet status`` following the folder without a restart, and docs/agents.md's
``stet append shared/log.md "- found X" --idempotency-key K`` working as written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.test_cli import one_sentence


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("words")
    (root / "vault").mkdir()
    (root / "vault" / "a.md").write_text("a\n")
    run_stet(root / "home", "init", str(root / "vault"), "--name", "notes")
    d = DaemonProcess(root / "home")
    try:
        yield d.start()
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.kill9()


def test_the_documented_append_with_a_leading_dash_works(served: DaemonProcess) -> None:
    home = served.home
    first = run_stet(home, "append", "shared/log.md", "- found X", "--idempotency-key", "K")
    again = run_stet(home, "append", "shared/log.md", "- found X", "--idempotency-key", "K")
    assert b"a retry" in again.stdout
    assert first.stdout.split(b"(revision ")[1][:12] == again.stdout.split(b"(revision ")[1][:12]
    run_stet(home, "append", "shared/log.md", "--idempotency-key", "K2", "- found Y")
    run_stet(home, "append", "shared/log.md", "--", "--not-an-option")
    assert run_stet(home, "read", "shared/log.md").stdout == b"- found X\n- found Y\n--not-an-option"
    assert "no such option '--vualt'" in run_stet(home, "append", "shared/log.md", "--vualt",
                                                  check=False).stderr.decode()


def test_since_takes_the_words_the_help_gives(served: DaemonProcess) -> None:
    home = served.home
    run_stet(home, "append", "since.md", "one")
    for since in ("yesterday", "today", "10m", "2h", "1d", "1w", "2020-01-01", "2020-01-01T09:00",
                  f"{time.time() - 3600:.0f}"):
        out = run_stet(home, "log", "since.md", "--since", since).stdout.decode()
        assert "since.md" in out, since
        run_stet(home, "conflicts", "--since", since)
    future = run_stet(home, "log", "since.md", "--since", "2999-01-01").stdout.decode()
    assert future.strip() == "No changes."
    line = one_sentence(run_stet(home, "log", "--since", "last week", check=False))
    assert line.startswith("stet: --since 'last week' is not a time")
    assert "since must" not in line


def test_log_says_when_it_stopped_at_its_limit(served: DaemonProcess) -> None:
    home = served.home
    for i in range(3):
        run_stet(home, "append", "limit.md", f"line {i}")
    capped = run_stet(home, "log", "limit.md", "--limit", "2")
    assert len(capped.stdout.decode().splitlines()) == 2
    hint = capped.stderr.decode()
    assert "stopped at --limit 2" in hint
    assert "--limit 20" in hint
    assert "--since" in hint
    whole = run_stet(home, "log", "limit.md", "--limit", "10")
    assert len(whole.stdout.decode().splitlines()) == 3
    assert whole.stderr == b""
    exact = run_stet(home, "log", "limit.md", "--limit", "3")  # all of them: nothing to hint at
    assert len(exact.stdout.decode().splitlines()) == 3
    assert exact.stderr == b""
    assert len(json.loads(run_stet(home, "log", "limit.md", "--limit", "2", "--json").stdout)) == 2
    assert run_stet(home, "log", "limit.md", "--limit", "2", "--json").stderr == b""  # JSON stays clean


def test_search_of_nothing_is_one_sentence_with_the_daemon_running(served: DaemonProcess) -> None:
    line = one_sentence(run_stet(served.home, "search", "", check=False))
    assert "give the words to search for" in line


def test_the_other_column_follows_the_folder_without_a_restart(served: DaemonProcess) -> None:
    home, vault = served.home, served.home.parent / "vault"

    def other() -> int:
        data = json.loads(run_stet(home, "status", "--json").stdout)
        return int(data["vaults"][0]["otherFiles"])

    start = other()
    (vault / "picture.png").write_bytes(b"\x89PNG not really")
    (vault / "docs").mkdir()
    (vault / "docs" / "paper.pdf").write_bytes(b"%PDF-")
    (vault / "ignored.swp").write_bytes(b"")  # the default ignore rules: never counted
    wait_until(lambda: other() == start + 2, timeout=30, what="OTHER to count two new attachments")
    table = run_stet(home, "status").stdout.decode()
    header = next(line for line in table.splitlines() if "OTHER" in line)
    row = next(line for line in table.splitlines() if line.startswith("notes"))
    assert row[header.index("OTHER"):].split()[0] == str(start + 2)
    (vault / "picture.png").unlink()
    wait_until(lambda: other() == start + 1, timeout=30, what="OTHER to drop a removed attachment")
