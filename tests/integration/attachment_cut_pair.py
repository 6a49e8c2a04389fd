"""Two daemons sharing a vault of attachments, B dialling A only through a cuttable proxy
(A knows no address of B): the setup of the tests that change an attachment on both sides
of a cut link (real daemons, TLS on loopback, `stet init`/`invite`/`join`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from stet.daemon.identity.device_identity import load_or_create_identity
from stet.sync.home import HomeLayout
from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_pairs import write_files
from tests.integration.attachment_support import wait_recorded
from tests.integration.link_proxy import LinkProxies, port_from_daemon_json
from tests.integration.peer_support import PEER_TEST_CONFIG, join, linked, start_daemon


@dataclass
class CutPair:
    a: DaemonProcess
    b: DaemonProcess
    va: Path
    vb: Path
    proxies: LinkProxies
    a_id: str
    b_id: str

    def cut(self, seconds: float = 600.0) -> None:
        """Cut the link (until ``heal``) and wait until neither side sees the other."""
        self.proxies.cut(self.a_id, self.b_id, seconds)
        wait_until(lambda: not linked(self.a, self.b) and not linked(self.b, self.a), timeout=30,
                   what="the link down on both sides")

    def heal(self) -> None:
        self.proxies.heal()
        wait_until(lambda: linked(self.a, self.b) and linked(self.b, self.a), timeout=60,
                   what="the link up again")


def cut_pair(tmp_path: Path, factory: list[DaemonProcess], proxies: LinkProxies,
             files: dict[str, bytes], *, b_files: dict[str, bytes] | None = None) -> CutPair:
    """A with ``files``; B (its folder holding ``b_files``, default the same) joined through
    a proxy and holding every one of ``files``, linked."""
    va, vb = tmp_path / "a", tmp_path / "b"
    write_files(va, files)
    write_files(vb, files if b_files is None else b_files)
    ha, hb = tmp_path / "ha", tmp_path / "hb"
    a_id = load_or_create_identity(HomeLayout(ha)).device_id
    b_id = load_or_create_identity(HomeLayout(hb)).device_id
    port = proxies.add(b_id, a_id, port_from_daemon_json(HomeLayout(ha).daemon_json))
    run_stet(ha, "init", str(va), "--name", "notes")
    a = start_daemon(ha, factory)
    for path in files:
        wait_recorded(ha, path, None, timeout=120)
    hb.mkdir(parents=True, exist_ok=True)
    (hb / "config.toml").write_text(PEER_TEST_CONFIG.replace(
        "[peer]\n", f'[peer]\naddresses = ["127.0.0.1:{port}"]\n'))
    b = start_daemon(hb, factory)
    out = run_stet(ha, "invite", "notes", "--address", f"127.0.0.1:{port}", "--json")
    join(b, json.loads(out.stdout)["invite"], vb)
    wait_until(lambda: linked(a, b) and linked(b, a), timeout=60, what="A and B linked")
    wait_until(lambda: all((vb / p).is_file() and (vb / p).read_bytes() == d for p, d in files.items()),
               timeout=120, what="every file on B")
    for path in files:
        wait_recorded(hb, path, None, timeout=60)
    return CutPair(a, b, va, vb, proxies, a_id, b_id)
