"""A loopback server speaking OpenAI's Chat Completions wire protocol (JSON and SSE).

``POST /v1/responses`` (the Responses API) is served from the same script: a
:class:`Reply` whose ``completion`` is a ``response`` object (non-streaming calls).

A real HTTP/1.1 server on 127.0.0.1 in a thread: the official SDK talks to it
over a socket, nothing is patched. ``POST /v1/chat/completions`` answers from a
script: a dict keyed by the number of assistant messages in the request (so a
resumed run gets the right next turn) or a list served in order. A
:class:`Reply` holds one turn twice, as the ``chat.completion`` JSON body and as
the ``chat.completion.chunk`` sequence served as server-sent events (``data:
{...}`` then ``data: [DONE]``, chunked transfer encoding) when the request says
``"stream": true``. :class:`ErrorReply` answers with a status and OpenAI's error
body, :class:`Stall` answers too late, :class:`StreamError` fails mid-stream.
Every request body is kept in :attr:`OpenAIServer.requests`, its headers in
:attr:`OpenAIServer.headers`.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union

MODEL = "gpt-4o-mini-2024-07-18"
CREATED = 1_727_000_000


@dataclass(frozen=True)
class Reply:
    """One turn: the JSON completion and the SSE chunks of the same turn."""

    completion: dict[str, Any]
    chunks: list[dict[str, Any]]


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with OpenAI's body: ``{"error": {"message", "type", "param", "code"}}``."""

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.type, "param": None, "code": self.code}
        }


@dataclass(frozen=True)
class Stall:
    """Wait ``seconds`` (or until the server stops), then answer with ``then``.

    With ``head``, a stream starts first: those chunks are sent, then the wait.
    """

    seconds: float
    then: Reply | None = None
    head: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class StreamError:
    """Stream ``chunks``, then an error event (``data: {"error": {...}}``) and stop."""

    chunks: list[dict[str, Any]]
    message: str
    type: str = "server_error"


Answer = Union[Reply, ErrorReply, Stall, StreamError]
Script = Union[Mapping[int, Answer], Sequence[Answer], Callable[[dict[str, Any]], Answer]]


# -- wire builders (the envelope; tests write the deltas and messages by hand) -----------------


def completion(
    message: dict[str, Any],
    finish_reason: str,
    usage: dict[str, Any] | None,
    *,
    cid: str = "chatcmpl-AAA",
    model: str = MODEL,
) -> dict[str, Any]:
    """A ``chat.completion`` object, as documented."""
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "system_fingerprint": "fp_loopback",
        "service_tier": "default",
    }
    if usage is not None:
        body["usage"] = usage
    return body


def chunk(
    delta: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    *,
    usage: dict[str, Any] | None = None,
    cid: str = "chatcmpl-AAA",
    model: str = MODEL,
) -> dict[str, Any]:
    """A ``chat.completion.chunk``; ``delta=None`` makes the final usage-only chunk."""
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    )
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "fp_loopback",
        "choices": choices,
        "usage": usage,
    }


def usage(prompt: int, completion_tokens: int, cached: int = 0) -> dict[str, Any]:
    """A ``usage`` object with its token details."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def text_reply(text: str, used: dict[str, Any] | None = None, *, cid: str = "chatcmpl-T") -> Reply:
    """A text-only turn, streamed word by word."""
    used = used or usage(20, 5)
    words = [w + " " for w in text.split(" ")]
    words[-1] = words[-1][:-1]
    chunks = [chunk({"role": "assistant", "content": ""}, cid=cid)]
    chunks += [chunk({"content": w}, cid=cid) for w in words]
    chunks += [chunk({}, "stop", cid=cid), chunk(usage=used, cid=cid)]
    return Reply(completion({"content": text}, "stop", used, cid=cid), chunks)


# -- the server -------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that drops its keep-alive connection (its event loop closed) is no error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class OpenAIServer:
    """A Chat Completions server on 127.0.0.1 that plays a script and records requests."""

    def __init__(self, script: Script, *, api_key: str = "sk-loopback") -> None:
        self.script = script
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._served = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        """The API root to give the SDK as ``base_url``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def answer_for(self, body: dict[str, Any]) -> Answer:
        with self._lock:
            script = self.script
            if callable(script):
                return script(body)
            if isinstance(script, Mapping):
                turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
                if turn in script:
                    return script[turn]
                return ErrorReply(400, f"the script has no turn {turn}")
            if self._served >= len(script):
                return ErrorReply(400, f"the script has {len(script)} answers")
            self._served += 1
            return script[self._served - 1]


