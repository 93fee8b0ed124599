"""The low-speed floor of remote transfers (trtpipe/cache/remote/low_speed.py), on its own, in real
time with a short window: what trips it and what does not."""

from __future__ import annotations

import threading
import time

import pytest

from trtpipe.cache.remote.low_speed import LowSpeedGuard, TooSlow

WINDOW = 0.2


def test_a_transfer_shorter_than_a_window_is_never_given_up():
    with LowSpeedGuard(limit=1e9, window=WINDOW) as guard:
        guard.progress(1)  # far below the floor, but the window has not passed
    assert guard.reason is None


def test_a_burst_then_a_trickle_is_given_up_in_the_window_after_the_burst():
    with LowSpeedGuard(limit=10_000, window=WINDOW) as guard:
        guard.progress(1_000_000)
        time.sleep(WINDOW * 1.2)
        guard.progress(1)  # the first window: 5 MB/s, fine
        time.sleep(WINDOW * 1.2)
        with pytest.raises(TooSlow, match=r"the link moved 0\.0 kB/s for 0 s, below the 10\.0 kB/s"):
            guard.progress(1)


def test_the_watcher_stops_a_read_that_reports_nothing():
    stopped = threading.Event()
    with LowSpeedGuard(limit=10_000, window=WINDOW, stop=stopped.set) as guard:
        assert stopped.wait(WINDOW * 5)  # a read blocked in the client: only the watcher can end it
    assert guard.reason and "below the 10.0 kB/s" in guard.reason


def test_a_steady_link_above_the_floor_passes_many_windows():
    with LowSpeedGuard(limit=10_000, window=WINDOW, stop=lambda: None) as guard:
        for _ in range(30):
            time.sleep(WINDOW / 10)
            guard.progress(50_000)  # 2.5 MB/s: only a pause of 5 s would break the floor
    assert guard.reason is None
