"""The daemon's secrets read in a child process (daemon/identity/startup_secrets.py, P7): the same
token and identity as before, created once, and a broken key is a clear error, not a new
identity."""

from __future__ import annotations

from pathlib import Path

import pytest

from stet.daemon.identity.startup_secrets import load_startup_secrets
from stet.sync.errors import StoreError
from stet.sync.home import HomeLayout
from tests.harness import KEYRING_ENV


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HomeLayout:
    for k, v in KEYRING_ENV.items():  # no keyring backend: the documented 0600 files
        monkeypatch.setenv(k, v)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    out = HomeLayout(home)
    out.ensure()
    return out


async def test_the_child_creates_then_returns_the_same_secrets(layout: HomeLayout) -> None:
    token, identity = await load_startup_secrets(layout)
    assert token.startswith("stet_owner_")
    assert layout.owner_token_file.read_text().strip() == token
    again_token, again = await load_startup_secrets(layout)
    assert again_token == token
    assert again.device_id == identity.device_id
    assert again.cert_der == identity.cert_der
    assert again.key_pem == identity.key_pem
    assert again.scratch_dir == layout.root


async def test_an_unreadable_key_is_the_childs_error(layout: HomeLayout) -> None:
    await load_startup_secrets(layout)
    (layout.root / "device.key").write_bytes(b"not a key\n")
    with pytest.raises(StoreError, match="unreadable"):
        await load_startup_secrets(layout)
