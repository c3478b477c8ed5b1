"""Keeping claimed runs' leases: renew them, and notice a cancel, a deadline or a lost lease.

An engine that executes runs holds their leases while they execute. One keeper
task serves every run the engine executes (not one task, and one store read, per
run): each turn, at most every ``poll_interval * 4`` seconds, it reads the runs
being cancelled in one query, stops those it executes and those past their
deadline, and renews, in one call on a store thread, each lease that is due: a
lease is renewed every third of ``lease_ms``, so it never has less than two
thirds of it left. A lease another owner took is noticed at its next renewal (or
at the run's next fenced write, whichever comes first); it cannot be taken
before it lapses, which is two more renewal periods away.

With 200 runs executing, the per-run keepers of before read and renewed every
run five times a second: 2,000 store calls a second, which held the store
threads and the loop more than the runs themselves (issue 42).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..durable._offload import offload
from ..durable._transient import StoreUnavailableError
from ..runs import ACTIVE_STATES, RuntimeRun
from . import _lifecycle as lifecycle
from ._outcome import LegOutcome

if TYPE_CHECKING:
    from ._seam import RunRecords

__all__ = ["Execution", "Held", "LeaseKeeper"]


class Execution(Protocol):
    """What the engine's shared bookkeeping needs of an execution (agent run or task)."""

    record: RuntimeRun
    stop: LegOutcome | None

    @property
    def fence(self) -> int:
        """The fencing token the owner holds."""
        ...


@dataclass(eq=False)
class Held:
    """One execution whose lease the keeper holds."""

    context: Execution
    task: asyncio.Task[None] | None
    done: asyncio.Future[None]
    renew_at: float  # loop time of the next renewal
    renewed: list[bool] = field(default_factory=list)  # the latest renewal's answer


