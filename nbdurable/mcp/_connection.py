"""One live MCP session to one server, owned by a background task on the running loop.

The SDK's client is a stack of anyio context managers that must be entered and
left by the same task, while tool calls come from many tasks (parallel tool
calls, several runs). So a dedicated owner task opens the session, keeps it
until :meth:`Connection.aclose`, and then leaves it (which stops and reaps a
stdio server's process). Calls share the session. A session whose transport
ended (a crashed server, a dropped HTTP connection) is replaced on next use.

An HTTP server that restarted no longer knows the session's id and refuses
every request that carries it (404, as the protocol says; the reference
TypeScript server answers 400 "No valid session ID"). The refusal is seen on
the HTTP response, before the SDK turns it into a JSON-RPC error: the session
is then replaced, and a call or listing whose own request was refused this way
is sent once more on the new session. Only then: the server refused it without
running it. A request that may have reached a live session (a connection that
broke mid-call, an earlier round of the same call that was answered) is never
sent again here; the model reads the error, and the call's recovery policy
decides on a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from .._aio import wait_event
from .._errors import NbdurableError

if TYPE_CHECKING:
    import mcp_types
    from mcp import Client

    from ._server import MCPServer

__all__ = ["Connection", "MCPConnectionError"]

_log = logging.getLogger("nbdurable")
T = TypeVar("T")
_CLOSE_TIMEOUT = 10.0  # seconds; the SDK stops a stdio server within a few
_SUBSCRIBE_TIMEOUT = 10.0
_HTTP_TIMEOUT = 30.0
_LEGACY_PROBE_TIMEOUT = 5.0
"""Seconds the legacy-SSE probe waits for the first event, after a failed connection."""
_HTTP_STREAM_READ_TIMEOUT = 300.0  # server-sent event streams stay open between events
_CONNECTION_CLOSED = -32000  # the SDK's error code for a transport that ended
_SESSION_HEADER = "mcp-session-id"


class MCPConnectionError(NbdurableError, ConnectionError):
    """An MCP server cannot be reached, or its connection broke during a request."""


class _Session:
    """One opened session: whether it failed, and its requests in flight."""

    def __init__(self) -> None:
        self.broken = False  # its transport failed
        self.refused = False  # the server no longer knows its id (it restarted)
        self._requests = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Count a call or listing in flight on the session while the block runs."""
        self._requests += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._requests -= 1
            if not self._requests:
                self._idle.set()

    async def idle(self, timeout: float) -> None:
        """Wait until no request is in flight, or ``timeout`` seconds pass."""
        await wait_event(self._idle, timeout)


@dataclass
class _Attempt:
    """What the HTTP responses to one call (or listing) said, from the hook."""

    answered: bool = False  # a request of it was taken: it may have run
    refused: bool = False  # its first request was refused for the session: it did not run


# The SDK sends each request in the context of the task that made it, so the
# response hook sees the attempt of the call it answers (parallel calls apart).
# Were that context lost, the hook would see no attempt: the refused session is
# still replaced, but nothing is sent again (the safe side).
_attempt: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar(
    "nbdurable_mcp_attempt", default=None
)


