"""One batch of tool calls: validated, gated, approved, then run (as effects)."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..messages import (
    Message,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCallPart,
    ToolResultPart,
    Usage,
    VerdictSource,
)
from ..parts import ApprovalResolvedStreamPart
from ..tools import Tool, ToolArgumentsError
from ._approvals import DEFAULT_DENIAL_REASON, Approvals
from ._effects import (
    AskApprover,
    Effect,
    Emit,
    EvaluateGates,
    ExecuteTools,
    ToolInvocation,
    error_result,
)
from ._history import recorded_requests
from ._options import LoopOptions

__all__ = ["CLIENT_TOOL_PLACEHOLDER", "Batch", "BatchRunner"]

CLIENT_TOOL_PLACEHOLDER = "No result provided for this client tool."


@dataclass
class Batch:
    """The outcome of running one batch of calls.

    Attributes:
        results: Results by call id (calls that ran, were denied or were invalid).
        own_requests: Approval requests this batch made (the run waits for them).
        child_requests: Requests suspended sub-agents wait for.
        client_calls: Client tool calls waiting for the caller's result.
        verdicts: Verdicts given to recorded requests, by call id.
        granted: Verdicts standing approvals gave to gated calls (emitted before they run).
        usage: Model usage spent inside the calls (sub-agents).
        suspended: Whether the step waits for a human (no tool message is written).
        human_answers: The request and verdict of each call a human edited (and
            that runs with the edit) or answered in place of the tool, by call
            id: the history shows them (:func:`~._history.with_human_answers`).
    """

    results: dict[str, ToolResultPart] = field(default_factory=dict)
    own_requests: list[ToolApprovalRequest] = field(default_factory=list)
    child_requests: list[ToolApprovalRequest] = field(default_factory=list)
    client_calls: list[ToolCallPart] = field(default_factory=list)
    verdicts: dict[str, ToolApprovalResponse] = field(default_factory=dict)
    granted: list[ApprovalResolvedStreamPart] = field(default_factory=list)
    usage: Usage = Usage()
    suspended: bool = False
    human_answers: dict[str, tuple[ToolApprovalRequest, ToolApprovalResponse]] = field(
        default_factory=dict
    )


class BatchRunner:
    """Runs the batches of one leg.

    Args:
        options: The leg's options.
        approvals: The leg's approvals (verdicts, new requests).
    """

    def __init__(self, options: LoopOptions, approvals: Approvals) -> None:
        self.options = options
        self.approvals = approvals

    def run(
        self,
        step_index: int,
        assistant: Message,
        calls: tuple[ToolCallPart, ...],
        *,
        settling: bool,
        tools: Mapping[str, Tool] | None = None,
    ) -> Generator[Effect, Any, Batch]:
        """Validate, gate and run one batch of calls.

        Args:
            step_index: The step the calls belong to.
            assistant: The message that made the calls.
            calls: The calls to run.
            settling: The calls trail the history (a new leg settles them from verdicts).
            tools: The tools offered this step (default: the leg's tools).
        """
        available = self.options.tools if tools is None else tools
        batch = Batch()
        recorded = recorded_requests(assistant) if settling else {}
        runnable, to_gate = self._sort(batch, calls, available, recorded, settling=settling)
        gated = yield from self._evaluate_gates(to_gate, runnable)
        gated = self._granted(batch, step_index, gated, runnable)
        if gated:
            yield from self._approve(batch, gated, runnable)

        batch.client_calls.extend(inv.call for inv in runnable if inv.tool.is_client_tool)
        runnable = [inv for inv in runnable if not inv.tool.is_client_tool]
        if batch.own_requests or batch.client_calls:
            # Nothing in a step that waits for a human runs before the human answers.
            # A call a grant covered is gated again when the step is settled.
            batch.suspended = True
            return batch
        for part in batch.granted:
            yield Emit(part)

        order = {call.tool_call_id: i for i, call in enumerate(calls)}
        runnable.sort(key=lambda inv: order[inv.call.tool_call_id])
        if runnable:
            yield from self._execute(batch, step_index, runnable)
        return batch

    def _sort(
        self,
        batch: Batch,
        calls: tuple[ToolCallPart, ...],
        available: Mapping[str, Tool],
        recorded: Mapping[str, tuple[ToolApprovalRequest, ToolApprovalResponse | None]],
        *,
        settling: bool,
    ) -> tuple[list[ToolInvocation], list[ToolInvocation]]:
        """Settle what needs no effect; the calls that run, and the ones whose gate decides."""
        runnable: list[ToolInvocation] = []
        to_gate: list[ToolInvocation] = []
        for call in calls:
            tool = available.get(call.tool_name)
            if tool is None:
                unknown = _unknown_tool(call, available)
                batch.results[call.tool_call_id] = error_result(call, unknown)
                continue
            try:
                kwargs = tool.validate_args(call.args)
            except ToolArgumentsError as exc:
                batch.results[call.tool_call_id] = error_result(call, str(exc))
                continue
            invocation = ToolInvocation(tool=tool, call=call, kwargs=kwargs)
            if call.tool_call_id in recorded:
                request, prior = recorded[call.tool_call_id]
                verdict = prior or self.approvals.verdict(request)
                if verdict.arguments is not None:
                    verdict, invocation = _edited(verdict, invocation)
                batch.verdicts[call.tool_call_id] = verdict
                if verdict.arguments is not None or verdict.reply is not None:
                    batch.human_answers[call.tool_call_id] = (request, verdict)
                if verdict.reply is not None:
                    batch.results[call.tool_call_id] = ToolResultPart(
                        tool_call_id=call.tool_call_id,
                        tool_name=call.tool_name,
                        result=verdict.reply,
                    )
                elif not verdict.approved:
                    reason = verdict.reason or DEFAULT_DENIAL_REASON
                    batch.results[call.tool_call_id] = error_result(call, reason)
                elif tool.is_client_tool:
                    batch.results[call.tool_call_id] = error_result(call, CLIENT_TOOL_PLACEHOLDER)
                else:
                    runnable.append(invocation)
            elif settling and tool.is_client_tool:
                batch.results[call.tool_call_id] = error_result(call, CLIENT_TOOL_PLACEHOLDER)
            elif tool.needs_approval is False:
                runnable.append(invocation)
            else:
                to_gate.append(invocation)
        return runnable, to_gate

    def _evaluate_gates(
        self, to_gate: list[ToolInvocation], runnable: list[ToolInvocation]
    ) -> Generator[Effect, Any, list[ToolInvocation]]:
        """The calls that need approval; the others join ``runnable``."""
        gated: list[ToolInvocation] = []
        if not to_gate:
            return gated
        callables = [inv for inv in to_gate if not isinstance(inv.tool.needs_approval, bool)]
        decisions: dict[str, bool] = {}
        if callables:
            answers = yield EvaluateGates(tuple(callables))
            decisions = {
                inv.call.tool_call_id: bool(a) for inv, a in zip(callables, answers, strict=False)
            }
        for inv in to_gate:
            needed = decisions.get(inv.call.tool_call_id, inv.tool.needs_approval is True)
            (gated if needed else runnable).append(inv)
        return gated

    def _granted(
        self,
        batch: Batch,
        step_index: int,
        gated: list[ToolInvocation],
        runnable: list[ToolInvocation],
    ) -> list[ToolInvocation]:
        """The gated calls no standing approval covers; the covered ones join ``runnable``."""
        left: list[ToolInvocation] = []
        for inv in gated:
            grant = self.approvals.covering_grant(inv)
            if grant is None:
                left.append(inv)
                continue
            runnable.append(inv)
            batch.granted.append(
                ApprovalResolvedStreamPart(
                    step_index=step_index,
                    approval_id=self.approvals.new_request(inv).approval_id,
                    tool_call_id=inv.call.tool_call_id,
                    approved=True,
                    source=VerdictSource(by=grant.granted_by, via="grant", grant_id=grant.grant_id),
                )
            )
        return left

    def _approve(
        self, batch: Batch, gated: list[ToolInvocation], runnable: list[ToolInvocation]
    ) -> Generator[Effect, Any, None]:
        """Ask the server-mode approver, or record signed requests (client mode)."""
        requests = tuple(self.approvals.new_request(inv) for inv in gated)
        if self.options.approve_tool_call is None:
            batch.own_requests.extend(self.approvals.signed(r) for r in requests)
            return
        answers = yield AskApprover(requests)
        for request, inv, answer in zip(requests, gated, answers, strict=False):
            if answer.arguments is not None:
                answer, inv = _edited(answer, inv)
            if answer.arguments is not None or answer.reply is not None:
                batch.human_answers[inv.call.tool_call_id] = (request, answer)
            if answer.reply is not None:
                batch.results[inv.call.tool_call_id] = ToolResultPart(
                    tool_call_id=inv.call.tool_call_id,
                    tool_name=inv.call.tool_name,
                    result=answer.reply,
                )
            elif answer.approved:
                runnable.append(inv)
            else:
                reason = answer.reason or DEFAULT_DENIAL_REASON
                batch.results[inv.call.tool_call_id] = error_result(inv.call, reason)

    def _execute(
        self, batch: Batch, step_index: int, runnable: list[ToolInvocation]
    ) -> Generator[Effect, Any, None]:
        outcomes = yield ExecuteTools(
            step_index=step_index,
            invocations=tuple(runnable),
            max_concurrency=self.options.max_tool_concurrency,
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


def _edited(
    verdict: ToolApprovalResponse, invocation: ToolInvocation
) -> tuple[ToolApprovalResponse, ToolInvocation]:
    """An approval with edited arguments: the call as it runs, or a denial when they cannot be.

    The verdict was checked when it was recorded; this holds it to the tool as
    this leg defines it (it may allow no edits, or take other arguments now).
    A refusal is recorded as what happened: a denial naming why.
    """
    tool, call, edited = invocation.tool, invocation.call, verdict.arguments or {}
    if not tool.allow_edit:
        problem = f"tool {tool.name!r} does not allow editing its arguments"
    else:
        try:
            kwargs = tool.validate_edit(edited)
        except ToolArgumentsError as exc:
            problem = f"the edited arguments do not fit: {exc}"
        else:
            return verdict, ToolInvocation(
                tool=tool, call=call.model_copy(update={"args": dict(edited)}), kwargs=kwargs
            )
    denial = ToolApprovalResponse(
        approval_id=verdict.approval_id,
        approved=False,
        reason=f"Approved with edited arguments, but {problem}; the call did not run.",
        source=verdict.source,
    )
    return denial, invocation


def _unknown_tool(call: ToolCallPart, available: Mapping[str, Tool]) -> str:
    names = ", ".join(sorted(available)) or "none"
    return f"Unknown tool {call.tool_name!r}. Available tools: {names}."
