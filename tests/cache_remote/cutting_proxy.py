"""A TCP relay on 127.0.0.1 in front of the test S3 server that can cut a file's download
midway (the server "goes away" while it sends an object's bytes, as a host that dies or a link
that drops does), an upload's request midway through its body (a file's PUT or one part of a
multipart upload), or an upload's last request, the record's PUT (the server goes away after the
entry's files went up). With `dies`, the first cut is the server stopping: every connection is
closed and new ones are refused from then on. Only loopback; it stops with the test (`close`)."""

from __future__ import annotations

import socket
import threading

from tests.cache_remote.relay import LoopbackRelay, close_socket, receive, send


class CuttingProxy(LoopbackRelay):
    def __init__(self, upstream: str, cut_gets_after: int | None = None, cut_under: bytes = b"/files/",
                 cut_record_puts: bool = False, cut_puts_after: int | None = None, dies: bool = False) -> None:
        """`upstream`: the server's http://host:port. A GET of an object under `cut_under` gets its
        response's headers and `cut_gets_after` bytes of its body, then both connections are closed;
        a PUT whose request line holds `cut_under` (b"partNumber=": a part) reaches the server with
        its headers and `cut_puts_after` bytes of its body, then both are closed; with
        `cut_record_puts`, a PUT under `/entries/` is cut before the server sees it."""
        self.cut_gets_after, self.cut_under = cut_gets_after, cut_under
        self.cut_record_puts, self.cut_puts_after, self.dies = cut_record_puts, cut_puts_after, dies
        self.cuts = 0
        self.cut_lines: list[bytes] = []  # the request line of each request cut
        super().__init__(upstream)

    def _connect(self, client: socket.socket, server: socket.socket) -> None:
        state = {"budget": None, "body": False}
        threading.Thread(target=self._requests, args=(client, server, state), daemon=True).start()
        threading.Thread(target=self._responses, args=(server, client, state), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, state: dict) -> None:
        while data := receive(client):
            request_line = data.split(b"\r\n", 1)[0]
            if self.cut_record_puts and data.startswith(b"PUT ") and b"/entries/" in request_line:
                self._cut(request_line, client, server)
                break
            if self.cut_puts_after is not None and data.startswith(b"PUT ") and self.cut_under in request_line:
                self._forward_part_of_body(data, client, server)
                self._cut(request_line, client, server)
                break
            if self.cut_gets_after is not None and data.startswith(b"GET ") and self.cut_under in request_line:
                state.update(budget=self.cut_gets_after, body=False)  # set before the server can answer
            if not send(server, data):
                break
        close_socket(server)

    def _forward_part_of_body(self, data: bytes, client: socket.socket, server: socket.socket) -> None:
        """The request's headers (one read on loopback) and `cut_puts_after` bytes of its body."""
        left = data.find(b"\r\n\r\n") + 4 + self.cut_puts_after
        while data and left > 0:
            send(server, data[:left])
            left -= len(data[:left])
            data = receive(client) if left > 0 else b""

    def _cut(self, request_line: bytes, client: socket.socket, server: socket.socket) -> None:
        self.cuts += 1
        self.cut_lines.append(request_line)
        close_socket(client)
        close_socket(server)
        if self.dies:
            self.close()

    def _responses(self, server: socket.socket, client: socket.socket, state: dict) -> None:
        while data := receive(server):
            budget = state["budget"]
            if budget is not None and not state["body"]:  # the headers pass whole (one read on loopback)
                end = data.find(b"\r\n\r\n")
                if end < 0:
                    send(client, data)
                    continue
                send(client, data[:end + 4])
                data, state["body"] = data[end + 4:], True
            if budget is not None and len(data) >= budget:
                send(client, data[:budget])
                self._cut(b"", client, server)
                break
            if budget is not None:
                state["budget"] = budget - len(data)
            if not send(client, data):  # closed by a cut of the request
                break
        close_socket(client)
        close_socket(server)
