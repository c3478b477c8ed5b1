"""Bearer-token authentication: one shared token and named ones, compared in constant time.

The token is passed in, or read from ``NBDURABLE_SERVER_TOKEN``; named tokens
(:mod:`~nbdurable.server._principals`) authenticate a principal by name, which
the routes read as ``request.state.principal`` (None for the unnamed token or a
loopback client without one). Without any token,
the API answers loopback clients only (``nbdurable serve`` refuses to listen on
another host without a token). Approval links never need the bearer token:
their own signed token binds them to one call.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .._errors import ConfigurationError
from ._errors import NotAuthenticatedError
from ._principals import Principals

__all__ = ["TOKEN_ENV_VAR", "bearer_guard", "is_loopback", "principal_of", "resolve_token"]

TOKEN_ENV_VAR = "NBDURABLE_SERVER_TOKEN"

_SCHEME = HTTPBearer(auto_error=False, description="The server's token (NBDURABLE_SERVER_TOKEN)")


def resolve_token(token: str | None) -> str | None:
    """The configured bearer token: ``token``, else ``NBDURABLE_SERVER_TOKEN``, else None.

    Raises:
        ConfigurationError: A blank token.
    """
    value = token if token is not None else os.environ.get(TOKEN_ENV_VAR) or None
    if value is not None and not value.strip():
        raise ConfigurationError("the server token must not be blank")
    return value


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine only."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def principal_of(request: Request) -> str | None:
    """The named principal a request authenticated as (None: unnamed, or no token)."""
    name = getattr(request.state, "principal", None)
    return name if isinstance(name, str) else None


def bearer_guard(
    token: str | None, named: Mapping[str, str] | None = None
) -> Callable[..., Awaitable[None]]:
    """A dependency that admits a request carrying ``Authorization: Bearer <token>``.

    ``token`` is the unnamed principal's, ``named`` maps names to theirs. With
    neither it admits loopback clients only.
    """
    principals = Principals(token, named)

    async def check(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_SCHEME)],
    ) -> None:
        request.state.principal = None
        if not principals.configured:
            client = request.client.host if request.client else None
            if not is_loopback(client):
                raise NotAuthenticatedError(
                    "this server has no token configured: it answers loopback clients only"
                )
            return
        if credentials is None:
            raise NotAuthenticatedError("missing bearer token (Authorization: Bearer ...)")
        known, name = principals.identify(credentials.credentials)
        if not known:
            raise NotAuthenticatedError("wrong bearer token")
        request.state.principal = name

    return check
