"""A TCP proxy in front of one node that can stop passing the node's answers on while it
still passes requests in (the answer of a call that reached the node is lost), can break
the connection a moment after a request went through (a reset after sending), and can close
every new connection at once (a node that refuses every call while it is so)."""

from __future__ import annotations

import contextlib
import socket
import threading


class LossyProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.drop_answers = False
        #: Answers are lost too, but for each connection's first bytes from the node (its
        #: HTTP/2 settings): the client takes the connection as up, and then hears nothing.
        self.drop_answers_after_greeting = False
        #: Seconds after a request's bytes went through at which the connection is broken.
        self.cut_after: float | None = None
        #: New connections are closed as soon as they are accepted.
        self.refuse = False
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.refuse:
                with contextlib.suppress(OSError):
                    client.close()
                continue
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        greeted = False
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if answers and self.drop_answers:
                    continue
                if answers and self.drop_answers_after_greeting and greeted:
                    continue
                greeted = True
                sink.sendall(data)
                if not answers and self.cut_after is not None:
                    threading.Timer(self.cut_after, self._cut, args=(source, sink)).start()
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _cut(*sockets: socket.socket) -> None:
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()
