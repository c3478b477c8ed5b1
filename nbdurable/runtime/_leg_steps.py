"""The bodies of a leg's steps that run outside the loop: Temporal's activities, Restate's steps.

The step machine of a leg on Temporal or Restate runs where no I/O may happen;
every touch of the store, the model and the tools is a step of the engine's
(an activity, a journaled ``ctx.run``) whose body is here: take the pending
run (a fenced compare-and-set), write the outbox, call the model (its attempt
retried by the run's policy, as the embedded engine decides), run a tool call
under its intent record, write the leg's end. What each did is mirrored into
the nbdurable store, so a run executed on either reads exactly like one the
embedded engine executed. A body decides by raising :class:`StepDecided`
(needs attention, a retry after a delay, the run ends): each engine turns it
into its own answer (an ``ApplicationError``, a journaled value).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

from .._errors import FencedOutError, LimitExceededError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._offload import offload
from ..loop._driver import Driver
from ..loop._effects import CallModel, ToolInvocation
from ..loop._options import LoopOptions
from ..loop._start import LegStart
from ..messages import ToolCallPart, ToolResultPart
from ..models._base import ModelRequest, ModelResponse
from ..runs import (
    RunPatch,
    RuntimeRun,
    ToolIntent,
    definition_matches,
    mismatch_reason,
    of_engine,
    unclaimable_by_definition,
    unserved_reason,
)
from . import _lifecycle as lifecycle
from ._agent import Agent
from ._executor import RunContext, RuntimeDriver
from ._legs import first_messages
from ._legs_outside import (
    claim_pending,
    loop_options_at,
    note_task_waiting,
    write_outbox,
    write_started,
)
from ._outcome import (
    ModelAttemptFailed,
    NeedsAttention,
    RunTimedOut,
    after_model_error,
    record_changes,
)
from ._seam import RunServices
from ._state_events import claim_event
from ._tasks import TaskDefinition, TaskExecution, resume_point

__all__ = ["NEEDS_ATTENTION", "BoundSteps", "LegSteps", "StepDecided", "TaskSteps"]

NEEDS_ATTENTION = "needs_attention"
""":attr:`StepDecided.kind` of a tool call that needs a human (``manual`` recovery)."""


class StepDecided(Exception):
    """What a step decided for its leg instead of a result; never a step to retry.

    Attributes:
        kind: ``needs_attention``; else the reason the run ends with
            (``limit_exceeded``, ``timeout``, ``error``, ``model_error``, a
            model error's reason), or the failed attempt's when ``retry_after``.
        message: What happened.
        retry_after: Milliseconds after which the run's policy retries the
            model attempt (the run waits in ``retry_wait``); None: no retry.
    """

    def __init__(self, kind: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after

    @classmethod
    def final(cls, error: Exception) -> StepDecided:
        """A run-ending limit or timeout."""
        return cls("timeout" if isinstance(error, RunTimedOut) else "limit_exceeded", str(error))


class BoundSteps:
    """Step bodies bound to a worker's (or an endpoint's) runtime: store, agents, tasks, signer."""

    engine: ClassVar[str]
    """The engine whose runs they execute (``RuntimeRun.engine``)."""

    def __init__(self, runtime: RunServices) -> None:
        self.runtime = runtime

    def missing(self, message: str) -> Exception:
        """What a step raises for something it needs that is gone (no retry helps)."""
        return LookupError(message)

    def owner(self, run_id: str) -> str:
        """The lease owner a leg of ``run_id`` records (its workflow or object, on any worker)."""
        return f"{self.engine}:{run_id}"

    def _record(self, run_id: str) -> RuntimeRun:
        record = self.runtime.runtime_store.rt_get(run_id)
        if record is None:
            raise self.missing(f"no run {run_id!r} in the store")
        return record


class LegSteps(BoundSteps):
    """The bodies of an agent run's leg's steps."""

    leaves: ClassVar[str] = "its leg leaves it alone"
    """How the log says a leg leaves a run of another engine."""

    # -- what an engine adds ------------------------------------------------------

    @contextlib.asynccontextmanager
    async def calling(self, record: RuntimeRun, label: str) -> AsyncIterator[None]:
        """Around a model or tool call (``label``): the engine's heartbeats and traces."""
        yield

    def leg_began(self, record: RuntimeRun, checkpoint: AgentCheckpoint | None) -> None:
        """A leg took its run (before its first step)."""

    async def leg_ending(self, run_id: str, changes: dict[str, Any]) -> None:
        """A leg's outbox is written; its state change (``changes``) comes next."""

    def model_driver(
        self, options: LoopOptions, context: RunContext, scope: dict[str, Any], step_index: int
    ) -> RuntimeDriver:
        """The driver of the run's own model call."""
        runtime = self.runtime
        return RuntimeDriver(
            options,
            LegStart(messages=(), run_id=context.record.run_id, durable=True),
            store=runtime.store,
            streaming=context.record.stream,
            flush_interval=runtime.flush_interval,
            context=context,
        )

    async def model_answered(
        self, driver: RuntimeDriver, response: ModelResponse, step_index: int, early: bool
    ) -> tuple[dict[str, ToolResultPart], bool]:
        """The results of calls run at once (``early``); whether the model (no journal) answered."""
        return {}, True

    def agent_of(self, record: RuntimeRun) -> Agent:
        """The run's agent, as this worker registers it."""
        agent = self.runtime.registry.get(record.agent_id, record.agent_version)
        if agent is None:
            raise self.missing(unserved_reason(record))
        return agent

    def _options(self, agent: Agent, path: Sequence[str], record: RuntimeRun) -> LoopOptions:
        """The options of the loop at ``path``; a missing sub-agent fails the step for good."""
        try:
            return loop_options_at(self.runtime, agent, list(path), record)
        except LookupError as exc:
            raise self.missing(str(exc)) from exc

    # -- a leg begins and ends ----------------------------------------------------

    async def take(self, run_id: str) -> dict[str, Any] | None:
        """Take a pending run (a fenced compare-and-set to ``running``).

        Returns the record, the latest checkpoint and, for a first leg, the
        messages it starts from, with the clock (``now``); or ``{"final":
        state}`` (finished already, or its deadline passed); or ``{"elsewhere":
        reason}`` (this worker does not serve the run's definition: the run is
        left pending, its waiting reason recorded); or None (a run of another
        engine, or a duplicate: another leg decided already). Run again after a
        crash, it recognises its own claim.
        """
        runtime = self.runtime
        record = await offload(self._record, run_id)
        owner = self.owner(run_id)
        if not record.finished and not of_engine(record, self.engine):
            runtime.deps.logger.warning(
                "nbdurable: run %s was submitted to the %s engine: %s",
                run_id,
                record.engine,
                self.leaves,
            )
            return None  # it resumes only if the run is moved back here
        definitions = runtime.registry.definitions()
        if not record.finished and definition_matches(record, definitions) is not True:
            return {"elsewhere": await offload(self._wait_elsewhere, record)}
        retried = record.retried
        if record.state == "pending":
            claimed = await claim_pending(runtime, record, owner)
            if claimed is None:
                return {"final": "failed"}
            record = claimed
        elif record.finished:
            return {"final": record.state}  # retried or cancelled since: nothing left to run
        elif record.state != "running" or record.lease_owner != owner:
            return None
        checkpoint = await offload(runtime.store.load, run_id)
        messages: list[Any] = []
        if checkpoint is None:
            messages = [m.model_dump(mode="json") for m in await first_messages(runtime, record)]
        await write_started(runtime, run_id, checkpoint, retried=retried)
        self.leg_began(record, checkpoint)
        return {
            "record": record.model_dump(mode="json"),
            "checkpoint": None if checkpoint is None else checkpoint.model_dump(mode="json"),
            "messages": messages,
            "now": runtime.now(),
        }

    def _wait_elsewhere(self, record: RuntimeRun) -> str:
        """Record why this worker leaves the run (once, fenced); the reason."""
        definitions = self.runtime.registry.definitions()
        now = self.runtime.now()
        waiting = unclaimable_by_definition(record, now, definitions, engine=self.engine)
        if waiting is not None:
            with contextlib.suppress(FencedOutError):  # another worker took it meanwhile
                self.runtime.runtime_store.rt_update(
                    record.run_id,
                    RunPatch(waiting_reason=waiting.waiting_reason),
                    fence=record.fence,
                )
        if definition_matches(record, definitions) is None:
            return unserved_reason(record)
        return mismatch_reason(record, definitions)

    async def start_child(self, log: str) -> dict[str, Any]:
        """A sub-agent starts or resumes: its checkpoint (under ``log``), if any."""
        checkpoint = await offload(self.runtime.store.load, log)
        await write_started(self.runtime, log, checkpoint)
        return {"checkpoint": None if checkpoint is None else checkpoint.model_dump(mode="json")}

    async def write(self, entries: list[dict[str, Any]], run_log: str | None = None) -> Any:
        """Write outbox entries in order; the run's terminal payload is returned (held back)."""
        return await write_outbox(self.runtime, entries, run_log)

    async def end_leg(
        self,
        run_id: str,
        entries: list[dict[str, Any]],
        changes: dict[str, Any],
        fence: int | None = None,
    ) -> None:
        """Write the leg's outbox and its run-state change.

        ``entries`` may hold completed intents (``{"log", "intent"}``) of the
        leg's last step that no step wrote. A run finished meanwhile (cancelled
        from a client) keeps its state. With the leg's ``fence``, a leg whose
        claim is gone (its end written already, then the run retried, decided
        or claimed again) writes nothing: the step may run a second time.
        """
        if fence is not None:
            current = await offload(self._record, run_id)
            if current.fence != fence or current.lease_owner != self.owner(run_id):
                return
        intents = [ToolIntent.model_validate(e["intent"]) for e in entries if "intent" in e]
        entries = [e for e in entries if "intent" not in e]
        finish = await write_outbox(self.runtime, entries, run_log=run_id)
        await self.leg_ending(run_id, changes)
        record = await offload(self._record, run_id)
        mine = record.fence if fence is None else fence
        for intent in intents:
            with contextlib.suppress(FencedOutError):  # the run has moved on: not ours to write
                await offload(self.runtime.runtime_store.rt_intent, intent, fence=mine)
        if record.finished:
            return
        patch = RunPatch(lease_owner=None) | RunPatch(**changes)  # a misspelt field: TypeError
        await offload(self.runtime.set_state, run_id, patch, finish=finish)
        if patch.state:
            lifecycle.left(record, patch.state, patch.reason or None)

    # -- the model and the tools --------------------------------------------------

    async def ask_model(
        self, scope: dict[str, Any], step_index: int, request: ModelRequest, early: bool = False
    ) -> tuple[ModelResponse, dict[str, ToolResultPart], bool]:
        """One model attempt, its deltas and attempt events persisted.

        Returns the response, the results of calls that ran at once
        (:meth:`model_answered`) and whether the model (not the journal)
        answered. A response journaled in the store for the step is reused.

        Raises:
            StepDecided: The run's policy retries the failed attempt after a
                delay (the run is in ``retry_wait``), or it ends the run (a
                sub-agent's error: ``model_error``, the parent's tool result).
        """
        runtime = self.runtime
        record = await offload(self._record, scope["run_id"])
        agent = self.agent_of(record)
        options = self._options(agent, scope["path"], record)
        effect = CallModel(step_index, options.model, request)
        if scope["path"]:  # a sub-agent's call: no journal, an error is the parent's tool result
            log = scope["log"]
            start = LegStart(messages=(), run_id=log, durable=log is not None)
            store = runtime.store if log is not None else None
            plain = Driver(options, start, store=store, streaming=record.stream)
            try:
                async with self.calling(record, f"sub-agent model call of step {step_index}"):
                    response = await plain.call_model(effect)
            except Exception as exc:
                raise StepDecided("model_error", f"{type(exc).__name__}: {exc}") from None
            finally:
                if plain.events is not None:
                    await plain.events.close()
            return response, {}, True
        if record.state == "retry_wait":
            running = RunPatch(state="running", next_attempt_at=None)
            record = await offload(runtime.set_state, record.run_id, running)
            lifecycle.claimed(record, resumed=False)  # the retried attempt starts a leg
        context = RunContext(runtime=runtime, agent=agent, record=record)
        driver = self.model_driver(options, context, scope, step_index)
        try:
            async with self.calling(record, f"model call of step {step_index}"):
                response = await driver.call_model(effect)
            results, answered = await self.model_answered(driver, response, step_index, early)
        except ModelAttemptFailed as failed:
            raise await offload(self._model_failure, context, failed) from None
        except (LimitExceededError, RunTimedOut) as exc:
            raise StepDecided.final(exc) from None
        except FencedOutError as exc:
            raise StepDecided("error", str(exc)) from None
        finally:
            if driver.events is not None:
                await driver.events.close()
        return response, results, answered

    def _model_failure(self, context: RunContext, failed: ModelAttemptFailed) -> StepDecided:
        """Retried after a delay (``retry_wait``) or final: the embedded engine's rule.

        The record counts attempts (a lost worker's attempt counts too); the
        run's saved policy and the agent's ``retry_if`` decide.
        """
        record = self._record(context.record.run_id)
        now = self.runtime.now()
        outcome = after_model_error(
            failed.error,
            policy=context.retry_policy,
            retry_if=context.agent.retry_if,
            used=record.model_attempts,
            now=now,
        )
        if outcome.kind != "retry_wait":
            return StepDecided(outcome.reason or "error", outcome.error or "")
        assert outcome.next_attempt_at is not None
        self.runtime.set_state(record.run_id, record_changes(outcome))
        lifecycle.left(record, "retry_wait", outcome.reason)
        delay = outcome.next_attempt_at - now
        return StepDecided(outcome.reason or "error", outcome.error or "", retry_after=delay)

    def _tool_driver(self, agent: Agent, options: LoopOptions, record: RuntimeRun) -> Driver:
        """The driver that runs the run's own agent's calls under their intent records."""
        intents = {i.tool_call_id: i for i in self.runtime.runtime_store.rt_intents(record.run_id)}
        context = RunContext(runtime=self.runtime, agent=agent, record=record, intents=intents)
        start = LegStart(messages=(), run_id=record.run_id, durable=True)
        return RuntimeDriver(options, start, context=context)

    async def call_tool(
        self, scope: dict[str, Any], step_index: int, call: dict[str, Any]
    ) -> ToolResultPart:
        """Run one tool call under its intent record; its result.

        A call whose intent completed returns that result (never runs twice). A
        ``manual`` call found started (it was interrupted) runs again only when
        ``retry()`` allowed it.

        Raises:
            StepDecided: Otherwise the run needs attention; or a limit, the
                timeout or a lost claim ends it.
        """
        record = await offload(self._record, scope["run_id"])
        agent = self.agent_of(record)
        options = self._options(agent, scope["path"], record)
        part = ToolCallPart.model_validate(call)
        tool = options.tools.get(part.tool_name)
        if tool is None:
            raise StepDecided("error", f"no tool {part.tool_name!r}")
        invocation = ToolInvocation(tool=tool, call=part, kwargs=tool.validate_args(part.args))
        driver: Driver
        if scope["path"]:
            log = scope["log"]
            driver = Driver(options, LegStart(messages=(), run_id=log, durable=log is not None))
        else:
            driver = await offload(self._tool_driver, agent, options, record)
        try:
            async with self.calling(record, f"tool {part.tool_name!r} (call {part.tool_call_id})"):
                outcome = await driver.run_tool(invocation, step_index)
        except NeedsAttention as exc:
            raise StepDecided(NEEDS_ATTENTION, str(exc)) from None
        except (LimitExceededError, RunTimedOut) as exc:
            raise StepDecided.final(exc) from None
        except FencedOutError as exc:
            raise StepDecided("error", str(exc)) from None
        return outcome.result or ToolResultPart(
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            result="The tool gave no result.",
            is_error=True,
        )


