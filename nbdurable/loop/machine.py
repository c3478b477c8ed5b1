"""The agent loop as a pure step machine (sans-IO).

:meth:`AgentMachine.run` is a generator. It yields *effects* (call the model,
run tools, save a checkpoint, emit a stream part...) and is sent their
results; it never touches a socket, a store or the wall clock itself. Drivers
run it: the async driver behind ``generate_text``/``stream_chat``, the durable
runtime, a Temporal workflow. Tests step it by hand.

One step = one model call plus the tools it asked for. A durable run saves a
checkpoint after every step. A step whose tools need a human (client-mode
approval, a client tool, a suspended sub-agent) writes no tool message: the
run suspends with the assistant message last, and the next leg *settles* those
trailing calls before its first model call.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from .._errors import OutputValidationError
from ..durable.checkpoint import AgentCheckpoint, CheckpointStatus, ForkPoint
from ..durable.signer import TOKEN_DENIAL_REASON, token_matches
from ..messages import (
    ApprovalRequestPart,
    Message,
    Part,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCallPart,
    ToolResultPart,
    Usage,
    tool_message,
)
from ..models.base import Model, ModelRequest, ModelResponse
from ..tools import Tool, ToolArgumentsError
from .options import (
    GenerateTextResult,
    LoopOptions,
    PrepareStepResult,
    StepContext,
    StepResult,
)
from .parts import (
    ApprovalRequestStreamPart,
    ApprovalResolvedStreamPart,
    FinishPart,
    StepFinishPart,
    StepStartPart,
    StreamPart,
    ToolCallStreamPart,
    ToolResultStreamPart,
)

__all__ = [
    "CLIENT_TOOL_PLACEHOLDER",
    "NO_VERDICT_REASON",
    "AgentMachine",
    "AskApprover",
    "CallModel",
    "Effect",
    "Emit",
    "EvaluateGates",
    "ExecuteTools",
    "LegStart",
    "PrepareStepCall",
    "SaveCheckpoint",
    "ToolInvocation",
    "ToolOutcome",
    "leg_start_from_checkpoint",
]

CLIENT_TOOL_PLACEHOLDER = "No result provided for this client tool."
NO_VERDICT_REASON = "No verdict was given for this approval request; denied by default."
DEFAULT_DENIAL_REASON = "Denied by user."


@dataclass(frozen=True)
class ToolInvocation:
    """A validated call, ready to run."""

    tool: Tool
    call: ToolCallPart
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class ToolOutcome:
    """What running one call gave: a result, or the approvals a sub-agent now waits for.

    Attributes:
        result: The tool result (None when the call suspended).
        suspended: Requests a suspended sub-agent waits for (None when it did not suspend).
        usage: Model usage spent inside the call (sub-agents), added to the step.
    """

    result: ToolResultPart | None = None
    suspended: tuple[ToolApprovalRequest, ...] | None = None
    usage: Usage | None = None


# --- effects -----------------------------------------------------------------


@dataclass(frozen=True)
class Emit:
    """Deliver a stream part to subscribers. Send back None."""

    part: StreamPart


@dataclass(frozen=True)
class SaveCheckpoint:
    """Save a checkpoint (best-effort). Send back None."""

    checkpoint: AgentCheckpoint


@dataclass(frozen=True)
class PrepareStepCall:
    """Call ``prepare_step``. Send back its ``PrepareStepResult`` or None."""

    context: StepContext


@dataclass(frozen=True)
class CallModel:
    """Call the model. Send back a :class:`ModelResponse` (raise into the driver on failure)."""

    step_index: int
    model: Model
    request: ModelRequest


@dataclass(frozen=True)
class EvaluateGates:
    """Evaluate callable ``needs_approval`` gates. Send back one bool per invocation."""

    invocations: tuple[ToolInvocation, ...]


@dataclass(frozen=True)
class AskApprover:
    """Ask the server-mode approver. Send back one :class:`ToolApprovalResponse` per request."""

    requests: tuple[ToolApprovalRequest, ...]


@dataclass(frozen=True)
class ExecuteTools:
    """Run tools. Send back one :class:`ToolOutcome` (or None if not started) per invocation.

    With ``max_concurrency == 1`` calls run in order and the ones after a
    suspended call are not started.
    """

    step_index: int
    invocations: tuple[ToolInvocation, ...]
    max_concurrency: int | None


Effect = Union[
    Emit, SaveCheckpoint, PrepareStepCall, CallModel, EvaluateGates, AskApprover, ExecuteTools
]


@dataclass(frozen=True)
class LegStart:
    """Where a leg starts.

    Attributes:
        messages: History so far (the checkpoint's, or the caller's).
        next_step_index: Index the next step gets.
        run_usage: Cumulative usage before this leg.
        run_id: The durable run id (None without a session or tools).
        durable: Whether to save checkpoints.
        completed: The stored checkpoint when resuming a completed run (no new step).
        known_approvals: Approval ids pending in the checkpoint (sub-agents' included),
            so verdicts that match nothing can be reported.
        forked_from: The fork point the run's checkpoints carry (a forked run's lineage).
    """

    messages: tuple[Message, ...]
    next_step_index: int = 0
    run_usage: Usage = Usage()
    run_id: str | None = None
    durable: bool = False
    completed: AgentCheckpoint | None = None
    known_approvals: frozenset[str] = frozenset()
    forked_from: ForkPoint | None = None


def leg_start_from_checkpoint(checkpoint: AgentCheckpoint) -> LegStart:
    """The start of a leg that continues ``checkpoint``."""
    return LegStart(
        messages=checkpoint.messages,
        next_step_index=checkpoint.step_index + 1,
        run_usage=checkpoint.usage,
        run_id=checkpoint.run_id,
        durable=True,
        completed=checkpoint if checkpoint.status == "completed" else None,
        known_approvals=frozenset(r.approval_id for r in checkpoint.pending_approvals),
        forked_from=checkpoint.forked_from,
    )


@dataclass
class _Batch:
    """The outcome of running one batch of calls."""

    results: dict[str, ToolResultPart] = field(default_factory=dict)
    own_requests: list[ToolApprovalRequest] = field(default_factory=list)
    child_requests: list[ToolApprovalRequest] = field(default_factory=list)
    client_calls: list[ToolCallPart] = field(default_factory=list)
    verdicts: dict[str, ToolApprovalResponse] = field(default_factory=dict)
    usage: Usage = Usage()
    suspended: bool = False


class AgentMachine:
    """The pure agent loop for one leg of a run.

    Args:
        options: The call's validated options.
        start: Where this leg starts.
    """

    def __init__(self, options: LoopOptions, start: LegStart) -> None:
        self.options = options
        self.start = start
        self._responses = {r.approval_id: r for r in options.approval_responses}
        self._warned_unchecked = False
        self._view_cache: tuple[tuple[Message, ...], tuple[Message, ...]] | None = None

    # -- public ----------------------------------------------------------------

    def run(self) -> Generator[Effect, Any, GenerateTextResult]:
        """Drive the leg; returns the leg's result."""
        start = self.start
        if start.completed is not None:
            return (yield from self._finish_completed(start.completed))

        self._messages = start.messages
        self._step_index = start.next_step_index
        self._run_usage = start.run_usage
        self._leg_usage = Usage()
        self._steps: list[StepResult] = []
        self._settled = False
        settle_usage = Usage()

        trailing = _trailing_calls(self._messages)
        self._warn_unmatched_responses(trailing)
        if trailing is not None:
            index, calls = trailing
            assistant = self._messages[index]
            batch = yield from self._run_batch(self._step_index, assistant, calls, settling=True)
            self._add_usage(batch.usage)
            settle_usage = batch.usage
            if batch.suspended:
                updated = _with_approval_parts(assistant, batch)
                self._messages = (*self._messages[:index], updated, *self._messages[index + 1 :])
                return (yield from self._suspend(batch, self._step_index))
            yield from self._emit_verdicts(self._step_index, assistant, batch)
            yield from self._emit_results(self._step_index, calls, batch.results)
            self._messages = (*self._messages, _tool_message_for(calls, batch.results))
            self._settled = True
        elif start.next_step_index > 0 and self._stop_requested(start.next_step_index - 1):
            # A leg that ends before any new step still records the ending, at the
            # next index (indices only grow), so the store never shows a finished
            # run as running.
            return (yield from self._end(self._step_index, "stop_condition", save=True))

        while True:
            step_index = self._step_index
            if step_index >= self.options.max_steps:
                return (yield from self._end(step_index, "max_steps", save=True))
            if self._settled and self._stop_requested(step_index - 1):
                return (yield from self._end(step_index, "stop_condition", save=True))
            yield Emit(StepStartPart(step_index=step_index))
            model, tools, request = yield from self._prepare(step_index)
            response = yield CallModel(step_index=step_index, model=model, request=request)
            if not isinstance(response, ModelResponse):
                raise TypeError(
                    f"CallModel must be answered with a ModelResponse, not {response!r}"
                )
            step_usage = response.usage + settle_usage
            settle_usage = Usage()
            self._add_usage(response.usage)
            assistant = Message(role="assistant", content=response.content)
            calls = response.tool_calls
            for call in calls:
                yield Emit(ToolCallStreamPart(step_index=step_index, tool_call=call))

            if not calls:
                self._messages = (*self._messages, assistant)
                self._record_step(step_index, response, (), step_usage)
                yield Emit(
                    StepFinishPart(
                        step_index=step_index,
                        usage=step_usage,
                        finish_reason=response.finish_reason,
                    )
                )
                return (yield from self._end(step_index, response.finish_reason, save=True))

            batch = yield from self._run_batch(
                step_index, assistant, calls, settling=False, tools=tools
            )
            self._add_usage(batch.usage)
            step_usage = step_usage + batch.usage
            if batch.suspended:
                self._messages = (*self._messages, _with_approval_parts(assistant, batch))
                self._record_step(step_index, response, (), step_usage)
                yield Emit(
                    StepFinishPart(
                        step_index=step_index,
                        usage=step_usage,
                        finish_reason=response.finish_reason,
                    )
                )
                return (yield from self._suspend(batch, step_index))

            yield from self._emit_results(step_index, calls, batch.results)
            tool_msg = _tool_message_for(calls, batch.results)
            self._messages = (*self._messages, assistant, tool_msg)
            self._record_step(step_index, response, tool_msg.tool_results, step_usage)
            self._settled = False
            yield Emit(
                StepFinishPart(
                    step_index=step_index, usage=step_usage, finish_reason=response.finish_reason
                )
            )
            if self._stop_requested(step_index):
                return (yield from self._end(step_index, "stop_condition", save=True))
            if step_index + 1 >= self.options.max_steps:
                return (yield from self._end(step_index, "max_steps", save=True))
            yield from self._save(step_index, "running")
            self._step_index = step_index + 1

    # -- steps -----------------------------------------------------------------

    def _prepare(
        self, step_index: int
    ) -> Generator[Effect, Any, tuple[Model, dict[str, Tool], ModelRequest]]:
        options = self.options
        model: Model = options.model
        tools = options.tools
        messages = self._messages
        instructions = options.instructions
        if options.prepare_step is not None:
            prepared = yield PrepareStepCall(self._context(step_index))
            if prepared is not None:
                if not isinstance(prepared, PrepareStepResult):
                    raise TypeError("prepare_step must return a PrepareStepResult or None")
                model = prepared.model or model
                if prepared.tools is not None:
                    tools = {name: tools[name] for name in prepared.tools if name in tools}
                if prepared.messages is not None:
                    messages = tuple(prepared.messages)
                if prepared.instructions is not None:
                    instructions = prepared.instructions
        output = options.output
        request = ModelRequest(
            messages=self._model_view(messages),
            tools=tuple(t.spec for t in tools.values()),
            instructions=instructions,
            output_schema=output.schema if output is not None else None,
            output_name=output.name if output is not None else "output",
        )
        return model, tools, request

    def _model_view(self, messages: tuple[Message, ...]) -> tuple[Message, ...]:
        # History only grows between model calls, so the view of the previous call
        # is extended with the new messages instead of rescanning the whole run.
        cached = self._view_cache
        if cached is not None:
            source, view = cached
            n = len(source)
            if n <= len(messages) and (n == 0 or messages[n - 1] is source[-1]):
                view = (*view, *_model_view(messages[n:]))
                self._view_cache = (messages, view)
                return view
        view = _model_view(messages)
        self._view_cache = (messages, view)
        return view

    def _run_batch(
        self,
        step_index: int,
        assistant: Message,
        calls: tuple[ToolCallPart, ...],
        *,
        settling: bool,
        tools: Mapping[str, Tool] | None = None,
    ) -> Generator[Effect, Any, _Batch]:
        """Validate, gate and run one batch of calls."""
        options = self.options
        available = options.tools if tools is None else tools
        recorded = _recorded_requests(assistant) if settling else {}
        batch = _Batch()
        runnable: list[ToolInvocation] = []
        to_gate: list[ToolInvocation] = []

        for call in calls:
            tool = available.get(call.tool_name)
            if tool is None:
                batch.results[call.tool_call_id] = _error(call, _unknown_tool(call, available))
                continue
            try:
                kwargs = tool.validate_args(call.args)
            except ToolArgumentsError as exc:
                batch.results[call.tool_call_id] = _error(call, str(exc))
                continue
            invocation = ToolInvocation(tool=tool, call=call, kwargs=kwargs)
            if call.tool_call_id in recorded:
                request, prior = recorded[call.tool_call_id]
                verdict = prior or self._verdict(request)
                batch.verdicts[call.tool_call_id] = verdict
                if verdict.approved:
                    if tool.is_client_tool:
                        batch.results[call.tool_call_id] = _error(call, CLIENT_TOOL_PLACEHOLDER)
                    else:
                        runnable.append(invocation)
                else:
                    batch.results[call.tool_call_id] = _error(
                        call, verdict.reason or DEFAULT_DENIAL_REASON
                    )
            elif settling and tool.is_client_tool:
                batch.results[call.tool_call_id] = _error(call, CLIENT_TOOL_PLACEHOLDER)
            elif tool.needs_approval is False:
                runnable.append(invocation)
            else:
                to_gate.append(invocation)

        gated: list[ToolInvocation] = []
        if to_gate:
            callables = [inv for inv in to_gate if not isinstance(inv.tool.needs_approval, bool)]
            decisions: dict[str, bool] = {}
            if callables:
                answers = yield EvaluateGates(tuple(callables))
                decisions = {
                    inv.call.tool_call_id: bool(a)
                    for inv, a in zip(callables, answers, strict=False)
                }
            for inv in to_gate:
                needed = decisions.get(inv.call.tool_call_id, inv.tool.needs_approval is True)
                (gated if needed else runnable).append(inv)

        if gated:
            requests = tuple(self._new_request(inv) for inv in gated)
            if options.approve_tool_call is not None:
                answers = yield AskApprover(requests)
                for inv, answer in zip(gated, answers, strict=False):
                    if answer.approved:
                        runnable.append(inv)
                    else:
                        batch.results[inv.call.tool_call_id] = _error(
                            inv.call, answer.reason or DEFAULT_DENIAL_REASON
                        )
            else:
                batch.own_requests.extend(self._signed(r) for r in requests)

        clients = [inv for inv in runnable if inv.tool.is_client_tool]
        batch.client_calls.extend(inv.call for inv in clients)
        runnable = [inv for inv in runnable if not inv.tool.is_client_tool]
        if batch.own_requests or batch.client_calls:
            # Nothing in a step that waits for a human runs before the human answers.
            batch.suspended = True
            return batch

        order = {call.tool_call_id: i for i, call in enumerate(calls)}
        runnable.sort(key=lambda inv: order[inv.call.tool_call_id])
        if runnable:
            outcomes = yield ExecuteTools(
                step_index=step_index,
                invocations=tuple(runnable),
                max_concurrency=options.max_tool_concurrency,
            )
            for inv, outcome in zip(runnable, outcomes, strict=False):
                if outcome is None:
                    continue
                if outcome.usage is not None:
                    batch.usage = batch.usage + outcome.usage
                if outcome.suspended is not None:
                    batch.suspended = True
                    batch.child_requests.extend(outcome.suspended)
                elif outcome.result is not None:
                    batch.results[inv.call.tool_call_id] = outcome.result
        return batch

    def _warn_unmatched_responses(
        self, trailing: tuple[int, tuple[ToolCallPart, ...]] | None
    ) -> None:
        if not self._responses or self.options.depth > 0:
            return  # sub-agents see their parent's verdicts for every level
        known = set(self.start.known_approvals)
        if trailing is not None:
            known.update(r.approval_id for r in self._messages[trailing[0]].approval_requests)
        for approval_id in self._responses.keys() - known:
            self.options.deps.logger.warning(
                "nbdurable: ignoring approval response %s: it matches no pending approval",
                approval_id,
            )

    def _verdict(self, request: ToolApprovalRequest) -> ToolApprovalResponse:
        """Settle one recorded request from this leg's approval responses."""
        options = self.options
        response = self._responses.get(request.approval_id)
        if response is None:
            return ToolApprovalResponse(
                approval_id=request.approval_id, approved=False, reason=NO_VERDICT_REASON
            )
        if not response.approved:
            return ToolApprovalResponse(
                approval_id=request.approval_id,
                approved=False,
                reason=response.reason or DEFAULT_DENIAL_REASON,
            )
        if options.approval_signer is None and request.token is not None:
            self._warn_unchecked(request)
        if options.approval_signer is not None and not token_matches(
            options.approval_signer,
            response.token,
            request,
            run_id=self._session_run_id,
            max_age_ms=options.approval_max_age_ms,
        ):
            return ToolApprovalResponse(
                approval_id=request.approval_id, approved=False, reason=TOKEN_DENIAL_REASON
            )
        return ToolApprovalResponse(approval_id=request.approval_id, approved=True)

    def _warn_unchecked(self, request: ToolApprovalRequest) -> None:
        """Approvals are honoured without a signer; say so (once a leg) when they were signed."""
        if self._warned_unchecked:
            return
        self._warned_unchecked = True
        self.options.deps.logger.warning(
            "nbdurable: run %s: approving signed requests (first: %s) without approval_signer: "
            "their tokens are not checked; pass approval_signer= to verify them",
            self.start.run_id,
            request.approval_id,
        )

    @property
    def _session_run_id(self) -> str | None:
        """The run id tokens bind: the session's, also inside a sub-agent."""
        return self.options.session_run_id or self.start.run_id

    def _new_request(self, invocation: ToolInvocation) -> ToolApprovalRequest:
        return ToolApprovalRequest(
            approval_id=f"approval_{self.options.deps.generate_id()}",
            tool_call_id=invocation.call.tool_call_id,
            tool_name=invocation.call.tool_name,
            input=dict(invocation.call.args),
            agent_path=self.options.agent_path,
        )

    def _signed(self, request: ToolApprovalRequest) -> ToolApprovalRequest:
        signer = self.options.approval_signer
        if signer is None:
            return request
        try:
            token = signer.sign(
                request, run_id=self._session_run_id if self.start.durable else None
            )
        except Exception as exc:  # best-effort: unsigned requests are denied on resume
            self.options.deps.logger.error(
                "nbdurable: signing approval %s failed: %r", request.approval_id, exc
            )
            return request
        return request.model_copy(update={"token": token})

    # -- endings ---------------------------------------------------------------

    def _suspend(
        self, batch: _Batch, step_index: int
    ) -> Generator[Effect, Any, GenerateTextResult]:
        pending = (*batch.own_requests, *batch.child_requests)
        for request in pending:
            yield Emit(ApprovalRequestStreamPart(step_index=step_index, request=request))
        yield from self._save(step_index, "suspended", pending=pending, finish_reason="suspended")
        return (
            yield from self._finish(
                "suspended",
                "suspended",
                step_index,
                pending=pending,
                client_calls=tuple(batch.client_calls),
            )
        )

    def _end(
        self, step_index: int, reason: str, *, save: bool
    ) -> Generator[Effect, Any, GenerateTextResult]:
        if save:
            yield from self._save(step_index, "completed", finish_reason=reason)
        return (yield from self._finish("completed", reason, step_index))

    def _finish(
        self,
        status: Any,
        reason: str,
        step_index: int,
        *,
        pending: tuple[ToolApprovalRequest, ...] = (),
        client_calls: tuple[ToolCallPart, ...] = (),
    ) -> Generator[Effect, Any, GenerateTextResult]:
        yield Emit(
            FinishPart(
                finish_reason=reason,
                status=status,
                usage=self._leg_usage,
                total_usage=self._run_usage,
            )
        )
        initial = len(self.start.messages)
        text = _final_text(self._messages)
        return GenerateTextResult(
            text=text,
            output=self._output(status, reason, text),
            status=status,
            finish_reason=reason,
            messages=self._messages,
            response_messages=self._messages[initial:],
            steps=tuple(self._steps),
            usage=self._leg_usage,
            total_usage=self._run_usage,
            pending_approvals=pending,
            pending_tool_calls=client_calls,
            run_id=self.start.run_id,
            step_index=max(step_index, -1),
        )

    def _finish_completed(
        self, checkpoint: AgentCheckpoint
    ) -> Generator[Effect, Any, GenerateTextResult]:
        reason = checkpoint.finish_reason or "stop"
        yield Emit(
            FinishPart(
                finish_reason=reason,
                status="completed",
                usage=Usage(),
                total_usage=checkpoint.usage,
            )
        )
        text = _final_text(checkpoint.messages)
        return GenerateTextResult(
            text=text,
            output=self._output("completed", reason, text),
            status="completed",
            finish_reason=reason,
            messages=checkpoint.messages,
            response_messages=(),
            steps=(),
            usage=Usage(),
            total_usage=checkpoint.usage,
            run_id=checkpoint.run_id,
            step_index=checkpoint.step_index,
        )

    def _output(self, status: str, reason: str, text: str) -> Any:
        # The driver validated a final answer when the model gave it: a run that
        # ended on its own answer has a valid output; other endings have none.
        spec = self.options.output
        if spec is None or status != "completed" or reason not in ("stop", "length"):
            return None
        try:
            return spec.parse(text)
        except OutputValidationError:
            return None

    def _save(
        self,
        step_index: int,
        status: CheckpointStatus,
        *,
        pending: tuple[ToolApprovalRequest, ...] = (),
        finish_reason: str | None = None,
    ) -> Generator[Effect, Any, None]:
        if not self.start.durable or self.start.run_id is None:
            return
        checkpoint = AgentCheckpoint(
            run_id=self.start.run_id,
            step_index=max(step_index, 0),
            status=status,
            messages=self._messages,
            usage=self._run_usage,
            pending_approvals=pending,
            agent_path=self.options.agent_path,
            created_at=int(self.options.deps.clock.now()),
            finish_reason=finish_reason,
            forked_from=self.start.forked_from,
        )
        yield SaveCheckpoint(checkpoint)

    # -- helpers ---------------------------------------------------------------

    def _emit_verdicts(
        self, step_index: int, assistant: Message, batch: _Batch
    ) -> Generator[Effect, Any, None]:
        requests = {r.tool_call_id: r for r in assistant.approval_requests}
        for tool_call_id, verdict in batch.verdicts.items():
            yield Emit(
                ApprovalResolvedStreamPart(
                    step_index=step_index,
                    approval_id=requests[tool_call_id].approval_id,
                    tool_call_id=tool_call_id,
                    approved=verdict.approved,
                    reason=verdict.reason,
                )
            )

    def _emit_results(
        self, step_index: int, calls: tuple[ToolCallPart, ...], results: dict[str, ToolResultPart]
    ) -> Generator[Effect, Any, None]:
        for call in calls:
            result = results.get(call.tool_call_id)
            if result is not None:
                yield Emit(ToolResultStreamPart(step_index=step_index, result=result))

    def _add_usage(self, usage: Usage) -> None:
        self._leg_usage = self._leg_usage + usage
        self._run_usage = self._run_usage + usage

    def _record_step(
        self,
        step_index: int,
        response: ModelResponse,
        results: tuple[ToolResultPart, ...],
        usage: Usage,
    ) -> None:
        self._steps.append(
            StepResult(
                step_index=step_index,
                text=response.text,
                tool_calls=response.tool_calls,
                tool_results=results,
                usage=usage,
                finish_reason=response.finish_reason,
            )
        )

    def _context(self, step_index: int) -> StepContext:
        return StepContext(
            step_index=step_index,
            messages=self._messages,
            usage=self._run_usage,
            leg_usage=self._leg_usage,
            steps=tuple(self._steps),
            model=self.options.model,
        )

    def _stop_requested(self, step_index: int) -> bool:
        if step_index < 0:
            return False
        context = self._context(step_index)
        return any(condition(context) for condition in self.options.stop_when)