class LeaseKeeper:
    """Renews the leases of the runs an engine executes, with one task for all of them.

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
        self._held: dict[int, Held] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def _period(self) -> float:
        """Seconds between renewals of one lease: a third of it."""
        return max(self.runtime.lease_ms / 3000, 0.01)

    @property
    def _tick(self) -> float:
        """Seconds between the keeper's turns (cancels and deadlines are noticed within it)."""
        return min(self._period, self.runtime.poll_interval * 4)

    async def keep(self, context: Execution, task: asyncio.Task[None] | None) -> None:
        """Hold a lease until ``task`` must stop; then set ``context.stop`` and cancel ``task``.

        Returns when the keeper let go of the run (it stopped it, the run was
        deleted, or the execution released the lease itself); cancelling it
        stops keeping the lease.
        """
        held = self.hold(context, task)
        try:
            await held.done
        finally:
            self.let_go(held)

    def hold(self, context: Execution, task: asyncio.Task[None] | None) -> Held:
        """:meth:`keep` without a task of its own: hold the lease until :meth:`let_go`.

        What an engine uses: a task per run, only to be cancelled at the run's
        end, cost a run a task's start and cancellation (issue 42).
        """
        loop = asyncio.get_running_loop()
        held = Held(context, task, loop.create_future(), loop.time() + self._period)
        self._held[id(held)] = held
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._keep_all())
        return held

    def let_go(self, held: Held) -> None:
        """Stop keeping a lease :meth:`hold` took."""
        self._held.pop(id(held), None)

    async def _keep_all(self) -> None:
        """The keeper's turns, while any lease is held."""
        loop = asyncio.get_running_loop()
        while self._held:
            await self.runtime.deps.sleep(self._tick)
            held = [h for h in self._held.values() if not h.done.done()]
            if not held:
                continue
            try:
                await self._turn(held, loop.time())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep the leases: try again next turn
                self.runtime.deps.logger.error("nbdurable: renewing leases failed: %r", exc)

    async def _turn(self, held: list[Held], now_loop: float) -> None:
        try:
            cancelling = await offload(self._cancelling)
        except StoreUnavailableError as exc:  # retried past the budget: the engine stops
            self.on_store_lost(exc)  # and leases are renewed again if the store comes back
            return
        except Exception as exc:  # keep the leases: try again next turn
            self.runtime.deps.logger.error("nbdurable: renewing the lease failed: %r", exc)
            return
        now = self.runtime.now()
        due: list[Held] = []
        for h in held:
            record = h.context.record
            if h.task is None:
                h.done.set_result(None)
            elif record.run_id in cancelling and h.context.stop is None:
                # Cancel once: a second cancel would cut the callbacks' settling short
                # (a run already stopping keeps its lease while it settles).
                self._stop(h, LegOutcome.cancelled())
            elif record.deadline_at is not None and now >= record.deadline_at:
                self._stop(h, LegOutcome.timed_out())
            elif now_loop >= h.renew_at:
                due.append(h)
        if not due:
            return
        try:
            answers = await offload(self._renew_all, [h.context for h in due])
        except StoreUnavailableError as exc:
            self.on_store_lost(exc)
            return  # the runs' own next store calls end them, or the store is back
        for h, kept in zip(due, answers, strict=True):
            if kept is None:  # an error other than the store's absence: next turn
                continue
            if kept:
                h.renew_at = now_loop + self._period
                lifecycle.lease_renewed(h.context.record, True)
                continue
            released = await self._released(h.context)
            if released is not False:  # its own end, or the run was deleted: nothing lost
                if not h.done.done():
                    h.done.set_result(None)
                continue
            lifecycle.lease_renewed(h.context.record, False)
            self._stop(h, LegOutcome.superseded())

    def _stop(self, held: Held, stop: LegOutcome) -> None:
        """Let go of a run: set why it stops and cancel its execution."""
        held.context.stop = stop
        assert held.task is not None
        held.task.cancel()
        if not held.done.done():
            held.done.set_result(None)

    def _cancelling(self) -> set[str]:
        """The ids of the runs being cancelled (one query, whatever the number of runs held)."""
        return {record.run_id for record in self.runtime.runtime_store.rt_list(["cancelling"])}

    def _renew_all(self, contexts: list[Execution]) -> list[bool | None]:
        """Renew each lease (on a store thread); None where renewing failed otherwise."""
        store = self.runtime.runtime_store
        answers: list[bool | None] = []
        for context in contexts:
            try:
                answers.append(
                    store.rt_renew(
                        context.record.run_id,
                        self.holder,
                        context.fence,
                        self.runtime.now() + self.runtime.lease_ms,
                        lease_ms=self.runtime.lease_ms,
                    )
                )
            except StoreUnavailableError:
                raise
            except Exception as exc:  # not the store's absence: try again next turn
                self.runtime.deps.logger.error("nbdurable: renewing the lease failed: %r", exc)
                answers.append(None)
        return answers

    async def renew(self, context: Execution) -> bool:
        """Extend one lease by ``lease_ms`` now; False when another owner holds the run now."""
        try:
            [kept] = await offload(self._renew_all, [context])
        except StoreUnavailableError as exc:  # retried past the budget: the engine stops
            self.on_store_lost(exc)
            return True  # the run's own next store call ends it, or the store is back
        return True if kept is None else kept

    async def _released(self, context: Execution) -> bool | None:
        """Whether a refused renewal met this owner's own release, not another owner.

        The execution's end (waiting for a human, finished, handed back) clears
        the lease under the same fence, on a store thread, while this keeper may
        be renewing it. None: the run was deleted.
        """
        try:
            record = await offload(self.runtime.runtime_store.rt_get, context.record.run_id)
        except Exception:  # unknown: treated as lost, as before
            return False
        if record is None:
            return None
        return (
            record.fence == context.fence
            and record.lease_owner is None
            and record.state not in ACTIVE_STATES
        )

    async def close(self) -> None:
        """Stop the keeper's task (the engine is closing)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
