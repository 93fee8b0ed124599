"""A TCP relay on 127.0.0.1 in front of the test S3 server: the base of the fault proxies
(cutting_proxy.py, delay_proxy.py). Each accepted connection gets one to the server, and a
subclass's `_connect(client, server)` relays between them (in threads of its own). Only
loopback; it stops with the test (`close`)."""

from __future__ import annotations

import socket
import threading


class LoopbackRelay:
    def __init__(self, upstream: str) -> None:
        """`upstream`: the server's http://host:port."""
        host, port = upstream.removeprefix("http://").split(":")
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            close_socket(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            server = socket.create_connection(self._upstream, timeout=30)
            server.settimeout(None)
            self._sockets += [client, server]
            self._connect(client, server)

    def _connect(self, client: socket.socket, server: socket.socket) -> None:
        raise NotImplementedError


def receive(sock: socket.socket) -> bytes:
    """What the socket has (up to 64 kB); b"" when it is closed or failed."""
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def send(sock: socket.socket, data: bytes) -> bool:
    """All of `data`; False when the socket is closed or failed (the other side, or a cut, closed it)."""
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def close_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
