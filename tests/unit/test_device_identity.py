"""The device identity: keyring first, else a 0600 file; stable across restarts."""

from __future__ import annotations

import logging
import os
import re
import ssl
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import keyring
import keyring.backend
import keyring.backends.fail
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from stet.daemon.identity.device_identity import (
    DEVICE_KEY_USER,
    device_cert_file,
    device_key_file,
    generate_identity,
    load_identity_into,
    load_or_create_identity,
    write_cert_files,
)
from stet.sync.device_ids import device_id_of, normalize_device_id
from stet.sync.errors import StoreError
from stet.sync.home import HomeLayout


class MemoryKeyring(keyring.backend.KeyringBackend):
    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.items: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.items.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.items[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        del self.items[(service, username)]


@pytest.fixture
def memory_keyring() -> Iterator[MemoryKeyring]:
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(previous)


@pytest.fixture
def no_keyring() -> Iterator[None]:
    previous = keyring.get_keyring()
    keyring.set_keyring(keyring.backends.fail.Keyring())
    try:
        yield
    finally:
        keyring.set_keyring(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keyring_keeps_the_key_and_the_id_survives_restarts(
    home: Path, memory_keyring: MemoryKeyring,
) -> None:
    layout = HomeLayout(home)
    first = load_or_create_identity(layout)
    assert normalize_device_id(first.device_id) == first.device_id == device_id_of(first.cert_der)
    assert memory_keyring.items[(layout.keyring_service, DEVICE_KEY_USER)].encode() == first.key_pem
    assert not device_key_file(layout).exists()
    assert device_cert_file(layout).read_bytes() == first.cert_pem
    again = load_or_create_identity(layout)
    assert (again.device_id, again.cert_der) == (first.device_id, first.cert_der)
    assert again.key_pem == first.key_pem
    assert "PRIVATE KEY" not in repr(first)


def test_without_a_keyring_the_key_is_a_0600_file_with_a_warning(
    home: Path, no_keyring: None, caplog: pytest.LogCaptureFixture,
) -> None:
    layout = HomeLayout(home)
    with caplog.at_level(logging.WARNING, logger="stet.daemon.identity.device_identity"):
        first = load_or_create_identity(layout)
    assert any("no usable keyring backend" in r.getMessage() for r in caplog.records)
    key_file = device_key_file(layout)
    assert key_file.read_bytes() == first.key_pem
    assert _mode(key_file) == 0o600
    assert load_or_create_identity(layout).device_id == first.device_id


def test_the_certificate_is_what_the_brief_says(tmp_path: Path) -> None:
    identity = generate_identity(tmp_path)
    cert = x509.load_der_x509_certificate(identity.cert_der)
    # CN "stet-<hex of the key id>": distinct subjects, so OpenSSL never checks one peer's
    # certificate against another trusted peer's key (it looks issuers up by name).
    assert cert.subject == cert.issuer
    assert re.fullmatch(r"CN=stet-[0-9a-f]{16}", cert.subject.rfc4514_string())
    assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == ["stet"]
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert isinstance(cert.public_key().curve, ec.SECP256R1)  # type: ignore[union-attr]
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days >= 20 * 365
    assert cert.serial_number > 2**64
    assert generate_identity(tmp_path).device_id != identity.device_id


def test_a_lost_key_makes_a_new_identity_loudly(
    home: Path, memory_keyring: MemoryKeyring, caplog: pytest.LogCaptureFixture,
) -> None:
    layout = HomeLayout(home)
    first = load_or_create_identity(layout)
    memory_keyring.items.clear()
    with caplog.at_level(logging.WARNING, logger="stet.daemon.identity.device_identity"):
        second = load_or_create_identity(layout)
    assert second.device_id != first.device_id
    assert any("must pair" in r.getMessage() for r in caplog.records)
    assert load_or_create_identity(layout).device_id == second.device_id


def test_a_lost_certificate_is_remade_from_the_key(home: Path, memory_keyring: MemoryKeyring) -> None:
    layout = HomeLayout(home)
    first = load_or_create_identity(layout)
    device_cert_file(layout).unlink()
    second = load_or_create_identity(layout)
    assert second.key_pem == first.key_pem
    assert second.device_id != first.device_id


def test_a_certificate_of_another_key_is_replaced(home: Path, memory_keyring: MemoryKeyring) -> None:
    layout = HomeLayout(home)
    first = load_or_create_identity(layout)
    device_cert_file(layout).write_bytes(generate_identity().cert_pem)
    second = load_or_create_identity(layout)
    assert second.key_pem == first.key_pem
    assert x509.load_pem_x509_certificate(device_cert_file(layout).read_bytes()).public_key() == \
        x509.load_der_x509_certificate(second.cert_der).public_key()


def test_an_unreadable_key_is_an_error_not_a_silent_new_identity(home: Path, no_keyring: None) -> None:
    layout = HomeLayout(home)
    load_or_create_identity(layout)
    device_key_file(layout).write_bytes(b"-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n")
    with pytest.raises(StoreError, match="unreadable"):
        load_or_create_identity(layout)


def test_load_identity_into_leaves_no_key_file_behind(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o700)
    identity = generate_identity(scratch)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_identity_into(ctx, identity)
    assert list(scratch.iterdir()) == []


def test_stale_scratch_files_are_swept_fresh_ones_kept(home: Path, memory_keyring: MemoryKeyring) -> None:
    stale, fresh = home / ".stet-tls-old.pem", home / ".stet-tls-new.pem"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    load_or_create_identity(HomeLayout(home))
    assert not stale.exists()
    assert fresh.exists()


def test_write_cert_files(tmp_path: Path) -> None:
    identity = generate_identity()
    certfile, keyfile = write_cert_files(identity, tmp_path)
    layout = HomeLayout(tmp_path)
    assert keyfile != device_key_file(layout)
    assert certfile != device_cert_file(layout)
    assert certfile.read_bytes() == identity.cert_pem
    assert keyfile.read_bytes() == identity.key_pem
    assert _mode(keyfile) == 0o600
    ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(certfile, keyfile)
