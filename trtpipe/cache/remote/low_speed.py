"""Give up a transfer that crawls: one that moves fewer than `limit` bytes a second over `window`
seconds (git's `http.lowSpeedLimit` / `http.lowSpeedTime`, curl's `--speed-limit` / `--speed-time`).

Why: boto3's timeouts bound the wait for a connection and for the next byte, never a whole
transfer. A link that delivers a byte every few seconds never trips a read timeout, so a download
lasted as long as the trickle took (days for a large engine; found with the trickling proxy of
tests/cache_remote/delay_proxy.py), holding the stage's local lock, so the sweep's other jobs
waited behind it. The remote is a shortcut: a link
this slow is a miss, the stage runs here.

Decisions:
- Progress is counted by whoever moves the bytes (`progress`, which raises `TooSlow` once the
  floor is broken). A watcher thread checks every quarter window too: a read blocked inside the
  client reports nothing until it returns, so the watcher calls `stop` (which ends that read) and
  the reader then raises; and it closes windows on time, so a burst (an upload's first megabytes
  go into the socket's buffers at once) is not averaged with the trickle after it.
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
        """`stop`: ends a read that is blocked in the client (called once, from the watcher); None
        where the next `progress` comes soon enough (an upload: see GuardedPart)."""
        self._limit, self._window, self._stop = limit, window, stop
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._moved = 0
        self._mark = (time.monotonic(), 0)
        self.reason: str | None = None

    def __enter__(self) -> "LowSpeedGuard":
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
                if self._stop is not None:
                    self._stop()
                return


def _rate(per_second: float) -> str:
    return f"{per_second / 1000:.1f} kB/s"


class GuardedPart:
    """`length` bytes of a file from `offset`, as an upload's body: each read counts as progress
    of `guard`, and raises TooSlow once the link is below the floor.

    Why a body and not boto3's progress callback: the client reads a body block by block as the
    socket takes them (128 KiB with boto3 1.44, after reading it whole once for its checksums;
    each block's send is bounded by the connect timeout), so the guard hears of a trickle soon; s3transfer's callback comes every 256 KiB, and after a
    retry only once the re-sent bytes pass the point reached before, so a trickling upload went on
    for many minutes after the floor was broken (tests/cache_remote/test_slow_link.py)."""

    def __init__(self, path, offset: int, length: int, guard: LowSpeedGuard) -> None:
        self._handle = open(path, "rb")
        self._offset, self._length, self._guard = offset, length, guard
        self._handle.seek(offset)

    def __len__(self) -> int:
        return self._length

    def read(self, size: int = -1) -> bytes:
        left = self._length - self.tell()
        data = self._handle.read(left if size is None or size < 0 else min(size, left))
        self._guard.progress(len(data))
        return data

    def tell(self) -> int:
        return self._handle.tell() - self._offset

    def seek(self, position: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.tell(), 2: self._length}[whence]
        self._handle.seek(self._offset + min(max(base + position, 0), self._length))
        return self.tell()

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "GuardedPart":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
