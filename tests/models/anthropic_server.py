"""A loopback server speaking Anthropic's Messages API wire protocol (JSON and SSE).

A real HTTP server on 127.0.0.1 in a thread: the official SDK talks to it over
a socket, nothing is patched. Tests queue replies (one per request, in order);
the same scripted message is served as a JSON body or, when the request asks
for ``"stream": true``, as the documented SSE event sequence (message_start,
content_block_start/delta/stop with ``text_delta`` and ``input_json_delta``
fragments, ``ping``, message_delta, message_stop). Every request body is kept
in :attr:`AnthropicServer.requests`.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def message(
    *content: dict[str, Any],
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int | None = None,
    cache_write: int | None = None,
    msg_id: str = "msg_01XFDUDYJgAACzvnptvVoYEL",
    model: str = "claude-sonnet-4-5-20250929",
) -> dict[str, Any]:
    """A Messages API response object, as documented."""
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if cache_read is not None:
        usage["cache_read_input_tokens"] = cache_read
    if cache_write is not None:
        usage["cache_creation_input_tokens"] = cache_write
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(tool_id: str, tool_name: str, /, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": tool_name, "input": args}


@dataclass
class Error:
    """An error reply: an HTTP status with Anthropic's error body."""

    type: str
    message: str
    status: int | None = None


@dataclass
class StreamError:
    """A stream that starts (status 200), says ``text`` and then sends an ``error`` event."""

    type: str
    message: str
    text: str = "Let me"


@dataclass
class Stall:
    """Wait ``seconds`` (or until the server stops) before answering at all, or,
    ``mid_stream``, after the first events of a stream."""

    seconds: float
    mid_stream: bool = False


@dataclass
class Truncated:
    """A stream whose connection closes after its first events (no message_stop)."""


Reply = dict[str, Any] | Error | StreamError | Stall | Truncated


def sse_events(msg: dict[str, Any], chunk: int = 7) -> Iterator[dict[str, Any]]:
    """The documented SSE sequence of ``msg``: text and tool input split into fragments.

    Each event's SSE name is its ``type``.
    """
    usage = msg["usage"]
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens"} | {"output_tokens": 1}
    yield {
        "type": "message_start",
        "message": {**msg, "content": [], "stop_reason": None, "usage": start_usage},
    }
    for index, block in enumerate(msg["content"]):
        if block["type"] == "text":
            start, pieces = {"type": "text", "text": ""}, _split(block["text"], chunk)
            deltas = [{"type": "text_delta", "text": p} for p in pieces]
        else:
            start = {**block, "input": {}}
            raw = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [{"type": "input_json_delta", "partial_json": p} for p in _split(raw, chunk)]
        yield {
            "type": "content_block_start",
            "index": index,
            "content_block": start,
        }
        if index == 0:
            yield {"type": "ping"}
        for delta in deltas:
            yield {
                "type": "content_block_delta",
                "index": index,
                "delta": delta,
            }
        yield {"type": "content_block_stop", "index": index}
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    yield {"type": "message_stop"}


def _split(value: str, size: int) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


@dataclass
class AnthropicServer:
    """The server: queue replies with :meth:`add`, read :attr:`requests` afterwards."""

    replies: deque[Reply] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def add(self, *replies: Reply) -> AnthropicServer:
        self.replies.extend(replies)
        return self

    def start(self) -> AnthropicServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    server.serve(self, body)  # (the client may have given up: timeout tests)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def serve(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if handler.path != "/v1/messages":
            return _json(handler, 404, _error_body("not_found_error", f"no route {handler.path}"))
        if not self.replies:
            return _json(handler, 500, _error_body("api_error", "the test queued no reply"))
        reply = self.replies.popleft()
        if isinstance(reply, Truncated):
            return _sse(handler, list(sse_events(message(text("Let me"))))[:4])
        if isinstance(reply, Stall) and reply.mid_stream:
            events = list(sse_events(message(text("Let me"))))
            return _sse(handler, events[:4], then=lambda: self.stopping.wait(reply.seconds))
        if isinstance(reply, Stall):
            self.stopping.wait(reply.seconds)
            return _json(handler, 500, _error_body("api_error", "stalled"))
        if isinstance(reply, Error):
            status = reply.status or ERROR_STATUS[reply.type]
            return _json(handler, status, _error_body(reply.type, reply.message))
        if isinstance(reply, StreamError):
            events = list(sse_events(message(text(reply.text))))[:4]  # start, block, ping, delta
            events.append(_error_body(reply.type, reply.message))
            return _sse(handler, events)
        if body.get("stream"):
            return _sse(handler, sse_events(reply))
        return _json(handler, 200, reply)


def _error_body(kind: str, msg: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": msg}}


def _json(handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.send_header("request-id", "req_011CTestLoopback")
    handler.end_headers()
    handler.wfile.write(data)


def _sse(
    handler: BaseHTTPRequestHandler, events: Any, then: Callable[[], object] | None = None
) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.close_connection = True
    for data in events:
        handler.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
        handler.wfile.flush()
    if then is not None:
        then()
