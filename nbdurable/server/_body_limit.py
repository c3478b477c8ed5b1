"""``max_body_bytes``: a request body over the limit is refused with 413 before anything parses it.

A declared ``Content-Length`` over the limit is refused at once; a chunked body
is read (never more than the limit plus one chunk) and refused as soon as it
goes over. A body within the limit is handed on unchanged. ``body_timeout_s``:
a body that has not all come that long after the request's headers is refused
with 408 and its connection closed (a slow client holds nothing for longer).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import ConfigurationError

__all__ = ["DEFAULT_BODY_TIMEOUT_S", "BodyLimit", "positive_seconds"]

DEFAULT_BODY_TIMEOUT_S = 30.0
"""Seconds a client has to send a request's body once its headers came (``--body-timeout``)."""


def positive_seconds(name: str, value: float) -> float:
    """``value`` as seconds, checked positive and finite.

    Raises:
        ConfigurationError: Not a positive finite number.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a number of seconds, not {value!r}")
    if not 0 < value < float("inf"):
        raise ConfigurationError(f"{name} must be positive and finite, not {value!r}")
    return float(value)


class BodyLimit:
    """ASGI middleware enforcing a maximum request body size.

    Args:
        app: The application it guards.
        max_body_bytes: The largest body accepted, in bytes.
        body_timeout_s: Seconds the whole body may take to arrive (None: no bound).
    """

    def __init__(
        self, app: ASGIApp, max_body_bytes: int, body_timeout_s: float | None = None
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the body within the limit (or refuse it), then hand the request on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._refuse(send, declared)
            return
        body = bytearray()
        try:
            async with asyncio.timeout(self.body_timeout_s):
                complete = await self._read(receive, send, body)
        except TimeoutError:
            await self._answer(
                send,
                408,
                "RequestTimeoutError",
                f"request body not received within {self.body_timeout_s:g} s (body_timeout)",
            )
            return
        if not complete:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive, send: Send, body: bytearray) -> bool:
        """Read the body into ``body``; False when it was refused or the client left."""
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return False
            body.extend(message.get("body", b""))
            more = bool(message.get("more_body", False))
            if len(body) > self.max_body_bytes:
                await self._refuse(send, len(body))
                return False
        return True

    async def _refuse(self, send: Send, size: int) -> None:
        await self._answer(
            send,
            413,
            "LimitExceededError",
            f"request body too large: {size} > {self.max_body_bytes} bytes (max_body_bytes)",
        )

    async def _answer(self, send: Send, status: int, type_: str, message: str) -> None:
        """An error answer that closes the connection (the rest of the body is never read)."""
        body = json.dumps({"error": {"type": type_, "message": message}}).encode("utf-8")
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
