"""Invites and join proofs (SPEC §4.2), as pure functions.

An invite is one line: ``stet-invite:2:`` + base64url(JSON) with the vault id and name,
a single-use Ed25519 private key (its 32-byte seed, base64url), the inviter's device ID,
its addresses and the expiry. The inviter's home keeps only the matching *public* key
(``ed25519:<hex>``), which can check a proof but never make one: a full copy of the home
does not let its reader join (SPEC R4). The joiner proves it holds the invite by signing
BOTH certificates' fingerprints (the inviter's, as seen in the TLS handshake, and its own):
a man in the middle has a different certificate on one side, so a proof it relays is
worthless, and it never sees the key itself.

Version 1 invites (an HMAC keyed with a hash the home stored, so the home could forge
proofs) are refused with a sentence asking for a new invite.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import StetError

if TYPE_CHECKING:  # cryptography is imported where keys are used: `stet --help` stays light (P10)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PREFIX = "stet-invite:2:"
OLD_PREFIXES = ("stet-invite:1:",)
KEY_PREFIX = "ed25519:"  # how home.db keeps an invite's public key


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_invite_key() -> tuple[str, str]:
    """(the secret for the invite line, the verify key for home.db)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return _b64(seed), verify_key_of(key.public_key())


def verify_key_of(public: Ed25519PublicKey) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return KEY_PREFIX + public.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def _private_key(secret: str) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        seed = _unb64(secret)
        if len(seed) != 32:
            raise ValueError
        return Ed25519PrivateKey.from_private_bytes(seed)
    except (ValueError, binascii.Error):
        raise StetError("the invite is damaged (copy the whole line)") from None


def verify_key_for(secret: str) -> str:
    return verify_key_of(_private_key(secret).public_key())


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
    if text.startswith(OLD_PREFIXES):
        raise StetError("that invite was made by an older Stet (stet-invite:1:): ask for a new one "
                        "with `stet invite`")
    if not text.startswith(PREFIX):
        raise StetError(f"that is not a Stet invite (it should start with {PREFIX})")
    raw = text[len(PREFIX):]
    try:
        data: Any = json.loads(_unb64(raw))
    except (ValueError, RecursionError, binascii.Error):
        raise StetError("the invite is damaged (copy the whole line)") from None
    try:
        addresses = tuple(str(a) for a in data["a"])
        invite = Invite(str(data["v"]), str(data["n"]), str(data["s"]), str(data["d"]), addresses,
                        float(data["e"]))
    except (KeyError, TypeError, ValueError):
        raise StetError("the invite is damaged (copy the whole line)") from None
    return invite


def _proof_message(vault_id: str, inviter_cert_der: bytes, joiner_cert_der: bytes) -> bytes:
    return (b"stet-join:2\0" + vault_id.encode("utf-8", "replace") + b"\0"
            + hashlib.sha256(inviter_cert_der).digest() + hashlib.sha256(joiner_cert_der).digest())


def proof_for_secret(secret: str, vault_id: str, inviter_cert_der: bytes, joiner_cert_der: bytes) -> str:
    """The joiner's proof: its signature, with the invite's key, over both certificates."""
    signature = _private_key(secret).sign(_proof_message(vault_id, inviter_cert_der, joiner_cert_der))
    return signature.hex()


def check_proof(proof: str, verify_keys: list[str], vault_id: str, inviter_cert_der: bytes,
                joiner_cert_der: bytes) -> str | None:
    """The verify key (as stored) of the invite the proof was made with, or None."""
    try:
        signature = bytes.fromhex(proof)
    except ValueError:
        return None
    if len(signature) != 64:
        return None
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    message = _proof_message(vault_id, inviter_cert_der, joiner_cert_der)
    for stored in verify_keys:
        if not stored.startswith(KEY_PREFIX):
            continue  # a version 1 invite's hash: it verifies nothing
        try:
            public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(stored[len(KEY_PREFIX):]))
            public.verify(signature, message)
        except (ValueError, InvalidSignature):
            continue
        return stored
    return None
