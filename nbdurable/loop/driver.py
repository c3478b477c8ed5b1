"""The async driver: runs the step machine's effects with real models, tools and stores."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from .. import metrics as _metrics
from .. import tracing as _tracing
from .._deps import Deps, new_id
from .._errors import (
    CheckpointNotFoundError,
    ConfigurationError,
    LimitExceededError,
    ModelError,
)
from ..durable.checkpoint import StepStats
from ..durable.signer import ApprovalSigner
from ..durable.store import DurableSession, SessionStore, maybe_await, supports
from ..durable.transient import DEFAULT_STORE_RETRY_MS, StoreRetry
from ..events.log import EVENTS
from ..events.model import CHECKPOINT_SAVED, MODEL_COMPLETED
from ..events.writer import DEFAULT_FLUSH_INTERVAL, MAX_BUFFERED, EventWriter
from ..messages import (
    Message,
    TextPart,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolResultPart,
    user,
)
from ..models.base import ModelResponse, ResponseEvent, TextDeltaEvent
from ..tools import Tool, ToolContext, normalize_tools
from .machine import (
    AgentMachine,
    AskApprover,
    CallModel,
    Effect,
    Emit,
    EvaluateGates,
    ExecuteTools,
    LegStart,
    PrepareStepCall,
    SaveCheckpoint,
    ToolInvocation,
    ToolOutcome,
    leg_start_from_checkpoint,
)
from .options import (
    DEFAULT_MAX_STEPS,
    MAX_AGENT_DEPTH,
    ApproveToolCall,
    GenerateTextResult,
    LoopOptions,
    PrepareStep,
    StopCondition,
)
from .output import OutputSpec
from .parts import StreamPart, TextDeltaPart
from .subagent import AgentTool, child_run_id

__all__ = ["Driver", "generate_text", "resume_from_checkpoint"]

EmitFn = Callable[[StreamPart], None]


def _ignore(_: StreamPart) -> None:
    return None


class Driver:
    """Runs one leg's machine: answers each effect with real I/O.

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
        # What the step in flight did, attached to its checkpoint (StepStats).
        self._step_started: int | None = None
        self._model_ms = 0
        self._tool_ms = 0
        self._tool_calls: list[str] = []
        if store is not None and start.run_id is not None and supports(store, EVENTS):
            self.events = EventWriter(
                store,  # type: ignore[arg-type]  # EVENTS declares the EventStore methods
                start.run_id,
                deps=options.deps,
                publish=emit,
                flush_interval=flush_interval,
                retry=store_retry,
            )

    traced: ClassVar[bool] = True
    """Whether this driver's legs and effects make spans (not in deterministic workflow code)."""

    def _hooks(self) -> _tracing.TracingHooks | None:
        return _tracing.HOOKS if self.traced else None

    async def run(self) -> GenerateTextResult:
        """Run the leg to its result. Model errors and cancellation propagate."""
        hooks = self._hooks()
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
                await self._leg_started(events)
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

    async def _leg_started(self, events: EventWriter, *, retried: bool = False) -> None:
        """Write the leg's ``run_started`` (from here on the run is visible to subscribers)."""
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
            await self._save(self._timed(effect))
            return None
        if isinstance(effect, CallModel):
            began = self._clock()
            try:
                response = await self._call_model(effect)
            finally:
                self._model_ms += self._clock() - began
            self._tool_calls += [call.tool_name for call in response.tool_calls]
            return response
        if isinstance(effect, ExecuteTools):
            if self.events is not None:
                await self.events.flush()  # viewers see the calls while the tools run
            began = self._clock()
            try:
                return await self._execute(effect)
            finally:
                self._tool_ms += self._clock() - began
        if isinstance(effect, EvaluateGates):
            return [await self._gate(inv) for inv in effect.invocations]
        if isinstance(effect, AskApprover):
            if self.events is not None:
                await self.events.flush()  # the requests are visible while a human decides
            return [await self._ask(request) for request in effect.requests]
        if isinstance(effect, PrepareStepCall):
            assert self.options.prepare_step is not None
            return await maybe_await(self.options.prepare_step(effect.context))
        raise TypeError(f"unknown effect {effect!r}")

    def _clock(self) -> int:
        now = int(self.options.deps.clock.now())
        if self._step_started is None:
            self._step_started = now
        return now

    def _timed(self, effect: SaveCheckpoint) -> SaveCheckpoint:
        """The save with the stats of the work since the previous save attached."""
        started = self._step_started if self._step_started is not None else self._clock()
        stats = StepStats(
            started_at=started,
            model_ms=self._model_ms,
            tool_ms=self._tool_ms,
            tool_calls=tuple(self._tool_calls),
        )
        self._step_started, self._model_ms, self._tool_ms, self._tool_calls = None, 0, 0, []
        meter = _metrics.HOOKS
        if meter is not None:
            elapsed_ms = int(self.options.deps.clock.now()) - started
            meter.step_seconds.labels(self.trace_agent_name() or "-").observe(elapsed_ms / 1000)
        return SaveCheckpoint(effect.checkpoint.model_copy(update={"stats": stats}))

    async def _save(self, effect: SaveCheckpoint) -> None:
        if self.store is None:
            return
        if self.events is not None:
            await self.events.save_checkpoint(effect.checkpoint)  # one transaction
            return
        try:
            if self.store_retry is None:
                await maybe_await(self.store.save(effect.checkpoint))
            else:
                save = self.store.save
                await self.store_retry.acall("save a checkpoint", save, effect.checkpoint)
        except Exception as exc:  # durability is best-effort: never a run-killer
            self.options.deps.logger.error(
                "nbdurable: saving checkpoint %s failed: %r", effect.checkpoint.step_id, exc
            )

    async def _load_committed_responses(self) -> None:
        events: Any = self.store  # a store with the events capability (self.events is set)
        logged = await maybe_await(events.read_events(self.start.run_id))
        step = self.start.next_step_index
        for event in logged:
            if event.type == CHECKPOINT_SAVED:
                self._committed.clear()  # responses before a checkpoint are in its history
            elif event.type == MODEL_COMPLETED and event.step_index == step:
                self._committed[step] = ModelResponse.model_validate(event.payload["response"])

    async def _call_model(self, effect: CallModel) -> ModelResponse:
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
        # The model checkpoint commits before anything acts on the response.
        await events.flush()
        return response

    async def _model_response(
        self, effect: CallModel, operation_id: str | None, attempt_id: str
    ) -> ModelResponse:
        meter = _metrics.HOOKS
        if meter is not None:
            with meter.timed(meter.model_seconds, self.trace_agent_name() or "-"):
                return await self._traced_model_call(effect, operation_id, attempt_id)
        return await self._traced_model_call(effect, operation_id, attempt_id)

    async def _traced_model_call(
        self, effect: CallModel, operation_id: str | None, attempt_id: str
    ) -> ModelResponse:
        hooks = self._hooks()
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
            response = None
            async for event in stream(effect.request):
                if isinstance(event, TextDeltaEvent):
                    # With structured output no text shows before it validates.
                    if event.delta and output is None:
                        await self._delta(effect.step_index, event.delta, operation_id, attempt_id)
                elif isinstance(event, ResponseEvent):
                    response = event.response
            if response is None:
                raise ModelError("the model's stream ended without a complete response")
        if not isinstance(response, ModelResponse):
            raise ModelError(f"the model returned {type(response).__name__}, not a ModelResponse")
        if output is not None:
            if not response.tool_calls:
                output.parse(response.text)  # a failure is this attempt's model error
            if self.streaming and stream is not None and response.text:
                await self._delta(effect.step_index, response.text, operation_id, attempt_id)
        return response

    async def _delta(
        self, step_index: int, delta: str, operation_id: str | None, attempt_id: str
    ) -> None:
        part = TextDeltaPart(step_index=step_index, delta=delta)
        self.check_delta(part)
        if self.events is not None and operation_id is not None:
            self.events.delta(part, operation_id, attempt_id)
            if self.events.backlog >= MAX_BUFFERED:
                # A model that never yields would never let the timer fire.
                await self.events.flush()
        else:
            self.emit(part)

    def check_delta(self, part: TextDeltaPart) -> None:
        """Hook run on every streamed delta before it is recorded (the runtime's limits)."""

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
        hooks = self._hooks()
        if hooks is not None:
            hooks.approval_asked(request, answer)
        return answer

    # --- what a trace says about this leg (see nbdurable.tracing) ----------------------

    def trace_agent_name(self) -> str | None:
        """The agent's name on the leg's ``invoke_agent`` span."""
        return self.options.agent_path[-1] if self.options.agent_path else None

    def trace_attributes(self) -> dict[str, Any]:
        """Extra attributes of the leg's span."""
        return {}

    def trace_model_attributes(self) -> dict[str, Any]:
        """Extra attributes of a ``chat`` span."""
        return {}

    def trace_tool_attributes(self, tool_name: str) -> dict[str, Any]:
        """Extra attributes of an ``execute_tool`` span."""
        return {}

    def trace_parent(self) -> dict[str, str] | None:
        """The stored W3C trace context the leg joins (None: the caller's current span)."""
        return None

    def trace_leg_started(self, traceparent: str) -> None:
        """The leg's span started (a durable owner stores it for the next leg's link)."""

    async def _execute(self, effect: ExecuteTools) -> list[ToolOutcome | None]:
        invocations = effect.invocations
        if effect.max_concurrency == 1:
            outcomes: list[ToolOutcome | None] = [None] * len(invocations)
            for i, invocation in enumerate(invocations):
                outcomes[i] = await self._run_tool(invocation, effect.step_index)
                if outcomes[i] is not None and outcomes[i].suspended is not None:  # type: ignore[union-attr]
                    break  # later calls of the batch run on resume
            return outcomes
        limit = asyncio.Semaphore(effect.max_concurrency or len(invocations) or 1)

        async def run_one(invocation: ToolInvocation) -> ToolOutcome:
            async with limit:
                return await self._run_tool(invocation, effect.step_index)

        return list(await asyncio.gather(*(run_one(inv) for inv in invocations)))

    async def _run_tool(self, invocation: ToolInvocation, step_index: int) -> ToolOutcome:
        meter = _metrics.HOOKS
        if meter is None:
            return await self._traced_tool(invocation, step_index)
        with meter.timed(meter.tool_seconds, invocation.call.tool_name) as timer:
            outcome = await self._traced_tool(invocation, step_index)
            if outcome.result is not None and outcome.result.is_error:
                timer.outcome = "error"
            return outcome

    async def _traced_tool(self, invocation: ToolInvocation, step_index: int) -> ToolOutcome:
        hooks = self._hooks()
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
                return await self._run_subagent(invocation.tool, invocation)
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
            return ToolOutcome(result=_error_result(invocation, f"{type(exc).__name__}: {exc}"))
        return ToolOutcome(
            result=ToolResultPart(
                tool_call_id=call.tool_call_id, tool_name=call.tool_name, result=value
            )
        )

    async def _run_subagent(self, agent: AgentTool, invocation: ToolInvocation) -> ToolOutcome:
        parent = self.options
        if parent.depth + 1 > MAX_AGENT_DEPTH:
            return ToolOutcome(
                result=_error_result(
                    invocation, f"Sub-agent nesting is limited to {MAX_AGENT_DEPTH} levels."
                )
            )
        assert agent.model is not None
        options = LoopOptions(
            model=agent.model,
            tools=agent.tools,
            instructions=agent.instructions,
            max_steps=agent.max_steps,
            max_tool_concurrency=agent.max_tool_concurrency,
            approve_tool_call=parent.approve_tool_call,
            approval_responses=parent.approval_responses,
            approval_signer=parent.approval_signer,
            approval_max_age_ms=parent.approval_max_age_ms,
            deps=parent.deps,
            agent_path=(*parent.agent_path, agent.name),
            depth=parent.depth + 1,
            session_run_id=parent.session_run_id or self.start.run_id,
        )
        child, durable = await self._child_driver(agent, options, invocation)
        child.owner_check = self.owner_check
        result = await child.run()
        if result.status == "suspended":
            if durable:
                return ToolOutcome(suspended=result.pending_approvals, usage=result.usage)
            names = ", ".join(sorted({r.tool_name for r in result.pending_approvals})) or "a tool"
            return ToolOutcome(
                result=_error_result(
                    invocation,
                    f"Sub-agent {agent.name!r} needs approval for {names}, but there is no "
                    "approver: run the parent with a durable session for client-mode "
                    "approval, or pass approve_tool_call.",
                ),
                usage=result.usage,
            )
        return ToolOutcome(
            result=ToolResultPart(
                tool_call_id=invocation.call.tool_call_id,
                tool_name=invocation.call.tool_name,
                result=result.text,
            ),
            usage=result.usage,
        )

    async def _child_driver(
        self, agent: AgentTool, options: LoopOptions, invocation: ToolInvocation
    ) -> tuple[Driver, bool]:
        """The sub-agent's driver and whether it checkpoints (resumes from its own key).

        A sub-agent with tools inside a durable run checkpoints under
        :func:`child_run_id`; it resumes from there when the parent's step runs again.
        """
        prompt = (user(invocation.kwargs["prompt"]),)
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
        existing = await maybe_await(self.store.load(run_id))
        start = (
            leg_start_from_checkpoint(existing)
            if existing is not None
            else LegStart(messages=prompt, run_id=run_id, durable=True)
        )
        child = Driver(
            options,
            start,
            store=self.store,
            streaming=self.streaming,
            flush_interval=self.flush_interval,
            store_retry=self.store_retry,
        )
        return child, True


