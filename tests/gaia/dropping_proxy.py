"""Test-only: a TCP proxy in front of a service that drops the first ``drops`` connections as soon as
they arrive (the client sees the connection closed with no answer), then relays bytes both ways."""

from __future__ import annotations

import socket
import threading

from tests.kronos.conftest import free_port


class DroppingProxy:
    def __init__(self, upstream_port: int, drops: int) -> None:
        self.upstream_port, self.left = upstream_port, drops
        self.dropped = 0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.sock = socket.create_server(("127.0.0.1", self.port))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.left > 0:
                self.left -= 1
                self.dropped += 1
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                conn.close()  # a reset: the request never got an answer
                continue
            up = socket.create_connection(("127.0.0.1", self.upstream_port))
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
