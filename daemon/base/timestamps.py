"""Timestamps as the API shows them: ISO 8601, UTC, with a Z."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")
