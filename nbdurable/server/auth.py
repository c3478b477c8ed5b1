"""Bearer-token authentication: one shared token, compared in constant time.

The token is passed in, or read from ``NBDURABLE_SERVER_TOKEN``. Without one,
the API answers loopback clients only (``nbdurable serve`` refuses to listen on
another host without a token). Approval links never need the bearer token:
their own signed token binds them to one call.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .._errors import ConfigurationError
from .errors import NotAuthenticatedError

__all__ = ["TOKEN_ENV_VAR", "bearer_guard", "is_loopback", "resolve_token"]

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


def bearer_guard(token: str | None) -> Callable[..., Awaitable[None]]:
    """A dependency that admits a request carrying ``Authorization: Bearer <token>``.

    With ``token`` None it admits loopback clients only.
    """
    expected = token.encode("utf-8") if token is not None else None

    async def check(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_SCHEME)],
    ) -> None:
        if expected is None:
            client = request.client.host if request.client else None
            if not is_loopback(client):
                raise NotAuthenticatedError(
                    "this server has no token configured: it answers loopback clients only"
                )
            return
        if credentials is None:
            raise NotAuthenticatedError("missing bearer token (Authorization: Bearer ...)")
        if not hmac.compare_digest(credentials.credentials.encode("utf-8"), expected):
            raise NotAuthenticatedError("wrong bearer token")

    return check
