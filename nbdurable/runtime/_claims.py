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

__all__ = ["claim_next", "hand_back"]


async def claim_next(
    runtime: RunRecords, holder: str, keys: Any, kind: str = "agent"
) -> RuntimeRun | None:
    """The next eligible run, claimed for ``holder``; handed back if the caller is cancelled.

    A claim on a store thread runs to its end even when its caller (the
    scheduler, which ``close()`` cancels) is cancelled meanwhile: the run it
    took would stay ``running`` under a lease nobody keeps, so it is handed
    back (``pending``) before the cancellation goes on.
    """
    store = runtime.runtime_store
    now, lease_ms = runtime.now(), runtime.lease_ms
    claim = asyncio.ensure_future(offload(store.rt_claim, holder, now, lease_ms, keys, kind))
    try:
        return await asyncio.shield(claim)
    except asyncio.CancelledError:
        record = None
        with contextlib.suppress(Exception):
            record = await claim
        if record is not None:
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
