"""MCPServer: how to reach an MCP server, and its tools as nbdurable tools."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import ConfigurationError
from .._resources import ResourceScope, current_scope
from ..interop._foreign import ForeignTool
from ..tools import RECOVERY_POLICIES, NeedsApproval, Tool, ToolContext
from ._connection import Connection
from ._policy import annotated_policy, check_settings, pick, selected
from ._results import result_value
from ._schema import shallow_validator

__all__ = ["IDEMPOTENCY_META_KEY", "MCPServer"]

IDEMPOTENCY_META_KEY = "nbdurable/idempotencyKey"
"""The ``_meta`` key of every tool call that carries the call's idempotency key."""


@dataclass(frozen=True, repr=False)
class MCPServer:
    """How to reach an MCP server: a description, not a live session.

    Make one with :meth:`stdio` or :meth:`http`. A tool made from it opens a
    session when first called: one per server in a ``DurableRuntime`` (closed
    with the runtime) or, outside a runtime, one per event loop. So a run
    resumed in another process or on another worker connects again by itself.
    Two equal descriptions share a session.

    Attributes:
        transport: ``"stdio"`` or ``"http"`` (streamable HTTP).
        command: The server's executable (stdio).
        args: Its arguments (stdio).
        env: Environment variables added to the SDK's safe default set (stdio).
        cwd: Its working directory (stdio).
        url: The endpoint, e.g. ``http://127.0.0.1:8000/mcp`` (http).
        headers: HTTP headers sent with every request (http).
        timeout: Seconds to wait for each request's answer (None: no limit).
        trusted: Whether the server's tool annotations are believed (see
            :mod:`nbdurable.mcp._policy`); untrusted tools all need approval.
    """

    transport: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float | None = None
    trusted: bool = False

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        trusted: bool = False,
    ) -> MCPServer:
        """A server started as a child process that speaks MCP on its stdin and stdout.

        Args:
            command: The executable, e.g. ``"npx"`` or ``sys.executable``.
            args: Its arguments.
            env: Extra environment variables (the child otherwise gets only a
                safe default set: HOME, PATH, ...).
            cwd: Its working directory.
            timeout: Seconds to wait for each request's answer.
            trusted: Believe the server's tool annotations.

        Raises:
            ConfigurationError: The ``mcp`` package is missing or an argument is invalid.
        """
        _require_sdk()
        if not isinstance(command, str) or not command.strip():
            raise ConfigurationError(f"MCPServer.stdio needs a command, not {command!r}")
        if isinstance(args, str):
            raise ConfigurationError("args= takes a list of arguments, not one string")
        return cls(
            transport="stdio",
            command=command,
            args=tuple(str(a) for a in args),
            env=None if env is None else tuple(sorted((str(k), str(v)) for k, v in env.items())),
            cwd=None if cwd is None else str(cwd),
            timeout=_check_timeout(timeout),
            trusted=bool(trusted),
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        trusted: bool = False,
    ) -> MCPServer:
        """A server reached over streamable HTTP.

        Args:
            url: The MCP endpoint (``http://`` or ``https://``).
            headers: Headers for every request (e.g. ``Authorization``).
            timeout: Seconds to wait for each request's answer (also the HTTP
                connect timeout; default 30 s for the connection, no limit per request).
            trusted: Believe the server's tool annotations.

        Raises:
            ConfigurationError: The ``mcp`` package is missing or an argument is invalid.
        """
        _require_sdk()
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"MCPServer.http needs an http(s) URL, not {url!r}")
        return cls(
            transport="http",
            url=url,
            headers=tuple(sorted((str(k), str(v)) for k, v in (headers or {}).items())),
            timeout=_check_timeout(timeout),
            trusted=bool(trusted),
        )

    def __repr__(self) -> str:
        # Values of env and headers may be secrets: only their names are shown.
        trust = ", trusted=True" if self.trusted else ""
        if self.transport == "stdio":
            env = f", env={sorted(k for k, _ in self.env)}" if self.env else ""
            return f"MCPServer.stdio({self.command!r}, args={list(self.args)!r}{env}{trust})"
        headers = f", headers={sorted(k for k, _ in self.headers)}" if self.headers else ""
        return f"MCPServer.http({self.url!r}{headers}{trust})"

    # -- tools -------------------------------------------------------------------------

    async def tools(
        self,
        *,
        include: str | Sequence[str] | None = None,
        approval: Mapping[str, NeedsApproval] | None = None,
        recovery: Mapping[str, str] | None = None,
        prefix: str = "",
        allow_edit: bool | Mapping[str, bool] = False,
    ) -> list[Tool]:
        """The server's tools as nbdurable tools (listed again after ``tools/list_changed``).

        Args:
            include: Tool names or glob patterns to keep (default: all).
            approval: Tool name or glob pattern -> True, False or a callable on
                the arguments; wins over the annotations.
            recovery: Tool name or glob pattern -> ``"safe"``, ``"idempotent"``
                or ``"manual"``; wins over the annotations (and an agent's
                ``tool_recovery`` wins over this).
            prefix: Put before every tool's name (e.g. ``"fs."``), to keep the
                names of several servers apart; the server still sees its own names.
            allow_edit: True (every tool), or tool name or glob pattern -> bool:
                let a human approving a gated call edit its arguments first
                (checked against the tool's input schema); default False.

        Returns:
            One :class:`~nbdurable.tools.Tool` per listed tool.

        Raises:
            MCPConnectionError: The server cannot be reached.
            ConfigurationError: A setting names a tool the server does not list,
                or a tool's name is not valid for nbdurable (use ``include=``).
        """
        listed = await self.connection().list_tools()
        check_settings(
            [t.name for t in listed],
            include=include,
            approval=approval,
            recovery=recovery,
            server=repr(self),
            allow_edit=allow_edit if isinstance(allow_edit, Mapping) else None,
        )
        edits = allow_edit if isinstance(allow_edit, Mapping) else {"*": bool(allow_edit)}
        return [
            self._tool(t, approval=approval, recovery=recovery, prefix=prefix, edits=edits)
            for t in listed
            if selected(include, t.name)
        ]

    def tools_sync(self, **options: Any) -> list[Tool]:
        """:meth:`tools` for code without ``await``, e.g. a module a worker imports.

        Lists the tools over a connection of its own, closed before it returns
        (calls later open the runtime's). Blocks the caller meanwhile.
        """

        async def once() -> list[Tool]:
            scope = ResourceScope()
            try:
                with scope.active():
                    return await self.tools(**options)
            finally:
                await scope.aclose()

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(once())
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # this thread's loop is busy
            return pool.submit(asyncio.run, once()).result()

    def connection(self) -> Connection:
        """The server's session in the current runtime (or event loop), opened on first use."""
        return current_scope().get(("mcp", self), lambda: Connection(self))  # type: ignore[no-any-return]

    async def close(self) -> None:
        """Close this server's session in the current runtime (or event loop), if open."""
        await current_scope().discard(("mcp", self))

    def _tool(
        self,
        listed: Any,
        *,
        approval: Mapping[str, NeedsApproval] | None,
        recovery: Mapping[str, str] | None,
        prefix: str,
        edits: Mapping[str, bool] | None = None,
    ) -> Tool:
        remote = listed.name
        editable = pick(edits, remote)[1] is True
        gate, policy = annotated_policy(listed.annotations, trusted=self.trusted)
        found, value = pick(approval, remote)
        needs_approval: NeedsApproval = value if found and value is not None else gate
        found, chosen = pick(recovery, remote)
        if found and chosen in RECOVERY_POLICIES:
            policy = str(chosen)
        server = self

        async def run(kwargs: dict[str, Any], context: ToolContext) -> Any:
            meta = {IDEMPOTENCY_META_KEY: context.idempotency_key}
            return result_value(await server.connection().call(remote, kwargs, meta))

        name = f"{prefix}{remote}"
        try:
            return ForeignTool(
                name=name,
                description=listed.description or listed.title or "",
                parameters=dict(listed.input_schema),
                execute=run,
                needs_approval=needs_approval,
                recovery=policy,
                allow_edit=editable,
                validator=shallow_validator(name, listed.input_schema),
                source=f"MCP tool {remote!r} of {self!r}",
            )
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"{self!r} lists a tool nbdurable cannot name {name!r} ({exc}); "
                "use another prefix= or leave the tool out with include="
            ) from exc


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigurationError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def _require_sdk() -> None:
    if importlib.util.find_spec("mcp") is None:
        raise ConfigurationError("nbdurable.mcp needs the MCP SDK: pip install 'nbdurable[mcp]'")
