"""The activities of a run's workflow: every touch of the store, the model and the tools.

Each activity mirrors what it did into the nbdurable store (run records,
checkpoints, events, tool intents, the model journal), so a run executed on
Temporal reads exactly like one the embedded engine executed. A call of the
run's own agent goes through the embedded engine's :class:`RuntimeDriver` (the
model journal, tool intents, ``max_operations``, the deadline, per-delta
``max_payload_bytes``); a sub-agent's call, as on the embedded engine, through
the plain driver, its events under the sub-agent's key.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .. import tracing as _tracing
from .._errors import FencedOutError, LimitExceededError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._offload import offload
from ..loop._driver import Driver
from ..loop._effects import CallModel, ToolInvocation
from ..loop._options import LoopOptions
from ..loop._start import LegStart
from ..messages import ToolCallPart, ToolResultPart
from ..models._base import ModelRequest
from ..runs import (
    TEMPORAL,
    RunPatch,
    RuntimeRun,
    ToolIntent,
    definition_matches,
    mismatch_reason,
    of_engine,
    unclaimable_by_definition,
    unserved_reason,
)
from ..runtime import _lifecycle as lifecycle
from ..runtime._agent import Agent
from ..runtime._executor import RunContext, RuntimeDriver
from ..runtime._legs import first_messages
from ..runtime._legs_outside import (
    claim_pending,
    loop_options_at,
    write_outbox,
    write_started,
)
from ..runtime._outcome import (
    ModelAttemptFailed,
    NeedsAttention,
    RunTimedOut,
    after_model_error,
    record_changes,
)
from ..runtime._seam import RunServices
from ._drain import draining, handed_back
from ._driver import (
    DEFINITION_MISMATCH,
    LIMIT_EXCEEDED,
    MODEL_ATTEMPT_FAILED,
    NEEDS_ATTENTION,
    TIMEOUT,
)
from ._prefetch import early_calls
from ._routing import definition_key
from ._step import StepDriver
from ._tracing import begin_leg_span, end_leg_span, joined

__all__ = ["BoundActivities", "RunActivities", "calls_in_flight", "heartbeats"]


@contextlib.asynccontextmanager
async def heartbeats(
    period: float = 0.5, *, run_id: str | None = None, call: str | None = None
) -> AsyncIterator[None]:
    """Heartbeat while a model or tool runs, so a dead worker is noticed quickly.

    A stopping worker lets the call finish for its graceful shutdown timeout
    (``--drain-seconds``); one still running then is cancelled, and logged as
    cut (``run_id``'s ``call``): the activity's retry finds it interrupted.
    """

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(period)

    task = asyncio.get_running_loop().create_task(beat())
    key = object()
    if run_id is not None:
        _IN_FLIGHT[key] = (run_id, call or "activity")
    try:
        yield
    except asyncio.CancelledError:
        if run_id is not None and activity.is_worker_shutdown():
            lifecycle.cut(run_id, call or "activity")
        raise
    finally:
        _IN_FLIGHT.pop(key, None)
        task.cancel()


_IN_FLIGHT: dict[object, tuple[str, str]] = {}


def calls_in_flight() -> list[tuple[str, str]]:
    """The model and tool calls this process's activities are running, as (run id, label)."""
    return list(_IN_FLIGHT.values())


def _final(error: Exception) -> ApplicationError:
    """A run-ending limit or timeout, as Temporal sees it (never retried)."""
    kind = TIMEOUT if isinstance(error, RunTimedOut) else LIMIT_EXCEEDED
    return ApplicationError(str(error), type=kind, non_retryable=True)


class BoundActivities:
    """Activities bound to one worker's runtime (store, agents, tasks, signer)."""

    def __init__(self, runtime: RunServices) -> None:
        self.runtime = runtime

    def all(self) -> list[Callable[..., Any]]:
        """Every activity the class defines, bound to this runtime (for the worker)."""
        return [
            getattr(self, name)
            for name in dir(type(self))
            if hasattr(getattr(type(self), name), "__temporal_activity_definition")
        ]

    def _record(self, run_id: str) -> RuntimeRun:
        record = self.runtime.runtime_store.rt_get(run_id)
        if record is None:
            raise ApplicationError(f"no run {run_id!r} in the store", non_retryable=True)
        return record


class RunActivities(BoundActivities):
    """The run workflow's activities."""

    def _agent(self, record: RuntimeRun) -> Agent:
        agent = self.runtime.registry.get(record.agent_id, record.agent_version)
        # Any worker of the queue may pick an activity up: one that does not serve
        # the run's (agent, version), or serves another definition of it, hands it
        # back untouched, naming the run's definition; the workflow schedules it
        # again on that definition's queue (.routing).
        if agent is None:
            raise ApplicationError(
                unserved_reason(record),
                *definition_key(record),
                type=DEFINITION_MISMATCH,
                non_retryable=True,
            )
        definitions = self.runtime.registry.definitions()
        if definition_matches(record, definitions) is False:
            raise ApplicationError(
                mismatch_reason(record, definitions),
                *definition_key(record),
                type=DEFINITION_MISMATCH,
                non_retryable=True,
            )
        return agent

    def _wait_elsewhere(self, record: RuntimeRun) -> dict[str, Any]:
        """Leave a run this worker must not execute (another version or definition); say why.

        The waiting reason is recorded once (not at every hand-on), fenced: a
        worker that took the run meanwhile keeps its claim.
        """
        definitions = self.runtime.registry.definitions()
        waiting = unclaimable_by_definition(
            record, self.runtime.now(), definitions, engine=TEMPORAL
        )
        if waiting is not None:
            with contextlib.suppress(FencedOutError):  # another worker took it meanwhile
                self.runtime.runtime_store.rt_update(
                    record.run_id,
                    RunPatch(waiting_reason=waiting.waiting_reason),
                    fence=record.fence,
                )
        if definition_matches(record, definitions) is None:
            return {"elsewhere": unserved_reason(record)}
        return {"elsewhere": mismatch_reason(record, definitions)}

    def _options(self, agent: Agent, path: list[str], record: RuntimeRun) -> LoopOptions:
        """The options of the loop at ``path``; a missing sub-agent fails the activity for good."""
        try:
            return loop_options_at(self.runtime, agent, path, record)
        except LookupError as exc:
            raise ApplicationError(str(exc), non_retryable=True) from exc

    @activity.defn(name="nbdurable.begin_leg")
    async def begin_leg(self, run_id: str) -> dict[str, Any] | None:
        """Take a pending run (a fenced compare-and-set to running); None when not pending.

        Returns the record, the latest checkpoint and, for a first leg, the
        messages it starts from; or ``{"final": state}`` when the run is
        finished (a resume that raced with the workflow's end) or its deadline
        passed before the leg began; or ``{"elsewhere": reason}`` (the run
        untouched, its waiting reason recorded) when this worker does not serve
        the run's ``(agent, version)`` or its definition of it is not the one
        the run was submitted under. None too for a run of another engine. Run again
        after a crash, it recognises its own claim.
        """
        runtime = self.runtime
        record = await offload(self._record, run_id)
        owner = f"temporal:{activity.info().workflow_id}"
        if not record.finished and not of_engine(record, TEMPORAL):
            runtime.deps.logger.warning(
                "nbdurable: run %s was submitted to the %s engine: its workflow leaves it alone",
                run_id,
                record.engine,
            )
            return None  # the workflow parks; it resumes only if the run is moved back here
        if (
            not record.finished
            and definition_matches(record, runtime.registry.definitions()) is not True
        ):
            return await offload(self._wait_elsewhere, record)
        retried = record.retried
        if record.state == "pending":
            claimed = await claim_pending(runtime, record, owner)
            if claimed is None:
                return {"final": "failed"}
            record = claimed
        elif record.finished:
            return {"final": record.state}  # retried or cancelled since: nothing left to run
        elif record.state != "running" or record.lease_owner != owner:
            return None  # a duplicate resume: another leg decided already
        checkpoint = await offload(runtime.store.load, run_id)
        messages: list[Any] = []
        if checkpoint is None:
            messages = [m.model_dump(mode="json") for m in await first_messages(runtime, record)]
        await write_started(self.runtime, run_id, checkpoint, retried=retried)
        if _tracing.HOOKS is not None:
            self._trace_leg(record, checkpoint)
        return {
            "record": record.model_dump(mode="json"),
            "checkpoint": None if checkpoint is None else checkpoint.model_dump(mode="json"),
            "messages": messages,
        }

    def _trace_leg(self, record: RuntimeRun, checkpoint: AgentCheckpoint | None) -> None:
        """Start the leg's span and store its context with the run (for the activities)."""
        agent = self.runtime.registry.get(record.agent_id, record.agent_version)
        stored = begin_leg_span(record, agent, checkpoint)
        if stored is None:
            return
        try:
            self.runtime.runtime_store.rt_update(
                record.run_id, RunPatch(trace_context=stored), fence=record.fence
            )
        except Exception as exc:  # a trace is never worth a run: the leg goes on untracked
            self.runtime.deps.logger.warning(
                "nbdurable: storing the trace context of %s failed: %r", record.run_id, exc
            )

    @activity.defn(name="nbdurable.begin_child")
    async def begin_child(self, run_id: str, log: str) -> dict[str, Any]:
        """A sub-agent starts or resumes: its checkpoint (under ``log``), if any."""
        checkpoint = await offload(self.runtime.store.load, log)
        await write_started(self.runtime, log, checkpoint)
        return {"checkpoint": None if checkpoint is None else checkpoint.model_dump(mode="json")}

    @activity.defn(name="nbdurable.mirror")
    async def mirror(self, entries: list[dict[str, Any]]) -> None:
        """Write the workflow's outbox: stream parts' events and checkpoints, in order."""
        await write_outbox(self.runtime, entries)

    @activity.defn(name="nbdurable.call_model")
    async def call_model(
        self, scope: dict[str, Any], step_index: int, request: dict[str, Any]
    ) -> str:
        """One model attempt, its deltas and attempt events persisted; the response's JSON.

        A response journaled for the step (a crash or a pause during its tools)
        is reused, not asked again. A failed attempt that the run's retry policy
        retries leaves the run in ``retry_wait`` and tells the workflow how long
        to wait (the error's details).
        """
        text, _, _ = await self._model(scope, step_index, request, early=False)
        return text

    @activity.defn(name="nbdurable.model_step")
    async def model_step(
        self, scope: dict[str, Any], step_index: int, request: dict[str, Any]
    ) -> dict[str, Any]:
        """The model attempt of ``call_model``, then the step's calls that run unattended.

        When every call of the response would run with no human in the loop
        (``safe`` recovery, no approval gate, see :mod:`nbdurable.temporal._prefetch`),
        they run here, each under its intent record, after the response is
        journaled: a retry of this activity reuses the response and never asks
        the model again. Only a first attempt runs calls: a retried one (its
        worker was lost) returns the journaled response and leaves the calls to
        ``run_tool`` activities, which find the completed ones' results and give
        an interrupted one the run's recovery policy. Returns the response's
        JSON (``response``), the results by call id (``results``) and whether
        the model answered, the journal lacking the step (``answered``).

        ``scope`` may carry, from a workflow that carries its completed intents
        (``carries``), the previous step's (``completed``: written with this
        activity's first commit) and ``journal: False`` (the leg's journal
        lacks this step); see :class:`~nbdurable.temporal._step.StepDriver`.
        """
        early = activity.info().attempt == 1 and not scope["path"]
        text, done, answered = await self._model(scope, step_index, request, early=early)
        results = {key: part.model_dump(mode="json") for key, part in done.items()}
        # ``answered``: the model answered (the journal lacked the step), so later
        # steps of the leg need not read it (a workflow of this version tells them).
        return {"response": text, "results": results, "answered": answered}

    def _tool_driver(self, agent: Agent, options: LoopOptions, record: RuntimeRun) -> Driver:
        """The driver that runs the run's own agent's calls under their intent records."""
        intents = {i.tool_call_id: i for i in self.runtime.runtime_store.rt_intents(record.run_id)}
        context = RunContext(runtime=self.runtime, agent=agent, record=record, intents=intents)
        start = LegStart(messages=(), run_id=record.run_id, durable=True)
        return RuntimeDriver(options, start, context=context)

    async def _model(
        self, scope: dict[str, Any], step_index: int, request: dict[str, Any], *, early: bool
    ) -> tuple[str, dict[str, ToolResultPart], bool]:
        """The model attempt (and, ``early``, the step's unattended calls).

        Returns the response's JSON, the calls' results and whether the model
        was asked (not the journal).
        """
        if draining():  # taken as the worker began to drain: another worker asks the model
            raise handed_back()
        runtime = self.runtime
        record = await offload(self._record, scope["run_id"])
        agent = self._agent(record)
        options = self._options(agent, scope["path"], record)
        effect = CallModel(step_index, options.model, ModelRequest.model_validate(request))
        log = scope["log"]
        if scope["path"]:  # a sub-agent's call: no journal, an error is the parent's tool result
            start = LegStart(messages=(), run_id=log, durable=log is not None)
            store = runtime.store if log is not None else None
            driver = Driver(options, start, store=store, streaming=record.stream)
            try:
                with joined(record):
                    label = f"sub-agent model call of step {step_index}"
                    async with heartbeats(run_id=record.run_id, call=label):
                        response = await driver.call_model(effect)
            except Exception as exc:
                message = f"{type(exc).__name__}: {exc}"
                raise ApplicationError(message, type="model_error", non_retryable=True) from None
            finally:
                if driver.events is not None:
                    await driver.events.close()
            return response.model_dump_json(), {}, True
        if record.state == "retry_wait":
            running = RunPatch(state="running", next_attempt_at=None)
            record = await offload(runtime.set_state, record.run_id, running)
            lifecycle.claimed(record, resumed=False)  # the retried attempt starts a leg
        context = RunContext(runtime=runtime, agent=agent, record=record)
        lacks = scope.get("journal") is False
        step = StepDriver(
            options,
            context,
            heartbeats,
            flush_interval=runtime.flush_interval,
            carried=[ToolIntent.model_validate(i) for i in scope.get("completed", ())],
            carries=bool(scope.get("carries")),
            # An earlier call of this leg was answered, so the journal lacks this
            # step (legs journal in order); a retried attempt may have journaled it.
            journal_lacks_from=step_index if lacks and activity.info().attempt == 1 else None,
        )
        results: dict[str, ToolResultPart] = {}
        try:
            with joined(record):
                label = f"model call of step {step_index}"
                async with heartbeats(run_id=record.run_id, call=label):
                    response = await step.call_model(effect)
                answered = step.answered_now
                if early:  # the calls run after the response is journaled (with the first)
                    invocations = early_calls(agent, options, response)
                    limit = options.max_tool_concurrency
                    results = await step.run_early(invocations, step_index, limit)
            await step.finish()
        except ModelAttemptFailed as failed:
            raise await offload(self._model_failure, context, failed) from None
        except (LimitExceededError, RunTimedOut) as exc:
            raise _final(exc) from None
        except FencedOutError as exc:
            raise ApplicationError(str(exc), type="error", non_retryable=True) from None
        finally:
            if step.events is not None:
                await step.events.close()
        return response.model_dump_json(), results, answered

    def _model_failure(self, context: RunContext, failed: ModelAttemptFailed) -> ApplicationError:
        """The attempt's error for the workflow: retried after a delay (``retry_wait``) or final.

        The embedded engine's rule: the record counts attempts (a lost worker's
        attempt counts too); the run's saved policy and the agent's ``retry_if``
        decide.
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
        error = outcome.error or ""
        if outcome.kind != "retry_wait":
            return ApplicationError(error, type=outcome.reason, non_retryable=True)
        assert outcome.next_attempt_at is not None
        delay = outcome.next_attempt_at - now
        self.runtime.set_state(record.run_id, record_changes(outcome))
        lifecycle.left(record, "retry_wait", outcome.reason)
        return ApplicationError(error, delay, type=MODEL_ATTEMPT_FAILED, non_retryable=True)

    @activity.defn(name="nbdurable.run_tool")
    async def run_tool(
        self, scope: dict[str, Any], step_index: int, call: dict[str, Any]
    ) -> dict[str, Any]:
        """Run one tool call under its intent record; the tool result part's JSON.

        A call whose intent completed returns that result (never runs twice). A
        ``manual`` call found started (it was interrupted) runs again only when
        ``retry()`` allowed it; otherwise the run needs attention.
        """
        if draining():  # a manual call started now would be cut into needs_attention
            raise handed_back()
        record = await offload(self._record, scope["run_id"])
        agent = self._agent(record)
        options = self._options(agent, scope["path"], record)
        part = ToolCallPart.model_validate(call)
        tool = options.tools.get(part.tool_name)
        if tool is None:
            raise ApplicationError(f"no tool {part.tool_name!r}", type="error", non_retryable=True)
        invocation = ToolInvocation(tool=tool, call=part, kwargs=tool.validate_args(part.args))
        driver: Driver
        if scope["path"]:
            log = scope["log"]
            driver = Driver(options, LegStart(messages=(), run_id=log, durable=log is not None))
        else:
            driver = await offload(self._tool_driver, agent, options, record)
        try:
            with joined(record):
                label = f"tool {part.tool_name!r} (call {part.tool_call_id})"
                async with heartbeats(run_id=record.run_id, call=label):
                    outcome = await driver.run_tool(invocation, step_index)
        except NeedsAttention as exc:
            raise ApplicationError(str(exc), type=NEEDS_ATTENTION, non_retryable=True) from None
        except (LimitExceededError, RunTimedOut) as exc:
            raise _final(exc) from None
        except FencedOutError as exc:
            raise ApplicationError(str(exc), type="error", non_retryable=True) from None
        result = outcome.result or ToolResultPart(
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            result="The tool gave no result.",
            is_error=True,
        )
        return result.model_dump(mode="json")

    @activity.defn(name="nbdurable.finish_leg")
    async def finish_leg(
        self,
        run_id: str,
        entries: list[dict[str, Any]],
        changes: dict[str, Any],
        fence: int | None = None,
    ) -> None:
        """Write the leg's outbox and its run-state change.

        ``entries`` may hold completed intents (``{"log", "intent"}``) the
        workflow carried from the leg's last step, which no ``model_step`` wrote.
        A run finished meanwhile (cancelled from a client) keeps its state. With
        the leg's ``fence``, a leg whose claim is gone (its end written already,
        then the run retried, decided or claimed again) writes nothing: this
        local activity runs a second time when its workflow task is retried.
        """
        if fence is not None:
            current = await offload(self._record, run_id)
            owner = f"temporal:{activity.info().workflow_id}"
            if current.fence != fence or current.lease_owner != owner:
                return
        intents = [ToolIntent.model_validate(e["intent"]) for e in entries if "intent" in e]
        entries = [e for e in entries if "intent" not in e]
        finish = await write_outbox(self.runtime, entries, run_log=run_id)
        if _tracing.HOOKS is not None:
            checkpoint = await offload(self.runtime.store.load, run_id)
            end_leg_span(run_id, changes, checkpoint)
        record = await offload(self._record, run_id)
        mine = record.fence if fence is None else fence
        for intent in intents:  # the last step's early calls (no model_step came after them)
            with contextlib.suppress(FencedOutError):  # the run has moved on: not ours to write
                await offload(self.runtime.runtime_store.rt_intent, intent, fence=mine)
        if record.finished:
            return
        patch = RunPatch(lease_owner=None) | RunPatch(**changes)  # a misspelt field: TypeError
        await offload(self.runtime.set_state, run_id, patch, finish=finish)
        if patch.state:
            lifecycle.left(record, patch.state, patch.reason or None)
