"""The pure rule for when a changed note may be written to its file (sync/write_pacing.py):
a live editor's keystrokes go at once, a flood of changes is written once per interval."""

from __future__ import annotations

import pytest

from stet.sync.write_pacing import BUSY_INTERVAL_S, HOT_CHANGES, WritePacing


def test_a_keystroke_after_a_write_is_due_at_once() -> None:
    # P11: the old rule held a note written < 100 ms ago; a keystroke typed 20 ms after the
    # previous one reached the disk waited ~80 ms on the peer.
    pacing = WritePacing()
    t = 1000.0
    for _ in range(200):  # 500 keystrokes, one every 30 ms, each written when due
        pacing.changed("live", t)
        assert pacing.due("live", t) == t
        pacing.written("live", t + 0.005)
        t += 0.030


def test_key_repeat_is_not_hot() -> None:
    pacing = WritePacing()
    t = 0.0
    for _ in range(100):  # a held key: ~30 repeats a second
        pacing.changed("n", t)
        pacing.written("n", t)
        t += 1 / 30
        pacing.changed("n", t)
        assert not pacing.hot("n", t)
        assert pacing.due("n", t) == t


def test_a_flood_of_changes_waits_for_the_interval() -> None:
    pacing = WritePacing()
    pacing.written("log", 10.0)
    for i in range(HOT_CHANGES):  # an agent appending ~1,000 lines a second
        pacing.changed("log", 10.001 + i * 0.001)
    now = 10.001 + HOT_CHANGES * 0.001
    assert pacing.hot("log", now)
    assert pacing.due("log", now) == pytest.approx(10.0 + BUSY_INTERVAL_S)
    # once the interval since the last write is up, it is written (and the next flood waits again)
    later = 10.0 + BUSY_INTERVAL_S
    assert pacing.due("log", later) == later


def test_a_hot_note_never_written_is_due_at_once() -> None:
    pacing = WritePacing()
    for i in range(HOT_CHANGES * 3):
        pacing.changed("new", i * 0.0001)
    assert pacing.due("new", 0.01) == 0.01  # its first write is not held


def test_a_flood_that_stopped_is_no_longer_hot() -> None:
    pacing = WritePacing(interval_s=0.1, hot_changes=4)
    for i in range(4):
        pacing.changed("n", i * 0.01)
    pacing.written("n", 0.035)
    assert pacing.due("n", 0.04) == pytest.approx(0.135)
    pacing.written("n", 0.25)  # written, then quiet; one change a moment after the write
    pacing.changed("n", 0.27)
    assert not pacing.hot("n", 0.27)
    assert pacing.due("n", 0.27) == 0.27


def test_quiet_notes_are_forgotten() -> None:
    pacing = WritePacing()
    for n in range(100):
        pacing.changed(f"n{n}", 1.0)
        pacing.written(f"n{n}", 1.0)
    assert pacing.tracked() == 100
    pacing.forget_quiet(1.0 + BUSY_INTERVAL_S)
    assert pacing.tracked() == 0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="interval_s must be >= 0"):
        WritePacing(interval_s=-1)
    with pytest.raises(ValueError, match="hot_changes >= 1"):
        WritePacing(hot_changes=0)