def _handler(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path not in ("/v1/chat/completions", "/v1/responses"):
                self._json(404, ErrorReply(404, f"Unknown path {self.path}").body())
                return
            body = json.loads(raw)
            with server._lock:
                server.requests.append(body)
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
            if self.headers.get("Authorization") != f"Bearer {server.api_key}":
                error = ErrorReply(
                    401, "Incorrect API key provided.", code="invalid_api_key"
                ).body()
                self._json(401, error)
                return
            answer = server.answer_for(body)
            with suppress(BrokenPipeError, ConnectionResetError):  # a client that gave up
                self._serve(answer, stream=bool(body.get("stream")))

        def _serve(self, answer: Answer, *, stream: bool) -> None:
            if isinstance(answer, Stall) and answer.head:
                self._sse_start()
                for event in answer.head:
                    self._sse_write(f"data: {json.dumps(event)}\n\n")
                server._stopping.wait(answer.seconds)
                return
            if isinstance(answer, Stall):
                server._stopping.wait(answer.seconds)
                if answer.then is None:
                    return
                answer = answer.then
            if isinstance(answer, ErrorReply):
                self._json(answer.status, answer.body(), answer.headers)
            elif isinstance(answer, StreamError):
                events = [
                    *answer.chunks,
                    {"error": {"message": answer.message, "type": answer.type}},
                ]
                self._sse(events, done=False)
            elif stream:
                self._sse(answer.chunks, done=True)
            else:
                self._json(200, answer.completion)

        def _json(
            self, status: int, payload: dict[str, Any], headers: Mapping[str, str] = {}
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-request-id", f"req_{len(server.requests)}")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _sse(self, events: list[dict[str, Any]], *, done: bool) -> None:
            self._sse_start()
            lines = [f"data: {json.dumps(e)}\n\n" for e in events]
            if done:
                lines.append("data: [DONE]\n\n")
            for line in lines:
                self._sse_write(line)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _sse_start(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

        def _sse_write(self, line: str) -> None:
            data = line.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    return Handler


# -- a hand-written multi-step conversation ---------------------------------------------------

# Turn 0: some text, then two parallel calls whose arguments arrive in fragments.
# Turn 1 (after both tool results): the answer.
WEATHER_ARGS_PARIS = '{"city": "Paris"}'
WEATHER_ARGS_TOKYO = '{"city": "Tokyo", "unit": "celsius"}'
WEATHER_USAGE_0 = usage(152, 48, cached=128)
WEATHER_USAGE_1 = usage(231, 17)
WEATHER_ANSWER = "Paris is 18 °C and cloudy; Tokyo is 24 °C and sunny."

w0 = partial(chunk, cid="chatcmpl-W0")
e0 = partial(chunk, cid="chatcmpl-E0")

WEATHER: dict[int, Answer] = {
    0: Reply(
        completion=completion(
            {
                "content": "Let me check both cities.",
                "tool_calls": [
                    {
                        "id": "call_Pq7aW3paris",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": WEATHER_ARGS_PARIS},
                    },
                    {
                        "id": "call_Zt9kD1tokyo",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": WEATHER_ARGS_TOKYO},
                    },
                ],
            },
            "tool_calls",
            WEATHER_USAGE_0,
            cid="chatcmpl-W0",
        ),
        chunks=[
            w0({"role": "assistant", "content": "", "refusal": None}),
            w0({"content": "Let me"}),
            w0({"content": " check both cities."}),
            w0(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_Pq7aW3paris",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
            ),
            w0({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
            w0({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Pa'}}]}),
            w0({"tool_calls": [{"index": 0, "function": {"arguments": 'ris"}'}}]}),
            w0(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_Zt9kD1tokyo",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
            ),
            w0({"tool_calls": [{"index": 1, "function": {"arguments": '{"city": '}}]}),
            w0({"tool_calls": [{"index": 1, "function": {"arguments": '"Tokyo", "un'}}]}),
            w0({"tool_calls": [{"index": 1, "function": {"arguments": 'it": "celsius"}'}}]}),
            w0({}, "tool_calls"),
            w0(usage=WEATHER_USAGE_0),
        ],
    ),
    1: text_reply(WEATHER_ANSWER, WEATHER_USAGE_1, cid="chatcmpl-W1"),
}

# An approval conversation: turn 0 asks to email a report (a gated tool), turn 1 confirms.
EMAIL_CALL_ID = "call_Mx2Qe8email"
EMAIL_ARGS = '{"to": "ops@example.com", "subject": "Weekly report"}'
EMAIL: dict[int, Answer] = {
    0: Reply(
        completion=completion(
            {
                "content": None,
                "tool_calls": [
                    {
                        "id": EMAIL_CALL_ID,
                        "type": "function",
                        "function": {"name": "send_email", "arguments": EMAIL_ARGS},
                    }
                ],
            },
            "tool_calls",
            usage(80, 25),
            cid="chatcmpl-E0",
        ),
        chunks=[
            e0({"role": "assistant", "content": None}),
            e0(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": EMAIL_CALL_ID,
                            "type": "function",
                            "function": {"name": "send_email", "arguments": EMAIL_ARGS[:20]},
                        }
                    ]
                },
            ),
            e0({"tool_calls": [{"index": 0, "function": {"arguments": EMAIL_ARGS[20:]}}]}),
            e0({}, "tool_calls"),
            e0(usage=usage(80, 25)),
        ],
    ),
    1: text_reply("The weekly report is on its way to ops@example.com.", cid="chatcmpl-E1"),
}