def _error_result(invocation: ToolInvocation, message: str) -> ToolResultPart:
    return ToolResultPart(
        tool_call_id=invocation.call.tool_call_id,
        tool_name=invocation.call.tool_name,
        result=message,
        is_error=True,
    )


# --- option handling shared by every entry point -----------------------------------


def build_options(
    *,
    model: Any,
    tools: Iterable[Tool] | Mapping[str, Tool] | None,
    instructions: str | None,
    max_steps: int,
    stop_when: StopCondition | Sequence[StopCondition] | None,
    prepare_step: PrepareStep | None,
    max_tool_concurrency: int | None,
    approve_tool_call: ApproveToolCall | None,
    approval_responses: Sequence[ToolApprovalResponse] | None,
    approval_signer: ApprovalSigner | None,
    approval_max_age_ms: int | None,
    deps: Deps | None,
    agent_path: tuple[str, ...] = (),
    output_type: Any = None,
) -> LoopOptions:
    """Validate and normalize the options every loop entry point takes."""
    if stop_when is None:
        conditions: tuple[StopCondition, ...] = ()
    elif callable(stop_when):
        conditions = (stop_when,)
    else:
        conditions = tuple(stop_when)
    if approval_signer is not None and not isinstance(approval_signer, ApprovalSigner):
        raise ConfigurationError("approval_signer must be an ApprovalSigner")
    return LoopOptions(
        model=model,
        tools=normalize_tools(tools),
        instructions=instructions,
        max_steps=max_steps,
        stop_when=conditions,
        prepare_step=prepare_step,
        max_tool_concurrency=max_tool_concurrency,
        approve_tool_call=approve_tool_call,
        approval_responses=tuple(approval_responses or ()),
        approval_signer=approval_signer,
        approval_max_age_ms=approval_max_age_ms,
        deps=deps or Deps(),
        agent_path=agent_path,
        output=OutputSpec.of(output_type),
    )


