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
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .. import tracing as _tracing
from ..durable._checkpoint import AgentCheckpoint
from ..durable._offload import offload
from ..loop._options import LoopOptions
from ..messages import ToolResultPart
from ..models._base import ModelRequest, ModelResponse
from ..runs import (
    TEMPORAL,
    RunPatch,
    RuntimeRun,
    ToolIntent,
    definition_matches,
    mismatch_reason,
    unserved_reason,
)
from ..runtime import _lifecycle as lifecycle
from ..runtime._agent import Agent
from ..runtime._executor import RunContext, RuntimeDriver
from ..runtime._leg_steps import BoundSteps, LegSteps, StepDecided
from ._drain import draining, handed_back
from ._driver import DEFINITION_MISMATCH, MODEL_ATTEMPT_FAILED
from ._prefetch import early_calls
from ._routing import definition_key
from ._step import StepDriver
from ._tracing import begin_leg_span, end_leg_span, joined

__all__ = ["BoundActivities", "RunActivities", "calls_in_flight", "decisions", "heartbeats"]


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


@contextlib.contextmanager
def decisions() -> Iterator[None]:
    """A step's decision as Temporal sees it: an error never retried.

    A retry's delay is in its details, for the workflow's durable sleep.
    """
    try:
        yield
    except StepDecided as decided:
        if decided.retry_after is not None:
            delay = decided.retry_after
            raise ApplicationError(
                decided.message, delay, type=MODEL_ATTEMPT_FAILED, non_retryable=True
            ) from None
        raise ApplicationError(decided.message, type=decided.kind, non_retryable=True) from None


class BoundActivities(BoundSteps):
    """Activities bound to one worker's runtime (store, agents, tasks, signer)."""

    engine = TEMPORAL

    def all(self) -> list[Callable[..., Any]]:
        """Every activity the class defines, bound to this runtime (for the worker)."""
        return [
            getattr(self, name)
            for name in dir(type(self))
            if hasattr(getattr(type(self), name), "__temporal_activity_definition")
        ]

    def missing(self, message: str) -> Exception:
        """Gone for good: the activity fails, never retried."""
        return ApplicationError(message, non_retryable=True)

    def owner(self, run_id: str) -> str:
        """The run's workflow (its id is the run's)."""
        return f"temporal:{activity.info().workflow_id}"


