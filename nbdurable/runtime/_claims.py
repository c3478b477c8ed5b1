"""The embedded engine's claims: a run claimed while the engine stops goes back at once."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from .._errors import FencedOutError
from ..durable._offload import offload
from ..runs import RunPatch, RuntimeRun
from ._outcome import LegOutcome, record_changes

if TYPE_CHECKING:
    from ._seam import RunRecords

__all__ = ["claim_next", "claim_some", "hand_back"]


async def claim_next(
    runtime: RunRecords, holder: str, keys: Any, kind: str = "agent"
) -> RuntimeRun | None:
    """The next eligible run, claimed for ``holder``; handed back if the caller is cancelled."""
    claimed = await claim_some(runtime, holder, keys, 1, kind)
    return claimed[0] if claimed else None


async def claim_some(
    runtime: RunRecords, holder: str, keys: Any, limit: int, kind: str = "agent"
) -> list[RuntimeRun]:
    """Up to ``limit`` eligible runs, claimed for ``holder`` in one trip to a store thread.

    One claim at a time, each a trip to a store thread that waits behind the
    store calls of every run already executing, started 200 submitted runs over
    tens of seconds (issue 42); claimed together, they start at once.

    Claims on a store thread run to their end even when the caller (the
    scheduler, which ``close()`` cancels) is cancelled meanwhile: the runs they
    took would stay ``running`` under leases nobody keeps, so they are handed
    back (``pending``) before the cancellation goes on.
    """
    store = runtime.runtime_store
    now, lease_ms = runtime.now(), runtime.lease_ms

    claim = asyncio.ensure_future(
        offload(store.rt_claim_many, holder, now, lease_ms, keys, kind, limit)
    )
    try:
        return await asyncio.shield(claim)
    except asyncio.CancelledError:
        records: list[RuntimeRun] = []
        with contextlib.suppress(Exception):
            records = await claim
        for record in records:
            with contextlib.suppress(Exception):
                await offload(hand_back, runtime, record)
        raise


def hand_back(runtime: RunRecords, record: RuntimeRun) -> None:
    """Release a claimed run that never started (fenced: not one another owner has now)."""
    patch = record_changes(LegOutcome.released()) | RunPatch(
        lease_owner=None, lease_expires_at=None
    )
    with contextlib.suppress(FencedOutError):
        runtime.set_state(record.run_id, patch, fence=record.fence)