# --- pure helpers --------------------------------------------------------------


def _trailing_calls(
    messages: tuple[Message, ...],
) -> tuple[int, tuple[ToolCallPart, ...]] | None:
    """The last assistant message's calls that no following tool message answers."""
    answered: set[str] = set()
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "tool":
            answered.update(r.tool_call_id for r in message.tool_results)
            continue
        if message.role != "assistant":
            return None
        unresolved = tuple(c for c in message.tool_calls if c.tool_call_id not in answered)
        return (index, unresolved) if unresolved else None
    return None


def _recorded_requests(
    assistant: Message,
) -> dict[str, tuple[ToolApprovalRequest, ToolApprovalResponse | None]]:
    return {
        part.request.tool_call_id: (part.request, part.verdict)
        for part in assistant.content
        if isinstance(part, ApprovalRequestPart)
    }


def _with_approval_parts(assistant: Message, batch: _Batch) -> Message:
    """The assistant message with its approval requests (and settled verdicts) recorded."""
    content: list[Part] = []
    for part in assistant.content:
        if isinstance(part, ApprovalRequestPart):
            verdict = batch.verdicts.get(part.request.tool_call_id)
            if verdict is not None and part.verdict is None:
                part = part.model_copy(update={"verdict": verdict})
        content.append(part)
    content.extend(ApprovalRequestPart(request=r) for r in batch.own_requests)
    return assistant.model_copy(update={"content": tuple(content)})


def _model_view(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """Messages as a model sees them: approval bookkeeping parts left out."""
    if not any(isinstance(p, ApprovalRequestPart) for m in messages for p in m.content):
        return messages
    view = []
    for message in messages:
        if any(isinstance(p, ApprovalRequestPart) for p in message.content):
            kept = tuple(p for p in message.content if not isinstance(p, ApprovalRequestPart))
            message = message.model_copy(update={"content": kept})
        view.append(message)
    return tuple(view)


def _tool_message_for(
    calls: tuple[ToolCallPart, ...], results: dict[str, ToolResultPart]
) -> Message:
    return tool_message([results[c.tool_call_id] for c in calls if c.tool_call_id in results])


def _error(call: ToolCallPart, message: str) -> ToolResultPart:
    return ToolResultPart(
        tool_call_id=call.tool_call_id, tool_name=call.tool_name, result=message, is_error=True
    )


def _unknown_tool(call: ToolCallPart, available: Mapping[str, Tool]) -> str:
    names = ", ".join(sorted(available)) or "none"
    return f"Unknown tool {call.tool_name!r}. Available tools: {names}."


def _final_text(messages: tuple[Message, ...]) -> str:
    for message in reversed(messages):
        if message.role == "assistant":
            return message.text
    return ""
