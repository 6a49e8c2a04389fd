"""Device IDs: Syncthing's format and check characters, and what normalize accepts."""

from __future__ import annotations

import base64
import hashlib

import pytest

from stet.sync.device_ids import (
    ALPHABET,
    cert_matches_device_id,
    device_id_from_fingerprint,
    device_id_of,
    fingerprint,
    fingerprint_of_device_id,
    luhn32,
    normalize_device_id,
    short_id,
)

# Syncthing's own test vector (lib/protocol/deviceid_test.go): the unchecked base32 and the
# formatted ID with its check characters.
SYNCTHING_RAW = "P56IOI7MZJNU2IQGDREYDM2MGTMGL3BXNPQ6W5BTBBZ4TJXZWICQ"
SYNCTHING_ID = "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2"


def test_matches_syncthing_published_vector() -> None:
    digest = base64.b32decode(SYNCTHING_RAW + "====")
    assert device_id_from_fingerprint(digest) == SYNCTHING_ID
    assert fingerprint_of_device_id(SYNCTHING_ID) == digest


@pytest.mark.parametrize(("block", "check"), [
    # The four blocks of Syncthing's vector, and two from another Syncthing implementation.
    ("P56IOI7MZJNU2", "Y"), ("IQGDREYDM2MGT", "I"), ("MGL3BXNPQ6W5B", "M"), ("TBBZ4TJXZWICQ", "2"),
    ("WG2IWWALPC2HZ", "H"), ("KHQNO2S5QSILR", "K"),
])
def test_luhn32_vectors(block: str, check: str) -> None:
    assert luhn32(block) == check


def test_luhn32_rejects_foreign_characters() -> None:
    with pytest.raises(ValueError, match="not a base32 character"):
        luhn32("ABC1")


@pytest.mark.parametrize("spelling", [
    SYNCTHING_ID,
    SYNCTHING_ID.lower(),
    SYNCTHING_ID.replace("-", ""),
    SYNCTHING_ID.replace("-", " "),
    "  P56IOI7 MZJNU2Y\tIQGDREY-DM2MGTI\nMGL3BXN PQ6W5BM TBBZ4TJ XZWICQ2  ",
    "P56IOI7MZJNU2YIQGDREYDM2MGTIMGL3BXNPQ6W5BMTBBZ4TJXZWICQ2",
    "P561017MZJNU2YIQGDREYDM2MGTIMGL3BXNPQ6W5BMT88Z4TJXZWICQ2",  # 0/1/8 typed for O/I/B
    "p56ioi7mzj-nu2yiq-gdreydm2mgtimgl3bxnpq6w5bmtbbz4tjxzwicq2",
])
def test_normalize_accepts_any_case_spacing_and_dashes(spelling: str) -> None:
    assert normalize_device_id(spelling) == SYNCTHING_ID


def test_every_single_character_typo_is_caught() -> None:
    compact = SYNCTHING_ID.replace("-", "")
    for i, original in enumerate(compact):
        for replacement in ALPHABET:
            if replacement == original:
                continue
            typo = compact[:i] + replacement + compact[i + 1:]
            with pytest.raises(ValueError, match="check character|not canonical"):
                normalize_device_id(typo)


@pytest.mark.parametrize(("text", "message"), [
    ("", "expected 8 groups of 7 characters"),
    ("ABC", "got 3"),
    (SYNCTHING_RAW, "check characters are missing"),
    (SYNCTHING_ID + "A", "got 57"),
    (SYNCTHING_ID.replace("P56", "P5!"), "'!' not allowed"),
    (SYNCTHING_ID[:-1] + "9", "'9' not allowed"),
    (SYNCTHING_ID.replace("MZJNU2Y", "MZJNU2Z"), "check character of characters 1-14 is wrong"),
])
def test_normalize_rejects_bad_ids_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        normalize_device_id(text)


def test_non_canonical_last_character_is_rejected() -> None:
    # The 52nd base32 character holds 1 bit of the hash and 4 zero bits: 'R' (10001) has
    # nonzero padding bits yet decodes to the same hash as 'Q' (10000).
    raw = SYNCTHING_RAW[:-1] + "R"
    block = raw[39:]
    spelled = raw[:13] + "Y" + raw[13:26] + "I" + raw[26:39] + "M" + block + luhn32(block)
    with pytest.raises(ValueError, match="not canonical"):
        normalize_device_id(spelled)


def test_normalize_rejects_non_text() -> None:
    with pytest.raises(ValueError, match="is text"):
        normalize_device_id(b"P56IOI7")  # type: ignore[arg-type]


def test_device_id_of_a_certificate() -> None:
    cert = b"0\x82\x01\x00 not really DER, any bytes will do"
    device_id = device_id_of(cert)
    assert fingerprint(cert) == hashlib.sha256(cert).digest()
    assert fingerprint_of_device_id(device_id) == fingerprint(cert)
    assert normalize_device_id(device_id) == device_id
    assert len(device_id) == 63
    assert [len(g) for g in device_id.split("-")] == [7] * 8
    assert short_id(device_id) == device_id.split("-")[0]
    assert cert_matches_device_id(cert, device_id.lower())
    assert not cert_matches_device_id(cert + b"x", device_id)
    assert not cert_matches_device_id(cert, "garbage")


def test_fingerprint_length_is_checked() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        device_id_from_fingerprint(b"\x00" * 31)
