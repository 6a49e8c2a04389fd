"""This device's identity: an ECDSA P-256 key and a self-signed certificate.

The device ID (``stet.sync.device_ids``) is the SHA-256 of the DER certificate, so the
certificate must outlive restarts unchanged: it is kept in ``<home>/device.crt``
(public, though written 0600 like everything in the home). The private key (PKCS#8 PEM)
is kept with keyring (service ``layout.keyring_service``, user ``device-key``); where no
keyring backend works (headless Linux), in ``<home>/device.key``, a 0600 file written
atomically, with a warning - the same rule as the owner token (SPEC §4.1).

Python's ``ssl`` reads a key only from a file (``SSLContext.load_cert_chain``):
``load_identity_into`` (``device_cert``) hands it an in-memory file on Linux, elsewhere
a 0600 temp file in the home with the key *encrypted* under a one-time password, deleted
at once; a file left behind by a crash is useless (and swept at the next start).

The running daemon imports neither keyring nor ``cryptography``: it calls this module in a
short-lived child process at start (``startup_secrets``) and keeps only the bytes (P7).

Changing identity means every peer must pair again, so nothing here replaces a key
silently: an unreadable key is an error; a missing one (keyring reset, or a home moved,
which changes ``keyring_service``) makes a new identity with a loud warning. Create the
identity in the daemon, which holds the home's lock: two processes creating one at the same
moment would each store a key.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
from pathlib import Path

import keyring
import keyring.errors
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The running daemon's side (no keyring, no cryptography: P7), re-exported for callers here.
from stet.daemon.identity.device_cert import SCRATCH_PREFIX as _SCRATCH_PREFIX
from stet.daemon.identity.device_cert import DeviceIdentity, load_identity_into
from stet.sync.device_ids import device_id_of
from stet.sync.errors import StoreError
from stet.sync.home import write_private_file
from stet.sync.home_layout import HomeLayout

__all__ = ["DeviceIdentity", "generate_identity", "load_identity_into", "load_or_create_identity",
           "write_cert_files"]

logger = logging.getLogger(__name__)

DEVICE_KEY_USER = "device-key"
CERT_COMMON_NAME = "stet"
CERT_VALIDITY = datetime.timedelta(days=20 * 365)


def device_cert_file(layout: HomeLayout) -> Path:
    return layout.root / "device.crt"


def device_key_file(layout: HomeLayout) -> Path:
    """Where the key lives only when no keyring backend works."""
    return layout.root / "device.key"


def load_or_create_identity(layout: HomeLayout) -> DeviceIdentity:
    """This home's identity, created on first use; the same device ID across restarts."""
    layout.ensure()
    _sweep_scratch(layout.root)
    key_pem, where = _load_key(layout)
    if key_pem is None:
        if device_cert_file(layout).exists():
            logger.warning(
                "the device key of %s is gone (keyring reset, or the home moved?): creating a new "
                "device identity; every peer must pair with this device again", layout.root,
            )
        key_pem = _new_key_pem()
        where = _store_key(layout, key_pem)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError:
        raise StoreError(f"the device key in {where} is unreadable: restore it, or remove it to "
                         "create a new identity (peers must then pair again)") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise StoreError(f"the device key in {where} is not an EC key")
    cert_pem = _load_matching_cert(layout, key)
    if cert_pem is None:
        cert_pem = _new_cert_pem(key)
        write_private_file(device_cert_file(layout), cert_pem)
    cert_der = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
    identity = DeviceIdentity(cert_pem, key_pem, cert_der, device_id_of(cert_der), scratch_dir=layout.root)
    logger.info("device ID %s (key in %s)", identity.device_id, where)
    return identity


def generate_identity(scratch_dir: Path | None = None) -> DeviceIdentity:
    """A fresh identity kept only in memory (tests, tools)."""
    key_pem = _new_key_pem()
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    cert_pem = _new_cert_pem(key)
    cert_der = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
    return DeviceIdentity(cert_pem, key_pem, cert_der, device_id_of(cert_der), scratch_dir=scratch_dir)


def write_cert_files(identity: DeviceIdentity, directory: Path) -> tuple[Path, Path]:
    """Write ``tls-export.crt`` and a plaintext ``tls-export.key`` (0600, atomic) into ``directory``.

    For tools that need files. Stet itself never calls it (``load_identity_into`` is the
    safe path); whoever does owns the key file and must delete it. (The names differ from
    the home's ``device.crt``/``device.key``, so deleting them never deletes the identity.)
    """
    certfile, keyfile = directory / "tls-export.crt", directory / "tls-export.key"
    write_private_file(certfile, identity.cert_pem)
    write_private_file(keyfile, identity.key_pem)
    return certfile, keyfile


# -- the key --------------------------------------------------------------------------


def _load_key(layout: HomeLayout) -> tuple[bytes | None, str]:
    try:
        stored = keyring.get_password(layout.keyring_service, DEVICE_KEY_USER)
        if stored:
            return stored.encode("ascii"), "the keyring"
    except keyring.errors.KeyringError:
        pass
    path = device_key_file(layout)
    if path.exists():
        return path.read_bytes(), str(path)
    return None, ""


def _store_key(layout: HomeLayout, key_pem: bytes) -> str:
    text = key_pem.decode("ascii")
    try:
        keyring.set_password(layout.keyring_service, DEVICE_KEY_USER, text)
        if keyring.get_password(layout.keyring_service, DEVICE_KEY_USER) == text:
            logger.info("device key stored in the keyring (%s)", type(keyring.get_keyring()).__name__)
            return "the keyring"
    except keyring.errors.KeyringError as exc:
        logger.warning(
            "no usable keyring backend (%s): keeping the device key in %s (mode 0600)",
            exc, device_key_file(layout),
        )
    else:
        logger.warning("the keyring did not keep the device key: keeping it in %s (mode 0600)",
                       device_key_file(layout))
    write_private_file(device_key_file(layout), key_pem)
    return str(device_key_file(layout))


def _new_key_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


# -- the certificate ------------------------------------------------------------------


def _load_matching_cert(layout: HomeLayout, key: ec.EllipticCurvePrivateKey) -> bytes | None:
    path = device_cert_file(layout)
    try:
        cert_pem = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        logger.warning("%s is unreadable: making a new certificate (a new device ID)", path)
        return None
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(serialization.Encoding.DER, spki) != key.public_key().public_bytes(
        serialization.Encoding.DER, spki
    ):
        logger.warning("%s is not the certificate of this device's key: making a new one "
                       "(a new device ID; peers must pair again)", path)
        return None
    return cert_pem


def _new_cert_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    # A subject of its own per device (and a matching authority key id): with several
    # peers' self-signed certificates trusted at once, OpenSSL picks the issuer by name,
    # and identical names made it check a certificate against another peer's key.
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{CERT_COMMON_NAME}-{ski.digest.hex()[:16]}")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))  # tolerate a peer's clock behind ours
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(CERT_COMMON_NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def _sweep_scratch(directory: Path) -> None:
    """Remove scratch key files a crash left behind (encrypted under a forgotten password).

    Only old ones: another process on this home may be between writing and loading its own.
    """
    cutoff = time.time() - 60
    for path in directory.glob(f"{_SCRATCH_PREFIX}*.pem"):
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < cutoff:
                path.unlink()