def coerce_messages(messages: str | Message | Sequence[Message | str]) -> tuple[Message, ...]:
    """Accept a prompt string, one message or a sequence; strings become user messages."""
    if isinstance(messages, (str, Message)):
        messages = [messages]
    result = tuple(user(m) if isinstance(m, str) else m for m in messages)
    if not result:
        raise ConfigurationError("messages must not be empty")
    for message in result:
        if not isinstance(message, Message):
            raise ConfigurationError(f"not a Message: {message!r}")
        if message.role == "user" and all(
            isinstance(p, TextPart) and not p.text.strip() for p in message.content
        ):  # what runtime.submit refuses too: the model would be asked about nothing
            raise ConfigurationError("a user message (the prompt) must not be blank")
    return result


def session_run_id(session: DurableSession | None, options: LoopOptions) -> str | None:
    """The run id of a durable call (tools and a session), else None."""
    if session is None or not options.tools:
        return None
    if not isinstance(session, DurableSession):
        raise ConfigurationError("session must be a DurableSession(store, run_id=None)")
    return session.run_id or options.deps.generate_id()


def session_retry(session: DurableSession | None, options: LoopOptions) -> StoreRetry | None:
    """The retry of a durable call's store calls (``DurableSession.store_retry_ms``)."""
    if session is None:
        return None
    return StoreRetry.for_store(session.store, session.store_retry_ms, options.deps.logger)


