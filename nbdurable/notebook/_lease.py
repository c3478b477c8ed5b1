"""Whether a run is still held by another runtime's lease, e.g. a kernel that was restarted."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..runs import ACTIVE_STATES, RuntimeRun, lease_holder

__all__ = ["HELD_STATES", "LeaseWait", "lease_wait"]

HELD_STATES = ACTIVE_STATES
"""Run states in which the run's lease owner executes it."""


@dataclass(frozen=True)
class LeaseWait:
    """Another runtime's lease on a run: nobody else takes the run until it lapses.

    Attributes:
        owner: The runtime holding it (``runtime-...``).
        until: When it lapses unless renewed (epoch ms).
    """

    owner: str
    until: int

    def seconds_left(self, now: int | None = None) -> int:
        """Whole seconds until the lease lapses (rounded up; 0 once it has)."""
        at = int(time.time() * 1000) if now is None else now
        return max(0, (self.until - at + 999) // 1000)

    def text(self, now: int | None = None) -> str:
        """One line saying what the run waits for and how long at most."""
        left = self.seconds_left(now)
        if not left:
            return (
                f"the lease of its previous owner ({self.owner}) lapsed: a runtime serving "
                "its agent takes it over"
            )
        return (
            f"waits for the lease of its previous owner ({self.owner}) to lapse "
            f"(up to {left} s), then goes on"
        )


def lease_wait(record: RuntimeRun, owner_id: str, now: int | None = None) -> LeaseWait | None:
    """The lease another runtime than ``owner_id`` holds on ``record``, if it is still valid."""
    at = int(time.time() * 1000) if now is None else now
    # a runtime holds leases under its owner id and its process (lease_holder)
    mine = (None, owner_id, lease_holder(owner_id))
    if record.state not in HELD_STATES or record.lease_owner in mine:
        return None
    if record.lease_expires_at is None or record.lease_expires_at <= at:
        return None
    return LeaseWait(owner=str(record.lease_owner), until=record.lease_expires_at)
