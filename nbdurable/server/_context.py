"""What the routes share: the runtime and the bridge's options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request

if TYPE_CHECKING:
    from ..runtime._runtime import DurableRuntime

__all__ = ["Bridge"]


@dataclass(frozen=True)
class Bridge:
    """The runtime a bridge serves and its options.

    Attributes:
        runtime: The runtime (opened on the serving loop to execute runs here,
            or a client whose runs workers execute).
        public_url: Base URL of approval links; default: the URL the request came to.
        approval_max_age_ms: Approval tokens this old or older are refused (None: no limit).
        keepalive_s: Seconds of silence after which an event stream sends a comment.
    """

    runtime: DurableRuntime
    public_url: str | None = None
    approval_max_age_ms: int | None = None
    keepalive_s: float = 15.0

    def base_url(self, request: Request) -> str:
        """Where approval links point: ``public_url``, else this app's own URL."""
        if self.public_url:
            return self.public_url
        url = request.url  # the mount point (root_path) is part of where links must point
        return f"{url.scheme}://{url.netloc}{request.scope.get('root_path', '')}"