class RunActivities(BoundActivities, LegSteps):
    """The run workflow's activities."""

    leaves = "its workflow leaves it alone"

    def agent_of(self, record: RuntimeRun) -> Agent:
        """The run's agent; a hand-back when this worker serves another definition or none."""
        agent = self.runtime.registry.get(record.agent_id, record.agent_version)
        # Any worker of the queue may pick an activity up: one that does not serve
        # the run's (agent, version), or serves another definition of it, hands it
        # back untouched, naming the run's definition; the workflow schedules it
        # again on that definition's queue (.routing).
        definitions = self.runtime.registry.definitions()
        if agent is None or definition_matches(record, definitions) is False:
            reason = (
                unserved_reason(record) if agent is None else mismatch_reason(record, definitions)
            )
            raise ApplicationError(
                reason, *definition_key(record), type=DEFINITION_MISMATCH, non_retryable=True
            )
        return agent

    @contextlib.asynccontextmanager
    async def calling(self, record: RuntimeRun, label: str) -> AsyncIterator[None]:
        """Under the run's leg span, heartbeating."""
        with joined(record):
            async with heartbeats(run_id=record.run_id, call=label):
                yield

    def leg_began(self, record: RuntimeRun, checkpoint: AgentCheckpoint | None) -> None:
        """Start the leg's span and store its context with the run (for the activities)."""
        if _tracing.HOOKS is None:
            return
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

    async def leg_ending(self, run_id: str, changes: dict[str, Any]) -> None:
        """End the leg's span."""
        if _tracing.HOOKS is not None:
            checkpoint = await offload(self.runtime.store.load, run_id)
            end_leg_span(run_id, changes, checkpoint)

    def model_driver(
        self, options: LoopOptions, context: RunContext, scope: dict[str, Any], step_index: int
    ) -> RuntimeDriver:
        """The step's driver: its writes share commits (:class:`StepDriver`)."""
        lacks = scope.get("journal") is False
        return StepDriver(
            options,
            context,
            heartbeats,
            flush_interval=self.runtime.flush_interval,
            carried=[ToolIntent.model_validate(i) for i in scope.get("completed", ())],
            carries=bool(scope.get("carries")),
            # An earlier call of this leg was answered, so the journal lacks this
            # step (legs journal in order); a retried attempt may have journaled it.
            journal_lacks_from=step_index if lacks and activity.info().attempt == 1 else None,
        )

    async def model_answered(
        self, driver: RuntimeDriver, response: ModelResponse, step_index: int, early: bool
    ) -> tuple[dict[str, ToolResultPart], bool]:
        """The step's unattended calls run once the response is journaled (with the first)."""
        assert isinstance(driver, StepDriver)
        answered = driver.answered_now
        results: dict[str, ToolResultPart] = {}
        if early:
            with joined(driver.context.record):
                options = driver.options
                invocations = early_calls(driver.context.agent, options, response)
                limit = options.max_tool_concurrency
                results = await driver.run_early(invocations, step_index, limit)
        await driver.finish()
        return results, answered

    @activity.defn(name="nbdurable.begin_leg")
    async def begin_leg(self, run_id: str) -> dict[str, Any] | None:
        """Take a pending run (:meth:`~nbdurable.runtime._leg_steps.LegSteps.take`).

        None for a run of another engine: the workflow parks; it resumes only
        if the run is moved back here.
        """
        return await self.take(run_id)

    @activity.defn(name="nbdurable.begin_child")
    async def begin_child(self, run_id: str, log: str) -> dict[str, Any]:
        """A sub-agent starts or resumes: its checkpoint (under ``log``), if any."""
        return await self.start_child(log)

    @activity.defn(name="nbdurable.mirror")
    async def mirror(self, entries: list[dict[str, Any]]) -> None:
        """Write the workflow's outbox: stream parts' events and checkpoints, in order."""
        await self.write(entries)

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
        response, _, _ = await self._model(scope, step_index, request, early=False)
        return response.model_dump_json()

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
        response, done, answered = await self._model(scope, step_index, request, early=early)
        results = {key: part.model_dump(mode="json") for key, part in done.items()}
        # ``answered``: the model answered (the journal lacked the step), so later
        # steps of the leg need not read it (a workflow of this version tells them).
        return {"response": response.model_dump_json(), "results": results, "answered": answered}

    async def _model(
        self, scope: dict[str, Any], step_index: int, request: dict[str, Any], *, early: bool
    ) -> tuple[ModelResponse, dict[str, ToolResultPart], bool]:
        if draining():  # taken as the worker began to drain: another worker asks the model
            raise handed_back()
        with decisions():
            return await self.ask_model(
                scope, step_index, ModelRequest.model_validate(request), early
            )

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
        with decisions():
            result = await self.call_tool(scope, step_index, call)
        return result.model_dump(mode="json")

    @activity.defn(name="nbdurable.finish_leg")
    async def finish_leg(
        self,
        run_id: str,
        entries: list[dict[str, Any]],
        changes: dict[str, Any],
        fence: int | None = None,
    ) -> None:
        """Write the leg's outbox and its run-state change (:meth:`end_leg`).

        ``entries`` may hold completed intents the workflow carried from the
        leg's last step, which no ``model_step`` wrote. This local activity runs
        a second time when its workflow task is retried: with the leg's
        ``fence``, the second writes nothing.
        """
        await self.end_leg(run_id, entries, changes, fence)