async def call_start(
    messages: tuple[Message, ...],
    session: DurableSession | None,
    run_id: str | None,
    options: LoopOptions,
    retry: StoreRetry | None = None,
) -> LegStart:
    """Where a plain call starts; a run id the store knows continues its counters."""
    if run_id is None or session is None:
        return LegStart(messages=messages)
    try:
        if retry is None:
            existing = await maybe_await(session.store.load(run_id))
        else:
            existing = await retry.acall("load a checkpoint", session.store.load, run_id)
    except Exception as exc:
        options.deps.logger.error("nbdurable: loading run %s failed: %r", run_id, exc)
        existing = None
    if existing is None:
        return LegStart(messages=messages, run_id=run_id, durable=True)
    return LegStart(
        messages=messages,
        next_step_index=existing.step_index + 1,
        run_usage=existing.usage,
        run_id=run_id,
        durable=True,
    )


_OPTION_NAMES = (
    "model",
    "tools",
    "instructions",
    "max_steps",
    "stop_when",
    "prepare_step",
    "max_tool_concurrency",
    "approve_tool_call",
    "approval_responses",
    "approval_signer",
    "approval_max_age_ms",
    "deps",
    "output_type",
)


def options_from(arguments: Mapping[str, Any], agent_path: tuple[str, ...] = ()) -> LoopOptions:
    """Options from an entry point's own arguments (its ``locals()``).

    The public entry points spell their options out for readers and type
    checkers; this keeps the one place that turns them into :class:`LoopOptions`.
    """
    return build_options(**{name: arguments[name] for name in _OPTION_NAMES}, agent_path=agent_path)


