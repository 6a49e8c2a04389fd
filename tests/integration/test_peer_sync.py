"""Two and three real daemons paired over loopback TLS (SPEC §3.7–3.10, §4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.peer_support import (
    invite,
    join,
    start_daemon,
    tree,
    wait_linked,
    wait_same_tree,
)


@pytest.fixture
def pair(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> tuple[DaemonProcess, DaemonProcess, Path, Path]:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    (va / "welcome.md").write_bytes("# Welcome 😀\r\nshared text\r\n".encode())
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_same_tree(va, vb)
    return a, b, va, vb


def test_edits_on_either_side_arrive_byte_identical(
    pair: tuple[DaemonProcess, DaemonProcess, Path, Path],
) -> None:
    a, b, va, vb = pair
    (va / "from-a.md").write_bytes(b"no final newline, CRLF\r\nline")
    (vb / "sub").mkdir()
    (vb / "sub" / "from-b.md").write_bytes("\ufeff世界 e\u0301\n".encode())
    final = wait_same_tree(va, vb)
    assert final["from-a.md"] == b"no final newline, CRLF\r\nline"
    assert final["sub/from-b.md"] == "\ufeff世界 e\u0301\n".encode()
    with (vb / "welcome.md").open("ab") as f:
        f.write(b"more from b\r\n")
    final = wait_same_tree(va, vb)
    assert final["welcome.md"].endswith(b"shared text\r\nmore from b\r\n")


def test_provenance_names_the_agent_and_device(pair: tuple[DaemonProcess, DaemonProcess, Path, Path]) -> None:
    from stet.sync.home import HomeLayout, HomeRegistry
    from tests.integration.peer_support import device_id

    a, b, va, vb = pair
    vault_id = a.client.status()["vaults"][0]["id"]
    registry = HomeRegistry(HomeLayout(a.home))
    token = registry.create_token("researcher", vault_id, {"append": ["**"]})
    registry.close()
    from stet.client.daemon_link import DaemonClient

    agent = DaemonClient(a.api_url, token)
    agent.request("POST", "/v1/vaults/notes/notes/findings.md/append", {"text": "finding 1\n"})
    b.wait_content("findings.md", "finding 1\n")
    log = b.client.request("GET", "/v1/vaults/notes/log", query={"path": "findings.md"})["changes"]
    assert any(c["source"] == "agent:researcher" and c["device"] == device_id(a) for c in log), log


def test_a_third_daemon_joins_and_catches_up(
    tmp_path: Path, pair: tuple[DaemonProcess, DaemonProcess, Path, Path], daemon_factory: list[DaemonProcess]
) -> None:
    a, b, va, vb = pair
    (vb / "before-c.md").write_text("written before C existed\n")
    wait_same_tree(va, vb)
    c = start_daemon(tmp_path / "hc", daemon_factory)
    vc = tmp_path / "c"
    join(c, invite(b), vc)
    wait_same_tree(va, vb, vc)
    (vc / "from-c.md").write_text("hello from C\n")
    final = wait_same_tree(va, vb, vc)
    assert final["from-c.md"] == b"hello from C\n"


def test_offline_edits_in_different_places_merge_once(
    pair: tuple[DaemonProcess, DaemonProcess, Path, Path], daemon_factory: list[DaemonProcess]
) -> None:
    a, b, va, vb = pair
    base = "".join(f"paragraph {i}\n\n" for i in range(10))
    (va / "plan.md").write_text(base)
    wait_same_tree(va, vb)
    assert b.stop() == 0
    (va / "plan.md").write_text(base.replace("paragraph 1\n", "paragraph 1 edited on A\n"))
    a.wait_content("plan.md", base.replace("paragraph 1\n", "paragraph 1 edited on A\n"))
    (vb / "plan.md").write_text(base.replace("paragraph 8\n", "paragraph 8 edited on B\n"))
    b2 = start_daemon(b.home, daemon_factory)
    wait_linked(a, b2)
    final = wait_same_tree(va, vb)
    text = final["plan.md"].decode()
    assert text.count("paragraph 1 edited on A") == 1
    assert text.count("paragraph 8 edited on B") == 1
    assert text.count("paragraph 5\n") == 1


def test_no_duplication_when_both_had_a_copy(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    """SPEC §3.7: two machines with a copy of the same folder are joined."""
    va, vb = tmp_path / "a", tmp_path / "b"
    for root in (va, vb):
        root.mkdir()
        (root / "same.md").write_text("# Same\n\nidentical on both\n")
        (root / "nested").mkdir()
        (root / "nested" / "deep.md").write_text("deep\n")
    (va / "differs.md").write_text("# Differs\n\nshared line\n\nA's line\n")
    (vb / "differs.md").write_text("# Differs\n\nshared line\n\nB's line\n")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    final = wait_same_tree(va, vb)
    assert final["same.md"] == b"# Same\n\nidentical on both\n"
    assert final["nested/deep.md"] == b"deep\n"
    text = final["differs.md"].decode()
    assert text.count("shared line") == 1
    assert text.count("# Differs") == 1
    assert text.count("A's line") == 1
    assert text.count("B's line") == 1


def test_same_path_created_offline_on_both_is_one_note(
    pair: tuple[DaemonProcess, DaemonProcess, Path, Path], daemon_factory: list[DaemonProcess]
) -> None:
    """SPEC §3.10: today's daily note created on both machines while apart."""
    a, b, va, vb = pair
    assert b.stop() == 0
    (va / "daily.md").write_text("# 2026-11-29\n- A: standup notes\n")
    a.wait_content("daily.md", "# 2026-11-29\n- A: standup notes\n")
    (vb / "daily.md").write_text("# 2026-11-29\n- B: call with the vendor\n")
    b2 = start_daemon(b.home, daemon_factory)
    wait_linked(a, b2)
    final = wait_same_tree(va, vb)
    text = final["daily.md"].decode()
    assert text.count("A: standup notes") == 1
    assert text.count("B: call with the vendor") == 1
    assert text.count("# 2026-11-29") == 1
    assert not any(name != "daily.md" and "daily" in name for name in final), "no conflict copy"


