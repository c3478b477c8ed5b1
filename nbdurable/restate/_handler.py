"""A run's leg as a Restate handler: the same pure step machine, its effects journaled steps.

One virtual object per agent definition (:func:`~nbdurable.restate._config.run_service`),
keyed by run id, so one leg of a run executes at a time, on an endpoint serving
its definition. The handler holds no I/O of its own: the machine runs in it
(deterministic given the leg's start and its steps' results), and every effect
with I/O is a ``ctx.run`` step of :class:`~nbdurable.restate._steps.LegSteps`
(the model call, each tool call, the writes of checkpoints and events, the end).
Stream parts and checkpoints collect in an *outbox* that the next step writes
first, as on Temporal. An endpoint that dies mid-leg: Restate invokes the
handler again (on the endpoint its deployment now names), which replays the
finished steps from the journal and runs the unfinished one, whose intent
record in the store decides (``safe`` and ``idempotent`` run again, ``manual``
needs attention).

A leg ends completed, failed, waiting for approvals or needing attention; a
verdict makes the record pending again and the dispatcher invokes the next leg
(a new invocation: the verdicts are in the record, which the leg's first step
reads). A model attempt the run's policy retries is a durable sleep
(``ctx.sleep``). A run's ``timeout`` bounds each leg; a cancelled invocation
ends the leg cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import restate
from restate.exceptions import TerminalError

from .._deps import Deps
from .._errors import LimitExceededError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._stored import validate_stored
from ..loop._effects import CallModel, ToolInvocation, ToolOutcome
from ..loop._machine import LegStart, leg_start_from_checkpoint
from ..loop._subagent import AgentTool
from ..messages import Message, ToolApprovalResponse, ToolResultPart
from ..models._base import ModelResponse
from ..parts import StreamPart
from ..runs import RuntimeRun
from ..runtime._legs import leg_options
from ..runtime._outbox_driver import OutboxDriver, SubAgentFailed
from ..runtime._outcome import (
    LegEnded,
    LegFailed,
    LegOutcome,
    NeedsAttention,
    ended_by,
    leg_result,
    record_changes,
)
from ..runtime._seam import RunServices
from ._config import RestateConfig
from ._steps import LegSteps

__all__ = [
    "ELSEWHERE",
    "endpoint_runtime",
    "in_flight",
    "leg",
    "run_objects",
    "set_endpoint_runtime",
    "stop_taking_steps",
]

ELSEWHERE = "elsewhere"
"""What a leg returns when this endpoint does not serve the run's definition."""

_RUNTIME: list[RunServices] = []


def set_endpoint_runtime(runtime: RunServices) -> None:
    """Make ``runtime`` the one this process's handlers run legs under."""
    _RUNTIME[:] = [runtime]


def endpoint_runtime() -> RunServices:
    """The runtime this process's handlers run under.

    Raises:
        RuntimeError: No endpoint was set up in this process.
    """
    if not _RUNTIME:
        raise RuntimeError("no nbdurable Restate endpoint runs in this process")
    return _RUNTIME[0]


_IN_FLIGHT: dict[object, tuple[str, str]] = {}
_STOPPING: list[bool] = []


def stop_taking_steps() -> None:
    """From now on, legs of this process start no step (a drain)."""
    _STOPPING[:] = [True]


def in_flight() -> list[tuple[str, str]]:
    """The steps this process runs now, as (run id, label)."""
    return list(_IN_FLIGHT.values())


async def step(
    ctx: restate.Context, run_id: str, name: str, body: Callable[[], Awaitable[Any]]
) -> Any:
    """One journaled step: ``body`` runs once; replayed, its journaled result is returned.

    Restate retries a body that raises (a store outage, a lost endpoint) until it
    answers: what a step decides is in its answer. A draining endpoint starts none.
    """
    if _STOPPING:
        # A draining endpoint starts no step: the leg waits here until the process
        # exits, and Restate, its connection gone, invokes it again (the journal
        # holds every step so far) where the deployment then points.
        await asyncio.Event().wait()

    async def tracked() -> Any:
        key = object()
        _IN_FLIGHT[key] = (run_id, name)
        try:
            return await body()
        finally:
            _IN_FLIGHT.pop(key, None)

    return await ctx.run_typed(name, tracked, restate.RunOptions(type_hint=object))