class Connection:
    """A lazily opened, self-healing session to one MCP server.

    Attributes:
        mode: The SDK's protocol negotiation (``"auto"``: the 2026 protocol when
            the server speaks it, else the initialize handshake; ``"legacy"``
            forces the handshake).
    """

    mode = "auto"

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[Client] | None = None
        self._closing: asyncio.Event | None = None
        self._session = _Session()
        self._retiring: set[asyncio.Task[None]] = set()
        self._listing: list[mcp_types.Tool] | None = None
        self._listing_stale = True
        self.opened = 0  # sessions opened so far (for tests and diagnostics)

    def __repr__(self) -> str:
        return f"<MCP connection to {self.server!r}>"

    # -- public ---------------------------------------------------------------------

    async def list_tools(self) -> list[mcp_types.Tool]:
        """The server's tools, listed again after ``tools/list_changed`` or a reconnect."""

        async def listed(client: Client) -> list[mcp_types.Tool]:
            if self._listing is not None and not self._listing_stale:
                return self._listing
            self._listing_stale = False  # a change announced from here on marks it again
            try:
                self._listing = await _list_all(client)
            except BaseException:
                self._listing_stale = True
                raise
            return self._listing

        return await self._request("listing its tools", listed)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        meta: Mapping[str, Any],
    ) -> mcp_types.CallToolResult:
        """Call a tool; an error the server reports comes back as the result's ``is_error``.

        A call the server refused because it no longer knows the session (it
        restarted) did not run: it is sent once more on a new session. Nothing
        else is sent again.

        Raises:
            MCPConnectionError: The server cannot be reached, or the connection
                broke during the call (the next call reconnects).
            mcp.MCPError: The server refused the request (a protocol error).
        """

        async def called(client: Client) -> mcp_types.CallToolResult:
            return await client.call_tool(name, arguments, meta=dict(meta))  # type: ignore[arg-type]

        return await self._request(f"calling {name!r}", called)

    async def client(self) -> Client:
        """The open session; opened now if there is none or the last one broke.

        Raises:
            MCPConnectionError: The server cannot be reached.
        """
        client, _session = await self._open()
        return client

    async def _request(self, doing: str, send: Callable[[Client], Awaitable[T]]) -> T:
        """``send`` on the open session, and once more on a new one when refused unrun.

        Only a refusal because the server no longer knows the session (it
        restarted) is sent again: the server did not run it. Nothing else is.
        """
        for resend in (False, True):
            client, session = await self._open()
            attempt = _Attempt()
            token = _attempt.set(attempt)
            try:
                with session.request():
                    return await send(client)
            except BaseException as exc:
                if self._reopen(exc, attempt, resend):
                    continue
                failure = self._failure(exc, doing, attempt, session)
                if failure is exc:
                    raise
                raise failure from exc
            finally:
                _attempt.reset(token)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def aclose(self) -> None:
        """Leave the session (a stdio server is stopped and reaped); reopened on next use."""
        async with self._lock:
            await self._stop()
            retiring = list(self._retiring)
        await asyncio.gather(*retiring, return_exceptions=True)

    async def _open(self) -> tuple[Client, _Session]:
        async with self._lock:
            if not self._usable():
                if self._session.refused and not self._session.broken:
                    self._retire()
                else:
                    await self._stop()
                self._start()
            ready, session = self._ready, self._session
        assert ready is not None
        try:
            return await asyncio.shield(ready), session
        except Exception as exc:
            server = self.server
            if server.url is not None and await _serves_legacy_sse(server.url, server.headers):
                raise MCPConnectionError(
                    f"cannot connect to {server!r}: it serves MCP's legacy HTTP+SSE transport "
                    "(protocol 2024-11-05: a GET event stream that names a POST endpoint), which "
                    "nbdurable does not speak; it speaks streamable HTTP. Run the server with its "
                    "streamable HTTP transport (often `--transport streamable-http`, at /mcp), "
                    "or reach it through a stdio bridge: MCPServer.stdio('uvx', "
                    f"args=['mcp-proxy', {server.url!r}])"
                ) from exc
            raise MCPConnectionError(f"cannot connect to {server!r}: {_describe(exc)}") from exc

    # -- the owner task -------------------------------------------------------------

    def _usable(self) -> bool:
        ready, task, session = self._ready, self._task, self._session
        if session.broken or session.refused or ready is None or task is None or task.done():
            return False
        if not ready.done():
            return True  # still opening: wait for it
        if ready.cancelled() or ready.exception() is not None:
            return False
        return not _transport_ended(ready.result())

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._session = session = _Session()
        self._listing_stale = True
        self._ready = ready = loop.create_future()
        self._closing = closing = asyncio.Event()
        self._task = loop.create_task(
            self._own(ready, closing, session), name=f"nbdurable {self!r}"
        )
        self.opened += 1

    async def _stop(self) -> None:
        task, closing = self._task, self._closing
        self._task = self._ready = self._closing = None
        if task is None or closing is None:
            return
        closing.set()
        await _ended(task)

    def _retire(self) -> None:
        """Leave a refused session once its requests in flight have their answers.

        Its other requests are being refused too (unrun, so sent again): left
        at once, they would end with a closed connection instead, which says
        nothing about whether they ran.
        """
        task, closing, session = self._task, self._closing, self._session
        self._task = self._ready = self._closing = None
        if task is None or closing is None:
            return

        async def leave() -> None:
            await session.idle(_CLOSE_TIMEOUT)
            closing.set()
            await _ended(task)

        retiring = asyncio.get_running_loop().create_task(leave(), name=f"nbdurable {self!r}")
        self._retiring.add(retiring)
        retiring.add_done_callback(self._retiring.discard)

    async def _own(
        self, ready: asyncio.Future[Client], closing: asyncio.Event, session: _Session
    ) -> None:
        import anyio
        from mcp import Client

        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(
                    await self._transport(stack, session),
                    read_timeout_seconds=self.server.timeout,
                    mode=self.mode,
                    message_handler=self._on_message,
                    client_info=_client_info(),
                    cache=None,  # a listing must reflect tools/list_changed at once
                )
                await stack.enter_async_context(client)
                async with anyio.create_task_group() as group:
                    with anyio.move_on_after(_SUBSCRIBE_TIMEOUT):
                        await group.start(self._listen, client)
                    ready.set_result(client)
                    await closing.wait()
                    group.cancel_scope.cancel()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                _log.debug("nbdurable: %r ended: %r", self, exc)
        finally:
            if not ready.done():
                ready.set_exception(MCPConnectionError(f"the session to {self.server!r} ended"))

    async def _transport(self, stack: contextlib.AsyncExitStack, session: _Session) -> Any:
        server = self.server
        if server.transport == "stdio":
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            assert server.command is not None
            params = StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=dict(server.env) if server.env is not None else None,
                cwd=server.cwd,
            )
            return stdio_client(params, errlog=_errlog())
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert server.url is not None
        timeout = server.timeout if server.timeout is not None else _HTTP_TIMEOUT

        async def on_response(response: httpx2.Response) -> None:
            await _watch(response, session)

        http = httpx2.AsyncClient(
            headers=dict(server.headers),
            timeout=httpx2.Timeout(timeout, read=max(timeout, _HTTP_STREAM_READ_TIMEOUT)),
            event_hooks={"response": [on_response]},
            transport=_http_transport(session),
        )
        await stack.enter_async_context(http)
        return streamable_http_client(server.url, http_client=http)

    async def _listen(self, client: Client, *, task_status: Any) -> None:
        """Mark the listing stale on ``tools/list_changed`` (servers of the 2026 protocol).

        Earlier servers send the notification on the session, where
        :meth:`_on_message` sees it; they refuse the subscription.
        """
        started = False
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                task_status.started()
                started = True
                async for _event in subscription:
                    self._listing_stale = True
        except Exception as exc:
            _log.debug("nbdurable: %r: no tools/list_changed subscription: %r", self, exc)
        finally:
            self._listing_stale = True
            if not started:
                with contextlib.suppress(RuntimeError):  # the start itself was given up
                    task_status.started()

    async def _on_message(self, message: Any) -> None:
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._listing_stale = True
        elif isinstance(message, Exception):
            _log.debug("nbdurable: %r: transport error %r", self, message)

    def _reopen(self, exc: BaseException, attempt: _Attempt, resent: bool) -> bool:
        """Whether to send a request again on a new session: refused unrun, not yet resent."""
        if resent or not attempt.refused or not isinstance(exc, Exception):
            return False
        _log.info("nbdurable: %r no longer knows its session (restarted?): opening a new one", self)
        return True

    def _failure(
        self, exc: BaseException, doing: str, attempt: _Attempt, session: _Session
    ) -> BaseException:
        """Mark the session broken when the transport failed; the error to raise."""
        if isinstance(exc, MCPConnectionError):
            session.broken = True
            return exc  # raised again as it is
        # refused, or cut off unanswered on a session found refused meanwhile (an
        # answered request's error is the server's own)
        unanswered = session.refused and not attempt.answered and isinstance(exc, Exception)
        if attempt.refused or unanswered:
            again = "a new session refused it too" if attempt.refused else "it may have run"
            return MCPConnectionError(
                f"{self.server!r} no longer knows the session while {doing} (did it "
                f"restart?); the request was not sent again: {again} "
                "(the next call opens a new session)"
            )
        code = getattr(exc, "code", None)
        transport = code == _CONNECTION_CLOSED or isinstance(exc, OSError | EOFError)
        if not transport:
            import anyio

            transport = isinstance(exc, anyio.BrokenResourceError | anyio.ClosedResourceError)
        if transport:
            session.broken = True
            return MCPConnectionError(
                f"the connection to {self.server!r} broke while {doing}: {_describe(exc)} "
                "(the next call reconnects)"
            )
        return exc


