"""A run whose owner stopped: still ``running`` in the record, but nobody executes it.

An owner (a kernel's runtime, a worker) renews its lease while it runs a run. When
its process is gone (SIGKILL, a crashed kernel) or its lease ran out, the record
still says ``running`` until a runtime serving the run's agent claims it: the
run is *stalled*, and a person looking at it should be told so rather than shown
a healthy "running".
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ._leases import describe_holder, process_gone
from ._record import RuntimeRun
from ._states import ACTIVE_STATES

__all__ = ["STALLED", "Stalled", "stalled"]

STALLED = "stalled"
"""The status views show a stalled run under (its record still says ``running``)."""


@dataclass(frozen=True)
class Stalled:
    """Why a run in an active state has nobody executing it.

    Attributes:
        owner: The lease holder that stopped (``runtime-... (pid 4242 on host)``).
        gone: Its process is known to be gone (else its lease merely ran out).
        expires_at: When its lease lapsed or lapses (epoch ms).
        agent: The agent and version that must be served to take it over (``reporter v1``).
    """

    owner: str
    gone: bool
    expires_at: int
    agent: str

    def text(self, now: int | None = None) -> str:
        """``owner gone, lease expired 27 m ago; a worker serving reporter v1 takes it over``."""
        at = int(time.time() * 1000) if now is None else now
        who = "owner gone" if self.gone else f"owner {self.owner} silent"
        if self.expires_at <= at:
            lease = f"lease expired {_ago(at - self.expires_at)} ago"
        else:
            lease = f"lease runs out in {_ago(self.expires_at - at)}"
        return f"{who}, {lease}; a runtime or worker serving {self.agent} will take it over"


def stalled(record: RuntimeRun, now: int | None = None) -> Stalled | None:
    """The run's stopped owner, or None when the run is not active or its owner is alive.

    Stalled means: an active state (``running``, ``cancelling``) whose lease lapsed,
    or whose holder's process is known to be gone on this host.
    """
    if record.state not in ACTIVE_STATES or not record.lease_owner:
        return None
    at = int(time.time() * 1000) if now is None else now
    expires = record.lease_expires_at or 0
    gone = process_gone(record.lease_owner)
    if expires > at and not gone:
        return None
    return Stalled(
        owner=describe_holder(record.lease_owner),
        gone=gone,
        expires_at=expires,
        agent=f"{record.agent_id} v{record.agent_version}",
    )


def _ago(ms: int) -> str:
    seconds = max(0, ms) // 1000
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} m"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} m"
