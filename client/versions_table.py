"""The table ``stet versions`` prints, for notes (``cli_versions``) and attachments
(``cli_attachment_versions``): the same lines around it, columns per kind."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import click


def when(iso: str | None) -> str:
    """An API timestamp (UTC, ISO 8601) in local time, to the second."""
    if not iso:
        return "-"
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


@dataclass(frozen=True, slots=True)
class Column:
    title: str
    value: Callable[[dict[str, Any]], object]
    width: int = 0  # 0: the last column, as wide as its text
    right: bool = False  # aligned right (numbers)
    cut: bool = False  # longer text is cut to the width

    def cell(self, text: object) -> str:
        if not self.width:
            return str(text)
        spec = f"{'>' if self.right else '<'}{self.width}{f'.{self.width}' if self.cut else ''}"
        return format(str(text) if self.cut or not isinstance(text, int) else text, spec)


def common_columns(kind_width: int) -> list[Column]:
    """ID, KIND, SAVED, SOURCE: the columns every version table starts with."""
    return [Column("ID", lambda v: v["id"], 6, right=True),
            Column("KIND", lambda v: v["kind"], kind_width),
            Column("SAVED", lambda v: when(v["createdAt"]), 19),
            Column("SOURCE", lambda v: v.get("by") or v["source"], 28, cut=True)]


def print_versions(path: str, data: dict[str, Any], columns: Sequence[Column]) -> None:
    """``data``: the API's ``{deleted, versions}`` answer."""
    rows = data["versions"]
    if not rows:
        click.echo(f"No versions of {path} yet.")
        return
    if data.get("deleted"):
        click.echo(f"{path} is deleted; `stet restore {path}` brings it back.")
    click.echo("  ".join(c.cell(c.title) if c.width else c.title for c in columns))
    for v in rows:
        click.echo("  ".join(c.cell(c.value(v)) for c in columns))