class _LegClock:
    """The leg's time, epoch ms: its first step's (deterministic on replay)."""

    def __init__(self, now: int) -> None:
        self._now = now

    def now(self) -> int:
        return self._now


@dataclass(frozen=True)
class _Leg:
    """What a leg's steps need: its Restate context, the steps' bodies, its settings."""

    ctx: restate.Context
    steps: LegSteps
    config: RestateConfig


class RestateDriver(OutboxDriver[_Leg]):
    """Drives one agent loop (the run's, or a sub-agent's) with journaled steps.

    Its ``leg`` is the leg's Restate context, its steps' bodies and its settings;
    the other arguments are :class:`OutboxDriver`'s.
    """

    # A cancellation reaching a sub-agent's step ends the run, not the sub-agent.
    run_fates = (*OutboxDriver.run_fates, TerminalError)

    def outbox_value(self, value: StreamPart | AgentCheckpoint) -> Any:
        """The part or checkpoint itself: the outbox never leaves this process.

        A step's body runs where its leg does, and a replayed step does not run.
        A checkpoint's messages are then the very objects of the previous
        checkpoint's, so the store writes only the new ones (a history re-read
        from JSON is new objects: each write was every message of the run again,
        a cost that grew with the run).
        """
        return value

    async def _after_outbox(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """``call``, after the outbox is written: viewers see a step's parts before its work.

        The write is a step of its own: an endpoint lost during ``call`` must not
        write the same parts again when the leg is invoked again.
        """
        entries, self.outbox[:] = list(self.outbox), []
        if entries:
            label = "mirror"

            async def write() -> None:
                await self.leg.steps.write(entries)

            await step(self.leg.ctx, self.run_id, label, write)
        return call

    async def call_model(self, effect: CallModel) -> ModelResponse:
        """The model call as a step; a failed attempt the policy retries after a durable sleep.

        Raises:
            LegFailed: The model's error ends the run (or a limit, or the timeout).
        """
        # the request itself: the body runs in this process, and only its answer is journaled
        request = effect.request
        attempt = 0
        while True:
            body = await self._after_outbox(
                lambda: self.leg.steps.model(self.scope, effect.step_index, request)
            )
            label = f"model call of step {self._where()}{effect.step_index}.{attempt}"
            answer = await step(self.leg.ctx, self.run_id, label, body)
            attempt += 1
            if "retry_after" in answer:
                await self.leg.ctx.sleep(timedelta(milliseconds=max(int(answer["retry_after"]), 0)))
                continue
            if "failed" in answer:
                reason, message = answer["failed"]
                if self.path and reason not in ("limit_exceeded", "timeout"):
                    raise SubAgentFailed(message)  # the parent model gets is_error
                raise LegFailed(reason, message)
            return ModelResponse.model_validate_json(answer["response"])

    def _where(self) -> str:
        return "".join(f"{name}/" for name in self.path)

    async def run_tool(self, invocation: ToolInvocation, step_index: int) -> ToolOutcome:
        """The call as a step; a sub-agent runs in this handler.

        Raises:
            LegFailed: A limit, the timeout or a lost claim ends the run.
            NeedsAttention: An interrupted ``manual`` call needs a human.
        """
        call = invocation.call
        if isinstance(invocation.tool, AgentTool):
            return await self.run_agent_tool(invocation.tool, invocation)
        body = await self._after_outbox(
            lambda: self.leg.steps.tool(self.scope, step_index, call.model_dump(mode="json"))
        )
        label = f"tool {self._where()}{call.tool_name!r} (call {call.tool_call_id})"
        answer = await step(self.leg.ctx, self.run_id, label, body)
        if "needs_attention" in answer:
            raise NeedsAttention(answer["needs_attention"])
        if "failed" in answer:
            raise LegFailed(*answer["failed"])
        return ToolOutcome(result=ToolResultPart.model_validate(answer["result"]))

    async def begin_child(self, log: str) -> dict[str, Any] | None:
        """The sub-agent's ``begin`` step, after the outbox's."""
        body = await self._after_outbox(lambda: self.leg.steps.start_child(log))
        saved = await step(self.leg.ctx, self.run_id, f"begin {log}", body)
        checkpoint: dict[str, Any] | None = saved.get("checkpoint")
        return checkpoint


async def leg(ctx: restate.ObjectContext, config: dict[str, Any]) -> str | None:
    """Run one leg of the run ``ctx.key()``; its state after the leg (None: nothing to run)."""
    run_id = ctx.key()
    runtime = endpoint_runtime()
    steps = LegSteps(runtime)
    settings = RestateConfig(**config)
    outbox: list[dict[str, Any]] = []

    async def finish(outcome: LegOutcome, fence: int | None = None) -> str | None:
        entries, outbox[:] = list(outbox), []
        changes = record_changes(outcome).changes()

        async def body() -> None:
            await steps.end_leg(run_id, entries, changes, fence)

        await step(ctx, run_id, "finish", body)
        return outcome.state

    info = await step(ctx, run_id, "begin", lambda: steps.take(run_id))
    if not info:
        return None
    if info.get("final"):
        return str(info["final"])
    if info.get("elsewhere"):
        return ELSEWHERE
    record = validate_stored(RuntimeRun, info["record"])
    agent = runtime.registry.get(record.agent_id, record.agent_version)
    if agent is None:  # unregistered between the begin step and now (a replay elsewhere)
        error = f"this endpoint serves no agent {record.agent_id!r} v{record.agent_version}"
        return await finish(LegOutcome.failed("error", error), record.fence)
    if info["checkpoint"] is not None:
        start = leg_start_from_checkpoint(AgentCheckpoint.model_validate(info["checkpoint"]))
    else:
        messages = tuple(Message.model_validate(m) for m in info["messages"])
        start = LegStart(messages=messages, run_id=run_id, durable=True)
    verdicts = record.verdicts.values()  # the record's: a leg's input, the same on replay
    options = leg_options(
        agent,
        record,
        approval_responses=[ToolApprovalResponse.model_validate(v) for v in verdicts],
        approval_signer=runtime.signer,
        deps=Deps(clock=_LegClock(int(info["now"])), generate_id=lambda: ctx.uuid().hex),
    )
    driver = RestateDriver(
        options,
        start,
        leg=_Leg(ctx, steps, settings),
        run_id=run_id,
        agent=agent,
        limits=runtime.limits,
        outbox=outbox,
        log=run_id,
    )
    deadline = record.deadline_at
    try:
        if deadline is None:
            result = await driver.run()
        else:
            left = max(deadline - int(info["now"]), 0) / 1000
            result = await asyncio.wait_for(driver.run(), left)
    except TimeoutError:
        return await finish(LegOutcome.timed_out(), record.fence)
    except (LegEnded, LimitExceededError) as exc:
        ended = ended_by(exc)
        assert ended is not None  # both decide the run's outcome
        return await finish(ended, record.fence)
    except TerminalError as exc:
        if exc.status_code != 409:  # not a cancellation: Restate fails the invocation
            raise
        return await finish(LegOutcome.cancelled())
    return await finish(leg_result(result), record.fence)


def run_objects(runtime: RunServices) -> list[restate.VirtualObject]:
    """The virtual objects of an endpoint serving ``runtime``'s agents: one per definition."""
    from ._config import run_service

    names = set()
    for (agent_id, version), found in runtime.registry.definitions().items():
        names.add(run_service(agent_id, version, found.fingerprint))
        names.add(run_service(agent_id, version, None))
    objects = []
    for name in sorted(names):
        obj = restate.VirtualObject(name)
        obj.handler("leg")(leg)
        objects.append(obj)
    return objects
