"""The async driver: runs the step machine's effects with real models, tools and stores."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

from .. import metrics as _metrics
from .. import tracing as _tracing
from .._deps import new_id
from .._errors import LimitExceededError, ModelError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._offload import offload
from ..durable._transient import StoreRetry
from ..durable.store import EventLog, SessionStore, maybe_await
from ..durable.store._events import events_since
from ..events._model import CHECKPOINT_SAVED, MODEL_COMPLETED
from ..events._writer import DEFAULT_FLUSH_INTERVAL, MAX_BUFFERED, EventWriter
from ..messages import Message, ToolApprovalRequest, ToolApprovalResponse, ToolResultPart
from ..models._base import ModelResponse
from ..parts import StreamPart, TextDeltaPart
from ..tools import ToolContext
from ._effects import (
    AskApprover,
    CallModel,
    Effect,
    Emit,
    EvaluateGates,
    ExecuteTools,
    PrepareStepCall,
    SaveCheckpoint,
    ToolInvocation,
    ToolOutcome,
    error_result,
)
from ._machine import AgentMachine
from ._model_stream import DeltaPart, read_stream
from ._options import MAX_AGENT_DEPTH, GenerateTextResult, LoopOptions
from ._start import LegStart
from ._stats import StepTimer
from ._subagent import (
    AgentTool,
    child_options,
    child_run_id,
    child_start,
    subagent_outcome,
    subagent_prompt,
)
from ._trace_hooks import TraceHooks

__all__ = ["Driver", "EmitFn"]

EmitFn = Callable[[StreamPart], None]


def _ignore(_: StreamPart) -> None:
    return None


class Driver(TraceHooks):
    """Runs one leg's machine: answers each effect with real I/O.

    This class is the local engine behind ``generate_text`` and ``stream_chat``,
    and the base of every other engine's driver: the embedded runtime's
    (``nbdurable.runtime._executor.RuntimeDriver``) and the Temporal workflow's
    (``nbdurable.temporal._driver.WorkflowDriver``). An engine changes how an
    effect is performed by overriding its hook; the machine, the effect
    dispatch (:meth:`handle`), step statistics, tracing and metrics stay here.

    The per-effect hooks:

    - :meth:`save_checkpoint` (``SaveCheckpoint``)
    - :meth:`call_model` (``CallModel``), with :meth:`check_delta` on each streamed delta
    - :meth:`run_tool` (each call of ``ExecuteTools``), with :meth:`run_subagent`
      and :meth:`child_driver` for ``agent_tool`` calls
    - :meth:`leg_started` (the leg's ``run_started`` event)

    An error a hook raises ends the leg and propagates out of :meth:`run`
    (an engine maps it to the run's state), except where a hook says otherwise.
    ``Emit``, ``EvaluateGates``, ``AskApprover`` and ``PrepareStepCall`` are
    performed the same way by every engine.

    Args:
        options: The leg's options.
        start: Where the leg starts.
        store: Where checkpoints go (None for a non-durable call).
        emit: Receives every stream part (after it is persisted, when the run
            keeps an event log).
        streaming: Call models with ``stream()`` when they have it.
        flush_interval: Longest wait, in seconds, before buffered events are written.
        reuse_responses: On a resume, reuse a model response the log committed
            for the step in flight (a crash during its tools): the model is not
            asked again and its deltas are not written twice.
        store_retry: Retries saves that fail for a connection-level reason
            before they are logged as failed (None: not retried).
    """

    def __init__(
        self,
        options: LoopOptions,
        start: LegStart,
        *,
        store: SessionStore | None = None,
        emit: EmitFn = _ignore,
        streaming: bool = False,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        reuse_responses: bool = False,
        store_retry: StoreRetry | None = None,
    ) -> None:
        self.options = options
        self.store_retry = store_retry
        self.reuse_responses = reuse_responses
        self._committed: dict[int, ModelResponse] = {}
        self.start = start
        self.store = store
        self.emit = emit
        self.streaming = streaming
        self.flush_interval = flush_interval
        self.events: EventWriter | None = None
        # What ctx.ensure_owner() runs in this leg's tools and its sub-agents' (set by the runtime).
        self.owner_check: Callable[[], None] | None = None
        self._step = StepTimer(options.deps.clock)
        # (the history a SaveCheckpoint carries, the one it extends) while it is handled.
        self._save_hint: tuple[Sequence[Message], Sequence[Message] | None] | None = None
        if isinstance(store, EventLog) and start.run_id is not None:
            self.events = EventWriter(
                store,
                start.run_id,
                deps=options.deps,
                publish=emit,
                flush_interval=flush_interval,
                retry=store_retry,
            )

    traced: ClassVar[bool] = True
    """Whether this driver's legs and effects make spans (not in deterministic workflow code)."""

    def _tracing_hooks(self) -> _tracing.TracingHooks | None:
        return _tracing.HOOKS if self.traced else None

    async def run(self) -> GenerateTextResult:
        """Run the leg to its result. Model errors and cancellation propagate."""
        hooks = self._tracing_hooks()
        if hooks is None:
            return await self._run()
        with hooks.leg(self) as span:
            result = await self._run()
            span.finish(result)
            return result

    async def _run(self) -> GenerateTextResult:
        machine = AgentMachine(self.options, self.start)
        flow = machine.run()
        events = self.events
        try:
            if events is not None:
                await self.leg_started(events)
                if self.reuse_responses:
                    await self._load_committed_responses()
            effect = next(flow)
            while True:
                value = await self.handle(effect)
                effect = flow.send(value)
        except StopIteration as stop:
            result: GenerateTextResult = stop.value
            if events is not None:
                await events.close()
            return result
        except BaseException as exc:
            if events is not None:
                events.error(exc)
                await events.close()
            raise
        finally:
            flow.close()

    async def leg_started(self, events: EventWriter, *, retried: bool = False) -> None:
        """Hook: write the leg's ``run_started`` event and flush it.

        Called once, before the machine's first effect, when the leg keeps an
        event log (:attr:`events` is set). From here on the run is visible to
        subscribers.

        Args:
            events: The leg's event writer.
            retried: The leg is the first after a ``retry()``.
        """
        events.started(
            resumed=self.start.next_step_index > 0,
            next_step_index=self.start.next_step_index,
            retried=retried,
        )
        await events.flush()

    async def handle(self, effect: Effect) -> Any:
        """Perform one effect and return what the machine expects back."""
        if isinstance(effect, Emit):
            if self.events is not None:
                self.events.part(effect.part)
            else:
                self.emit(effect.part)
            return None
        if isinstance(effect, SaveCheckpoint):
            # The hook's signature stays (engines override it): the hint waits here.
            self._save_hint = (effect.checkpoint.messages, effect.extends)
            try:
                await self.save_checkpoint(self._timed(effect.checkpoint))
            finally:
                self._save_hint = None
            return None
        if isinstance(effect, CallModel):
            began = self._step.now()
            try:
                response = await self.call_model(effect)
            except BaseException:
                self._step.model_call(began)
                raise
            self._step.model_call(began, [call.tool_name for call in response.tool_calls])
            return response
        if isinstance(effect, ExecuteTools):
            if self.events is not None:
                await self.events.flush()  # viewers see the calls while the tools run
            began = self._step.now()
            try:
                return await self._execute(effect)
            finally:
                self._step.tools(began)
        if isinstance(effect, EvaluateGates):
            if self.events is not None:
                await self.events.flush()  # gates run user code: the response is committed first
            return [await self._gate(inv) for inv in effect.invocations]
        if isinstance(effect, AskApprover):
            if self.events is not None:
                await self.events.flush()  # the requests are visible while a human decides
            return [await self._ask(request) for request in effect.requests]
        if isinstance(effect, PrepareStepCall):
            assert self.options.prepare_step is not None
            return await maybe_await(self.options.prepare_step(effect.context))
        raise TypeError(f"unknown effect {effect!r}")

    def _timed(self, checkpoint: AgentCheckpoint) -> AgentCheckpoint:
        """The checkpoint with the stats of the work since the previous save attached."""
        stats = self._step.finish()
        if _metrics.HOOKS is not None:
            self.observe_step((int(self.options.deps.clock.now()) - stats.started_at) / 1000)
        return checkpoint.model_copy(update={"stats": stats})

    def observe_step(self, seconds: float) -> None:
        """Hook: a step took ``seconds`` (``nbdurable_step_seconds`` when metrics are on)."""
        meter = _metrics.HOOKS
        if meter is not None:
            meter.step_seconds.labels(self.trace_agent_name() or "-").observe(seconds)

    async def save_checkpoint(self, checkpoint: AgentCheckpoint) -> None:
        """Hook: persist one checkpoint (a ``SaveCheckpoint`` effect).

        Called after every step (status ``running``), when the leg suspends and
        when it completes; the checkpoint already carries the step's
        :class:`~nbdurable.durable._checkpoint.StepStats`. With an event log the
        checkpoint and the buffered events are written in one transaction.
        Saving is best-effort here: a failed save is logged and the leg goes
        on. An engine may raise instead to end the leg (a payload over its
        limit, a passed deadline, a write refused by fencing).

        Args:
            checkpoint: What to save (under ``checkpoint.run_id``).
        """
        if self.store is None:
            return
        extends = self._extends(checkpoint)
        if self.events is not None:
            await self.events.save_checkpoint(checkpoint, extends=extends)  # one transaction
            return
        hint: dict[str, Any] = {"extends": extends} if extends is not None else {}
        try:
            if self.store_retry is None:
                await offload(self.store.save, checkpoint, **hint)
            else:
                save = self.store.save
                await self.store_retry.acall("save a checkpoint", save, checkpoint, **hint)
        except Exception as exc:  # durability is best-effort: never a run-killer
            self.options.deps.logger.error(
                "nbdurable: saving checkpoint %s failed: %r", checkpoint.step_id, exc
            )

    def history_extends(self, checkpoint: AgentCheckpoint) -> Sequence[Message] | None:
        """While a save is handled: the history ``checkpoint``'s history extends by appends.

        The machine builds each history from the one it saved before, so
        ``checkpoint.messages`` begins with the very objects of the returned
        tuple (the leg's previous save, or its start). None when it does not
        (an edited history, another checkpoint than the one being saved).
        """
        hint = self._save_hint
        if hint is None or hint[0] is not checkpoint.messages:
            return None
        return hint[1]

    def _extends(self, checkpoint: AgentCheckpoint) -> Sequence[Message] | None:
        """The append-only hint for the store, when it takes one."""
        if not (isinstance(self.store, EventLog) and self.store.saves_extensions):
            return None
        return self.history_extends(checkpoint)

    async def _load_committed_responses(self) -> None:
        # Only called when self.events is set: the store is an event log.
        assert self.events is not None
        events = self.events.store
        assert self.start.run_id is not None
        # The log's tail from its latest checkpoint on: what came before is in
        # the checkpoint's history (a long run's whole log is read no more).
        logged = await offload(events_since, events, self.start.run_id, CHECKPOINT_SAVED)
        step = self.start.next_step_index
        for event in logged:
            if event.type == CHECKPOINT_SAVED:
                self._committed.clear()  # responses before a checkpoint are in its history
            elif event.type == MODEL_COMPLETED and event.step_index == step:
                self._committed[step] = ModelResponse.model_validate(event.payload["response"])

    async def call_model(self, effect: CallModel) -> ModelResponse:
        """Hook: one model call (a ``CallModel`` effect); the model's complete response.

        Called once per step, after ``prepare_step``. Streams when
        :attr:`streaming` is set and the model can: each text and tool-argument
        delta passes :meth:`check_delta` and is emitted (or logged, with an event log) as it
        arrives. With an event log the attempt's events are written and the
        response is committed before it is returned, so nothing acts on a
        response the log does not hold; on a resume with ``reuse_responses`` a
        committed response of the step is returned without asking the model.
        With structured output a final answer is validated here.

        Args:
            effect: The step index, model and request.

        Returns:
            The model's response.

        Raises:
            Exception: What the model raised, ``ModelError`` for a stream without
                a response or a value that is not a ``ModelResponse``,
                ``OutputValidationError`` for an answer that does not validate.
                The leg ends with it.
        """
        committed = self._committed.pop(effect.step_index, None)
        if committed is not None:
            return committed  # completed before the crash, reused as it is
        events = self.events
        if events is None:
            return await self._model_response(effect, None, "")
        operation_id = f"{self.start.run_id}:model:{effect.step_index}"
        attempt_id = new_id()  # unique per attempt; not from deps, whose ids tests pin
        events.attempt_started(effect.step_index, operation_id, attempt_id)
        try:
            response = await self._model_response(effect, operation_id, attempt_id)
        except BaseException as exc:
            # "model" is what the model raised; an interruption, or an
            # output this side cannot persist (a delta over a limit), is "local".
            local = not isinstance(exc, Exception) or isinstance(exc, LimitExceededError)
            kind = "local" if local else "model"
            events.attempt_failed(
                effect.step_index, operation_id, attempt_id, exc, failure_kind=kind
            )
            raise
        events.attempt_completed(effect.step_index, operation_id, attempt_id, response)
        # The model checkpoint commits before anything acts on the response: with
        # the step's tool calls, before a gate, an approver or a tool runs (see
        # handle), or with the checkpoint of a step that calls none.
        return response

    async def _model_response(
        self, effect: CallModel, operation_id: str | None, attempt_id: str
    ) -> ModelResponse:
        meter = _metrics.HOOKS
        if meter is not None:
            agent = self.trace_agent_name() or "-"
            with meter.timed(meter.model_seconds, agent):
                response = await self._traced_model_call(effect, operation_id, attempt_id)
            meter.model_used(agent, _tracing.model_name(effect.model), response.usage)
            return response
        return await self._traced_model_call(effect, operation_id, attempt_id)

    async def _traced_model_call(
        self, effect: CallModel, operation_id: str | None, attempt_id: str
    ) -> ModelResponse:
        hooks = self._tracing_hooks()
        if hooks is None:
            return await self._model_call(effect, operation_id, attempt_id)
        with hooks.chat(self, effect) as span:
            response = await self._model_call(effect, operation_id, attempt_id)
            span.response(response)
            return response

    async def _model_call(
        self, effect: CallModel, operation_id: str | None, attempt_id: str
    ) -> ModelResponse:
        model = effect.model
        stream = getattr(model, "stream", None)
        output = self.options.output
        if not self.streaming or stream is None:
            response = await model.generate(effect.request)
        else:
            # text waits for structured output to validate; tool deltas stream as they come
            shown = partial(self._delta, operation_id=operation_id, attempt_id=attempt_id)
            events = stream(effect.request)
            response = await read_stream(events, effect.step_index, output is None, shown)
        if not isinstance(response, ModelResponse):
            raise ModelError(f"the model returned {type(response).__name__}, not a ModelResponse")
        if output is not None:
            if not response.tool_calls:
                output.parse(response.text)  # a failure is this attempt's model error
            if self.streaming and stream is not None and response.text:
                part = TextDeltaPart(step_index=effect.step_index, delta=response.text)
                await self._delta(part, operation_id, attempt_id)
        return response

    async def _delta(self, part: DeltaPart, operation_id: str | None, attempt_id: str) -> None:
        self.check_delta(part)
        if self.events is not None and operation_id is not None:
            self.events.delta(part, operation_id, attempt_id)
            if self.events.backlog >= MAX_BUFFERED:
                # A model that never yields would never let the timer fire.
                await self.events.flush()
        else:
            self.emit(part)

    def check_delta(self, part: DeltaPart) -> None:
        """Hook: check one streamed delta (text or tool arguments) before it is recorded or shown.

        Does nothing here; an engine raises to refuse the delta (a payload
        limit), which fails the model call.
        """

    async def _gate(self, invocation: ToolInvocation) -> bool:
        try:
            return await invocation.tool.requires_approval(invocation.call.args)
        except Exception as exc:  # fail closed: a broken gate asks a human
            self.options.deps.logger.error(
                "nbdurable: needs_approval of %s raised %r; asking for approval",
                invocation.tool.name,
                exc,
            )
            return True

    async def _ask(self, request: ToolApprovalRequest) -> ToolApprovalResponse:
        approver = self.options.approve_tool_call
        assert approver is not None
        try:
            answer = await maybe_await(approver(request))
        except Exception as exc:  # fail closed
            return ToolApprovalResponse(
                approval_id=request.approval_id,
                approved=False,
                reason=f"The approval check failed: {type(exc).__name__}: {exc}",
            )
        if not isinstance(answer, ToolApprovalResponse):
            answer = ToolApprovalResponse(approval_id=request.approval_id, approved=bool(answer))
        hooks = self._tracing_hooks()
        if hooks is not None:
            hooks.approval_asked(request, answer)
        return answer

    async def _execute(self, effect: ExecuteTools) -> list[ToolOutcome | None]:
        invocations = effect.invocations
        if effect.max_concurrency == 1:
            outcomes: list[ToolOutcome | None] = []
            for invocation in invocations:
                outcome = await self.run_tool(invocation, effect.step_index)
                outcomes.append(outcome)
                if outcome.suspended is not None:
                    break  # later calls of the batch run on resume
            outcomes += [None] * (len(invocations) - len(outcomes))
            return outcomes
        limit = asyncio.Semaphore(effect.max_concurrency or len(invocations) or 1)

        async def run_one(invocation: ToolInvocation) -> ToolOutcome:
            async with limit:
                return await self.run_tool(invocation, effect.step_index)

        return list(await asyncio.gather(*(run_one(inv) for inv in invocations)))

    async def run_tool(self, invocation: ToolInvocation, step_index: int) -> ToolOutcome:
        """Hook: run one validated, approved call (one invocation of ``ExecuteTools``).

        Called for every call of a batch that may run, concurrently up to the
        batch's ``max_concurrency``; with ``max_concurrency == 1`` in order,
        and the calls after one that suspended are not started. An
        ``agent_tool`` call runs :meth:`run_subagent`. What the tool raises is
        its result (``is_error``), so the model can react: this never raises
        for a tool's own error. An engine raises to end the leg (fencing, a
        tool that needs a human).

        Args:
            invocation: The tool, the call and its validated arguments.
            step_index: The step the call belongs to.

        Returns:
            The call's result, or the approvals a suspended sub-agent waits for.
        """
        meter = _metrics.HOOKS
        if meter is None:
            return await self._traced_tool(invocation, step_index)
        with meter.timed(meter.tool_seconds, invocation.call.tool_name) as timer:
            outcome = await self._traced_tool(invocation, step_index)
            if outcome.result is not None and outcome.result.is_error:
                timer.outcome = "error"
            return outcome

    async def _traced_tool(self, invocation: ToolInvocation, step_index: int) -> ToolOutcome:
        hooks = self._tracing_hooks()
        if hooks is None:
            return await self._tool_call(invocation, step_index)
        with hooks.tool(self, invocation, step_index) as span:
            outcome = await self._tool_call(invocation, step_index)
            hooks.tool_outcome(span, outcome)
            return outcome

    async def _tool_call(self, invocation: ToolInvocation, step_index: int) -> ToolOutcome:
        call = invocation.call
        try:
            if isinstance(invocation.tool, AgentTool):
                return await self.run_subagent(invocation.tool, invocation)
            context = ToolContext(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                run_id=self.start.run_id,
                agent_path=self.options.agent_path,
                step_index=step_index,
                owner_check=self.owner_check,
            )
            value = await invocation.tool.invoke(invocation.kwargs, context)
        except Exception as exc:
            return ToolOutcome(result=error_result(call, f"{type(exc).__name__}: {exc}"))
        return ToolOutcome(
            result=ToolResultPart(
                tool_call_id=call.tool_call_id, tool_name=call.tool_name, result=value
            )
        )

    async def run_subagent(self, agent: AgentTool, invocation: ToolInvocation) -> ToolOutcome:
        """Run an ``agent_tool`` call: a nested loop on :meth:`child_driver`'s driver.

        Args:
            agent: The sub-agent.
            invocation: The parent's call of it (its ``prompt``).

        Returns:
            The sub-agent's final text as the call's result; the approvals it
            waits for when it suspended with a checkpoint; an ``is_error``
            result when it cannot run (nesting too deep) or suspended without one.

        Raises:
            Exception: What the child's leg raised (the model's error, an engine's).
        """
        parent = self.options
        if parent.depth + 1 > MAX_AGENT_DEPTH:
            message = f"Sub-agent nesting is limited to {MAX_AGENT_DEPTH} levels."
            return ToolOutcome(result=error_result(invocation.call, message))
        options = child_options(parent, agent, self.start.run_id)
        child, durable = await self.child_driver(agent, options, invocation)
        child.owner_check = self.owner_check
        result = await child.run()
        return subagent_outcome(agent, invocation, result, durable=durable)

    async def child_driver(
        self, agent: AgentTool, options: LoopOptions, invocation: ToolInvocation
    ) -> tuple[Driver, bool]:
        """Hook: the driver of a sub-agent's loop, and whether it checkpoints.

        Called by :meth:`run_subagent` each time the parent runs the call. A
        sub-agent with tools inside a durable run checkpoints under
        :func:`~nbdurable.loop._subagent.child_run_id`, and resumes from there
        when the parent's step runs again; any other sub-agent starts from its
        prompt and keeps nothing. An engine returns a driver of its own kind.

        Args:
            agent: The sub-agent.
            options: The sub-agent's options (see ``child_options``).
            invocation: The parent's call of it.

        Returns:
            The child's driver, and whether the child checkpoints (then a
            suspension of the child suspends the parent too).
        """
        prompt = subagent_prompt(invocation)
        durable = self.store is not None and self.start.run_id is not None and bool(agent.tools)
        if not durable:
            child = Driver(
                options,
                LegStart(messages=prompt),
                streaming=self.streaming,
                flush_interval=self.flush_interval,
            )
            return child, False
        assert self.store is not None
        assert self.start.run_id is not None
        run_id = child_run_id(self.start.run_id, agent.name, invocation.call.tool_call_id)
        existing = await offload(self.store.load, run_id)
        child = Driver(
            options,
            child_start(prompt, run_id, existing),
            store=self.store,
            streaming=self.streaming,
            flush_interval=self.flush_interval,
            store_retry=self.store_retry,
        )
        return child, True
