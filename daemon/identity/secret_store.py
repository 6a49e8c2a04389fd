"""Secrets of a home (the owner token now, the device key later): keyring first,
else a 0600 file in the home with a warning (headless Linux has no keyring backend).
"""

from __future__ import annotations

import logging
import secrets

import keyring
import keyring.errors

from stet.sync.home import write_private_file
from stet.sync.home_layout import HomeLayout

logger = logging.getLogger(__name__)

OWNER_TOKEN_USER = "owner-token"


def get_or_create_owner_token(layout: HomeLayout) -> str:
    """The owner token of this home, created on first use."""
    try:
        token = keyring.get_password(layout.keyring_service, OWNER_TOKEN_USER)
        if token:
            return token
    except keyring.errors.KeyringError:
        token = None
    if layout.owner_token_file.exists():
        return layout.owner_token_file.read_text().strip()
    token = "stet_owner_" + secrets.token_urlsafe(32)
    try:
        keyring.set_password(layout.keyring_service, OWNER_TOKEN_USER, token)
        if keyring.get_password(layout.keyring_service, OWNER_TOKEN_USER) == token:
            logger.info("owner token stored in the keyring (%s)", type(keyring.get_keyring()).__name__)
            return token
    except keyring.errors.KeyringError as exc:
        logger.warning(
            "no usable keyring backend (%s): keeping the owner token in %s (mode 0600)",
            exc, layout.owner_token_file,
        )
    write_private_file(layout.owner_token_file, token.encode() + b"\n")
    return token


def keyring_backend_name() -> str:
    backend = keyring.get_keyring()
    return f"{type(backend).__module__}.{type(backend).__name__}"
