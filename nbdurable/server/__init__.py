"""The HTTP bridge (the ``server`` extra): runs, live event streams and signed approval links.

``create_app(runtime, ...)`` is an ASGI app (FastAPI), standalone or mounted;
``nbdurable serve`` runs it with uvicorn beside a runtime. ``approval_link``
mints a link for one pending approval and needs no web framework: importing
this package does not import FastAPI until ``create_app`` or the serving
helpers are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes
from ._errors import (
    ApprovalExpiredError,
    ApprovalNotPendingError,
    ApprovalTokenError,
    NotAuthenticatedError,
    RunStateError,
    ServerError,
)
from ._links import approval_link, link_for

if TYPE_CHECKING:
    from ._app import create_app
    from ._serving import build_server, serve

__all__ = [
    "ApprovalExpiredError",
    "ApprovalNotPendingError",
    "ApprovalTokenError",
    "NotAuthenticatedError",
    "RunStateError",
    "ServerError",
    "approval_link",
    "build_server",
    "create_app",
    "link_for",
    "serve",
]

__getattr__ = lazy_attributes(
    __name__, {"create_app": "._app", "build_server": "._serving", "serve": "._serving"}
)
