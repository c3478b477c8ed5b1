"""The Run handle: a run owned by the runtime, watched and steered from anywhere."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import (
    ConfigurationError,
    NbdurableError,
    OutputValidationError,
    RunNotFoundError,
)
from ..durable.store import maybe_await
from ..events.model import Event
from ..events.subscribe import subscribe, wait_for_run
from ..loop.output import OutputSpec
from ..messages import Message, ToolApprovalRequest, ToolApprovalResponse, Usage
from .records import RuntimeRun, ToolIntent

if TYPE_CHECKING:
    from .runtime import DurableRuntime

__all__ = ["Run", "RunFailedError", "RunResult"]


class RunFailedError(NbdurableError):
    """The run ended failed or cancelled.

    Attributes:
        run_id: The run.
        state: ``failed`` or ``cancelled``.
        reason: Why (``timeout``, ``model_retries_exhausted``, ``limit_exceeded``, ...).
        error: The last error, when there was one.
    """

    def __init__(self, record: RuntimeRun) -> None:
        self.run_id = record.run_id
        self.state = record.state
        self.reason = record.reason
        self.error = record.error
        detail = f" ({record.error})" if record.error else ""
        super().__init__(f"run {record.run_id!r} {record.state}: {record.reason}{detail}")


@dataclass(frozen=True)
class RunResult:
    """A completed run's outcome.

    Attributes:
        run_id: The run.
        text: The final text.
        messages: The final history.
        usage: The whole run's cumulative usage.
        output: With the agent's ``output_type``, the final answer validated into
            it (None without one, or when this process has no registration of the
            run's agent version).
    """

    run_id: str
    text: str
    messages: tuple[Message, ...]
    usage: Usage
    output: Any = None


class Run:
    """A handle on a runtime run. Cheap: it holds only the runtime and the run id.

    Watching (``result()``, ``stream()``) never affects the run: cancelling a task
    that awaits them drops only that watcher. ``cancel()`` cancels the run.
    """

    def __init__(self, runtime: DurableRuntime, run_id: str) -> None:
        self.runtime = runtime
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"Run({self.run_id!r})"

    def record(self) -> RuntimeRun:
        """The run's current record.

        Raises:
            RunNotFoundError: The run was deleted.
        """
        record = self.runtime.runtime_store.rt_get(self.run_id)
        if record is None:
            raise RunNotFoundError(self.run_id)
        return record

    @property
    def status(self) -> str:
        """The current run state (read from the store)."""
        return self.record().state

    async def wait(self, *states: str) -> RuntimeRun:
        """Wait until the run is in one of ``states`` (default: finished); return its record."""
        while True:
            record = self.record()
            if (record.state in states) if states else record.finished:
                return record
            await wait_for_run(self.runtime.store, self.run_id, self.runtime.poll_interval)

    async def result(self) -> RunResult:
        """Wait for the run to finish; its result when completed.

        Raises:
            RunFailedError: The run failed or was cancelled.
        """
        record = await self.wait()
        if record.state != "completed":
            raise RunFailedError(record)
        checkpoint = await maybe_await(self.runtime.store.load(self.run_id))
        messages = checkpoint.messages if checkpoint is not None else ()
        usage = checkpoint.usage if checkpoint is not None else Usage()
        text = record.result_text or ""
        agent = self.runtime.registry.get(record.agent_id, record.agent_version)
        spec = OutputSpec.of(agent.output_type) if agent is not None else None
        output = None
        if spec is not None:
            # a run that ended on max_steps has no final answer to validate
            with contextlib.suppress(OutputValidationError):
                output = spec.parse(text)
        return RunResult(self.run_id, text, messages, usage, output)

    def stream(self, after: int = 0) -> AsyncIterator[Event]:
        """The run's event log after ``after``: replay, then live, until the run finishes."""
        return subscribe(
            self.runtime.store,
            self.run_id,
            after=after,
            wait=True,
            poll_interval=self.runtime.poll_interval,
        )

    async def pending_approvals(self) -> tuple[ToolApprovalRequest, ...]:
        """The approvals the run waits for (signed requests, tokens included)."""
        if self.record().state != "waiting_approval":
            return ()
        checkpoint = await maybe_await(self.runtime.store.load(self.run_id))
        return checkpoint.pending_approvals if checkpoint is not None else ()

    async def approve(self, approval_id: str | None = None, *, token: str | None = None) -> None:
        """Approve a pending call (the only one when ``approval_id`` is None).

        The request's signed token is echoed by default; the token is verified
        before the approved tool runs, so a forged or stale one is a denial.
        """
        await self._verdict(approval_id, approved=True, token=token, reason=None)

    async def deny(self, approval_id: str | None = None, *, reason: str | None = None) -> None:
        """Deny a pending call; the model sees an is_error result with ``reason``.

        For a run in ``needs_attention`` because a ``manual`` tool was
        interrupted, ``deny()`` settles that call as an is_error result instead.
        """
        record = self.record()
        if record.state == "needs_attention":
            await self._settle_interrupted(record, reason or "Denied after an interruption.")
            return
        await self._verdict(approval_id, approved=False, token=None, reason=reason)

    async def cancel(self) -> None:
        """Cancel the run: at once when it is not executing, else once its callbacks settle."""
        runtime = self.runtime
        record = self.record()
        if record.finished:
            return
        if record.state in ("running", "cancelling"):
            runtime.set_state(self.run_id, state="cancelling")
            runtime.cancel_local(self.run_id)
            return
        runtime.set_state(self.run_id, state="cancelled", reason="cancelled")

    async def retry(self) -> None:
        """Let a failed or needs_attention run go on.

        The model gets a fresh attempt budget, and an interrupted ``manual``
        tool runs again. A graph node whose dependencies have not all completed
        goes back to ``queued`` and starts once they have. The new leg's
        ``run_started`` event says ``retried: true``; it follows the failed
        run's terminal ``run_error`` in the log.

        Raises:
            ConfigurationError: The run is neither failed nor in needs_attention.
        """
        record = self.record()
        if record.state not in ("failed", "needs_attention"):
            raise ConfigurationError(
                f"only failed or needs_attention runs retry, not {record.state}"
            )
        started = [i.tool_call_id for i in self._interrupted()]
        ready = self._dependencies_completed(record)
        self.runtime.set_state(
            self.run_id,
            state="pending" if ready else "queued",
            reason=None,
            error=None if ready else record.error,
            model_attempts=0,
            next_attempt_at=None,
            rerun_tool_calls=started,
            retried=True,
        )
        if not ready and self._dependencies_completed(record):
            # the last dependency completed meanwhile (the store settled the graph
            # before this node was queued again): let it go on now
            current = self.record()
            if current.state == "queued":
                self.runtime.set_state(self.run_id, current.fence, state="pending", error=None)

    def _dependencies_completed(self, record: RuntimeRun) -> bool:
        """Whether every graph dependency of the run completed (True without any)."""
        store = self.runtime.runtime_store
        deps = [store.rt_get(run_id) for run_id in record.depends_on]
        return all(dep is not None and dep.state == "completed" for dep in deps)

    # -- internals -------------------------------------------------------------------

    def _interrupted(self) -> list[ToolIntent]:
        return [
            i for i in self.runtime.runtime_store.rt_intents(self.run_id) if i.state == "started"
        ]

    async def _verdict(
        self, approval_id: str | None, *, approved: bool, token: str | None, reason: str | None
    ) -> None:
        record = self.record()
        pending = await self.pending_approvals()
        if record.state != "waiting_approval" or not pending:
            raise ConfigurationError(f"run {self.run_id!r} waits for no approval")
        open_ = [r for r in pending if r.approval_id not in record.verdicts]
        if approval_id is None:
            if len(open_) != 1:
                raise ConfigurationError(
                    f"run {self.run_id!r} waits for {len(open_)} approvals; name one"
                )
            request = open_[0]
        else:
            matches = [r for r in pending if r.approval_id == approval_id]
            if not matches:
                raise ConfigurationError(f"run {self.run_id!r} has no approval {approval_id!r}")
            request = matches[0]
        response = ToolApprovalResponse(
            approval_id=request.approval_id,
            approved=approved,
            reason=reason,
            token=(token if token is not None else request.token) if approved else None,
        )
        verdicts = {**record.verdicts, request.approval_id: response.model_dump(mode="json")}
        answered = all(r.approval_id in verdicts for r in pending)
        self.runtime.set_state(
            self.run_id,
            state="pending" if answered else "waiting_approval",
            verdicts=verdicts,
        )

    async def _settle_interrupted(self, record: RuntimeRun, reason: str) -> None:
        from ..messages import ToolResultPart

        store = self.runtime.runtime_store
        for intent in self._interrupted():
            result = ToolResultPart(
                tool_call_id=intent.tool_call_id,
                tool_name=intent.tool_name,
                result=reason,
                is_error=True,
            )
            store.rt_intent(
                intent.model_copy(
                    update={"state": "completed", "result": result.model_dump(mode="json")}
                ),
                fence=record.fence,
            )
        self.runtime.set_state(self.run_id, state="pending", reason=None)
