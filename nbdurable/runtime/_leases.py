"""Keeping a claimed run's lease: renew it, and notice a cancel, a deadline or a lost lease.

An engine that executes a run holds its lease while the run executes. The keeper
renews it every third of the lease and stops the execution when the run is being
cancelled, passed its deadline, or the lease went to another owner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..durable._offload import offload
from ..durable._transient import StoreUnavailableError
from ..runs import ACTIVE_STATES, RuntimeRun
from . import _lifecycle as lifecycle
from ._outcome import LegOutcome

if TYPE_CHECKING:
    from ._seam import RunRecords

__all__ = ["Execution", "LeaseKeeper"]


class Execution(Protocol):
    """What the engine's shared bookkeeping needs of an execution (agent run or task)."""

    record: RuntimeRun
    stop: LegOutcome | None

    @property
    def fence(self) -> int:
        """The fencing token the owner holds."""
        ...


class LeaseKeeper:
    """Renews the leases of the runs an engine executes.

    Args:
        runtime: The runtime whose store holds the leases.
        holder: The name the leases are held under.
        on_store_lost: Called with the error when the store stayed unavailable past
            its retry budget (the engine stops taking work).
    """

    def __init__(
        self,
        runtime: RunRecords,
        holder: str,
        on_store_lost: Callable[[BaseException], None],
    ) -> None:
        self.runtime = runtime
        self.holder = holder
        self.on_store_lost = on_store_lost

    async def renew(self, context: Execution) -> bool:
        """Extend the lease by ``lease_ms``; False when another owner holds the run now."""
        try:
            return await offload(
                self.runtime.runtime_store.rt_renew,
                context.record.run_id,
                self.holder,
                context.fence,
                self.runtime.now() + self.runtime.lease_ms,
                lease_ms=self.runtime.lease_ms,
            )
        except StoreUnavailableError as exc:  # retried past the budget: the engine stops
            self.on_store_lost(exc)
            return True  # the run's own next store call ends it, or the store is back
        except Exception as exc:  # not the store's absence: try again next period
            self.runtime.deps.logger.error("nbdurable: renewing the lease failed: %r", exc)
            return True

    async def _released(self, context: Execution) -> bool:
        """Whether a refused renewal met this owner's own release, not another owner.

        The execution's end (waiting for a human, finished, handed back) clears
        the lease under the same fence, on a store thread, while this keeper may
        be renewing it.
        """
        try:
            record = await offload(self.runtime.runtime_store.rt_get, context.record.run_id)
        except Exception:  # unknown: treated as lost, as before
            return False
        return (
            record is not None
            and record.fence == context.fence
            and record.lease_owner is None
            and record.state not in ACTIVE_STATES
        )

    async def keep(self, context: Execution, task: asyncio.Task[None] | None) -> None:
        """Renew the lease until ``task`` must stop; then set ``context.stop`` and cancel it."""
        period = max(self.runtime.lease_ms / 3000, 0.01)
        while True:
            await self.runtime.deps.sleep(min(period, self.runtime.poll_interval * 4))
            try:
                record = await offload(self.runtime.runtime_store.rt_get, context.record.run_id)
            except StoreUnavailableError as exc:  # retried past the budget: the engine stops
                self.on_store_lost(exc)  # and the lease is renewed again if the store comes back
                continue
            except Exception as exc:  # keep the lease: try again next period
                self.runtime.deps.logger.error("nbdurable: renewing the lease failed: %r", exc)
                continue
            if record is None or task is None:
                return
            stop = None
            if record.state == "cancelling":
                # Cancel once: a second cancel would cut the callbacks' settling short.
                if context.stop is None:
                    stop = LegOutcome.cancelled()
            elif record.deadline_at is not None and self.runtime.now() >= record.deadline_at:
                stop = LegOutcome.timed_out()
            if stop is None:
                kept = await self.renew(context)
                if not kept and await self._released(context):
                    return  # the execution wrote its end meanwhile: nothing was lost
                lifecycle.lease_renewed(context.record, kept)
                if not kept:
                    stop = LegOutcome.superseded()
            if stop is not None:
                context.stop = stop
                task.cancel()
                return
