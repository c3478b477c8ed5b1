"""Failover between endpoints: a live one takes over the deployments of dead ones.

Restate pins an invocation to the deployment it started on and retries it
there. An endpoint that died (SIGKILL, a drain) leaves its legs retrying an
address nobody answers at. Every live endpoint looks every ``period`` seconds
for deployments whose services are all among its own (the same definitions)
and whose address does not answer, and points them at itself (the admin API's
``PATCH /deployments/{id}``): their invocations' next retry reaches it, and
the journal replays there.
"""

from __future__ import annotations

import asyncio
import contextlib

from . import _admin
from ._errors import RestateDeploymentError, RestateUnavailableError

__all__ = ["Failover"]


class Failover:
    """Take over dead deployments serving a subset of this endpoint's services.

    Args:
        admin: The admin API URL.
        uri: This endpoint's address.
        deployment: This endpoint's deployment id.
        period: Seconds between looks.
    """

    def __init__(self, admin: str, uri: str, deployment: str, period: float = 0.5) -> None:
        self.admin = admin
        self.uri = uri.rstrip("/")
        self.deployment = deployment
        self.period = period

    def take_over(self) -> list[str]:
        """One look: the ids of the deployments moved here."""
        found = _admin.deployments(self.admin)
        mine = next((d for d in found if d["id"] == self.deployment), None)
        if mine is None:
            return []
        served = {s["name"] for s in mine.get("services", [])}
        moved = []
        for other in found:
            uri = str(other.get("uri", "")).rstrip("/")
            names = {s["name"] for s in other.get("services", [])}
            if other["id"] == self.deployment or uri == self.uri or not names <= served:
                continue
            if _admin.answers(uri, timeout=0.5):
                continue
            with contextlib.suppress(RestateDeploymentError):
                _admin.move_deployment(self.admin, other["id"], self.uri)
                moved.append(str(other["id"]))
        return moved

    async def watch(self) -> None:
        """Look every ``period`` seconds until cancelled (the server away: look again later)."""
        while True:
            with contextlib.suppress(RestateUnavailableError, OSError, KeyError):
                await asyncio.to_thread(self.take_over)
            await asyncio.sleep(self.period)
