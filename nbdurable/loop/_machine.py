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

from collections.abc import Generator
from typing import Any, Literal

from .._errors import OutputValidationError
from ..durable._checkpoint import AgentCheckpoint, CheckpointStatus
from ..history import History, SharedSequence
from ..messages import (
    Message,
    ToolApprovalRequest,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..models._base import Model, ModelRequest, ModelResponse
from ..parts import (
    ApprovalRequestStreamPart,
    ApprovalResolvedStreamPart,
    FinishPart,
    StepFinishPart,
    StepStartPart,
    ToolCallStreamPart,
    ToolResultStreamPart,
)
from ..tools import Tool
from ._approvals import Approvals
from ._batch import Batch, BatchRunner
from ._effects import (
    CallModel,
    Effect,
    Emit,
    PrepareStepCall,
    SaveCheckpoint,
)
from ._history import (
    final_text,
    model_view,
    tool_message_for,
    trailing_calls,
    with_approval_parts,
    with_human_answers,
)
from ._options import (
    GenerateTextResult,
    LoopOptions,
    PrepareStepResult,
    StepContext,
    StepResult,
)
from ._start import LegStart, leg_start_from_checkpoint

# The leg start is defined beside the machine; importing it from here keeps working.
__all__ = ["AgentMachine", "LegStart", "leg_start_from_checkpoint"]

Status = Literal["completed", "suspended"]


class AgentMachine:
    """The pure agent loop for one leg of a run.

    Args:
        options: The call's validated options.
        start: Where this leg starts.
    """

    def __init__(self, options: LoopOptions, start: LegStart) -> None:
        self.options = options
        self.start = start
        self._approvals = Approvals(options, start)
        self._batches = BatchRunner(options, self._approvals)
        self._view_cache: tuple[History, History] | None = None
        # The leg's state: the history, the next step, usage, the steps run so far.
        # A History grows in place: a step adds its messages, never copies the run's.
        self._messages = History.of(start.messages)
        # The history the current one extends by appends only (None after an edit):
        # the last saved one, or the start. A save hands it to the store.
        self._extends: History | None = self._messages
        self._step_index = start.next_step_index
        self._run_usage = start.run_usage
        self._leg_usage = Usage()
        self._steps: SharedSequence[StepResult] = SharedSequence()
        # Whether the last thing this leg did was settle trailing calls (a tool
        # message the stop conditions have not seen yet), and what settling spent
        # (counted in the first step's usage).
        self._settled = False
        self._settle_usage = Usage()

    # -- public ----------------------------------------------------------------

    def run(self) -> Generator[Effect, Any, GenerateTextResult]:
        """Drive the leg: settle trailing calls, then run steps until the leg ends.

        Returns:
            The leg's result (completed or suspended).
        """
        if self.start.completed is not None:
            return (yield from self._finish_completed(self.start.completed))
        ended = yield from self._settle()
        while ended is None:
            ended = yield from self._step(self._step_index)
        return ended

    # -- steps -----------------------------------------------------------------

    def _settle(self) -> Generator[Effect, Any, GenerateTextResult | None]:
        """Settle the calls the history ends with; the leg's result if it ends here."""
        trailing = trailing_calls(self._messages)
        recorded = self._messages[trailing[0]].approval_requests if trailing is not None else ()
        self._approvals.warn_unmatched(recorded)
        if trailing is None:
            previous = self.start.next_step_index - 1
            if previous >= 0 and self._stop_requested(previous):
                # A leg that ends before any new step still records the ending, at the
                # next index (indices only grow), so the store never shows a finished
                # run as running.
                return (yield from self._end(self._step_index, "stop_condition"))
            return None
        index, calls = trailing
        assistant = self._messages[index]
        batch = yield from self._batches.run(self._step_index, assistant, calls, settling=True)
        self._add_usage(batch.usage)
        self._settle_usage = batch.usage
        if batch.suspended:
            updated = with_approval_parts(
                with_human_answers(assistant, batch.human_answers),
                batch.verdicts,
                batch.own_requests,
            )
            old = self._messages
            self._messages = History((*old[:index], updated, *old[index + 1 :]))
            self._extends = None  # an edit, not an append
            return (yield from self._suspend(batch, self._step_index))
        if batch.human_answers:  # the history shows the call that ran, and the verdict
            updated = with_human_answers(assistant, batch.human_answers)
            old = self._messages
            self._messages = History((*old[:index], updated, *old[index + 1 :]))
            self._extends = None  # an edit, not an append
        yield from self._emit_verdicts(self._step_index, assistant, batch)
        yield from self._emit_results(self._step_index, calls, batch.results)
        self._messages = self._messages.appended(tool_message_for(calls, batch.results))
        self._settled = True
        return None

    def _step(self, step_index: int) -> Generator[Effect, Any, GenerateTextResult | None]:
        """One step: a model call and the tools it asked for; the leg's result if it ends."""
        if step_index >= self.options.max_steps:
            return (yield from self._end(step_index, "max_steps"))
        if self._settled and self._stop_requested(step_index - 1):
            return (yield from self._end(step_index, "stop_condition"))
        yield Emit(StepStartPart(step_index=step_index))
        model, tools, request = yield from self._prepare(step_index)
        response = yield from self._call_model(step_index, model, request)
        step_usage = response.usage + self._settle_usage
        self._settle_usage = Usage()
        self._add_usage(response.usage)
        assistant = Message(role="assistant", content=response.content)
        calls = response.tool_calls
        for call in calls:
            yield Emit(ToolCallStreamPart(step_index=step_index, tool_call=call))

        if not calls:
            self._messages = self._messages.appended(assistant)
            yield from self._finish_step(step_index, response, (), step_usage)
            return (yield from self._end(step_index, response.finish_reason))

        batch = yield from self._batches.run(
            step_index, assistant, calls, settling=False, tools=tools
        )
        self._add_usage(batch.usage)
        step_usage = step_usage + batch.usage
        assistant = with_human_answers(assistant, batch.human_answers)
        if batch.suspended:
            waiting = with_approval_parts(assistant, batch.verdicts, batch.own_requests)
            self._messages = self._messages.appended(waiting)
            yield from self._finish_step(step_index, response, (), step_usage)
            return (yield from self._suspend(batch, step_index))

        yield from self._emit_results(step_index, calls, batch.results)
        tool_msg = tool_message_for(calls, batch.results)
        self._messages = self._messages.appended(assistant, tool_msg)
        self._settled = False
        yield from self._finish_step(step_index, response, tool_msg.tool_results, step_usage)
        if self._stop_requested(step_index):
            return (yield from self._end(step_index, "stop_condition"))
        if step_index + 1 >= self.options.max_steps:
            return (yield from self._end(step_index, "max_steps"))
        yield from self._save(step_index, "running")
        self._step_index = step_index + 1
        return None

    def _call_model(
        self, step_index: int, model: Model, request: ModelRequest
    ) -> Generator[Effect, Any, ModelResponse]:
        response = yield CallModel(step_index=step_index, model=model, request=request)
        if not isinstance(response, ModelResponse):
            raise TypeError(f"CallModel must be answered with a ModelResponse, not {response!r}")
        return response

    def _finish_step(
        self,
        step_index: int,
        response: ModelResponse,
        results: tuple[ToolResultPart, ...],
        usage: Usage,
    ) -> Generator[Effect, Any, None]:
        """Record the step and emit its ``step_finish`` part."""
        self._steps = self._steps.appended(
            StepResult(
                step_index=step_index,
                text=response.text,
                tool_calls=response.tool_calls,
                tool_results=results,
                usage=usage,
                finish_reason=response.finish_reason,
            )
        )
        yield Emit(
            StepFinishPart(step_index=step_index, usage=usage, finish_reason=response.finish_reason)
        )

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
                    messages = History(prepared.messages)
                if prepared.instructions is not None:
                    instructions = prepared.instructions
        output = options.output
        fields: dict[str, Any] = {
            "messages": self._model_view(messages),
            "tools": tuple(t.spec for t in tools.values()),
            "instructions": instructions,
            "output_schema": output.schema if output is not None else None,
            "output_name": output.name if output is not None else "output",
        }
        if options.prepare_step is None:
            # Every field is already of its type (the history holds validated
            # messages): validating again would walk the whole history each step.
            return model, tools, ModelRequest.model_construct(**fields)
        return model, tools, ModelRequest(**fields)

    def _model_view(self, messages: History) -> History:
        # History only grows between model calls, so the view of the previous call
        # is extended with the new messages instead of rescanning the whole run.
        cached = self._view_cache
        if cached is not None:
            source, view = cached
            if messages.extends(source):
                added = messages[len(source) :]
                kept = model_view(added)
                # While nothing was left out, the history is its own view: no copy.
                view = messages if view is source and kept is added else view.appended(*kept)
                self._view_cache = (messages, view)
                return view
        view = History.of(model_view(messages))
        self._view_cache = (messages, view)
        return view

    # -- endings ---------------------------------------------------------------

    def _suspend(self, batch: Batch, step_index: int) -> Generator[Effect, Any, GenerateTextResult]:
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

    def _end(self, step_index: int, reason: str) -> Generator[Effect, Any, GenerateTextResult]:
        yield from self._save(step_index, "completed", finish_reason=reason)
        return (yield from self._finish("completed", reason, step_index))

    def _finish(
        self,
        status: Status,
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
        text = final_text(self._messages)
        return GenerateTextResult(
            text=text,
            output=self._output(status, reason, text),
            status=status,
            finish_reason=reason,
            messages=self._messages,
            response_messages=self._messages[initial:],
            steps=self._steps.as_tuple(),
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
        text = final_text(checkpoint.messages)
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
            messages=(),
            usage=self._run_usage,
            pending_approvals=pending,
            agent_path=self.options.agent_path,
            created_at=int(self.options.deps.clock.now()),
            finish_reason=finish_reason,
            forked_from=self.start.forked_from,
        )
        # The history holds validated messages only: validating it again at every
        # save would walk the whole run, so it joins the validated checkpoint as is.
        messages = self._messages
        extends, self._extends = self._extends, messages
        yield SaveCheckpoint(checkpoint.model_copy(update={"messages": messages}), extends)

    # -- helpers ---------------------------------------------------------------

    def _emit_verdicts(
        self, step_index: int, assistant: Message, batch: Batch
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
                    source=verdict.source,
                    arguments=verdict.arguments,
                    original_arguments=(
                        requests[tool_call_id].input if verdict.arguments is not None else None
                    ),
                    reply=verdict.reply,
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

    def _context(self, step_index: int) -> StepContext:
        return StepContext(
            step_index=step_index,
            messages=self._messages,
            usage=self._run_usage,
            leg_usage=self._leg_usage,
            steps=self._steps,  # a view: no copy of the steps per context
            model=self.options.model,
        )

    def _stop_requested(self, step_index: int) -> bool:
        if step_index < 0 or not self.options.stop_when:
            return False
        context = self._context(step_index)
        return any(condition(context) for condition in self.options.stop_when)
