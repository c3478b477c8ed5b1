"""One live MCP session to one server, owned by a background task on the running loop.

The SDK's client is a stack of anyio context managers that must be entered and
left by the same task, while tool calls come from many tasks (parallel tool
calls, several runs). So a dedicated owner task opens the session, keeps it
until :meth:`Connection.aclose`, and then leaves it (which stops and reaps a
stdio server's process). Calls share the session. A session whose transport
ended (a crashed server, a dropped HTTP connection) is replaced on next use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from .._errors import NbdurableError

if TYPE_CHECKING:
    import mcp_types
    from mcp import Client

    from ._server import MCPServer

__all__ = ["Connection", "MCPConnectionError"]

_log = logging.getLogger("nbdurable")
_CLOSE_TIMEOUT = 10.0  # seconds; the SDK stops a stdio server within a few
_SUBSCRIBE_TIMEOUT = 10.0
_HTTP_TIMEOUT = 30.0
_HTTP_STREAM_READ_TIMEOUT = 300.0  # server-sent event streams stay open between events
_CONNECTION_CLOSED = -32000  # the SDK's error code for a transport that ended


class MCPConnectionError(NbdurableError, ConnectionError):
    """An MCP server cannot be reached, or its connection broke during a request."""


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
        self._broken = False
        self._listing: list[mcp_types.Tool] | None = None
        self._listing_stale = True
        self.opened = 0  # sessions opened so far (for tests and diagnostics)

    def __repr__(self) -> str:
        return f"<MCP connection to {self.server!r}>"

    # -- public ---------------------------------------------------------------------

    async def list_tools(self) -> list[mcp_types.Tool]:
        """The server's tools, listed again after ``tools/list_changed`` or a reconnect."""
        client = await self.client()
        if self._listing is not None and not self._listing_stale:
            return self._listing
        self._listing_stale = False  # a change announced from here on marks it again
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except BaseException as exc:
            self._listing_stale = True
            failure = self._failure(exc, "listing its tools")
            if failure is exc:
                raise
            raise failure from exc
        self._listing = tools
        return tools

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        meta: Mapping[str, Any],
    ) -> mcp_types.CallToolResult:
        """Call a tool; an error the server reports comes back as the result's ``is_error``.

        Raises:
            MCPConnectionError: The server cannot be reached, or the connection
                broke during the call (the next call reconnects).
            mcp.MCPError: The server refused the request (a protocol error).
        """
        client = await self.client()
        try:
            return await client.call_tool(name, arguments, meta=dict(meta))  # type: ignore[arg-type]
        except BaseException as exc:
            failure = self._failure(exc, f"calling {name!r}")
            if failure is exc:
                raise
            raise failure from exc

    async def client(self) -> Client:
        """The open session; opened now if there is none or the last one broke.

        Raises:
            MCPConnectionError: The server cannot be reached.
        """
        async with self._lock:
            if not self._usable():
                await self._stop()
                self._start()
            ready = self._ready
        assert ready is not None
        try:
            return await asyncio.shield(ready)
        except Exception as exc:
            raise MCPConnectionError(f"cannot connect to {self.server!r}: {exc}") from exc

    async def aclose(self) -> None:
        """Leave the session (a stdio server is stopped and reaped); reopened on next use."""
        async with self._lock:
            await self._stop()

    # -- the owner task -------------------------------------------------------------

    def _usable(self) -> bool:
        ready, task = self._ready, self._task
        if self._broken or ready is None or task is None or task.done():
            return False
        if not ready.done():
            return True  # still opening: wait for it
        if ready.cancelled() or ready.exception() is not None:
            return False
        return not _transport_ended(ready.result())

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._broken = False
        self._listing_stale = True
        self._ready = ready = loop.create_future()
        self._closing = closing = asyncio.Event()
        self._task = loop.create_task(self._own(ready, closing), name=f"nbdurable {self!r}")
        self.opened += 1

    async def _stop(self) -> None:
        task, closing = self._task, self._closing
        self._task = self._ready = self._closing = None
        if task is None or closing is None:
            return
        closing.set()
        done, _ = await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)
        if not done:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _own(self, ready: asyncio.Future[Client], closing: asyncio.Event) -> None:
        import anyio
        from mcp import Client

        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(
                    await self._transport(stack),
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

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
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
        http = httpx2.AsyncClient(
            headers=dict(server.headers),
            timeout=httpx2.Timeout(timeout, read=max(timeout, _HTTP_STREAM_READ_TIMEOUT)),
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

    def _failure(self, exc: BaseException, doing: str) -> BaseException:
        """Mark the session broken when the transport failed; the error to raise."""
        if isinstance(exc, MCPConnectionError):
            self._broken = True
            return exc  # raised again as it is
        code = getattr(exc, "code", None)
        transport = code == _CONNECTION_CLOSED or isinstance(exc, OSError | EOFError)
        if not transport:
            import anyio

            transport = isinstance(exc, anyio.BrokenResourceError | anyio.ClosedResourceError)
        if transport:
            self._broken = True
            return MCPConnectionError(
                f"the connection to {self.server!r} broke while {doing}: {exc} "
                "(the next call reconnects)"
            )
        return exc


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
