"""The agent API over REST against real daemons (SPEC §6.2, §6.4-6.10; issue 4).

The three write shapes under concurrency (appends retried with idempotency keys, two
rewrites with one expectedRevision, a rewrite racing a disk edit), stale rewrites
(baseRevision vs expectedRevision, unknown and expired bases), token scopes and
revocation, idempotency across a kill -9, and search staying current. Every agent is a
thread with its own token and its own keep-alive connection.
"""

from __future__ import annotations

import json
import random
import re
import socket
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.agent_support import (
    Agent,
    Answer,
    agent_for,
    event_stream,
    folder_files,
    make_token,
    owner_agent,
)
from tests.integration.bridge_support import restart, vault_db


@dataclass
class Service:
    daemon: DaemonProcess
    home: Path
    vault: Path

    def owner(self) -> Agent:
        return owner_agent(self.daemon)

    def agent(self, token: str, vault: str = "notes") -> Agent:
        return agent_for(self.daemon, token, vault)

    def disk(self, path: str) -> str | None:
        try:
            return (self.vault / path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def wait_disk(self, path: str, expected: str, timeout: float = 10.0) -> None:
        wait_until(lambda: self.disk(path) == expected, timeout=timeout,
                   what=f"{path} on disk to hold {expected!r:.120}")

    def settled(self) -> None:
        """Every change so far is written to disk (no file write pending in any vault)."""
        wait_until(lambda: all(v["pendingWrites"] == 0 for v in self.daemon.client.status()["vaults"]),
                   what="pending file writes to finish")

    def wait_api(self, path: str, predicate: Any, timeout: float = 10.0) -> str:
        owner = self.owner()

        def check() -> str | None:
            answer = owner.read(path)
            if answer.status == 200 and predicate(answer.body["content"]):
                return str(answer.body["content"])
            return None

        try:
            return wait_until(check, timeout=timeout, what=f"{path} in the API")
        finally:
            owner.close()


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One daemon for the module; each test works on its own paths and tokens."""
    root = tmp_path_factory.mktemp("agents")
    home, vault = root / "home", root / "vault"
    home.mkdir()
    vault.mkdir()
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    daemon = DaemonProcess(home)
    try:
        daemon.start()
        yield Service(daemon, home, vault)
        assert daemon.stop() == 0, daemon.log_tail()
        assert "unhandled error" not in (home / "logs" / "daemon.log").read_text(errors="replace")
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill9()


def conflicts_json(home: Path) -> list[dict[str, Any]]:
    """``stet conflicts --json`` (the real CLI, through the API)."""
    rows: list[dict[str, Any]] = json.loads(run_stet(home, "conflicts", "--vault", "notes", "--json").stdout)
    return rows


def changes_of(owner: Agent, path: str) -> list[dict[str, Any]]:
    body = owner.ok(owner.request("GET", owner.url(f"log?path={path}&limit=10000")))
    changes: list[dict[str, Any]] = body["changes"]
    return changes


def send_and_drop(agent: Agent, method: str, target: str, body: dict[str, Any]) -> None:
    """Send a whole request on a fresh connection and hang up without reading the answer:
    the agent cannot know whether the write was applied (a lost acknowledgement)."""
    data = json.dumps(body).encode()
    head = (f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{agent.port}\r\n"
            f"Authorization: Bearer {agent.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((agent.host, agent.port), timeout=10) as sock:
        sock.sendall(head + data)


# -- the three write shapes under concurrency ------------------------------------------------


MARKER = re.compile(r"- finding a(\d)-(\d{3})\Z")


def test_eight_agents_appending_with_retries_lose_nothing_and_duplicate_nothing(svc: Service) -> None:
    path = "shared/findings.md"
    header = "# Findings\n"
    owner = svc.owner()
    owner.ok(owner.create(path, header))
    n_agents, per_agent = 8, 15
    tokens = [make_token(svc.home, f"appender{i}", append=(path,)) for i in range(n_agents)]
    rng = random.Random(4)
    drop = {(i, j): rng.random() < 0.5 for i in range(n_agents) for j in range(per_agent)}
    barrier = threading.Barrier(n_agents)
    failures: list[str] = []
    replays = [0] * n_agents

    def run(i: int) -> None:
        agent = svc.agent(tokens[i])
        try:
            barrier.wait(timeout=30)
            for j in range(per_agent):
                text, key = f"- finding a{i}-{j:03d}\n", f"finding-{i}-{j}"
                first = None
                if drop[(i, j)]:
                    send_and_drop(agent, "POST", agent.note(path, "/append"),
                                  {"text": text, "idempotencyKey": key})
                else:
                    first = agent.ok(agent.append(path, text, idempotencyKey=key))
                retry = agent.ok(agent.append(path, text, idempotencyKey=key))  # every write retried
                if first is not None and retry != dict(first, replayed=True):
                    failures.append(f"agent {i} key {key}: retry answered {retry}, first {first}")
                replays[i] += bool(retry.get("replayed"))
        except Exception as exc:  # reported below, with the agent
            failures.append(f"agent {i}: {exc!r}")
        finally:
            agent.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert not failures, failures[:5]
    assert sum(replays) >= sum(1 for d in drop.values() if not d)

    def check(text: str, where: str) -> None:
        assert text.startswith(header), where
        lines = text[len(header):].splitlines()
        seen = [MARKER.match(line) for line in lines]
        assert all(seen), f"{where}: a line that is not a whole marker: {lines}"
        pairs = [(int(m.group(1)), int(m.group(2))) for m in seen if m]
        assert len(pairs) == len(set(pairs)), f"{where}: duplicated markers"
        assert set(pairs) == {(i, j) for i in range(n_agents) for j in range(per_agent)}, f"{where}: lost"
        for i in range(n_agents):  # each agent's appends land in the order it made them
            mine = [j for a, j in pairs if a == i]
            assert mine == sorted(mine), where

    content = owner.ok(owner.read(path))["content"]
    check(content, "API")
    svc.wait_disk(path, content)
    check(svc.disk(path) or "", "disk")
    # Attribution: exactly one logged change per marker, by the agent that wrote it.
    changes = [c for c in changes_of(owner, path) if c["kind"] == "changed"]
    by_source = {f"agent:appender{i}": 0 for i in range(n_agents)}
    for c in changes:
        by_source[c["source"]] += 1
    assert by_source == {s: per_agent for s in by_source}
    owner.close()


def test_two_rewrites_with_one_expected_revision_one_wins_and_the_refusal_is_visible(svc: Service) -> None:
    path = "shared/summary.md"
    owner = svc.owner()
    owner.ok(owner.create(path, "Summary, first draft.\n"))
    names = ("summarizer-a", "summarizer-b")
    agents = [svc.agent(make_token(svc.home, n, write=("shared/summary.md",))) for n in names]
    revision = agents[0].ok(agents[0].read(path))["revision"]
    assert agents[1].ok(agents[1].read(path))["revision"] == revision
    texts = [f"Summary by {n}.\n" for n in names]
    answers: list[Answer | None] = [None, None]
    barrier = threading.Barrier(2)

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        answers[i] = agents[i].update(path, texts[i], expectedRevision=revision)

    with event_stream(svc.daemon, svc.daemon.client.token) as stream:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        got = [a for a in answers if a is not None]
        assert len(got) == 2
        statuses = sorted(a.status for a in got)
        assert statuses == [200, 409], [(a.status, a.body) for a in got]
        win = 0 if got[0].status == 200 else 1
        lose = 1 - win
        winner, loser = got[win], got[lose]
        assert winner.body["changed"] is True
        err = loser.error
        assert err["code"] == "revision_mismatch"
        assert err["currentRevision"] == winner.body["revision"]
        assert err["currentContent"] == texts[win]
        assert owner.ok(owner.read(path))["content"] == texts[win]
        # Pushed to whoever watches the vault, within the deadline (no polling).
        event = stream.wait_for("conflict.refused", path=path, timeout=10)
        assert event.data["token"] == f"agent:{names[lose]}"
        assert event.data["code"] == "revision_mismatch"
        assert event.data["operation"] == "update_note"
        assert event.data["currentRevision"] == winner.body["revision"]
        assert event.data["attempted"]["content"] == texts[lose]
    listed = [c for c in conflicts_json(svc.home) if c["path"] == path]
    assert len(listed) == 1, listed
    assert listed[0]["token"] == f"agent:{names[lose]}"
    assert listed[0]["code"] == "revision_mismatch"
    assert listed[0]["currentRevision"] == winner.body["revision"]
    assert listed[0]["attempted"]["expectedRevision"] == revision
    text = run_stet(svc.home, "conflicts", "--vault", "notes").stdout.decode()
    assert f"agent:{names[lose]}" in text
    assert "revision_mismatch" in text
    svc.wait_disk(path, texts[win])
    for a in (*agents, owner):
        a.close()


@pytest.mark.parametrize("round_", range(3))
def test_a_paragraph_rewrite_racing_a_disk_edit_at_the_end_keeps_both(svc: Service, round_: int) -> None:
    path = f"race/plan-{round_}.md"
    original = "# Plan\n\nFirst paragraph, as the agent read it.\n\nSecond paragraph.\n"
    owner = svc.owner()
    owner.ok(owner.create(path, original))
    svc.wait_disk(path, original)
    agent = svc.agent(make_token(svc.home, f"planner{round_}", write=("race/**",)))
    read = agent.ok(agent.read(path))
    rewritten = original.replace("as the agent read it", "rewritten by the agent")
    disk_line = f"- added on disk, round {round_}\n"
    barrier = threading.Barrier(2)
    answer: list[Answer] = []

    def rewrite() -> None:
        barrier.wait(timeout=30)
        answer.append(agent.update(path, rewritten, baseRevision=read["revision"]))

    def disk_edit() -> None:
        barrier.wait(timeout=30)
        with open(svc.vault / path, "a", encoding="utf-8") as f:
            f.write(disk_line)

    threads = [threading.Thread(target=rewrite), threading.Thread(target=disk_edit)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert answer
    assert answer[0].status == 200, answer[0].body
    both = rewritten + disk_line
    svc.wait_api(path, lambda text: text == both)
    svc.wait_disk(path, both)
    agent.close()
    owner.close()


def test_the_event_stream_resumes_after_last_event_id_and_shows_an_agent_only_what_it_may_read(
        svc: Service) -> None:
    owner = svc.owner()
    watcher = make_token(svc.home, "watcher", read=("events/visible/**",))
    with event_stream(svc.daemon, svc.daemon.client.token) as stream:
        owner.ok(owner.create("events/visible/a.md", "one\n"))
        first = stream.wait_for("note.changed", path="events/visible/a.md")
    owner.ok(owner.append("events/visible/a.md", "two\n"))  # while nobody listens
    owner.ok(owner.create("events/hidden/b.md", "secret\n"))
    owner.ok(owner.append("events/visible/a.md", "three\n"))
    with event_stream(svc.daemon, watcher, last_event_id=first.id) as resumed:
        missed = resumed.wait_for("note.changed", path="events/visible/a.md")
        assert missed.id > first.id
        assert missed.data["created"] is False
        assert missed.data["source"] == "cli"
        then = resumed.wait_for("note.changed", path="events/visible/a.md")
        assert then.id > missed.id
        owner.ok(owner.append("events/visible/a.md", "four\n"))  # live, after the replay
        live = resumed.wait_for("note.changed", path="events/visible/a.md")
        assert live.id > then.id
        assert [e.data["path"] for e in resumed.seen] == ["events/visible/a.md"] * 3
    owner.close()


# -- stale rewrites ----------------------------------------------------------------------------


def test_stale_rewrites_base_revision_keeps_later_edits_expected_revision_refuses(svc: Service) -> None:
    path = "stale/report.md"
    original = "First paragraph, as read.\n\nSecond paragraph.\n"
    owner = svc.owner()
    owner.ok(owner.create(path, original))
    svc.wait_disk(path, original)
    agent = svc.agent(make_token(svc.home, "reporter", write=("stale/**",)))
    read = agent.ok(agent.read(path))
    assert read["content"] == original
    # Someone edits the file: a line at its end.
    with open(svc.vault / path, "a", encoding="utf-8") as f:
        f.write("- a line added on disk\n")
    edited = original + "- a line added on disk\n"
    svc.wait_api(path, lambda text: text == edited)
    rewritten = "First paragraph, rewritten by the agent.\n\nSecond paragraph.\n"

    refused = agent.update(path, rewritten, expectedRevision=read["revision"])
    assert refused.status == 409
    assert refused.error["code"] == "revision_mismatch"
    assert refused.error["currentContent"] == edited
    assert owner.ok(owner.read(path))["content"] == edited

    never = agent.update(path, rewritten, baseRevision="f" * 64)
    assert never.status == 409
    assert never.error["code"] == "revision_unknown"
    assert owner.ok(owner.read(path))["content"] == edited

    applied = agent.ok(agent.update(path, rewritten, baseRevision=read["revision"]))
    both = "First paragraph, rewritten by the agent.\n\nSecond paragraph.\n- a line added on disk\n"
    assert owner.ok(owner.read(path))["content"] == both
    assert applied["revision"] == owner.ok(owner.read(path))["revision"]
    svc.wait_disk(path, both)
    # The same stale rewrite again is a no-op: nothing of it is left to apply.
    again = agent.ok(agent.update(path, rewritten, baseRevision=read["revision"]))
    assert owner.ok(owner.read(path))["content"] == both
    assert again["revision"] == applied["revision"]
    refusals = [c for c in conflicts_json(svc.home) if c["path"] == path]
    assert [c["code"] for c in refusals] == ["revision_mismatch"]
    agent.close()
    owner.close()


def test_a_base_revision_older_than_an_hour_is_unknown(svc: Service) -> None:
    path = "stale/old.md"
    owner = svc.owner()
    owner.ok(owner.create(path, "Old paragraph.\n"))
    svc.wait_disk(path, "Old paragraph.\n")
    agent = svc.agent(make_token(svc.home, "old-reader", write=("stale/**",)))
    fresh = agent.ok(agent.read(path))["revision"]
    aged = agent.ok(agent.read(path))["revision"]
    assert fresh == aged
    owner.ok(owner.append(path, "- appended later\n"))
    # The daemon remembered the state behind the read revision when it stopped being
    # current; an hour and a bit later it may forget it: age that memory in place (the
    # daemon runs; WAL lets a second writer in between its transactions).
    db = sqlite3.connect(vault_db(svc.home), timeout=10)
    try:
        with db:
            rows = db.execute("UPDATE revision_states SET created_at = created_at - 3601 "
                              "WHERE revision = ?", (aged,)).rowcount
        assert rows == 1
    finally:
        db.close()
    answer = agent.update(path, "New paragraph.\n", baseRevision=aged)
    assert answer.status == 409, answer.body
    assert answer.error["code"] == "revision_unknown"
    assert answer.error["baseRevision"] == aged
    assert owner.ok(owner.read(path))["content"] == "Old paragraph.\n- appended later\n"
    agent.close()
    owner.close()


# -- scopes and tokens -----------------------------------------------------------------------


def test_scopes_write_glob_and_append_only_log(svc: Service) -> None:
    owner = svc.owner()
    owner.ok(owner.create("shared/log.md", "# Log\n"))
    owner.ok(owner.create("agents/b/notes.md", "b's notes\n"))
    out = run_stet(svc.home, "token", "create", "researcher-a", "--vault", "notes", "--write", "agents/a/**",
                   "--append", "shared/log.md", "--json").stdout
    agent = svc.agent(json.loads(out)["token"])
    svc.wait_disk("shared/log.md", "# Log\n")
    svc.wait_disk("agents/b/notes.md", "b's notes\n")
    svc.settled()
    before = folder_files(svc.vault)

    refusals = {
        "rewrite the log": agent.update("shared/log.md", "# Log, rewritten\n"),
        "edit the log": agent.edit("shared/log.md", [("# Log", "# Hijacked")]),
        "delete the log": agent.delete("shared/log.md"),
        "move the log": agent.move("shared/log.md", "agents/a/log.md"),
        "read the log": agent.read("shared/log.md"),
        "read b": agent.read("agents/b/notes.md"),
        "append to b": agent.append("agents/b/notes.md", "from a\n"),
        "rewrite b": agent.update("agents/b/notes.md", "taken over\n"),
        "create in b": agent.create("agents/b/new.md", "new\n"),
        "delete b": agent.delete("agents/b/notes.md"),
        "append outside": agent.append("elsewhere.md", "x\n"),
    }
    for what, answer in refusals.items():
        assert answer.status == 403, (what, answer.status, answer.body)
        assert answer.error["code"] == "forbidden", what
    assert folder_files(svc.vault) == before
    assert owner.ok(owner.read("shared/log.md"))["content"] == "# Log\n"
    assert owner.ok(owner.read("agents/b/notes.md"))["content"] == "b's notes\n"
    assert owner.read("agents/b/new.md").status == 404

    agent.ok(agent.append("shared/log.md", "- a: found something\n"))
    created = agent.create("agents/a/x.md", "draft\n")
    assert created.status == 201, created.body
    agent.ok(agent.update("agents/a/x.md", "final\n"))
    assert agent.ok(agent.read("agents/a/x.md"))["content"] == "final\n"
    moved = agent.move("agents/a/x.md", "agents/b/x.md")  # may not take it into b's folder
    assert moved.status == 403
    listed = [n["path"] for n in agent.ok(agent.request("GET", agent.url("notes")))["notes"]]
    assert listed == ["agents/a/x.md"]  # only what it may read
    assert owner.ok(owner.read("shared/log.md"))["content"] == "# Log\n- a: found something\n"
    svc.wait_disk("agents/a/x.md", "final\n")
    svc.wait_disk("shared/log.md", "# Log\n- a: found something\n")
    mine = [c for c in conflicts_json(svc.home) if c["token"] == "agent:researcher-a"]
    assert len(mine) >= 8
    assert {c["code"] for c in mine} == {"forbidden"}
    agent.close()
    owner.close()


def test_a_token_of_one_vault_sees_nothing_of_another(svc: Service, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "secret.md").write_text("the other vault's secret\n")
    run_stet(svc.home, "init", str(other), "--name", "other", "--json")
    owner = svc.owner()
    vaults = owner.ok(owner.request("GET", "/v1/vaults"))["vaults"]
    other_id = next(v["id"] for v in vaults if v["name"] == "other")
    agent = svc.agent(make_token(svc.home, "notes-only", vault="notes", read=("**",), write=("**",)))
    assert [v["name"] for v in agent.ok(agent.request("GET", "/v1/vaults"))["vaults"]] == ["notes"]
    for ref in ("other", other_id):
        foreign = Agent(svc.daemon.api_url, agent.token, ref)
        for answer in (foreign.read("secret.md"), foreign.request("GET", foreign.url("notes")),
                       foreign.search("secret"), foreign.log(), foreign.append("secret.md", "x\n"),
                       foreign.update("secret.md", "mine\n"), foreign.create("new.md", "x\n"),
                       foreign.request("GET", foreign.url("events"))):
            assert answer.status == 404, (ref, answer.status, answer.body)
            assert answer.error["code"] == "not_found"
            assert b"secret" not in answer.raw.replace(b"secret.md", b"")
        foreign.close()
    assert (other / "secret.md").read_text() == "the other vault's secret\n"
    assert sorted(folder_files(other)) == ["secret.md"]
    agent.close()
    owner.close()


def test_a_revoked_token_is_refused_on_the_very_next_request(svc: Service) -> None:
    out = run_stet(svc.home, "token", "create", "short-lived", "--vault", "notes", "--append", "temp/**",
                   "--json").stdout
    agent = svc.agent(json.loads(out)["token"])
    agent.ok(agent.append("temp/a.md", "one\n"))
    listed = json.loads(run_stet(svc.home, "token", "list", "--json").stdout)
    mine = next(t for t in listed if t["name"] == "short-lived")
    assert mine["vault"] == "notes"
    assert mine["scopes"] == {"read": [], "append": ["temp/**"], "write": []}
    assert mine["lastUsedAt"] is not None  # its first use shows at once
    run_stet(svc.home, "token", "revoke", "short-lived")
    refused = agent.append("temp/a.md", "two\n")  # same kept-alive connection
    assert refused.status == 401
    assert refused.error["code"] == "unauthorized"
    owner = svc.owner()
    assert owner.ok(owner.read("temp/a.md"))["content"] == "one\n"
    owner.close()
    names = [t["name"] for t in json.loads(run_stet(svc.home, "token", "list", "--json").stdout)]
    assert "short-lived" not in names
    agent.close()


# -- search -------------------------------------------------------------------------------------


def test_search_finds_disk_and_api_writes_and_follows_changes(svc: Service) -> None:
    owner = svc.owner()

    def hits(q: str) -> list[tuple[str, int]]:
        return [(r["path"], r["line"]) for r in owner.ok(owner.search(q))["results"]]

    (svc.vault / "search").mkdir()
    (svc.vault / "search/from-disk.md").write_text("# Zoo\n\nA zebracorn was seen.\n")
    svc.wait_api("search/from-disk.md", lambda text: "zebracorn" in text)
    assert hits("zebracorn") == [("search/from-disk.md", 3)]
    owner.ok(owner.create("search/from-api.md", "one\ntwo quokkafish three\n"))
    assert hits("quokkafish") == [("search/from-api.md", 2)]  # at once: flushed before searching
    owner.ok(owner.update("search/from-api.md", "one\ntwo narwhalbee three\n"))
    assert hits("quokkafish") == []
    assert hits("narwhalbee") == [("search/from-api.md", 2)]
    (svc.vault / "search/from-disk.md").write_text("# Zoo\n\nAn ocelotwing was seen.\n")
    svc.wait_api("search/from-disk.md", lambda text: "ocelotwing" in text)
    assert hits("zebracorn") == []
    assert hits("ocelotwing") == [("search/from-disk.md", 3)]
    owner.ok(owner.delete("search/from-api.md"))
    assert hits("narwhalbee") == []
    out = run_stet(svc.home, "search", "ocelotwing", "--vault", "notes").stdout.decode()
    assert out == "search/from-disk.md:3: An ocelotwing was seen.\n"
    # An agent sees only the hits it may read.
    agent = svc.agent(make_token(svc.home, "searcher", read=("elsewhere/**",)))
    assert agent.ok(agent.search("ocelotwing"))["results"] == []
    agent.close()
    owner.close()


# -- idempotency across a restart -------------------------------------------------------------


def test_idempotency_keys_survive_a_kill_and_a_changed_payload_is_refused(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    from tests.integration.bridge_support import start_daemon

    daemon = start_daemon(home, vault_dir, daemon_factory)
    token = make_token(home, "retrier", write=("**",))
    agent = agent_for(daemon, token)
    created = agent.create("ledger.md", "# Ledger\n", idempotencyKey="create-1")
    assert created.status == 201
    first = agent.ok(agent.append("ledger.md", "- entry 1\n", idempotencyKey="entry-1"))
    rewrite = agent.ok(agent.update("ledger.md", "# Ledger\n- entry 1\n- entry 2\n", idempotencyKey="rw-1"))
    owner = owner_agent(daemon)
    log_before = changes_of(owner, "ledger.md")
    wait_until(lambda: (vault_dir / "ledger.md").read_text() == "# Ledger\n- entry 1\n- entry 2\n",
               what="the ledger on disk")
    owner.close()
    daemon.kill9()

    daemon = restart(home, daemon_factory)
    agent.retarget(daemon.api_url)
    owner = owner_agent(daemon)
    again = agent.create("ledger.md", "# Ledger\n", idempotencyKey="create-1")
    assert again.status == 201  # the first result, not already_exists
    assert again.body == dict(created.body, replayed=True)
    assert agent.ok(agent.append("ledger.md", "- entry 1\n", idempotencyKey="entry-1")) == dict(
        first, replayed=True)
    assert agent.ok(agent.update("ledger.md", "# Ledger\n- entry 1\n- entry 2\n",
                                 idempotencyKey="rw-1")) == dict(rewrite, replayed=True)
    assert owner.ok(owner.read("ledger.md"))["content"] == "# Ledger\n- entry 1\n- entry 2\n"
    assert changes_of(owner, "ledger.md") == log_before  # nothing applied
    reused = agent.append("ledger.md", "- a different entry\n", idempotencyKey="entry-1")
    assert reused.status == 422
    assert reused.error["code"] == "idempotency_key_reused"
    assert owner.ok(owner.read("ledger.md"))["content"] == "# Ledger\n- entry 1\n- entry 2\n"
    # Keys are per token: another agent's "entry-1" is its own write.
    other = agent_for(daemon, make_token(home, "other-retrier", append=("**",)))
    other.ok(other.append("ledger.md", "- entry 1\n", idempotencyKey="entry-1"))
    assert owner.ok(owner.read("ledger.md"))["content"] == "# Ledger\n- entry 1\n- entry 2\n- entry 1\n"
    for a in (agent, owner, other):
        a.close()
    assert daemon.stop() == 0
