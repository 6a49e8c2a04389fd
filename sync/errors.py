"""One exception root for Stet; every error that crosses a boundary carries a code.

The codes are the wire codes of SPEC §6.7. Adapters (HTTP, MCP, CLI) translate a
``StetError`` into their own shape; nothing below them knows about HTTP.
"""

from __future__ import annotations

from typing import Any

# code -> HTTP status, the single table every face uses.
STATUS_BY_CODE: dict[str, int] = {
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "already_exists": 409,
    "revision_mismatch": 409,
    "revision_unknown": 409,
    "anchor_not_found": 422,
    "anchor_ambiguous": 422,
    "anchors_overlap": 422,
    "invalid_path": 400,
    "too_large": 413,
    "brake_engaged": 423,
    "idempotency_key_reused": 422,
    "bad_request": 400,
    "unavailable": 503,
    "expired_snapshot": 410,  # a snapshot read after the snapshot's hour (SPEC §6.4)
}


class StetError(Exception):
    """Base of every error Stet raises on purpose."""

    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details

    @property
    def status(self) -> int:
        return STATUS_BY_CODE.get(self.code, 400)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


class BaseNotRebuilt(StetError):
    """A ``baseRevision`` whose state was remembered but whose text cannot be rebuilt (its
    deleted text was collected by a client that does not keep it): refused, and recorded
    in ``stet conflicts`` so the rewrite is not lost."""

    code = "revision_unknown"


class NotFound(StetError):
    code = "not_found"


class AlreadyExists(StetError):
    code = "already_exists"


class InvalidNotePath(StetError):
    code = "invalid_path"


class TooLarge(StetError):
    code = "too_large"


class CrdtError(StetError):
    """A CRDT update could not be decoded or applied (including pycrdt panics)."""

    code = "bad_request"


class StoreError(StetError):
    """The store cannot be opened or used (e.g. written by a newer Stet)."""

    code = "unavailable"
