"""The search index off the loop (issue 11 P8 / issue 18 P4), through real daemons: it
is written by a worker thread into a database of its own, and a search still sees every
write made before it (an agent's, a peer's); an index deleted, or left behind by a
kill -9, is rebuilt / caught up at start, so nothing searchable is lost."""

from __future__ import annotations

from pathlib import Path

from tests.harness import DaemonProcess, run_stet
from tests.integration.agent_support import Answer, owner_agent
from tests.integration.bridge_support import restart, start_daemon
from tests.integration.peer_support import invite, join, wait_linked, wait_same_tree
from tests.integration.peer_support import start_daemon as start_peer


def _found(answer: Answer) -> list[str]:
    assert answer.status == 200, (answer.status, answer.body)
    return [h["path"] for h in answer.body["results"]]


def _index_files(home: Path) -> list[Path]:
    return sorted((home / "vaults").glob("*.search.sqlite*"))


def test_an_agents_write_is_found_by_the_very_next_search(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    (vault_dir / "old.md").write_text("an older note\n")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    agent = owner_agent(daemon)
    try:
        for i in range(25):
            agent.ok(agent.create(f"n{i}.md", f"quokka{i} first\n"))
            assert _found(agent.search(f"quokka{i}")) == [f"n{i}.md"]
            agent.ok(agent.append(f"n{i}.md", f"wombat{i}\n"))
            assert _found(agent.search(f"wombat{i}")) == [f"n{i}.md"]
        agent.ok(agent.move("n0.md", "moved/zero.md"))
        assert _found(agent.search("quokka0")) == ["moved/zero.md"]
        agent.ok(agent.delete("n1.md"))
        assert "n1.md" not in _found(agent.search("quokka1"))  # (the last word is a prefix)
        assert _found(agent.search("older")) == ["old.md"]  # stet init indexed it
    finally:
        agent.close()
    assert _index_files(home), "the index is a database of its own beside the store"


def test_a_peers_notes_are_found_on_the_receiving_side(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    (va / "welcome.md").write_text("# Welcome\nshared text\n")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_peer(tmp_path / "ha", daemon_factory)
    b = start_peer(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_same_tree(va, vb)
    n = 120  # a bulk arrival (a frame applied in slices on B)
    for i in range(n):
        (va / f"bulk/f{i}.md").parent.mkdir(exist_ok=True)
        (va / f"bulk/f{i}.md").write_text(f"numbat{i} arrived\n")
    wait_same_tree(va, vb, timeout=120)
    agent = owner_agent(b)
    try:
        assert _found(agent.search("welcome")) == ["welcome.md"]
        for i in range(0, n, 7):
            # quoted: the exact word (unquoted, every word is a prefix: numbat7 finds numbat70)
            assert _found(agent.search(f'"numbat{i}" arrived')) == [f"bulk/f{i}.md"]
        assert len(agent.ok(agent.request("GET", agent.url("search?q=arrived&limit=200")))["results"]) == n
        # and one note appended on A, searched on B as soon as B has it
        on_a = owner_agent(a)
        on_a.ok(on_a.append("welcome.md", "echidna\n"))
        on_a.close()
        b.wait_content("welcome.md", "# Welcome\nshared text\nechidna\n", timeout=60)
        assert _found(agent.search("echidna")) == ["welcome.md"]
    finally:
        agent.close()


def test_an_index_deleted_while_stopped_is_rebuilt_at_start(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    for i in range(60):
        (vault_dir / f"n{i}.md").write_text(f"platypus{i} note\n")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    agent = owner_agent(daemon)
    agent.ok(agent.create("later.md", "bilby arrives later\n"))
    agent.close()
    assert daemon.stop() == 0
    files = _index_files(home)
    assert files
    for f in files:
        f.unlink()
    daemon = restart(home, daemon_factory)
    agent = owner_agent(daemon)
    try:
        for i in range(0, 60, 9):
            assert _found(agent.search(f"platypus{i} note")) == [f"n{i}.md"]
        assert _found(agent.search("bilby")) == ["later.md"]
        assert len(agent.ok(agent.request("GET", agent.url("search?q=platypus&limit=200")))["results"]) == 60
    finally:
        agent.close()


def test_a_damaged_index_is_replaced_and_rebuilt(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    (vault_dir / "a.md").write_text("kookaburra\n")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    assert daemon.stop() == 0
    [index] = [f for f in _index_files(home) if f.name.endswith(".sqlite")]
    for f in _index_files(home):
        f.unlink()
    index.write_bytes(b"this is not a database" * 100)
    daemon = restart(home, daemon_factory)
    agent = owner_agent(daemon)
    try:
        assert _found(agent.search("kookaburra")) == ["a.md"]
    finally:
        agent.close()


def test_kill_9_mid_index_loses_nothing_searchable(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    (vault_dir / "seed.md").write_text("seed\n")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    agent = owner_agent(daemon)
    n = 150
    for i in range(n):  # every one acknowledged (committed) before the kill
        agent.ok(agent.create(f"k/n{i}.md", f"quoll{i} " + "filler words to tokenise " * 40 + "\n"))
    agent.close()
    daemon.kill9()  # the indexer is likely mid-batch or behind: either way, caught up at start
    daemon = restart(home, daemon_factory)
    agent = owner_agent(daemon)
    try:
        hits = agent.ok(agent.request("GET", agent.url("search?q=filler&limit=200")))["results"]
        assert sorted(h["path"] for h in hits) == sorted(f"k/n{i}.md" for i in range(n))
        assert _found(agent.search(f"quoll{n - 1}")) == [f"k/n{n - 1}.md"]
    finally:
        agent.close()
