"""DurableRuntime: submit runs and let the runtime own them (the embedded asyncio engine)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .._deps import Deps, new_id
from .._errors import (
    ConfigurationError,
    DurableConflictError,
    FencedOutError,
    LimitExceededError,
    RunNotFoundError,
)
from ..durable.signer import SECRET_ENV_VAR, ApprovalSigner
from ..durable.store import maybe_await, supports
from ..events.log import notify
from ..events.model import RUN_STATE, NewEvent
from ..loop.driver import build_options
from ..loop.machine import LegStart, leg_start_from_checkpoint
from ..messages import Message
from .agent import Agent, Registry
from .executor import ModelAttemptFailed, NeedsAttention, RunContext, RunTimedOut, RuntimeDriver
from .limits import Limits, check_concurrency, payload_bytes
from .prompts import Prompt, canonical_prompt, prompt_message, validate_prompt
from .records import RUNTIME, UNFINISHED_STATES, RuntimeRun, RuntimeStore
from .run import Run

__all__ = ["DurableRuntime"]

FatalHandler = Callable[[BaseException], Any]


class DurableRuntime:
    """Owns runs: schedules them, executes them on this event loop, recovers them.

    Open it with :meth:`open` (an async context manager). Runs are executed by
    one owner at a time (a lease with a fencing token in the store), so several
    runtimes or ``nbdurable worker`` processes can share one store.

    Attributes:
        store: The store (a bundled store with the ``runtime`` capability).
        limits: The runtime's limits.
        owner_id: This runtime's identity in leases.
    """

    def __init__(
        self,
        *,
        store: Any,
        agents: Iterable[Agent] = (),
        tasks: Sequence[Any] = (),
        max_concurrent_runs: int = 4,
        max_concurrent_tasks: int = 4,
        limits: Limits | None = None,
        on_fatal_error: FatalHandler | None = None,
        approval_signer: ApprovalSigner | None = None,
        lease_ms: int = 30_000,
        poll_interval: float = 0.05,
        flush_interval: float = 0.05,
        deps: Deps | None = None,
        owner_id: str | None = None,
    ) -> None:
        if store is None or not supports(store, RUNTIME):
            raise ConfigurationError(
                "DurableRuntime needs a store that keeps run records: "
                "open_store('sqlite:///...'), 'postgresql://...' or 'memory://'"
            )
        if tasks:
            raise ConfigurationError("custom tasks are not supported yet")
        self.store = store
        self.runtime_store: RuntimeStore = store
        self.max_concurrent_runs = check_concurrency("max_concurrent_runs", max_concurrent_runs)
        self.max_concurrent_tasks = check_concurrency("max_concurrent_tasks", max_concurrent_tasks)
        self.limits = limits if limits is not None else Limits()
        if not isinstance(self.limits, Limits):
            raise ConfigurationError("limits must be a Limits")
        self.on_fatal_error = on_fatal_error
        self.lease_ms = lease_ms
        self.poll_interval = poll_interval
        self.flush_interval = flush_interval
        self.deps = deps or Deps()
        self.owner_id = owner_id or f"runtime-{new_id()[:12]}"
        self._signer = approval_signer
        self.registry = Registry()
        self.registry.register(agents)
        self._executions: dict[str, asyncio.Task[None]] = {}
        self._contexts: dict[str, RunContext] = {}
        self._wake = asyncio.Event()
        self._scheduler: asyncio.Task[None] | None = None
        self._closed = False
        self._fatal = False

    # -- lifecycle -----------------------------------------------------------------

    @classmethod
    async def open(cls, **options: Any) -> DurableRuntime:
        """Open a runtime and start its scheduler on the running event loop.

        Keyword arguments are those of the class. Validation is eager: invalid
        options and registrations raise here.
        """
        runtime = cls(**options)
        runtime._scheduler = asyncio.get_running_loop().create_task(runtime._schedule())
        return runtime

    async def __aenter__(self) -> DurableRuntime:
        if self._scheduler is None:
            self._scheduler = asyncio.get_running_loop().create_task(self._schedule())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop taking work; abandon in-flight steps cleanly and release their leases.

        Nothing is marked failed that was not: runs this runtime was executing
        go back to ``pending`` for the next owner (or the next open).
        """
        if self._closed:
            return
        self._closed = True
        if self._scheduler is not None:
            self._scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scheduler
        for run_id, task in list(self._executions.items()):
            context = self._contexts.get(run_id)
            if context is not None and context.cancel_reason is None:
                context.cancel_reason = "shutdown"
            task.cancel()
        if self._executions:
            await asyncio.gather(*self._executions.values(), return_exceptions=True)

    def now(self) -> int:
        """The runtime clock, epoch ms."""
        return int(self.deps.clock.now())

    @property
    def signer(self) -> ApprovalSigner:
        """The approval signer.

        Passed in, or from ``NBDURABLE_APPROVAL_SECRET``, or a 0600 file beside
        the store (created on first use).
        """
        if self._signer is None:
            path = getattr(self.store, "path", None) or getattr(self.store, "directory", None)
            if path and str(path) != ":memory:":
                key = Path(str(path)).parent / "approval.key"
                self._signer = ApprovalSigner.from_file(key)
            elif os.environ.get(SECRET_ENV_VAR):
                self._signer = ApprovalSigner()
            else:  # an in-memory store: a secret that lives as long as the process
                self._signer = ApprovalSigner(secrets.token_urlsafe(32))
        return self._signer

    # -- registrations -------------------------------------------------------------------

    def register_agents(self, agents: Iterable[Agent]) -> None:
        """Validate the whole batch, then add it (running work is not affected).

        Raises:
            ConfigurationError: An invalid registration (nothing is added).
            DurableConflictError: An id twice in the batch, or an (id, version)
                already registered with another definition.
        """
        self.registry.register(agents)
        self._wake.set()

    def unregister_agent(self, agent_id: str) -> bool:
        """Remove an idle registration; True if it existed. History is kept.

        Raises:
            DurableConflictError: A run still needs the agent.
        """
        busy = [
            r.run_id
            for r in self.runtime_store.rt_list(sorted(UNFINISHED_STATES))
            if r.agent_id == agent_id
        ]
        if busy:
            raise DurableConflictError(
                f"agent {agent_id!r} is needed by unfinished runs: {', '.join(busy[:5])}"
            )
        return self.registry.remove(agent_id)

    # -- runs ------------------------------------------------------------------------------

    async def submit(
        self,
        agent_id: str,
        prompt: Prompt,
        *,
        session_id: str | None = None,
        request_id: str | None = None,
        enqueue: bool = False,
        timeout: float | None = None,
        run_id: str | None = None,
    ) -> Run:
        """Submit a run of a registered agent; returns its handle at once.

        Args:
            agent_id: A registered agent (its latest version is captured).
            prompt: A nonblank string or a user message.
            session_id: The conversation: its runs execute one after another,
                each starting from the latest completed history. Default: a new one.
            request_id: Deduplication key: an equivalent prompt returns the original run.
            enqueue: Queue behind an unfinished run of the session instead of failing.
            timeout: Seconds until the run fails with reason ``timeout``.
            run_id: The run's id (default: generated).

        Raises:
            ConfigurationError: An unknown agent or an invalid prompt.
            DurableConflictError: A busy session without ``enqueue``, or a
                request id reused for a different prompt.
            LimitExceededError: Too many unfinished runs, or the prompt is too large.
        """
        agent = self.registry.get(agent_id)
        if agent is None:
            raise ConfigurationError(f"no agent {agent_id!r} is registered")
        prompt = validate_prompt(prompt)
        text = canonical_prompt(prompt)
        size = payload_bytes(text)
        if size > self.limits.max_payload_bytes:
            raise LimitExceededError("max_payload_bytes", size, self.limits.max_payload_bytes)
        now = self.now()
        new_run_id = run_id or f"run-{new_id()[:16]}"
        retry = agent.retry_policy
        record = RuntimeRun(
            run_id=new_run_id,
            agent_id=agent.id,
            agent_version=str(agent.version),
            session_id=session_id or f"session-{new_run_id}",
            request_id=request_id,
            prompt=text,
            state="pending",
            created_at=now,
            updated_at=now,
            deadline_at=None if timeout is None else now + int(timeout * 1000),
            retry_policy=retry.model_dump() if retry else None,
            stream=agent.stream,
            max_steps=agent.max_steps,
        )
        stored, created = self.runtime_store.rt_insert(
            record, enqueue=enqueue, max_pending=self.limits.max_pending_runs
        )
        if created:
            self.state_event(stored)
            self._wake.set()
        return Run(self, stored.run_id)

    async def get_run(self, run_id: str) -> Run:
        """Re-attach to any run of the store, from any process.

        Raises:
            RunNotFoundError: The store has no such run.
        """
        if self.runtime_store.rt_get(run_id) is None:
            raise RunNotFoundError(run_id)
        return Run(self, run_id)

    def list_runs(self, status: str | Sequence[str] | None = None) -> list[RuntimeRun]:
        """Run records in submission order, optionally only those in ``status``."""
        states = [status] if isinstance(status, str) else status
        return self.runtime_store.rt_list(states)

    async def resume(self) -> None:
        """Pick up recovered work now (restored registrations make it eligible)."""
        self._wake.set()

    def state_event(self, record: RuntimeRun) -> None:
        """Append a ``run_state`` event for the record's current state."""
        event = NewEvent(
            type=RUN_STATE,
            created_at=self.now(),
            payload={
                "state": record.state,
                "reason": record.reason,
                "next_attempt_at": record.next_attempt_at,
            },
        )
        try:
            self.store.append_events(record.run_id, [event])
        except Exception as exc:  # the record is the authority; the event is for viewers
            self.deps.logger.error("nbdurable: state event of %s failed: %r", record.run_id, exc)
        notify(self.store, record.run_id)

    def set_state(self, run_id: str, fence: int | None = None, **changes: Any) -> RuntimeRun:
        """Write a run-state change (and its event)."""
        changes.setdefault("updated_at", self.now())
        record = self.runtime_store.rt_update(run_id, changes, fence=fence)
        self.state_event(record)
        if record.finished and "state" in changes:  # the store promoted the session's next run
            waiting = [
                r
                for r in self.runtime_store.rt_list(sorted(UNFINISHED_STATES))
                if r.session_id == record.session_id
            ]
            if waiting and waiting[0].state == "pending":
                self.state_event(waiting[0])
        self._wake.set()
        return record

    def cancel_local(self, run_id: str) -> bool:
        """Cancel this runtime's execution of a run, if it has one."""
        task = self._executions.get(run_id)
        context = self._contexts.get(run_id)
        if task is None or context is None:
            return False
        context.cancel_reason = "cancelled"
        task.cancel()
        return True

    def wake(self) -> None:
        """Make the scheduler look for work now."""
        self._wake.set()

    # -- scheduling ----------------------------------------------------------------------

    async def _schedule(self) -> None:
        try:
            while not self._closed:
                self._wake.clear()
                while len(self._executions) < self.max_concurrent_runs:
                    agents = self.registry.keys()
                    record = self.runtime_store.rt_claim(
                        self.owner_id, self.now(), self.lease_ms, agents
                    )
                    if record is None:
                        break
                    self._start(record)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a storage or scheduler failure the runtime cannot pass
            self._fatal = True  # no more claims; close() still abandons in-flight runs
            if self.on_fatal_error is not None:
                with contextlib.suppress(Exception):
                    await maybe_await(self.on_fatal_error(exc))
            else:
                self.deps.logger.error("nbdurable: the runtime stopped: %r", exc)

    def _start(self, record: RuntimeRun) -> None:
        agent = self.registry.get(record.agent_id, record.agent_version)
        assert agent is not None  # claims only take registered agents
        context = RunContext(runtime=self, agent=agent, record=record)
        self._contexts[record.run_id] = context
        task = asyncio.get_running_loop().create_task(self._execute(context))
        self._executions[record.run_id] = task
        task.add_done_callback(lambda _: self._finished(record.run_id))

    def _finished(self, run_id: str) -> None:
        self._executions.pop(run_id, None)
        self._contexts.pop(run_id, None)
        self._wake.set()

    async def _execute(self, context: RunContext) -> None:
        record = context.record
        if record.state == "cancelling":  # cancelled while its previous owner ran it
            self.set_state(
                record.run_id, record.fence, state="cancelled", reason="cancelled", lease_owner=None
            )
            return
        if record.deadline_at is not None and self.now() >= record.deadline_at:
            self.set_state(
                record.run_id, record.fence, state="failed", reason="timeout", lease_owner=None
            )
            return
        self.state_event(record)
        keeper = asyncio.get_running_loop().create_task(self._keep_lease(context))
        try:
            await self._leg(context)
        except FencedOutError:
            pass  # another owner has the run: it decides from here
        except asyncio.CancelledError:
            self._after_cancel(context)
        except ModelAttemptFailed as failed:
            self._after_model_error(context, failed)
        except NeedsAttention as exc:
            self._end(context, state="needs_attention", reason=str(exc))
        except RunTimedOut:
            self._end(context, state="failed", reason="timeout")
        except LimitExceededError as exc:
            self._end(context, state="failed", reason="limit_exceeded", error=str(exc))
        except Exception as exc:
            self._end(context, state="failed", reason="error", error=f"{type(exc).__name__}: {exc}")
        finally:
            keeper.cancel()

    async def _leg(self, context: RunContext) -> None:
        record = context.record
        agent = context.agent
        context.intents = {i.tool_call_id: i for i in self.runtime_store.rt_intents(record.run_id)}
        checkpoint = await maybe_await(self.store.load(record.run_id))
        if checkpoint is not None:
            start = leg_start_from_checkpoint(checkpoint)
        else:
            history = await self._session_history(record)
            start = LegStart(
                messages=(*history, prompt_message(record.prompt_value)),
                run_id=record.run_id,
                durable=True,
            )
        options = build_options(
            model=agent.model,
            tools=agent.tool_map,
            instructions=agent.instructions,
            max_steps=record.max_steps,
            stop_when=None,
            prepare_step=None,
            max_tool_concurrency=agent.max_tool_concurrency,
            approve_tool_call=None,
            approval_responses=record.approval_responses(),
            approval_signer=self.signer,
            approval_max_age_ms=None,
            deps=self.deps,
        )
        driver = RuntimeDriver(
            options,
            start,
            store=self.store,
            streaming=record.stream,
            flush_interval=self.flush_interval,
            context=context,
        )
        result = await driver.run()
        if result.status == "completed":
            self._end(
                context,
                state="completed",
                result_text=result.text,
                verdicts={},
                rerun_tool_calls=[],
            )
        elif result.pending_approvals:
            self._end(context, state="waiting_approval", verdicts={}, rerun_tool_calls=[])
        else:
            self._end(
                context,
                state="needs_attention",
                verdicts={},
                reason="the run waits for a client tool's result",
            )

    async def _session_history(self, record: RuntimeRun) -> tuple[Message, ...]:
        """The latest completed history of the run's session (failed runs add none)."""
        before = [
            r
            for r in self.runtime_store.rt_list(["completed"])
            if r.session_id == record.session_id and r.seq < record.seq
        ]
        if not before:
            return ()
        latest = await maybe_await(self.store.load(before[-1].run_id))
        return latest.messages if latest is not None else ()

    def _end(self, context: RunContext, **changes: Any) -> None:
        changes.setdefault("lease_owner", None)
        changes.setdefault("lease_expires_at", None)
        with contextlib.suppress(FencedOutError):  # another owner decides now
            self.set_state(context.record.run_id, context.fence, **changes)

    def _after_cancel(self, context: RunContext) -> None:
        reason = context.cancel_reason
        if reason == "cancelled":
            self._end(context, state="cancelled", reason="cancelled")
        elif reason == "timeout":
            self._end(context, state="failed", reason="timeout")
        elif reason == "lease_lost":
            pass
        else:  # shutdown: hand the run back untouched for the next owner
            self._end(context, state="pending")

    def _after_model_error(self, context: RunContext, failed: ModelAttemptFailed) -> None:
        record = self.runtime_store.rt_get(context.record.run_id) or context.record
        error = f"{type(failed.error).__name__}: {failed.error}"
        policy = context.retry_policy
        if policy is None:
            self._end(context, state="failed", reason="model_error", error=error)
            return
        used = record.model_attempts
        if used >= policy.max_attempts:
            self._end(context, state="failed", reason="model_retries_exhausted", error=error)
            return
        self._end(
            context,
            state="retry_wait",
            error=error,
            next_attempt_at=self.now() + policy.delay_ms(used),
        )

    def _renew(self, context: RunContext) -> bool:
        try:
            return self.runtime_store.rt_renew(
                context.record.run_id, self.owner_id, context.fence, self.now() + self.lease_ms
            )
        except Exception as exc:  # a transient store error: try again next period
            self.deps.logger.error("nbdurable: renewing the lease failed: %r", exc)
            return True

    async def _keep_lease(self, context: RunContext) -> None:
        """Renew the lease; notice cancellation, timeouts and a lost lease."""
        period = max(self.lease_ms / 3000, 0.01)
        task = self._executions.get(context.record.run_id)
        while True:
            await asyncio.sleep(min(period, self.poll_interval * 4))
            try:
                record = self.runtime_store.rt_get(context.record.run_id)
            except Exception as exc:  # the store is gone: the run's own writes will tell
                self.deps.logger.error("nbdurable: renewing the lease failed: %r", exc)
                return
            if record is None or task is None:
                return
            reason = None
            if record.state == "cancelling":
                # Cancel once: a second cancel would cut the callbacks' settling short.
                if context.cancel_reason is None:
                    reason = "cancelled"
            elif record.deadline_at is not None and self.now() >= record.deadline_at:
                reason = "timeout"
            if reason is None and not self._renew(context):
                reason = "lease_lost"
            if reason is not None:
                context.cancel_reason = reason
                task.cancel()
                return
