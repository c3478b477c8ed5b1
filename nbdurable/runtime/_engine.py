"""The embedded engine: claims eligible runs and executes them as asyncio tasks.

The runtime owns records, registrations and run handles; an engine decides where
runs execute. :class:`EmbeddedEngine` runs them on the current event loop (a
notebook kernel's, or a ``nbdurable worker`` process's); the Temporal engine
(:mod:`nbdurable.temporal`) implements the same :class:`Engine` seam with the same states.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .._aio import wait_event
from .._errors import FencedOutError, LeaseLostError, StoreWriteError
from ..durable._offload import NowaitDelegate, offload
from ..durable._transient import StoreUnavailableError, is_transient
from ..durable.store import RunStore, maybe_await, notify
from ..events._model import NewEvent
from ..loop._machine import LegStart, leg_start_from_checkpoint
from ..runs import (
    EMBEDDED,
    RunGrants,
    RunPatch,
    RuntimeRun,
    lease_holder,
)
from . import _lifecycle as lifecycle
from ._claims import claim_next, claim_some
from ._executor import RunContext, RuntimeDriver
from ._late_results import record_late_results
from ._leases import Execution, Held, LeaseKeeper
from ._legs import first_messages, leg_options
from ._outcome import (
    LegOutcome,
    ModelAttemptFailed,
    after_model_error,
    ended_by,
    leg_result,
    record_changes,
)
from ._owner_scans import DEAD_OWNER_SCAN_SECONDS, FOREIGN_SCAN_SECONDS, OwnerScans
from ._seam import Engine
from ._state_events import StateEventWrites, StateWriteProgress
from ._takeover import interrupted_calls, takeover_event
from ._tasks import TaskExecution, canonical_json, run_phases

if TYPE_CHECKING:
    from ._seam import RunServices

__all__ = ["DEAD_OWNER_SCAN_SECONDS", "FOREIGN_SCAN_SECONDS", "EmbeddedEngine", "Engine"]


class EmbeddedEngine(Engine, NowaitDelegate):
    """Executes runs as tasks on the running event loop.

    At most ``max_concurrent_runs`` agent runs and, apart from them,
    ``max_concurrent_tasks`` custom-task phases execute at once. A leg's end
    (:meth:`_end`) is written on the loop's thread when no store call in it
    waits (:class:`~nbdurable.durable._offload.NowaitDelegate`; issue 42).
    """

    name = EMBEDDED
    nowait_methods = frozenset({"_end"})

    def __init__(self) -> None:
        self.runtime: RunServices
        self._executions: dict[str, asyncio.Task[None]] = {}
        self._contexts: dict[str, Execution] = {}
        self._ended: set[tuple[str, int]] = set()  # legs whose end is written: (run, fence)
        self._ended_lock = threading.Lock()
        self._task_runs: set[str] = set()
        self._wake = asyncio.Event()
        self._scheduler: asyncio.Task[None] | None = None
        self._closed = False
        self._draining = False
        self._fatal = False
        self._fatal_report: asyncio.Task[None] | None = None
        self._write_refused = False
        self._scans: OwnerScans
        self._leases: LeaseKeeper
        self._unwatch_work: Callable[[], None] | None = None
        self._notifier: RunStore | None = None  # the store whose notifications wake the scheduler

    def nowait_store(self) -> object:
        """The runtime's store (a leg's end writes its run records and events)."""
        return self.runtime.store

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called."""
        return self._scheduler is not None

    def start(self, runtime: RunServices) -> None:
        """Start the scheduler task on the running loop."""
        self.runtime = runtime
        self._leases = LeaseKeeper(runtime, self.holder, self._stop_fatally)
        self._scans = OwnerScans(runtime)
        loop = asyncio.get_running_loop()
        store = runtime.store
        if isinstance(store, RunStore):
            # A store that notifies claimable work (PostgreSQL's LISTEN/NOTIFY)
            # wakes the scheduler at once; it then polls only every
            # idle_poll_interval while idle (for lease expiries and retry
            # waits, which no write announces).
            def wake(_kind: str) -> None:
                with contextlib.suppress(RuntimeError):  # the loop is closed
                    loop.call_soon_threadsafe(self._wake.set)

            self._notifier = store
            self._unwatch_work = store.watch_work(wake)
        self._scheduler = loop.create_task(self._schedule())

    def home_loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the scheduler runs on; ``None`` before :meth:`start`."""
        return self._scheduler.get_loop() if self._scheduler is not None else None

    def wake(self) -> None:
        """Make the scheduler look for work now."""
        self._wake.set()

    def execution(self, run_id: str) -> asyncio.Future[None] | None:
        """The task executing ``run_id`` here, if any (it ends when the execution does)."""
        return self._executions.get(run_id)

    def cancel_local(self, run_id: str) -> bool:
        """Cancel this engine's execution of a run, if it has one."""
        task = self._executions.get(run_id)
        context = self._contexts.get(run_id)
        if task is None or context is None:
            return False
        context.stop = LegOutcome.cancelled()
        task.cancel()
        return True

    async def close(self) -> None:
        """Stop taking work; abandon in-flight steps cleanly and release their leases."""
        if self._closed:
            return
        self._closed = True
        if self._unwatch_work is not None:
            self._unwatch_work()
            self._unwatch_work = None
        if self._scheduler is not None:
            self._scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scheduler
        for run_id, task in list(self._executions.items()):
            context = self._contexts.get(run_id)
            if context is not None and context.stop is None:
                context.stop = LegOutcome.released()
            task.cancel()
        if self._executions:
            await asyncio.gather(*self._executions.values(), return_exceptions=True)
        if self.started:
            await self._leases.close()
        if self._fatal_report is not None:
            await asyncio.gather(self._fatal_report, return_exceptions=True)

    async def drain(self, seconds: float, interrupt: asyncio.Event | None = None) -> list[str]:
        """Stop claiming; let the calls in flight finish, then hand every run back.

        No new model or tool call starts: a run whose calls in flight finished
        (their results journaled) is released at once, ``pending`` for the next
        owner. After ``seconds``, or once ``interrupt`` is set, the runs still
        executing are released as :meth:`close` does: a call still running is
        cut, and the next owner finds it interrupted, as after a crash (its
        tool's recovery policy decides). Custom-task phases run on until then.
        Call :meth:`close` after it.

        Returns:
            The calls that were cut, as log labels (``run <id>: tool 'x' (call c)``).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds  # counted from now: a claim in flight is waited for first
        # From here the scheduler claims nothing more (its loop checks the flag each turn).
        self._draining = True
        for context in self._contexts.values():  # held from now, not once that claim returned
            if isinstance(context, RunContext):
                context.draining = True
        if self._scheduler is not None and not self._scheduler.done():
            self._scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scheduler
        while self._executions and loop.time() < deadline:
            if interrupt is not None and interrupt.is_set():
                break
            for run_id, context in list(self._contexts.items()):
                if not isinstance(context, RunContext):
                    continue
                context.draining = True
                if context.held and not context.calls and context.stop is None:
                    context.stop = LegOutcome.released()
                    self._executions[run_id].cancel()
            # A short poll: a held call or a finished one is noticed within it.
            await asyncio.wait(
                list(self._executions.values()),
                timeout=min(0.05, max(deadline - loop.time(), 0)),
            )
        cut = [
            (run_id, label)
            for run_id, context in self._contexts.items()
            if isinstance(context, RunContext)
            for label in context.calls.values()
        ]
        cut += [(run_id, "a task phase") for run_id in self._task_runs]
        for run_id, label in cut:
            lifecycle.cut(run_id, label)
        return [f"run {run_id}: {label}" for run_id, label in cut]

    async def _schedule(self) -> None:
        try:
            while not (self._closed or self._fatal or self._draining):
                self._wake.clear()
                idle = False
                try:
                    idle = await self._claim_work()
                except StoreWriteError as exc:
                    # A claim is a write: a full or read-only store refuses it until
                    # space is freed; claims resume then, the engine does not stop.
                    if not self._write_refused:
                        self.runtime.deps.logger.error(
                            "nbdurable: claiming runs failed, trying again: %r", exc
                        )
                    self._write_refused = True
                else:
                    self._write_refused = False
                await wait_event(self._wake, self._interval(idle), self.runtime.deps.sleep)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a storage or scheduler failure the runtime cannot pass
            self._stop_fatally(exc)

    async def _claim_work(self) -> bool:
        """Claim and start eligible runs and task phases while slots are free.

        Returns whether a claim found nothing to take (the engine is idle).
        """
        runtime = self.runtime
        await offload(self._scans.expire_dead_owners)
        idle = False
        while (free := runtime.max_concurrent_runs - self._agent_runs()) > 0:
            agents = runtime.registry.definitions()  # a changed definition never claims
            records = await claim_some(runtime, self.holder, agents, free)
            for record in records:
                self._start(record)
            if len(records) < free:
                idle = True
                break
        while runtime.tasks and len(self._task_runs) < runtime.max_concurrent_tasks:
            task = await claim_next(runtime, self.holder, runtime.task_keys(), "task")
            if task is None:
                break
            idle = False
            self._start_task(task)
        return idle

    def _agent_runs(self) -> int:
        """How many agent runs execute here now."""
        return len(self._executions) - len(self._task_runs)

    def _interval(self, idle: bool) -> float:
        """How long the scheduler sleeps unless woken: longer when idle and notified of work."""
        interval = self.runtime.poll_interval
        if not idle or self._unwatch_work is None:
            return interval
        if self._notifier is not None and self._notifier.notifies_work():
            return max(interval, self.runtime.idle_poll_interval)
        return interval

    def _stop_fatally(self, exc: BaseException) -> None:
        """Stop taking work after a failure the runtime cannot pass; the first one only.

        The store stayed unavailable past ``store_retry_ms`` (or the scheduler
        broke): ``on_fatal_error`` is called once and no run is claimed any
        more. A run in flight goes on until its next store call: a store that
        is still away ends it there without a write (:meth:`_guarded`), as it
        is in the store; its lease lapses and another worker, or the next
        open, claims it. ``close()`` abandons the others as usual.
        """
        if self._fatal:
            return
        self._fatal = True
        if self._scheduler is not None and self._scheduler is not asyncio.current_task():
            self._scheduler.cancel()
        # Its own task: the caller may be a lease keeper that is about to be cancelled.
        self._fatal_report = asyncio.get_running_loop().create_task(self._report_fatal(exc))

    async def _report_fatal(self, exc: BaseException) -> None:
        if self.runtime.on_fatal_error is not None:
            with contextlib.suppress(Exception):
                await maybe_await(self.runtime.on_fatal_error(exc))
        else:
            self.runtime.deps.logger.error("nbdurable: the runtime stopped: %r", exc)

    async def _guarded(self, execution: Coroutine[Any, Any, None]) -> None:
        """Run an execution; a store unavailable past its retry budget stops the engine."""
        try:
            await execution
        except StoreUnavailableError as exc:  # the run stays as it is in the store
            self._stop_fatally(exc)

    @property
    def holder(self) -> str:
        """The name this engine's leases are held under: the runtime's owner id and this process."""
        return lease_holder(self.runtime.owner_id)

    def _taken_over(self, context: Execution, event: NewEvent | None) -> None:
        """Append the ``run_taken_over`` event of a takeover claim (fenced)."""
        if event is None:
            return
        run_id = context.record.run_id
        lifecycle.taken_over(context.record, str(event.payload.get("cause")))
        try:
            self.runtime.event_store.append_events(run_id, [event], fence=context.fence)
        except FencedOutError:
            raise
        except Exception as exc:  # the record is the authority; the event is for viewers
            self.runtime.deps.logger.error(
                "nbdurable: takeover event of %s failed: %r", run_id, exc
            )
        notify(self.runtime.store, run_id)

    def _start(self, record: RuntimeRun) -> None:
        agent = self.runtime.registry.get(record.agent_id, record.agent_version)
        assert agent is not None  # claims only take registered agents
        context = RunContext(
            runtime=self.runtime, agent=agent, record=record, lease_owner=record.lease_owner
        )
        self._contexts[record.run_id] = context
        lifecycle.claimed(record, resumed=bool(record.verdicts or record.decided))
        task = asyncio.get_running_loop().create_task(self._guarded(self._execute(context)))
        self._executions[record.run_id] = task
        task.add_done_callback(lambda _: self._finished(record.run_id))

    def _start_task(self, record: RuntimeRun) -> None:
        execution = TaskExecution(self.runtime, self.runtime.tasks[record.agent_id], record)
        self._contexts[record.run_id] = execution
        self._task_runs.add(record.run_id)
        lifecycle.claimed(record, resumed=record.phase > 0)
        task = asyncio.get_running_loop().create_task(self._guarded(self._execute_task(execution)))
        self._executions[record.run_id] = task
        task.add_done_callback(lambda _: self._finished(record.run_id))

    def _finished(self, run_id: str) -> None:
        self._executions.pop(run_id, None)
        self._contexts.pop(run_id, None)
        with self._ended_lock:
            self._ended = {ended for ended in self._ended if ended[0] != run_id}
        self._task_runs.discard(run_id)
        self._wake.set()

    async def _settled_at_claim(self, record: RuntimeRun) -> bool:
        """Settle a claimed run cancelled meanwhile or past its deadline; whether it was one.

        Asked on the loop: the usual claim starts without a store-thread trip (issue 42).
        """
        if record.state == "cancelling":
            outcome = LegOutcome.cancelled()
        elif record.deadline_at is not None and self.runtime.now() >= record.deadline_at:
            outcome = LegOutcome.timed_out()
        else:
            return False
        await offload(self._settle, record, record_changes(outcome) | RunPatch(lease_owner=None))
        return True

    def _settle(self, record: RuntimeRun, patch: RunPatch) -> None:
        # One call: a cancellation meanwhile finds the end written (_after_cancel).
        self.runtime.set_state(record.run_id, patch, fence=record.fence)
        with self._ended_lock:
            self._ended.add((record.run_id, record.fence))

    async def _execute_task(self, execution: TaskExecution) -> None:
        """Run a claimed task's phases from its last checkpoint, under its lease."""
        record = execution.record
        keeper: Held | None = None
        # inside the try: close() may cancel while a claim's first writes run on a store thread
        try:
            if await self._settled_at_claim(record):
                if record.state == "cancelling":
                    await self.runtime.cancel_owned(record.run_id)
                return
            await offload(StateEventWrites(self.runtime).claimed, record)
            keeper = self._leases.hold(execution, self._executions.get(record.run_id))
            event = takeover_event(record, now=self.runtime.now(), phase=record.phase)
            if event is not None:  # (else no trip to a store thread)
                await offload(self._taken_over, execution, event)
            state = await run_phases(execution)
            outcome = LegOutcome.completed(canonical_json(state))
            await offload(self._end, execution, outcome, progress=StateWriteProgress())
        except (FencedOutError, LeaseLostError):
            pass  # another owner has the task: it decides from here
        except asyncio.CancelledError:
            stop = await offload(self._after_cancel, execution)
            if stop.kind == "cancelled":
                await self.runtime.cancel_owned(record.run_id)
        except StoreUnavailableError:
            raise  # not the task's failure: the engine stops (_guarded)
        except Exception as exc:
            await offload(self._after_error, execution, exc)
        finally:
            if keeper is not None:
                self._leases.let_go(keeper)

    async def _execute(self, context: RunContext) -> None:
        record = context.record
        keeper: Held | None = None
        # inside the try: close() may cancel while a claim's first writes run on a store thread
        try:
            if await self._settled_at_claim(record):
                return
            await offload(StateEventWrites(self.runtime).claimed, record)
            keeper = self._leases.hold(context, self._executions.get(record.run_id))
            await self._leg(context)
        except (FencedOutError, LeaseLostError):
            # Another owner has the run and decides from here; what this one's tools
            # did meanwhile is kept as late results, for the human deciding the call.
            await offload(record_late_results, context)
        except asyncio.CancelledError:
            await offload(self._after_cancel, context)
        except ModelAttemptFailed as failed:
            await offload(self._after_model_error, context, failed)
        except StoreUnavailableError:
            raise  # not the run's failure: the engine stops (_guarded)
        except Exception as exc:
            await offload(self._after_error, context, exc)
        finally:
            if keeper is not None:
                self._leases.let_go(keeper)

    def _after_error(self, context: Execution, exc: Exception) -> None:
        """End the leg as ``exc`` decides; any other error fails the run (not a store's)."""
        outcome = ended_by(exc)
        if outcome is None:
            if self._store_accident(context, exc):
                return
            outcome = LegOutcome.failed("error", f"{type(exc).__name__}: {exc}")
        self._end(context, outcome)

    def _store_accident(self, context: Execution, exc: Exception) -> bool:
        """Whether ``exc`` is a store failure, not the run's own error.

        A transient failure (store calls are retried where they are made; one
        that was not and failed transiently), or a write the disk refused
        (:class:`StoreWriteError`: full, read-only), leaves the run as it is in
        the store: its lease lapses and a claim (this runtime's or another's)
        runs it again.
        """
        if not (is_transient(exc) or isinstance(exc, StoreWriteError)):
            return False
        self.runtime.deps.logger.error(
            "nbdurable: run %s left to be claimed again after a store failure: %r",
            context.record.run_id,
            exc,
        )
        return True

    async def _leg(self, context: RunContext) -> None:
        record = context.record
        agent = context.agent
        intents = await offload(self.runtime.runtime_store.rt_intents, record.run_id)
        context.intents = {i.tool_call_id: i for i in intents}
        checkpoint = await self.runtime.store_retry.acall(
            "load a checkpoint", self.runtime.store.load, record.run_id
        )
        if checkpoint is not None:
            start = leg_start_from_checkpoint(checkpoint)
        else:
            messages = await first_messages(self.runtime, record)
            start = LegStart(messages=messages, run_id=record.run_id, durable=True)
        event = takeover_event(
            record,
            now=self.runtime.now(),
            step_index=start.next_step_index,
            interrupted=interrupted_calls(context.intents.values(), start.messages),
            recovery_of=agent.recovery_of,
        )
        if event is not None:  # a run taken over (else no trip to a store thread)
            await offload(self._taken_over, context, event)
        options = leg_options(
            agent,
            record,
            approval_responses=record.approval_responses(),
            approval_signer=self.runtime.signer,
            deps=self.runtime.deps,
            approval_grants=lambda: RunGrants.of(context.record.grants),
        )
        driver = RuntimeDriver(
            options,
            start,
            store=self.runtime.store,
            streaming=record.stream,
            flush_interval=self.runtime.flush_interval,
            context=context,
        )
        result = await driver.run()
        finish = driver.events.finish if driver.events is not None else None
        progress = StateWriteProgress()
        await offload(self._end, context, leg_result(result), finish=finish, progress=progress)

    def _end(
        self,
        context: Execution,
        outcome: LegOutcome,
        *,
        finish: dict[str, Any] | None = None,
        progress: StateWriteProgress | None = None,
    ) -> None:
        """Write ``outcome`` (fenced) and release the lease; nothing when superseded.

        Run again from the start on a store thread when a store call in it would
        wait on the loop's thread: ``progress`` (the same object) skips what the
        first try wrote; the riders' flush writes only what still waits.
        """
        patch = record_changes(outcome)
        if not patch:
            return
        patch = RunPatch(lease_owner=None, lease_expires_at=None) | patch
        try:
            with contextlib.suppress(FencedOutError):  # another owner decides now
                if isinstance(context, RunContext) and context.riders is not None:
                    context.riders.flush()  # the results that waited for a shared commit
                record = self.runtime.set_state(
                    context.record.run_id,
                    patch,
                    fence=context.fence,
                    finish=finish,
                    progress=progress,
                )
                lifecycle.left(context.record, record.state, patch.reason or None)
            with self._ended_lock:  # written on a store thread
                self._ended.add((context.record.run_id, context.fence))
        except StoreWriteError as exc:  # the run stays as stored, to be claimed again
            self._store_accident(context, exc)

    def _after_cancel(self, context: Execution) -> LegOutcome:
        """End a cancelled leg as its owner decided; at shutdown, hand it back untouched.

        A leg whose end was written already (the cancellation arrived while that
        write ran on a store thread) keeps it: the run waits, or ended, as written.
        """
        stop = context.stop or LegOutcome.released()
        if stop.kind == "superseded" and isinstance(context, RunContext):
            record_late_results(context)  # the lease keeper found the run lost
        with self._ended_lock:
            ended = (context.record.run_id, context.fence) in self._ended
        if ended:
            return stop
        self._end(context, stop)
        return stop

    def _after_model_error(self, context: RunContext, failed: ModelAttemptFailed) -> None:
        record = self.runtime.runtime_store.rt_get(context.record.run_id) or context.record
        outcome = after_model_error(
            failed.error,
            policy=context.retry_policy,
            retry_if=context.agent.retry_if,
            used=record.model_attempts,
            now=self.runtime.now(),
        )
        self._end(context, outcome)
