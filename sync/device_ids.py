"""Device IDs: who a peer is, derived from its certificate (Syncthing's format).

A device ID is the SHA-256 of the device's DER certificate, in base32 (RFC 4648
alphabet, uppercase, padding dropped: 52 characters), cut into four blocks of 13
characters, each followed by one check character (56), and shown as 8 groups of 7
joined by dashes::

    P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2

This is exactly Syncthing's format, including its check character: Syncthing's
``luhn32`` is not the textbook Luhn mod N (it doubles every other character
counting from the left, starting with a factor of 1), and we reproduce it as is
so that the check characters match Syncthing's published IDs (see the tests).
Every check character catches any single mistyped character in its block.

``normalize_device_id`` accepts any case, spaces and dashes anywhere, and the
digits ``0``, ``1`` and ``8`` typed for ``O``, ``I`` and ``B`` (base32 has no such
digits), then verifies the check characters. Unlike Syncthing it does not accept
the old 52-character form without check characters: a typo would go unnoticed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_CODEPOINT = {c: i for i, c in enumerate(ALPHABET)}

FINGERPRINT_BYTES = 32
_BLOCK = 13  # base32 characters per check character
_BLOCKS = 4
_GROUP = 7  # characters per displayed group
_RAW_LENGTH = _BLOCK * _BLOCKS  # 52: base32 of 32 bytes without padding
CHECKED_LENGTH = (_BLOCK + 1) * _BLOCKS  # 56
DISPLAY_LENGTH = CHECKED_LENGTH + CHECKED_LENGTH // _GROUP - 1  # 63: 8 groups of 7, 7 dashes

# Characters people type for the base32 letters they resemble (Syncthing does the same).
_LOOKALIKES = str.maketrans({"0": "O", "1": "I", "8": "B"})
_SEPARATORS = str.maketrans("", "", "- \t\r\n")


def fingerprint(cert_der: bytes) -> bytes:
    """The SHA-256 of a DER certificate: what a device ID encodes."""
    return hashlib.sha256(cert_der).digest()


def luhn32(block: str) -> str:
    """Syncthing's check character for ``block`` (characters of ``ALPHABET``)."""
    factor = 1
    total = 0
    for ch in block:
        try:
            addend = factor * _CODEPOINT[ch]
        except KeyError:
            raise ValueError(f"{ch!r} is not a base32 character (A-Z, 2-7)") from None
        factor = 1 if factor == 2 else 2
        total += addend // 32 + addend % 32
    return ALPHABET[(32 - total % 32) % 32]


def device_id_from_fingerprint(digest: bytes) -> str:
    """The display form of a device ID from its 32-byte SHA-256 fingerprint."""
    if len(digest) != FINGERPRINT_BYTES:
        raise ValueError(f"a device fingerprint is {FINGERPRINT_BYTES} bytes, not {len(digest)}")
    raw = base64.b32encode(digest).decode("ascii").rstrip("=")
    checked = "".join(
        raw[i : i + _BLOCK] + luhn32(raw[i : i + _BLOCK]) for i in range(0, _RAW_LENGTH, _BLOCK)
    )
    return "-".join(checked[i : i + _GROUP] for i in range(0, CHECKED_LENGTH, _GROUP))


def device_id_of(cert_der: bytes) -> str:
    """The device ID of a DER certificate, e.g. ``P56IOI7-MZJNU2Y-...-XZWICQ2``."""
    return device_id_from_fingerprint(fingerprint(cert_der))


def fingerprint_of_device_id(text: str) -> bytes:
    """The 32-byte fingerprint a device ID (in any accepted spelling) stands for."""
    return _decode(text)[1]


def normalize_device_id(text: str) -> str:
    """The canonical form of a device ID typed or pasted by a person.

    Raises ``ValueError`` with a message fit to show that person when it is not one.
    """
    return _decode(text)[0]


def short_id(device_id: str) -> str:
    """The first group of a device ID (35 bits): enough to tell devices apart in logs."""
    return device_id[:_GROUP]


def cert_matches_device_id(cert_der: bytes, device_id: str) -> bool:
    """Whether ``cert_der`` is the certificate ``device_id`` names (any accepted spelling)."""
    try:
        expected = fingerprint_of_device_id(device_id)
    except ValueError:
        return False
    return hmac.compare_digest(fingerprint(cert_der), expected)


def _decode(text: str) -> tuple[str, bytes]:
    if not isinstance(text, str):
        raise ValueError(f"a device ID is text, not {type(text).__name__}")
    shown = text.strip()
    if len(shown) > 200:  # keep the message (and the work) small for junk input
        shown = shown[:40] + "..."
    cleaned = text.translate(_SEPARATORS).upper().translate(_LOOKALIKES)
    if len(cleaned) != CHECKED_LENGTH:
        hint = " (the check characters are missing)" if len(cleaned) == _RAW_LENGTH else ""
        raise ValueError(
            f"{shown!r} is not a device ID: expected 8 groups of 7 characters "
            f"({CHECKED_LENGTH} in all), got {len(cleaned)}{hint}"
        )
    bad = sorted({ch for ch in cleaned if ch not in _CODEPOINT})
    if bad:
        raise ValueError(
            f"{shown!r} is not a device ID: {''.join(bad)!r} not allowed (only A-Z and 2-7)"
        )
    raw = []
    for n in range(_BLOCKS):
        chunk = cleaned[n * (_BLOCK + 1) : (n + 1) * (_BLOCK + 1)]
        block, check = chunk[:_BLOCK], chunk[_BLOCK]
        if luhn32(block) != check:
            raise ValueError(
                f"{shown!r} is not a valid device ID: the check character of characters "
                f"{n * (_BLOCK + 1) + 1}-{(n + 1) * (_BLOCK + 1)} is wrong (a typo?)"
            )
        raw.append(block)
    digest = base64.b32decode("".join(raw) + "====")
    canonical = device_id_from_fingerprint(digest)
    if canonical.replace("-", "") != cleaned:
        # The last character carries one bit of the hash and four zero bits: the others
        # would decode to the same fingerprint under a different spelling.
        raise ValueError(f"{shown!r} is not a valid device ID: its last block is not canonical")
    return canonical, digest