async def run_resumed(
    store: SessionStore,
    run_id: str,
    arguments: Mapping[str, Any],
    *,
    emit: EmitFn = _ignore,
    streaming: bool = False,
) -> GenerateTextResult:
    """A resume leg of ``run_id``: both resume functions, buffered and streaming."""
    start, agent_path = await resume_start(store, run_id)
    options = options_from(arguments, agent_path)
    retry = StoreRetry.for_store(store, DEFAULT_STORE_RETRY_MS, options.deps.logger)
    driver = Driver(
        options,
        start,
        store=store,
        emit=emit,
        streaming=streaming,
        reuse_responses=True,
        store_retry=retry,
    )
    return await driver.run()


async def resume_start(store: SessionStore, run_id: str) -> tuple[LegStart, tuple[str, ...]]:
    """Load the latest checkpoint of ``run_id`` as the start of a new leg."""
    checkpoint = await maybe_await(store.load(run_id))
    if checkpoint is None:
        raise CheckpointNotFoundError(run_id)
    return leg_start_from_checkpoint(checkpoint), checkpoint.agent_path


# --- the public async entry points ---------------------------------------------------


async def generate_text(
    *,
    model: Any,
    messages: str | Message | Sequence[Message | str],
    tools: Iterable[Tool] | Mapping[str, Tool] | None = None,
    instructions: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    stop_when: StopCondition | Sequence[StopCondition] | None = None,
    prepare_step: PrepareStep | None = None,
    max_tool_concurrency: int | None = None,
    approve_tool_call: ApproveToolCall | None = None,
    approval_responses: Sequence[ToolApprovalResponse] | None = None,
    approval_signer: ApprovalSigner | None = None,
    approval_max_age_ms: int | None = None,
    output_type: Any = None,
    session: DurableSession | None = None,
    deps: Deps | None = None,
) -> GenerateTextResult:
    """Run the agent loop to completion or suspension.

    Args:
        model: The model (see :class:`~nbdurable.models.Model`).
        messages: The conversation so far; a string is one user message.
        tools: Tools the model may call (a list or a name -> tool mapping).
        instructions: System instructions sent with every model call.
        max_steps: Runaway guard: the run ends (``finish_reason="max_steps"``)
            once it has this many steps, counted across legs.
        stop_when: Stop conditions checked after each tool step, e.g.
            ``total_tokens_exceed(10_000)``; they see the whole run's usage.
        prepare_step: Called before each step; may return a
            :class:`PrepareStepResult` overriding model, tools, messages or
            instructions for that step.
        max_tool_concurrency: How many calls of one batch run at once (None: all).
        approve_tool_call: Server-mode approver for gated calls; without it
            gated calls suspend the run (client mode).
        approval_responses: Verdicts for calls awaiting approval in ``messages``.
        approval_signer: Signs approval requests and verifies returned tokens.
        approval_max_age_ms: Tokens this old or older are refused.
        output_type: Structured output: the final answer must be JSON of this type
            (a pydantic model, dataclass or TypedDict); the result's ``output``
            holds it validated. A failed validation is an ``OutputValidationError``.
        session: ``DurableSession(store, run_id)`` to checkpoint every step
            (only calls with tools checkpoint).
        deps: Clock, id generator and logger.

    Returns:
        The leg's :class:`GenerateTextResult`.

    Raises:
        ConfigurationError: Invalid options.
        Exception: Whatever the model raised (tool errors never raise).
    """
    options = options_from(locals())
    history = coerce_messages(messages)
    run_id = session_run_id(session, options)
    retry = session_retry(session, options)
    start = await call_start(history, session, run_id, options, retry)
    store = session.store if (session is not None and run_id is not None) else None
    return await Driver(options, start, store=store, store_retry=retry).run()


async def resume_from_checkpoint(
    store: SessionStore,
    run_id: str,
    *,
    model: Any,
    tools: Iterable[Tool] | Mapping[str, Tool] | None = None,
    instructions: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    stop_when: StopCondition | Sequence[StopCondition] | None = None,
    prepare_step: PrepareStep | None = None,
    max_tool_concurrency: int | None = None,
    approve_tool_call: ApproveToolCall | None = None,
    approval_responses: Sequence[ToolApprovalResponse] | None = None,
    approval_signer: ApprovalSigner | None = None,
    approval_max_age_ms: int | None = None,
    output_type: Any = None,
    deps: Deps | None = None,
) -> GenerateTextResult:
    """Continue a durable run from its latest checkpoint.

    Takes the options of :func:`generate_text` except ``messages`` (the
    checkpoint's history) and ``session`` (``store`` + ``run_id``). Pending
    approvals are settled from ``approval_responses``: approved calls run,
    denied ones become is_error results with the reason, unanswered ones are
    denied. ``step_index`` and cumulative usage continue; the result's
    ``usage`` is this leg's own.

    Raises:
        CheckpointNotFoundError: The store has no checkpoint for ``run_id``.
    """
    return await run_resumed(store, run_id, locals())
