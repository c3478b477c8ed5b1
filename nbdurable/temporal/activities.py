"""The activities of a run's workflow: every touch of the store, the model and the tools.

Each activity mirrors what it did into the nbdurable store (run records,
checkpoints, events, tool intents, the model journal), so a run executed on
Temporal reads exactly like one the embedded engine executed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from pydantic import TypeAdapter
from temporalio import activity
from temporalio.exceptions import ApplicationError

from .._deps import Deps
from ..durable.checkpoint import AgentCheckpoint
from ..durable.store import maybe_await
from ..events.writer import EventWriter
from ..loop.driver import Driver, build_options
from ..loop.machine import CallModel, LegStart, ToolInvocation
from ..messages import ToolCallPart, ToolResultPart
from ..models.base import ModelRequest, ModelResponse
from ..parts import StreamPart
from ..runtime.agent import Agent
from ..runtime.engine import EmbeddedEngine
from ..runtime.records import RuntimeRun, ToolIntent
from ..runtime.runtime import DurableRuntime

__all__ = ["NEEDS_ATTENTION", "RunActivities"]

NEEDS_ATTENTION = "needs_attention"
"""ApplicationError type of a tool call that needs a human (manual recovery)."""

_PARTS: TypeAdapter[Any] = TypeAdapter(StreamPart)


@contextlib.asynccontextmanager
async def _heartbeats(period: float = 0.5) -> AsyncIterator[None]:
    """Heartbeat while a model or tool runs, so a dead worker is noticed quickly."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(period)

    task = asyncio.get_running_loop().create_task(beat())
    try:
        yield
    finally:
        task.cancel()


