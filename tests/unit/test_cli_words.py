"""``--since`` parsing and ``stet held``'s table (issue 13, item 7), as pure functions."""

from __future__ import annotations

from datetime import datetime

import pytest

from stet.client.cli_agents import parse_since
from stet.client.cli_versions import held_table
from stet.sync.errors import StetError

NOW = datetime(2026, 3, 14, 15, 9, 26).astimezone().timestamp()


@pytest.mark.parametrize(("text", "seconds_ago"), [
    ("10m", 600), ("2h", 7200), ("1d", 86400), ("1w", 7 * 86400), ("30s", 30), ("1.5h", 5400), (" 2H ", 7200),
])
def test_durations(text: str, seconds_ago: float) -> None:
    assert parse_since(text, now=NOW) == pytest.approx(NOW - seconds_ago)


def test_today_and_yesterday_are_local_midnights() -> None:
    today = datetime(2026, 3, 14).astimezone().timestamp()
    assert parse_since("today", now=NOW) == today
    assert parse_since("Yesterday", now=NOW) == datetime(2026, 3, 13).astimezone().timestamp()


def test_iso_times_and_timestamps() -> None:
    assert parse_since("2026-03-01", now=NOW) == datetime(2026, 3, 1).astimezone().timestamp()
    assert parse_since("2026-03-01T09:30:00+00:00", now=NOW) == 1772357400.0
    assert parse_since("1700000000", now=NOW) == 1700000000.0


@pytest.mark.parametrize("text", ["", "last week", "10 minutes", "-5", "nan", "inf", "2026-13-01", "m10"])
def test_anything_else_names_what_it_accepts(text: str) -> None:
    with pytest.raises(StetError, match=r"--since .* is not a time: give 10m, 2h, 1d, 1w, today, yesterday"):
        parse_since(text, now=NOW)


def _row(i: int, kind: str, state: str = "held") -> dict[str, object]:
    return {"id": i, "kind": kind, "source": "disk", "heldAt": "2026-03-14T15:09:26Z", "releasesAt": None,
            "state": state, "path": f"n{i}.md"}


def test_the_held_table_keeps_its_columns_for_every_kind() -> None:
    lines = held_table([_row(1, "deleted"), _row(2, "overwritten"), _row(3, "emptied"),
                        _row(40, "deleted", state="released")])
    header, rows, footer = lines[0], lines[1:5], lines[5]
    for column in ("SOURCE", "HELD", "UNTIL", "PATH"):
        starts = {row.index(value) for row, value in zip(rows, _cells(column, rows), strict=True)}
        assert starts == {header.index(column)}, column
    assert rows[1].split()[1] == "overwritten"
    assert "stet release" in footer


def _cells(column: str, rows: list[str]) -> list[str]:
    return {"SOURCE": ["disk"] * 4, "HELD": [rows[0].split()[3]] * 4,
            "UNTIL": ["a person acts"] * 3 + ["released"],
            "PATH": ["n1.md", "n2.md", "n3.md", "n40.md"]}[column]


def test_nothing_held() -> None:
    assert held_table([]) == ["Nothing is held."]
