"""One outbound gate for what peers may not hear yet (issue 11): the pure timing rule, the
gate's one ``call_at`` timer, and a vault opened in-process whose local delete is
published when due, by the timer, with no polling task on the loop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from stet.daemon.app.runtime import Daemon
from stet.daemon.notes.changes import Change
from stet.daemon.notes.outbound_gate import OutboundGate, gate_pending_deletes, watch_deletes
from stet.daemon.notes.service import NotesService
from stet.sync.change_kinds import ChangeKind
from stet.sync.config import parse_config
from stet.sync.home import HomeRegistry
from stet.sync.home_layout import HomeLayout
from stet.sync.outbound_waits import OutboundWaits
from stet.sync.store import VaultStore

K = tuple[str, str]
A, B = ("v", "a"), ("v", "b")


def _never(_key: K) -> bool:
    return False


def test_items_go_when_due_in_order_and_later_ones_wait_behind() -> None:
    w: OutboundWaits[K, str] = OutboundWaits()
    w.add(A, "a1", 10.0)
    assert w.add(A, "a2", None) == 10.0  # behind a1
    w.add(B, "b1", 5.0)
    assert w.add(A, "a3", 7.0) == 10.0  # never before the one it waits behind
    assert w.next_due() == 5.0
    assert w.release(4.9, _never) == []
    assert w.release(5.0, _never) == [(B, "b1")]
    assert w.next_due() == 10.0
    assert w.release(10.0, _never) == [(A, "a1"), (A, "a2"), (A, "a3")]
    assert w.next_due() is None
    assert len(w) == 0
    assert A not in w


def test_a_held_note_waits_past_its_due_until_released_again() -> None:
    w: OutboundWaits[K, str] = OutboundWaits()
    held = {A}
    w.add(A, "a1", 1.0)
    w.add(A, "a2", 20.0)
    w.add(B, "b1", 1.0)
    assert w.release(2.0, held.__contains__) == [(B, "b1")]
    assert A in w
    assert w.next_due() is None  # held: no wake-up until it is let go (a2 waits behind a1)
    held.clear()
    assert w.release(3.0, held.__contains__) == [(A, "a1")]  # let go: what is due goes
    assert w.next_due() == 20.0  # a2 keeps its own time
    assert w.release(20.0, held.__contains__) == [(A, "a2")]


def test_dropping_a_note_forgets_it_and_leaves_no_stale_wakeup() -> None:
    w: OutboundWaits[K, str] = OutboundWaits()
    w.add(A, "a1", 1.0)
    assert w.drop(A) == [(1.0, "a1")]
    assert w.next_due() is None
    assert w.release(5.0, _never) == []


async def test_the_gate_sends_at_the_due_time_by_one_timer_not_a_poll() -> None:
    gate = OutboundGate()
    sent: list[float] = []
    done = asyncio.Event()

    def send() -> None:
        sent.append(time.time())
        done.set()

    gate.open_vault("v", is_held=lambda _n: False, publish_deletes=lambda _now: None)
    due = time.time() + 0.3
    gate.defer("v", "a", send, due)
    assert gate.waiting("v", "a")
    gate.defer("v", "a", lambda: sent.append(-1.0), None)  # behind the first
    assert gate.timer_due() is not None
    assert gate.timer_due() >= due
    assert asyncio.all_tasks() == {asyncio.current_task()}  # no task polls
    await asyncio.wait_for(done.wait(), 30)
    assert sent[0] >= due  # not before its time
    assert sent[1] == -1.0  # the one behind went with it, in order
    assert not gate.waiting("v", "a")
    assert gate.timer_due() is None  # nothing waits: no timer either
    gate.close()


async def test_a_held_change_goes_when_the_brake_lets_it_go_and_not_before() -> None:
    gate = OutboundGate()
    held = {"a"}
    sent = asyncio.Event()
    gate.open_vault("v", is_held=held.__contains__, publish_deletes=lambda _now: None)
    gate.defer("v", "a", sent.set, time.time() + 0.05)
    waited = asyncio.Event()
    asyncio.get_running_loop().call_later(0.5, waited.set)
    await asyncio.wait_for(waited.wait(), 30)  # well past its due time
    assert not sent.is_set()  # held
    assert gate.timer_due() is None  # and no timer spins for it
    held.clear()
    gate.wake()  # what Brake.on_unheld calls
    assert sent.is_set()
    gate.close()


async def test_a_change_after_a_waiting_delete_does_not_wait_behind_it() -> None:
    """A note brought back while peers have not heard of its delete yet: its new content
    goes at once (deletes wait in their own lane); the delete is still asked for when due."""
    gate = OutboundGate()
    asked = asyncio.Event()
    gate.open_vault("v", is_held=lambda _n: False, publish_deletes=lambda _now: asked.set())
    gate.defer_delete("v", "a", time.time() + 0.2)
    sent: list[str] = []
    gate.defer("v", "a", lambda: sent.append("created again"), None)
    assert sent == ["created again"]
    assert not gate.waiting("v", "a")
    await asyncio.wait_for(asked.wait(), 30)
    gate.close()


async def test_a_local_delete_is_published_by_the_service_when_due(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    service.write_text("a.md", "some text\n", "cli")
    service.set_delete_delay(0.3)
    gate = OutboundGate()
    gate.open_vault("v", is_held=lambda _n: False,
                    publish_deletes=lambda now: service.publish_due_deletes(now, lambda _n: False))
    watch_deletes(gate, "v", service)
    published = asyncio.Event()
    seen: list[float] = []

    def on_change(c: Change) -> None:
        if c.kind == ChangeKind.INDEX and not service.pending_deletes():
            seen.append(time.time())
            published.set()

    service.subscribe(on_change)
    row = service.delete("a.md", "cli")
    assert service.pending_deletes() == [row.id]
    assert not (service.index.entry(row.id) or row).deleted  # peers do not know yet
    await asyncio.wait_for(published.wait(), 30)
    entry = service.index.entry(row.id)
    assert entry is not None
    assert entry.deleted
    assert seen[0] >= row.updated_at + 0.3  # not before its time
    assert asyncio.all_tasks() == {asyncio.current_task()}
    gate.close()
    store.close()


async def test_deletes_found_unpublished_at_start_go_one_delay_later(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    service.write_text("a.md", "some text\n", "cli")
    service.set_delete_delay(60)
    row = service.delete("a.md", "cli")  # not published: the daemon stopped before
    store.close()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    assert service.pending_deletes() == [row.id]
    service.set_delete_delay(0.2)
    gate = OutboundGate()
    done = asyncio.Event()
    gate.open_vault("v", is_held=lambda _n: False,
                    publish_deletes=lambda now: (service.publish_due_deletes(now, lambda _n: False),
                                                 done.set()))
    gate_pending_deletes(gate, "v", service)
    await asyncio.wait_for(done.wait(), 30)
    assert service.pending_deletes() == []
    entry = service.index.entry(row.id)
    assert entry is not None
    assert entry.deleted
    gate.close()
    store.close()


async def test_an_open_vault_has_no_polling_task_for_deletes(tmp_path: Path) -> None:
    """The daemon's vault, opened in-process: its tasks are the rescan, the checkpoint and
    the versions ticker; deletes wait on the gate's timer (there was a once-a-second task)."""
    home, folder = tmp_path / "home", tmp_path / "vault"
    folder.mkdir()
    (folder / "a.md").write_text("a note with some text\n")
    layout = HomeLayout(home)
    layout.root.mkdir(parents=True)
    registry = HomeRegistry(layout)
    entry = registry.add("notes", folder)
    registry.close()
    daemon = Daemon(layout, parse_config({"peer": {"delete_delay_seconds": 0.3}}))
    runtime = await daemon._open_vault(entry)
    try:
        names = {t.get_name() for t in asyncio.all_tasks()}
        assert not any(n.startswith("deletes:") for n in names), names
        published = asyncio.Event()
        runtime.service.subscribe(
            lambda c: published.set() if c.kind == ChangeKind.INDEX and not runtime.service.pending_deletes()
            else None)
        row = runtime.service.delete("a.md", "cli")
        assert daemon.gate.timer_due() == row.updated_at + 0.3  # the one timer, at the due time
        await asyncio.wait_for(published.wait(), 30)
        entry_after = runtime.service.index.entry(row.id)
        assert entry_after is not None
        assert entry_after.deleted
    finally:
        await daemon._close_vault(runtime)
        daemon.gate.close()
        daemon.registry.close()
