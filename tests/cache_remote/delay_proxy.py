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
"""

from __future__ import annotations

import socket
import threading
import time

from tests.cache_remote.relay import LoopbackRelay, close_socket, receive


class DelayProxy(LoopbackRelay):
    def __init__(self, upstream: str, latency: float = 0.0, rate: float | None = None, piece: int = 1024) -> None:
        """`upstream`: the server's http://host:port; `rate`: bytes per second each way, None for no limit."""
        self.latency, self.rate, self.piece = latency, rate, piece
        self.forwarded = 0  # bytes relayed, both ways
        super().__init__(upstream)

    def _connect(self, client: socket.socket, server: socket.socket) -> None:
        for source, target in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(source, target), daemon=True).start()
    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        while data := receive(source):
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
