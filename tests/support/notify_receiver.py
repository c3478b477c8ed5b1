"""A webhook receiver on 127.0.0.1 for notification tests (stdlib http.server in a thread).

It records every request (headers and raw body) and answers with the next
status of its script (then 200 for ever), so a test can make it fail first.
``genuine`` checks a request's signature the way docs/runtime.md tells a
receiver to, without nbdurable's own helper.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """One request the receiver got, and the status it answered."""

    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def payload(self) -> dict[str, Any]:
        return dict(json.loads(self.body))

    def genuine(self, secret: str, tolerance_s: float = 300.0) -> bool:
        """The receiver's check: HMAC-SHA256(secret, timestamp + "." + body), and a recent timestamp."""
        timestamp = self.headers.get("x-nbdurable-timestamp", "")
        signature = self.headers.get("x-nbdurable-signature", "")
        expected = hmac.new(
            secret.encode(), timestamp.encode() + b"." + self.body, hashlib.sha256
        ).hexdigest()
        recent = timestamp.isdigit() and abs(time.time() - int(timestamp)) <= tolerance_s
        return recent and hmac.compare_digest(signature, f"sha256={expected}")


@dataclass
class Receiver:
    """The running receiver: its URL and what it received."""

    url: str
    script: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self) -> list[Received]:
        """The requests answered with a 2xx."""
        with self.lock:
            return [r for r in self.received if 200 <= r.status < 300]

    def all(self) -> list[Received]:
        with self.lock:
            return list(self.received)


@contextmanager
def receiver(script: Sequence[int] = ()) -> Iterator[Receiver]:
    """Serve on a free port of 127.0.0.1 until the block ends."""
    state = Receiver(url="", script=list(script))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            with state.lock:
                status = state.script.pop(0) if state.script else 200
                state.received.append(
                    Received({k.lower(): v for k, v in self.headers.items()}, body, status)
                )
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
