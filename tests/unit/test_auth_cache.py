"""What the request path remembers (issue 18, P2): home.db's data_version read once per
event-loop turn (``daemon/base/turn_memo.py``), never across turns; scope decisions remembered
by the scopes' value, so another token's (or a token's changed) scopes never answer."""

from __future__ import annotations

import asyncio

from stet.daemon.base.turn_memo import TurnMemo
from stet.sync.permissions import APPEND, READ, WRITE, Scopes


def test_a_turn_reads_once_and_the_next_turn_reads_again() -> None:
    version = [1]
    memo = TurnMemo(lambda: version[0])
    seen: list[tuple[str, int]] = []

    async def request(name: str) -> None:
        seen.append((name, memo.get()))

    async def main() -> None:
        # Three requests handled in one turn share one read...
        await asyncio.gather(request("a"), request("b"), request("c"))
        assert memo.reads == 1
        version[0] = 2  # ...another process commits to home.db (a `stet token revoke`)
        await asyncio.sleep(0)  # the next turn
        await request("d")
        assert memo.reads == 2
        await asyncio.gather(request("e"), request("f"))

    asyncio.run(main())
    assert seen[:3] == [("a", 1), ("b", 1), ("c", 1)]
    assert seen[3:] == [("d", 2), ("e", 2), ("f", 2)]
    assert memo.reads == 3


def test_without_a_running_loop_every_call_reads() -> None:
    version = [5]
    memo = TurnMemo(lambda: version[0])
    assert memo.get() == 5
    version[0] = 6
    assert memo.get() == 6
    assert memo.reads == 2


def test_scope_decisions_are_per_scopes_value() -> None:
    logs = Scopes(append=("logs/**",))
    reader = Scopes(read=("logs/**",))
    writer = Scopes(write=("logs/*.md",))
    for _ in range(3):  # asked again: the same answers (remembered or not)
        assert logs.allows(APPEND, "logs/a.md")
        assert not logs.allows(READ, "logs/a.md")
        assert not logs.allows(WRITE, "logs/a.md")
        assert reader.allows(READ, "logs/a.md")
        assert not reader.allows(APPEND, "logs/a.md")
        assert writer.allows(APPEND, "logs/a.md")
        assert writer.allows(READ, "logs/a.md")
        assert not writer.allows(WRITE, "logs/deep/a.md")
        assert not logs.allows(APPEND, "other/a.md")
    # A token whose scopes change is a new Scopes value: its old decisions do not answer.
    narrowed = Scopes(append=("logs/today/**",))
    assert not narrowed.allows(APPEND, "logs/a.md")
    assert narrowed.allows(APPEND, "logs/today/a.md")
    assert Scopes.everything().allows(WRITE, "anything.md")