async def _ended(task: asyncio.Task[None]) -> None:
    """Wait for an owner task told to close; cancel it if it does not end in time."""
    done, _ = await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)
    if not done:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def _list_all(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools


async def _watch(response: Any, session: _Session) -> None:
    """The HTTP client's response hook: notes a refused session, and whether a call ran."""
    request = response.request
    if request.method != "POST":
        return  # the event streams: no call is sent on them
    attempt = _attempt.get()
    if _SESSION_HEADER in request.headers and await _refuses_session(response):
        session.refused = True
        if attempt is not None and not attempt.answered:
            attempt.refused = True
    elif attempt is not None:
        attempt.answered = True  # taken, or refused otherwise: it may have run


def _http_transport(session: _Session) -> Any:
    """The HTTP transport, but a DELETE that would end a session the server forgot is not sent.

    The SDK ends the session it leaves with a DELETE, and logs a warning when
    the server answers that it does not know it: in a notebook, a red line
    after every restart of the server. There is nothing left to end.
    """
    import httpx2

    inner = httpx2.AsyncHTTPTransport()

    class Transport(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            if request.method == "DELETE" and session.refused:
                return httpx2.Response(204, request=request)
            return await inner.handle_async_request(request)

        async def aclose(self) -> None:
            await inner.aclose()

    return Transport()


async def _refuses_session(response: Any) -> bool:
    """Whether the answer to a request that named a session says the session is unknown.

    404 is the protocol's answer; the reference TypeScript servers answer 400
    with a JSON-RPC error about the session id.
    """
    if response.status_code == 404:
        return True
    if response.status_code != 400:
        return False
    if not response.headers.get("content-type", "").lower().startswith("application/json"):
        return False
    try:
        body = json.loads(await response.aread())  # kept: the SDK reads it again
    except ValueError:
        return False
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return isinstance(message, str) and "session" in message.lower()


async def _serves_legacy_sse(url: str, headers: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``url`` answers a GET with the legacy transport's ``endpoint`` event.

    Asked only after a streamable HTTP connection failed, to say why: a legacy
    server refuses the POST (405, 404) that streamable HTTP starts with.
    """
    import httpx2

    try:
        http = httpx2.AsyncClient(headers=dict(headers), timeout=_LEGACY_PROBE_TIMEOUT)
        request = http.stream("GET", url, headers={"Accept": "text/event-stream"})
        async with http, request as response:
            kind = response.headers.get("content-type", "").lower()
            if response.status_code != 200 or not kind.startswith("text/event-stream"):
                return False
            seen = ""
            async for chunk in response.aiter_text():
                seen += chunk.replace("\r\n", "\n").replace("\r", "\n")
                if "\n\n" in seen or len(seen) > 4096:
                    break  # the first event is enough
            return any(line.strip() == "event: endpoint" for line in seen.splitlines())
    except Exception:  # the probe only adds a hint; the connection error stands
        return False


def _describe(exc: BaseException) -> str:
    """An error's message; for an exception group (the SDK's task group), its first error's."""
    if not isinstance(exc, BaseExceptionGroup):
        return str(exc)
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _transport_ended(client: Client) -> bool:
    """Whether the session's transport has ended (a crashed server, a closed stream).

    The SDK has no public flag for it; its dispatcher's is read when present.
    """
    dispatcher = getattr(client.session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


def _client_info() -> Any:
    import mcp_types

    from .._version import __version__

    return mcp_types.Implementation(name="nbdurable", version=__version__)


_devnull: TextIO | None = None


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: ours when it is a real file (not a kernel's stream)."""
    global _devnull
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    if _devnull is None:
        _devnull = open(os.devnull, "w")  # noqa: SIM115 - kept for the process's life
    return _devnull
