"""``max_body_bytes``: a request body over the limit is refused with 413 before anything parses it.

A declared ``Content-Length`` over the limit is refused at once; a chunked body
is read (never more than the limit plus one chunk) and refused as soon as it
goes over. A body within the limit is handed on unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimit"]


class BodyLimit:
    """ASGI middleware enforcing a maximum request body size.

    Args:
        app: The application it guards.
        max_body_bytes: The largest body accepted, in bytes.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

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
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            more = bool(message.get("more_body", False))
            if len(body) > self.max_body_bytes:
                await self._refuse(send, len(body))
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, size: int) -> None:
        body = json.dumps(
            {
                "error": {
                    "type": "LimitExceededError",
                    "message": f"request body too large: {size} > {self.max_body_bytes} bytes "
                    "(max_body_bytes)",
                }
            }
        ).encode("utf-8")
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
