"""Invites and join proofs (SPEC §4.2), as pure functions.

An invite is one line: ``stet-invite:1:`` + base64url(JSON) with the vault id and name,
a single-use secret, the inviter's device ID, its addresses and the expiry. The joiner
proves it holds the secret with an HMAC bound to BOTH certificates (the inviter's, as
seen in the TLS handshake, and its own): a man in the middle has a different
certificate on one side, so a proof it relays is worthless, and it never sees the
secret itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from .errors import StetError
from .home import invite_key_hash

PREFIX = "stet-invite:1:"


@dataclass(frozen=True, slots=True)
class Invite:
    vault_id: str
    vault_name: str
    secret: str
    device_id: str
    addresses: tuple[str, ...]
    expires_at: float

    def encode(self) -> str:
        body = {"v": self.vault_id, "n": self.vault_name, "s": self.secret, "d": self.device_id,
                "a": list(self.addresses), "e": self.expires_at}
        raw = json.dumps(body, separators=(",", ":")).encode()
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_invite(text: str) -> Invite:
    text = text.strip()
    if not text.startswith(PREFIX):
        raise StetError("that is not a Stet invite (it should start with stet-invite:1:)")
    raw = text[len(PREFIX):]
    try:
        data: Any = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except ValueError:
        raise StetError("the invite is damaged (copy the whole line)") from None
    try:
        addresses = tuple(str(a) for a in data["a"])
        invite = Invite(str(data["v"]), str(data["n"]), str(data["s"]), str(data["d"]), addresses,
                        float(data["e"]))
    except (KeyError, TypeError, ValueError):
        raise StetError("the invite is damaged (copy the whole line)") from None
    return invite


def join_proof(secret_key_hash: str, vault_id: str, inviter_cert_der: bytes, joiner_cert_der: bytes) -> str:
    msg = (b"stet-join\0" + vault_id.encode() + b"\0" + hashlib.sha256(inviter_cert_der).digest()
           + hashlib.sha256(joiner_cert_der).digest())
    return hmac.new(bytes.fromhex(secret_key_hash), msg, hashlib.sha256).hexdigest()


def proof_for_secret(secret: str, vault_id: str, inviter_cert_der: bytes, joiner_cert_der: bytes) -> str:
    return join_proof(invite_key_hash(secret), vault_id, inviter_cert_der, joiner_cert_der)


def check_proof(proof: str, key_hashes: list[str], vault_id: str, inviter_cert_der: bytes,
                joiner_cert_der: bytes) -> str | None:
    """The key hash of the invite the proof was made with, or None."""
    for key in key_hashes:
        expected = join_proof(key, vault_id, inviter_cert_der, joiner_cert_der)
        if hmac.compare_digest(expected, proof):
            return key
    return None