class RunActivities:
    """The activities, bound to one worker's runtime (store, agents, signer)."""

    def __init__(self, runtime: DurableRuntime) -> None:
        self.runtime = runtime
        self._legs = EmbeddedEngine()  # for the prompt and session history of a first leg
        self._legs.runtime = runtime

    def all(self) -> list[Callable[..., Any]]:
        """Every activity of the run workflow, bound to this runtime (for the worker)."""
        return [
            getattr(self, name)
            for name in dir(type(self))
            if hasattr(getattr(type(self), name), "__temporal_activity_definition")
        ]

    def _agent(self, record: RuntimeRun) -> Agent:
        agent = self.runtime.registry.get(record.agent_id, record.agent_version)
        if agent is None:
            raise ApplicationError(
                f"this worker serves no agent {record.agent_id!r} version {record.agent_version!r}",
                non_retryable=True,
            )
        return agent

    def _record(self, run_id: str) -> RuntimeRun:
        record = self.runtime.runtime_store.rt_get(run_id)
        if record is None:
            raise ApplicationError(f"no run {run_id!r} in the store", non_retryable=True)
        return record

    def _writer(self, run_id: str, flush_interval: float = 0.0) -> EventWriter:
        return EventWriter(
            self.runtime.store, run_id, deps=self.runtime.deps, flush_interval=flush_interval
        )

    @activity.defn(name="nbdurable.begin_leg")
    async def begin_leg(self, run_id: str) -> dict[str, Any] | None:
        """Take a pending run (a fenced compare-and-set to running); None when not pending.

        Returns the record, the latest checkpoint and, for a first leg, the
        messages it starts from.
        """
        runtime = self.runtime
        record = self._record(run_id)
        if record.state != "pending":
            return None  # a duplicate resume: another leg decided already
        record = runtime.runtime_store.rt_update(
            run_id,
            {
                "state": "running",
                "fence": record.fence + 1,
                "lease_owner": f"temporal:{activity.info().workflow_id}",
                "updated_at": runtime.now(),
            },
            fence=record.fence,
        )
        runtime.state_event(record)
        checkpoint = await maybe_await(runtime.store.load(run_id))
        messages: list[Any] = []
        if checkpoint is None:
            history = await self._legs._session_history(record)
            first = self._legs._first_message(record)
            messages = [m.model_dump(mode="json") for m in (*history, first)]
        writer = self._writer(run_id)
        writer.started(
            resumed=checkpoint is not None,
            next_step_index=0 if checkpoint is None else checkpoint.step_index + 1,
        )
        await writer.close()
        return {
            "record": record.model_dump(mode="json"),
            "checkpoint": None if checkpoint is None else checkpoint.model_dump(mode="json"),
            "messages": messages,
        }

    @activity.defn(name="nbdurable.mirror")
    async def mirror(
        self, run_id: str, parts: list[dict[str, Any]], checkpoint: dict[str, Any] | None
    ) -> None:
        """Write the stream parts' events and (atomically with them) a checkpoint."""
        writer = self._writer(run_id)
        for data in parts:
            writer.part(_PARTS.validate_python(data))
        if checkpoint is not None:
            await writer.save_checkpoint(AgentCheckpoint.model_validate(checkpoint))
        await writer.close()

    @activity.defn(name="nbdurable.call_model")
    async def call_model(self, run_id: str, step_index: int, request: dict[str, Any]) -> str:
        """One model attempt, its deltas and attempt events persisted; the response's JSON.

        A response journaled for the step (a crash or a pause during its tools)
        is reused, not asked again. A failed attempt that the run's retry policy
        retries leaves the run in ``retry_wait`` until Temporal retries it.
        """
        runtime = self.runtime
        record = self._record(run_id)
        journaled = runtime.runtime_store.rt_journaled(run_id, step_index)
        if journaled is not None:
            return journaled
        attempt = activity.info().attempt
        if attempt > 1 and record.state == "retry_wait":
            record = runtime.set_state(run_id, state="running", next_attempt_at=None)
        agent = self._agent(record)
        options = build_options(
            model=agent.model,
            tools=agent.tool_map,
            instructions=agent.instructions,
            max_steps=record.max_steps,
            stop_when=None,
            prepare_step=None,
            max_tool_concurrency=None,
            approve_tool_call=None,
            approval_responses=None,
            approval_signer=None,
            approval_max_age_ms=None,
            deps=runtime.deps,
            output_type=agent.output_type,
        )
        driver = Driver(
            options,
            LegStart(messages=(), run_id=run_id, durable=True),
            store=runtime.store,
            streaming=record.stream,
            flush_interval=runtime.flush_interval,
        )
        effect = CallModel(step_index, agent.model, ModelRequest.model_validate(request))
        try:
            async with _heartbeats():
                response: ModelResponse = await driver._call_model(effect)
        except Exception as exc:
            if driver.events is not None:
                await driver.events.close()
            raise self._model_failure(record, agent, exc, attempt) from None
        if driver.events is not None:
            await driver.events.close()
        text = response.model_dump_json()
        runtime.runtime_store.rt_journal(run_id, step_index, text, fence=record.fence)
        runtime.runtime_store.rt_update(run_id, {"operations": record.operations + 1})
        return text

    def _model_failure(
        self, record: RuntimeRun, agent: Agent, error: Exception, attempt: int
    ) -> ApplicationError:
        """The attempt's error for Temporal: retryable (``retry_wait``) or final."""
        message = f"{type(error).__name__}: {error}"
        saved = record.retry_policy
        retry_if = agent.retry_if
        if saved is None or (retry_if is not None and not retry_if(error)):
            return ApplicationError(message, type="model_error", non_retryable=True)
        max_attempts = int(saved.get("max_attempts", 1))
        if attempt >= max_attempts:
            return ApplicationError(message, type="model_retries_exhausted", non_retryable=True)
        delay = min(int(saved["initial_delay_ms"]) * 2 ** (attempt - 1), int(saved["max_delay_ms"]))
        self.runtime.set_state(
            record.run_id,
            state="retry_wait",
            error=message,
            model_attempts=attempt,
            next_attempt_at=self.runtime.now() + delay,
        )
        return ApplicationError(message, type="model_attempt_failed")

    @activity.defn(name="nbdurable.run_tool")
    async def run_tool(self, run_id: str, step_index: int, call: dict[str, Any]) -> dict[str, Any]:
        """Run one tool call under its intent record; the tool result part's JSON.

        A call whose intent completed returns that result (never runs twice). A
        ``manual`` call found started (it was interrupted) runs again only when
        ``retry()`` allowed it; otherwise the run needs attention.
        """
        runtime = self.runtime
        store = runtime.runtime_store
        record = self._record(run_id)
        agent = self._agent(record)
        part = ToolCallPart.model_validate(call)
        prior = {i.tool_call_id: i for i in store.rt_intents(run_id)}.get(part.tool_call_id)
        if prior is not None and prior.state == "completed" and prior.result is not None:
            return prior.result
        if prior is not None and agent.recovery_of(part.tool_name) == "manual":
            if part.tool_call_id not in record.rerun_tool_calls:
                raise ApplicationError(
                    f"tool {part.tool_name!r} (call {part.tool_call_id}) was interrupted and "
                    "its recovery is manual: retry() runs it again, deny() settles it",
                    type=NEEDS_ATTENTION,
                    non_retryable=True,
                )
            remaining = [c for c in record.rerun_tool_calls if c != part.tool_call_id]
            record = store.rt_update(run_id, {"rerun_tool_calls": remaining})
        tool = agent.tool_map[part.tool_name]
        invocation = ToolInvocation(tool=tool, call=part, kwargs=tool.validate_args(part.args))
        intent = ToolIntent(
            run_id=run_id,
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            step_index=step_index,
            state="started",
        )
        store.rt_intent(intent, fence=record.fence)
        store.rt_update(run_id, {"operations": record.operations + 1})
        driver = Driver(
            build_options(
                model=agent.model,
                tools=agent.tool_map,
                instructions=None,
                max_steps=record.max_steps,
                stop_when=None,
                prepare_step=None,
                max_tool_concurrency=None,
                approve_tool_call=None,
                approval_responses=None,
                approval_signer=None,
                approval_max_age_ms=None,
                deps=Deps(),
            ),
            LegStart(messages=(), run_id=run_id, durable=True),
        )
        async with _heartbeats():
            outcome = await driver._run_tool(invocation, step_index)
        result = outcome.result or ToolResultPart(
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            result="The tool gave no result.",
            is_error=True,
        )
        data = result.model_dump(mode="json")
        store.rt_intent(
            intent.model_copy(update={"state": "completed", "result": data}), fence=record.fence
        )
        return data

    @activity.defn(name="nbdurable.finish_leg")
    async def finish_leg(
        self, run_id: str, parts: list[dict[str, Any]], changes: dict[str, Any]
    ) -> None:
        """Write the leg's last events and its run-state change.

        A run finished meanwhile (cancelled from a client) keeps its state.
        """
        await self.mirror(run_id, parts, None)
        record = self._record(run_id)
        if record.finished and changes.get("state") != "cancelled":
            return
        if record.finished:
            return
        changes.setdefault("lease_owner", None)
        self.runtime.set_state(run_id, **changes)
