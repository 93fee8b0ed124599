"""Give up a transfer that crawls: one that moves fewer than `limit` bytes a second over `window`
seconds (git's `http.lowSpeedLimit` / `http.lowSpeedTime`, curl's `--speed-limit` / `--speed-time`).

Why: boto3's timeouts bound the wait for a connection and for the next byte, never a whole
transfer. A link that delivers a byte every few seconds never trips a read timeout, so a download
went on for days (found with the trickling proxy of tests/cache_remote/delay_proxy.py), holding the
stage's local lock, so the sweep's other jobs waited behind it. The remote is a shortcut: a link
this slow is a miss, the stage runs here.

Decisions:
- Progress is counted by whoever moves the bytes (`progress`, which raises `TooSlow` once the
  floor is broken); a watcher thread checks too, since a read blocked inside the client reports
  nothing until it returns: it calls `stop` (which ends that read) and the reader then raises.
- Windows are measured from the last check that passed, so a transfer shorter than one window
  is never given up, and a burst followed by a stall is (the window after the burst is empty).
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class TooSlow(Exception):
    """str(): how slow the link was, in a few words."""


class LowSpeedGuard:
    def __init__(self, limit: float, window: float, stop: Callable[[], None] | None = None) -> None:
        """`stop`: ends a read that is blocked in the client (called once, from the watcher)."""
        self._limit, self._window, self._stop = limit, window, stop
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._moved = 0
        self._mark = (time.monotonic(), 0)
        self.reason: str | None = None

    def __enter__(self) -> "LowSpeedGuard":
        if self._stop is not None:
            threading.Thread(target=self._watch, daemon=True, name="trtpipe-low-speed").start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()

    def progress(self, moved: int) -> None:
        """Count `moved` more bytes; raises TooSlow when the link is below the floor."""
        with self._lock:
            self._moved += moved
        if self._check():
            raise TooSlow(self.reason)

    def _check(self) -> bool:
        with self._lock:
            if self.reason is None:
                now = time.monotonic()
                since, moved = self._mark
                if now - since >= self._window:
                    rate = (self._moved - moved) / (now - since)
                    if rate < self._limit:
                        self.reason = (f"the link moved {_rate(rate)} for {now - since:.0f} s, "
                                       f"below the {_rate(self._limit)} a transfer needs")
                    self._mark = (now, self._moved)
            return self.reason is not None

    def _watch(self) -> None:
        while not self._done.wait(self._window / 4):
            if self._check():
                self._stop()
                return


def _rate(per_second: float) -> str:
    return f"{per_second / 1000:.1f} kB/s"
