"""The hybrid logical clock: packing, the send/receive rules, clock steps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stet.sync.hlc import MAX_COUNTER, MAX_WALL, ZERO, Hlc, HlcError, HybridClock

hlcs = st.builds(Hlc, st.integers(0, MAX_WALL), st.integers(0, MAX_COUNTER))


class SteppingClock:
    """A wall clock the test sets (it may jump back, as NTP or a suspend does)."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


@given(hlcs)
def test_pack_round_trips(h: Hlc) -> None:
    packed = h.pack()
    assert len(packed) == 16
    assert Hlc.unpack(packed) == h


@given(hlcs, hlcs)
def test_packed_order_is_clock_order(a: Hlc, b: Hlc) -> None:
    assert (a < b) == (a.pack() < b.pack())
    assert (a == b) == (a.pack() == b.pack())


@pytest.mark.parametrize("bad", ["", "0" * 15, "0" * 17, "G" * 16, "ABCDEF0123456789", 5, None])
def test_unpack_refuses_garbage(bad: object) -> None:
    with pytest.raises(HlcError):
        Hlc.unpack(bad)  # type: ignore[arg-type]


def test_out_of_range_is_refused() -> None:
    with pytest.raises(HlcError):
        Hlc(MAX_WALL + 1, 0)
    with pytest.raises(HlcError):
        Hlc(0, MAX_COUNTER + 1)
    assert Hlc(5, MAX_COUNTER).next() == Hlc(6, 0)


@given(st.lists(st.integers(-10**6, 2 * 10**12), min_size=1, max_size=60))
def test_now_never_repeats_or_runs_back_whatever_the_wall_clock_does(readings: list[int]) -> None:
    wall = SteppingClock(readings[0])
    clock = HybridClock(wall)
    seen = [ZERO]
    for ms in readings:
        wall.ms = ms
        seen.append(clock.now())
    assert all(a < b for a, b in zip(seen, seen[1:], strict=False))


def test_clock_step_back_keeps_order_and_catches_up() -> None:
    wall = SteppingClock(1_000_000)
    clock = HybridClock(wall)
    a = clock.now()
    wall.ms = 1_000_000 - 3_600_000  # an hour back
    b = clock.now()
    assert b > a
    assert b.wall == a.wall  # the logical part carries it
    wall.ms = 2_000_000
    assert clock.now() == Hlc(2_000_000, 0)


@given(st.lists(st.tuples(st.booleans(), hlcs, st.integers(0, 10**12)), min_size=1, max_size=40))
def test_observe_is_after_both_the_remote_and_our_past(events: list[tuple[bool, Hlc, int]]) -> None:
    wall = SteppingClock(0)
    clock = HybridClock(wall, max_drift_ms=MAX_WALL)  # no drift cap: pure HLC rules
    last = ZERO
    for receive, remote, ms in events:
        wall.ms = ms
        if receive and remote.wall < MAX_WALL:
            got = clock.observe(remote)
            assert got > remote
        else:
            got = clock.now()
        assert got > last
        assert got.wall >= min(ms, MAX_WALL)
        last = got


def test_a_remote_far_in_the_future_is_not_adopted() -> None:
    wall = SteppingClock(1_000_000)
    clock = HybridClock(wall, max_drift_ms=60_000)
    far = Hlc(1_000_000 + 10 * 60_000, 7)
    got = clock.observe(far)
    assert got.wall == 1_000_000  # our clock stays on our time
    near = Hlc(1_000_000 + 30_000, 7)
    assert clock.observe(near) == Hlc(1_000_000 + 30_000, 8)


def test_restart_with_the_persisted_time_never_repeats() -> None:
    wall = SteppingClock(5_000)
    first = HybridClock(wall)
    stamps = [first.now() for _ in range(3)]
    wall.ms = 1_000  # the machine rebooted with its clock behind
    second = HybridClock(wall, last=Hlc.unpack(first.last.pack()))
    assert second.now() > stamps[-1]
