"""Idempotency keys (SPEC §6.5): a retried write returns its first result, applies nothing.

Keys are scoped to (token, vault) -- each vault has its own store -- and live at least
``min_age_s`` (24 h). The same key with a different payload is refused.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .errors import StetError
from .store import VaultStore

MIN_AGE_S = 24 * 3600.0


def payload_hash(operation: str, path: str, payload: dict[str, Any]) -> str:
    canonical = json.dumps([operation, path, payload], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class IdempotencyKeys:
    def __init__(self, store: VaultStore, *, min_age_s: float = MIN_AGE_S) -> None:
        self.store = store
        self.min_age_s = min_age_s

    def lookup(self, token: str, key: str, digest: str) -> dict[str, Any] | None:
        """The first result for this key, or None if the key is new.

        Raises ``idempotency_key_reused`` if the key was used for a different payload.
        """
        row = self.store.db.execute(
            "SELECT payload_hash, result FROM idempotency WHERE token = ? AND key = ?", (token, key)
        ).fetchone()
        if row is None:
            return None
        if row[0] != digest:
            raise StetError(
                "this idempotencyKey was already used for a different request",
                code="idempotency_key_reused", idempotencyKey=key,
            )
        result: dict[str, Any] = json.loads(row[1])
        return result

    def save(self, token: str, key: str, digest: str, result: dict[str, Any], now: float) -> None:
        """Call inside the same store transaction as the write it belongs to."""
        self.store.write_one(
            "INSERT INTO idempotency (token, key, payload_hash, result, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (token, key, digest, json.dumps(result, ensure_ascii=False), now),
        )

    def prune(self, now: float) -> int:
        with self.store.transaction():
            cur = self.store.db.execute("DELETE FROM idempotency WHERE created_at < ?",
                                        (now - 2 * self.min_age_s,))
        return cur.rowcount