def test_move_on_a_while_b_edits_lands_in_the_moved_note(
    pair: tuple[DaemonProcess, DaemonProcess, Path, Path], daemon_factory: list[DaemonProcess]
) -> None:
    """SPEC §3.8."""
    a, b, va, vb = pair
    (va / "draft.md").write_text("line one\nline two\n")
    wait_same_tree(va, vb)
    assert b.stop() == 0
    (va / "archive").mkdir()
    (va / "draft.md").rename(va / "archive" / "final.md")
    a.wait_content("archive/final.md", "line one\nline two\n")
    (vb / "draft.md").write_text("line one\nline two\nedited on B\n")
    b2 = start_daemon(b.home, daemon_factory)
    wait_linked(a, b2)
    final = wait_same_tree(va, vb)
    assert "draft.md" not in final
    assert final["archive/final.md"] == b"line one\nline two\nedited on B\n"


def test_delete_on_a_loses_to_an_edit_on_b(
    pair: tuple[DaemonProcess, DaemonProcess, Path, Path], daemon_factory: list[DaemonProcess]
) -> None:
    """SPEC §3.9: the note comes back with the edit."""
    a, b, va, vb = pair
    (va / "keep.md").write_text("original\n")
    wait_same_tree(va, vb)
    assert b.stop() == 0
    (va / "keep.md").unlink()
    wait_until(lambda: a.content("keep.md") is None, what="the delete on A")
    (vb / "keep.md").write_text("original\nedited on B while A deleted it\n")
    b2 = start_daemon(b.home, daemon_factory)
    wait_linked(a, b2)
    final = wait_same_tree(va, vb)
    assert final["keep.md"] == b"original\nedited on B while A deleted it\n"


def test_a_plain_delete_propagates(pair: tuple[DaemonProcess, DaemonProcess, Path, Path]) -> None:
    a, b, va, vb = pair
    (va / "gone.md").write_text("bye\n")
    wait_same_tree(va, vb)
    (vb / "gone.md").unlink()
    final = wait_same_tree(va, vb)
    assert "gone.md" not in final
    assert tree(va) == final
