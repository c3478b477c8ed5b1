"""A loopback TCP proxy that adds latency to every round trip (real sockets, threads).

Used to put a PostgreSQL server "far away": each chunk a client sends is held
for ``delay`` seconds before it is forwarded, so every request/response round
trip (a query, a commit, each step of a connection's startup) costs at least
``delay`` more. Replies travel back at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

__all__ = ["LatencyProxy", "latency_proxy"]


class LatencyProxy:
    """Forwards ``127.0.0.1:port`` to ``target_host:target_port`` with added latency.

    Args:
        target_host: Where connections are forwarded.
        target_port: Its port.
        delay: Seconds added to each client-to-server chunk.
    """

    def __init__(self, target_host: str, target_port: int, delay: float) -> None:
        self.target = (target_host, target_port)
        self.delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="latency-proxy", daemon=True)
        self._thread.start()

    def url_for(self, url: str, real_port: int) -> str:
        """``url`` with its port replaced by the proxy's."""
        return url.replace(f":{real_port}/", f":{self.port}/")

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(
                target=self._pump, args=(client, server, self.delay), daemon=True
            ).start()
            threading.Thread(target=self._pump, args=(server, client, 0.0), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, delay: float) -> None:
        try:
            while True:
                chunk = source.recv(65536)
                if not chunk:
                    break
                if delay:
                    time.sleep(delay)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting and cut every forwarded connection."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() at once
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def latency_proxy(target_host: str, target_port: int, delay: float) -> Iterator[LatencyProxy]:
    """A running :class:`LatencyProxy`, closed on exit."""
    proxy = LatencyProxy(target_host, target_port, delay)
    try:
        yield proxy
    finally:
        proxy.close()
