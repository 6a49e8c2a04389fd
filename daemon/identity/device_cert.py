"""This device's identity as the running daemon holds it, and loading it into TLS.

Kept apart from ``device_identity`` (which creates and stores the key, with keyring and
``cryptography``) so the daemon's resident memory holds neither library (SPEC §9 P7: they
are ~11 MB of a ~58 MB start): the daemon reads its secrets in a short-lived child
process (``startup_secrets``) and only ever needs the PEM bytes here.

``load_identity_into``: Python's ``ssl`` reads a key only from a file. On Linux the key
goes to an anonymous in-memory file (``memfd_create``, never on any disk, gone when
closed), read through ``/proc/self/fd``. Elsewhere it goes to a 0600 temp file in the
home encrypted under a one-time password (``cryptography``, imported only there) and is
deleted at once; a file left behind by a crash is useless and swept at the next start.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from stet.sync.device_ids import short_id

SCRATCH_PREFIX = ".stet-tls-"


@dataclass(frozen=True)
class DeviceIdentity:
    cert_pem: bytes
    key_pem: bytes = field(repr=False)  # PKCS#8 PEM, unencrypted: never log it
    cert_der: bytes = field(repr=False)
    device_id: str
    # A private (0700) directory for the short-lived files ssl needs; None = the system temp dir.
    scratch_dir: Path | None = None

    @property
    def short_id(self) -> str:
        return short_id(self.device_id)


def cert_der_of(cert_pem: bytes | str) -> bytes:
    """The DER bytes of a PEM certificate, checked by OpenSSL (``ValueError`` if it is not
    an X.509 certificate)."""
    try:
        text = cert_pem.decode("ascii") if isinstance(cert_pem, bytes) else cert_pem
        der = ssl.PEM_cert_to_DER_cert(text.strip() + "\n")
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=der)
    except (ValueError, TypeError, ssl.SSLError) as exc:  # binascii.Error is a ValueError
        raise ValueError(f"not a PEM certificate: {exc}") from None
    return der


def load_identity_into(ctx: ssl.SSLContext, identity: DeviceIdentity) -> None:
    """``ctx.load_cert_chain`` for ``identity`` without a plaintext key file on disk."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None and os.path.isdir("/proc/self/fd"):
        fd = memfd_create("stet-tls", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.write(fd, identity.cert_pem + b"\n" + identity.key_pem)
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    _load_sealed(ctx, identity)


def _load_sealed(ctx: ssl.SSLContext, identity: DeviceIdentity) -> None:
    """The portable way: the key encrypted under a one-time password in a 0600 temp file
    in ``identity.scratch_dir``, removed before this returns."""
    from cryptography.hazmat.primitives import serialization  # only here: memory (P7)

    key = serialization.load_pem_private_key(identity.key_pem, password=None)
    password = secrets.token_bytes(32)
    sealed = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password),
    )
    fd, name = tempfile.mkstemp(prefix=SCRATCH_PREFIX, suffix=".pem", dir=identity.scratch_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(identity.cert_pem + sealed)
        ctx.load_cert_chain(name, password=password)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
