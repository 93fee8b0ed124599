"""A slow link on loopback: a TCP relay on 127.0.0.1 in front of the test S3 server that delays
every piece of data it forwards (`latency`, seconds) and limits each direction to `rate` bytes per
second. A latency longer than the client's read timeout is a link that stalls; a low rate with a
short latency is a link that trickles (bytes keep coming, a read timeout never fires).

Decisions:
- What one read from a socket brings is held `latency` seconds, then forwarded in pieces of at
  most `piece` bytes, each after its share of the rate (`len / rate`): a trickle delivers a byte
  stream that never pauses for long, which is what defeats a per-read timeout; a stall delivers
  nothing for `latency` seconds.
- `latency` and `rate` may be changed while it runs (a link that degrades midway); they apply
  to pieces forwarded from then on. Only loopback; it stops with the test (`close`).
- `hold_puts_under`: the first PUT whose request line holds it is held at the relay, its
  request (and the body behind it, in the sockets' buffers) not forwarded, until `release`: an
  upload provably in flight for as long as a test needs (`holding` is set once it is held).
  A hold shorter than the client's read timeout (60 s) costs the upload nothing but the wait.
"""

from __future__ import annotations

import socket
import threading
import time

from tests.cache_remote.relay import LoopbackRelay, close_socket, receive


class DelayProxy(LoopbackRelay):
    def __init__(self, upstream: str, latency: float = 0.0, rate: float | None = None, piece: int = 1024,
                 hold_puts_under: bytes | None = None) -> None:
        """`upstream`: the server's http://host:port; `rate`: bytes per second each way, None for no limit."""
        self.latency, self.rate, self.piece = latency, rate, piece
        self.forwarded = 0  # bytes relayed, both ways
        self.hold_puts_under = hold_puts_under
        self.holding, self._released, self._choosing = threading.Event(), threading.Event(), threading.Lock()
        self.held_line = b""  # the request line of the PUT held
        super().__init__(upstream)

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self.release()
        super().close()

    def _connect(self, client: socket.socket, server: socket.socket) -> None:
        for source, target in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(source, target, source is client), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, to_server: bool) -> None:
        while data := receive(source):
            if to_server and self._holds(data):
                self._released.wait(120)
            time.sleep(self.latency)
            for start in range(0, len(data), self.piece):
                piece = data[start:start + self.piece]
                time.sleep(len(piece) / self.rate if self.rate else 0.0)
                try:
                    target.sendall(piece)
                except OSError:
                    close_socket(source)
                    return
                self.forwarded += len(piece)
        close_socket(target)

    def _holds(self, data: bytes) -> bool:
        """Whether `data` starts the PUT to hold (the first one whose request line matches)."""
        line = data.split(b"\r\n", 1)[0]
        if self.hold_puts_under is None or not data.startswith(b"PUT ") or self.hold_puts_under not in line:
            return False
        with self._choosing:
            if self.holding.is_set():
                return False
            self.held_line = line
            self.holding.set()
            return True