class TaskSteps(BoundSteps):
    """The bodies of a custom task run's steps: take the run, run a phase.

    A phase decides by raising :class:`StepDecided`: ``cancelled`` (the run
    is being cancelled), ``fenced`` (it is no longer this execution's),
    ``timeout``, ``limit_exceeded`` or ``error`` (the task fails with it).
    """

    def _task(self, record: RuntimeRun) -> TaskDefinition | None:
        """The run's task, when this worker executes its version now."""
        if (record.agent_id, record.agent_version) not in self.runtime.task_keys():
            return None
        return self.runtime.tasks.get(record.agent_id)

    def phase_task(self, record: RuntimeRun) -> TaskDefinition | None:
        """The task a phase runs (None: this worker lacks it; the phase fails plainly)."""
        return self._task(record)

    def task_elsewhere(self, record: RuntimeRun) -> dict[str, Any]:
        """What taking a task run this worker does not execute answers (its reason recorded)."""
        return {"elsewhere": unserved_reason(record)}

    async def run_phase(self, execution: TaskExecution, index: int, state: Any, how: Any) -> None:
        """Run phase ``index`` on ``state``, checkpointing its result (``how``: the step's args)."""
        raise NotImplementedError

    async def take_task(self, run_id: str) -> dict[str, Any]:
        """Take a pending task run (a fenced compare-and-set to running).

        Returns the run's state (``running`` only when taken now) and, when
        taken, its fence, its number of phases and the first phase to run; or
        :meth:`task_elsewhere`'s answer when this worker does not execute the
        task's version. A run past its deadline fails (``timeout``).
        """
        runtime = self.runtime
        record = await offload(self._record, run_id)
        if record.state != "pending":
            return {"state": record.state}  # a duplicate: another decision stands
        claim = RunPatch(fence=record.fence + 1, lease_owner=self.owner(run_id))
        task: TaskDefinition | None = None
        if record.deadline_at is not None and runtime.now() >= record.deadline_at:
            claim |= RunPatch(state="failed", reason="timeout", lease_owner=None)
        else:
            task = self._task(record)
            if task is None:  # recorded once, fenced: a worker that took it keeps it
                await offload(note_task_waiting, runtime, record, self.engine)
                return self.task_elsewhere(record)
            claim |= RunPatch(state="running", waiting_reason=None)
        claim |= RunPatch(updated_at=runtime.now())
        record = await offload(runtime.runtime_store.rt_update, run_id, claim, fence=record.fence)
        await offload(claim_event, runtime, record)
        if record.state != "running" or task is None:
            lifecycle.left(record, record.state, record.reason)
            return {"state": record.state}
        lifecycle.claimed(record, resumed=record.phase > 0)
        start, _ = await offload(resume_point, TaskExecution(runtime, task, record))
        return {
            "state": "running",
            "fence": record.fence,
            "start": start,
            "phases": len(task.phases),
        }

    async def task_phase(self, run_id: str, index: int, fence: int, how: Any = None) -> None:
        """Run phase ``index`` and checkpoint its state, cut at the task's deadline.

        A phase checkpointed already (its worker died before its step was
        recorded) is not run again.

        Raises:
            StepDecided: The phase did not complete (see the class).
        """
        runtime = self.runtime
        record = await offload(self._record, run_id)
        task = self.phase_task(record)
        if record.state == "cancelling":
            raise StepDecided("cancelled", "the task is being cancelled")
        if record.fence != fence or record.state != "running":
            raise StepDecided(
                "fenced", f"task run {run_id!r} is {record.state} (fence {record.fence})"
            )
        if task is None:
            raise StepDecided("error", unserved_reason(record))
        execution = TaskExecution(runtime, task, record)
        start, state = await offload(resume_point, execution)
        if start > index:
            return
        if start < index:
            raise StepDecided(
                "error", f"phase {index} of {run_id!r} cannot run before phase {start}"
            )
        deadline = record.deadline_at
        delay = None if deadline is None else max(deadline - runtime.now(), 0) / 1000
        cut = asyncio.timeout(delay)
        try:
            async with cut:
                await self.run_phase(execution, index, state, how)
        except StepDecided:
            raise
        except RunTimedOut as exc:
            raise StepDecided("timeout", str(exc)) from None
        except LimitExceededError as exc:
            raise StepDecided("limit_exceeded", str(exc)) from None
        except FencedOutError as exc:
            raise StepDecided("fenced", str(exc)) from None
        except Exception as exc:
            if cut.expired():
                raise StepDecided("timeout", "the task's timeout passed") from None
            raise StepDecided("error", f"{type(exc).__name__}: {exc}") from None
