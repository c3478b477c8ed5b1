"""Bounds on the time a client may take to send a request: its headers, then its body.

uvicorn's h11 protocol waits for a request's headers as long as the client
likes: a connection that sends nothing, or one header byte a second, is held
open for good (its ``timeout_keep_alive`` only starts once a response is sent).
A hundred such connections hold a hundred sockets and buffers of the bridge.

:func:`h11_with_header_deadline` makes an h11 protocol class whose connections
must deliver a request's complete headers within ``header_timeout_s``: counted
from the connection's opening for its first request, and from the first byte of
each later request on a kept-alive connection (between requests the keep-alive
timeout applies). Past it the connection is closed, with a ``408 Request
Timeout`` when part of a request had come. The body has its own deadline,
``body_timeout_s`` of :class:`nbdurable.server._body_limit.BodyLimit`, counted
from the end of the headers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ._body_limit import DEFAULT_BODY_TIMEOUT_S, positive_seconds

__all__ = ["DEFAULT_BODY_TIMEOUT_S", "DEFAULT_HEADER_TIMEOUT_S", "h11_with_header_deadline"]

DEFAULT_HEADER_TIMEOUT_S = 10.0
"""Seconds a client has to send a request's headers (``nbdurable serve --header-timeout``)."""

_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)

_log = logging.getLogger("uvicorn.error")


class HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing connections whose request headers do not come in time.

    The deadline is a class attribute: :func:`h11_with_header_deadline` makes a
    subclass per value (uvicorn instantiates the class it is given per connection).
    """

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timer: asyncio.TimerHandle | None = None
        self.request_bytes = 0
        """Bytes of the request whose headers are awaited (0: none yet)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Accept the connection; its first request's headers are due within the deadline."""
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Feed h11: a later request's deadline starts at its first byte, ends at its headers."""
        waiting = self.conn.their_state is h11.IDLE
        if waiting:
            self.request_bytes += len(data)
            if self.header_timer is None:  # a kept-alive connection's next request begins
                self._arm()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the headers are in (or h11 refused them)
            self._disarm()
            self.request_bytes = 0

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the deadline of a connection that is gone."""
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self.header_timer = self.loop.call_later(self.header_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _expired(self) -> None:
        self.header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.request_bytes:
            # Part of a request came: say why it is refused (h11 cannot send a
            # response before a request, so the bytes are written as they are).
            body = (
                b'{"error":{"type":"RequestTimeoutError","message":"request headers not '
                b'received within %g s (header_timeout)"}}' % self.header_timeout_s
            )
            self.transport.write(_TIMED_OUT % (len(body), body))
            client = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
            _log.info("%srequest headers not received within %g s", client, self.header_timeout_s)
        self.transport.close()


def h11_with_header_deadline(header_timeout_s: float) -> type[HeaderDeadlineProtocol]:
    """An h11 protocol class for uvicorn (``Config(http=...)``) with this header deadline.

    Raises:
        ConfigurationError: ``header_timeout_s`` is not a positive number.
    """
    seconds = positive_seconds("header_timeout_s", header_timeout_s)
    return type(
        "HeaderDeadlineProtocol",
        (HeaderDeadlineProtocol,),
        {"header_timeout_s": seconds, "__module__": __name__},
    )
