"""P7 (SPEC §9): the daemon keeps out of its memory the libraries it needs only once or
never. keyring and cryptography (~11 MB resident together) are used at start, to read the
owner token and the device key, and when pairing (Ed25519 invites): child processes do
that (``startup_secrets``, ``invite_crypto``), and the daemon loads its TLS key from an
in-memory file, never from disk. zeroconf loads only
with mDNS on, rich and the mcp SDK never (they are the CLI's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from stet.sync.home import HomeLayout
from tests.harness import DaemonProcess, run_stet

HEAVY = ("keyring", "cryptography", "zeroconf", "rich", "mcp")


def test_importing_the_daemon_loads_none_of_the_heavy_libraries() -> None:
    code = ("import sys, json\n"
            "import stet.daemon.app.main, stet.daemon.app.runtime\n"
            "import stet.daemon.peers.hub, stet.daemon.peers.tls\n"
            "import stet.daemon.api.app, stet.daemon.identity.startup_secrets\n"
            "import stet.daemon.identity.device_cert\n"
            f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True)
    assert json.loads(out.stdout) == []


def _mapped_libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_markdown_it_loads_with_the_first_rendered_note_only() -> None:
    """The web page's markdown renderer (~0.5 MB resident) is imported when a note is first
    rendered, not with the daemon (issue 18 item 2, P7)."""
    code = ("import sys, json\n"
            "import stet.daemon.app.main, stet.daemon.app.runtime\n"
            "import stet.daemon.api.app, stet.daemon.ui.routes\n"
            "from stet.daemon.ui.html import render_markdown\n"
            "before = 'markdown_it' in sys.modules\n"
            "html = render_markdown('# Title\\n<script>x</script>\\n')\n"
            "print(json.dumps([before, 'markdown_it' in sys.modules, html]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True)
    before, after, html = json.loads(out.stdout)
    assert before is False
    assert after is True
    assert "<h1>Title</h1>" in html
    assert "<script>" not in html  # raw HTML still off


def test_a_running_daemon_serves_tls_without_keyring_or_cryptography_in_memory(
        home: Path, vault_dir: Path, daemon: DaemonProcess, daemon_factory: list[DaemonProcess]) -> None:
    assert daemon.proc is not None
    status = daemon.client.status()  # the owner token (read by the child) is accepted
    device_id = status["deviceId"]
    assert device_id
    maps = _mapped_libraries(daemon.proc.pid)
    assert "cryptography" not in maps
    assert "_cffi_backend" not in maps
    layout = HomeLayout(home)
    assert not list(layout.root.glob(".stet-tls-*"))  # no key file left, none needed
    # The peer listener speaks TLS with this identity: a second daemon pairs with it.
    home_b = home.parent / "home-b"
    home_b.mkdir()
    invite = run_stet(home, "invite", "notes", "--address", f"127.0.0.1:{status['peerPort']}", "--json")
    line = json.loads(invite.stdout)["invite"]
    b = DaemonProcess(home_b)
    daemon_factory.append(b)
    b.start()
    joined = run_stet(home_b, "join", line, str(home.parent / "vault-b"), "--json", timeout=300)
    assert json.loads(joined.stdout).get("joined")
    # Pairing's Ed25519 work (invite key, proof, its check) ran in child processes too.
    assert b.proc is not None
    for pid in (daemon.proc.pid, b.proc.pid):
        assert "cryptography" not in _mapped_libraries(pid)
    # Restarted, the same identity comes back from the child.
    assert daemon.stop() == 0
    daemon.start()
    assert daemon.client.status()["deviceId"] == device_id
    assert daemon.proc is not None
    assert "cryptography" not in _mapped_libraries(daemon.proc.pid)
