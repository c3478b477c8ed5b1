"""The pure step machine, stepped by hand: no asyncio, no model, no store."""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd
from nbdurable.loop import (
    AgentMachine,
    AskApprover,
    CallModel,
    Emit,
    EvaluateGates,
    ExecuteTools,
    LegStart,
    SaveCheckpoint,
    ToolOutcome,
)
from nbdurable.loop._options import LoopOptions
from nbdurable.models import ModelResponse


@nd.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@nd.tool(needs_approval=True)
def wipe(path: str) -> str:
    """Delete a path."""
    return f"wiped {path}"


@nd.tool(needs_approval=lambda args: args["path"].startswith("/prod"))
def guarded(path: str) -> str:
    """Delete a path, gated only for production paths."""
    return f"wiped {path}"


class NoModel:
    """A model the machine never calls itself: the test answers CallModel."""

    model_id = "none"

    async def generate(self, request: Any) -> Any:  # pragma: no cover - never awaited
        raise AssertionError("the machine must not call models itself")


def respond(
    text: str = "", calls: tuple[tuple[str, str, dict[str, Any]], ...] = ()
) -> ModelResponse:
    content: list[Any] = [nd.TextPart(text=text)] if text else []
    content += [nd.ToolCallPart(tool_call_id=i, tool_name=n, args=a) for i, n, a in calls]
    return ModelResponse(
        content=tuple(content),
        usage=nd.Usage(input_tokens=10, output_tokens=5, total_tokens=15),
        finish_reason="tool_calls" if calls else "stop",
    )


class Stepper:
    """Steps a machine generator, answering effects from a handler, recording them all."""

    def __init__(self, machine: AgentMachine) -> None:
        self.flow = machine.run()
        self.effects: list[Any] = []
        self.result: nd.GenerateTextResult | None = None
        self._next = next(self.flow)

    def until(self, kind: type) -> Any:
        """Answer pass-through effects (Emit, SaveCheckpoint) until an effect of ``kind``."""
        while not isinstance(self._next, kind):
            if not isinstance(self._next, (Emit, SaveCheckpoint)):
                raise AssertionError(f"expected {kind.__name__}, got {self._next!r}")
            self.send(None)
        return self._next

    def send(self, value: Any) -> None:
        self.effects.append(self._next)
        try:
            self._next = self.flow.send(value)
        except StopIteration as stop:
            self.result = stop.value
            self._next = None

    def finish(self) -> nd.GenerateTextResult:
        while self.result is None:
            assert isinstance(self._next, (Emit, SaveCheckpoint)), self._next
            self.send(None)
        return self.result

    def saved(self) -> list[nd.AgentCheckpoint]:
        return [e.checkpoint for e in self.effects if isinstance(e, SaveCheckpoint)]

    def emitted(self) -> list[str]:
        return [e.part.type for e in self.effects if isinstance(e, Emit)]


def options(deps: nd.Deps, **kw: Any) -> LoopOptions:
    tools = kw.pop("tools", [add, wipe, guarded])
    return LoopOptions(model=NoModel(), tools={t.name: t for t in tools}, deps=deps, **kw)


def durable_start(run_id: str = "r1") -> LegStart:
    return LegStart(messages=(nd.user("go"),), run_id=run_id, durable=True)


def test_one_tool_step_then_final_text(deps: nd.Deps) -> None:
    s = Stepper(AgentMachine(options(deps), durable_start()))
    call = s.until(CallModel)
    assert call.step_index == 0
    assert [t.name for t in call.request.tools] == ["add", "wipe", "guarded"]
    s.send(respond("adding", (("c1", "add", {"a": 1, "b": 2}),)))
    execute = s.until(ExecuteTools)
    assert [inv.kwargs for inv in execute.invocations] == [{"a": 1, "b": 2}]
    s.send([ToolOutcome(result=nd.ToolResultPart(tool_call_id="c1", tool_name="add", result=3))])
    second = s.until(CallModel)
    assert second.step_index == 1
    assert second.request.messages[-1].tool_results[0].result == 3
    s.send(respond("3"))
    result = s.finish()
    assert result.text == "3" and result.status == "completed" and result.finish_reason == "stop"
    assert [(c.step_index, c.status) for c in s.saved()] == [(0, "running"), (1, "completed")]
    assert result.total_usage.total_tokens == 30
    assert s.emitted() == [
        "step-start",
        "tool-call",
        "tool-result",
        "step-finish",
        "step-start",
        "step-finish",
        "finish",
    ]


def test_non_durable_leg_yields_no_save(deps: nd.Deps) -> None:
    s = Stepper(AgentMachine(options(deps), LegStart(messages=(nd.user("go"),))))
    s.until(CallModel)
    s.send(respond("hi"))
    result = s.finish()
    assert s.saved() == [] and result.run_id is None


def test_invalid_args_and_unknown_tools_never_reach_execution(deps: nd.Deps) -> None:
    s = Stepper(AgentMachine(options(deps), durable_start()))
    s.until(CallModel)
    s.send(respond("", (("c1", "add", {"a": "x"}), ("c2", "nope", {}))))
    # nothing runnable: the machine answers both calls itself and asks the model again
    nxt = s.until(CallModel)
    results = nxt.request.messages[-1].tool_results
    assert all(r.is_error for r in results)
    assert "Invalid arguments for tool 'add'" in results[0].result
    assert "Unknown tool 'nope'" in results[1].result


def test_client_mode_gate_suspends_before_running_anything(deps: nd.Deps) -> None:
    s = Stepper(AgentMachine(options(deps), durable_start()))
    s.until(CallModel)
    s.send(respond("", (("c1", "add", {"a": 1, "b": 1}), ("c2", "wipe", {"path": "/tmp"}))))
    result = s.finish()
    assert not any(isinstance(e, ExecuteTools) for e in s.effects)
    assert result.status == "suspended"
    (request,) = result.pending_approvals
    assert request.tool_call_id == "c2" and request.approval_id == "approval_id1"
    (checkpoint,) = s.saved()
    assert checkpoint.status == "suspended" and checkpoint.pending_approvals == (request,)
    assert checkpoint.messages[-1].role == "assistant"  # no tool message for a suspended step
    assert checkpoint.messages[-1].approval_requests == (request,)


def test_callable_gate_is_an_effect(deps: nd.Deps) -> None:
    s = Stepper(AgentMachine(options(deps), durable_start()))
    s.until(CallModel)
    s.send(respond("", (("c1", "guarded", {"path": "/tmp/x"}),)))
    gates = s.until(EvaluateGates)
    assert [inv.call.tool_call_id for inv in gates.invocations] == ["c1"]
    s.send([False])
    execute = s.until(ExecuteTools)
    assert execute.invocations[0].call.tool_call_id == "c1"


def test_server_mode_asks_the_approver_inline(deps: nd.Deps) -> None:
    opts = options(deps, approve_tool_call=lambda request: True)
    s = Stepper(AgentMachine(opts, durable_start()))
    s.until(CallModel)
    s.send(respond("", (("c1", "wipe", {"path": "/a"}), ("c2", "wipe", {"path": "/b"}))))
    ask = s.until(AskApprover)
    assert [r.input["path"] for r in ask.requests] == ["/a", "/b"]
    s.send(
        [
            nd.ToolApprovalResponse(approval_id=ask.requests[0].approval_id, approved=True),
            nd.ToolApprovalResponse(
                approval_id=ask.requests[1].approval_id, approved=False, reason="not /b"
            ),
        ]
    )
    execute = s.until(ExecuteTools)
    assert [inv.call.tool_call_id for inv in execute.invocations] == ["c1"]
    s.send(
        [
            ToolOutcome(
                result=nd.ToolResultPart(tool_call_id="c1", tool_name="wipe", result="wiped /a")
            )
        ]
    )
    nxt = s.until(CallModel)
    results = {r.tool_call_id: r for r in nxt.request.messages[-1].tool_results}
    assert results["c2"].is_error and results["c2"].result == "not /b"
    assert not results["c1"].is_error


def test_settling_a_suspended_step_before_the_next_model_call(deps: nd.Deps) -> None:
    first = Stepper(AgentMachine(options(deps), durable_start()))
    first.until(CallModel)
    first.send(respond("", (("c1", "wipe", {"path": "/tmp"}),)))
    suspended = first.finish()
    checkpoint = first.saved()[-1]
    approval = suspended.pending_approvals[0]

    from nbdurable.loop._machine import leg_start_from_checkpoint

    verdicts = (nd.ToolApprovalResponse(approval_id=approval.approval_id, approved=True),)
    s = Stepper(
        AgentMachine(
            options(deps, approval_responses=verdicts), leg_start_from_checkpoint(checkpoint)
        )
    )
    execute = s.until(ExecuteTools)  # settlement comes first, no gating again
    assert execute.step_index == 1 and execute.invocations[0].call.tool_call_id == "c1"
    s.send(
        [
            ToolOutcome(
                result=nd.ToolResultPart(tool_call_id="c1", tool_name="wipe", result="wiped /tmp")
            )
        ]
    )
    call = s.until(CallModel)
    assert call.step_index == 1
    # the model never sees the approval bookkeeping parts
    assert all(p.type != "tool_approval_request" for m in call.request.messages for p in m.content)
    s.send(respond("done"))
    result = s.finish()
    assert s.emitted()[:3] == ["tool-approval-resolved", "tool-result", "step-start"]
    assert result.step_index == 1 and s.saved()[-1].status == "completed"


def test_max_steps_ends_the_run_as_completed(deps: nd.Deps) -> None:
    s = Stepper(AgentMachine(options(deps, max_steps=1), durable_start()))
    s.until(CallModel)
    s.send(respond("", (("c1", "add", {"a": 1, "b": 1}),)))
    s.until(ExecuteTools)
    s.send([ToolOutcome(result=nd.ToolResultPart(tool_call_id="c1", tool_name="add", result=2))])
    result = s.finish()
    assert result.finish_reason == "max_steps"
    assert [(c.step_index, c.status, c.finish_reason) for c in s.saved()] == [
        (0, "completed", "max_steps")
    ]


def test_model_errors_propagate_and_save_nothing(deps: nd.Deps) -> None:
    s = Stepper(AgentMachine(options(deps), durable_start()))
    s.until(CallModel)
    with pytest.raises(RuntimeError):
        s.flow.throw(RuntimeError("provider down"))
    assert s.saved() == []


def test_resuming_a_completed_checkpoint_runs_no_step(deps: nd.Deps) -> None:
    checkpoint = nd.AgentCheckpoint(
        run_id="r1",
        step_index=3,
        status="completed",
        messages=(nd.user("go"), nd.assistant("all done")),
        usage=nd.Usage(total_tokens=99),
        created_at=1,
        finish_reason="stop",
    )
    from nbdurable.loop._machine import leg_start_from_checkpoint

    s = Stepper(AgentMachine(options(deps), leg_start_from_checkpoint(checkpoint)))
    result = s.finish()
    assert result.text == "all done" and result.step_index == 3
    assert result.usage == nd.Usage() and result.total_usage.total_tokens == 99
    assert s.saved() == []


async def test_responses_matching_no_pending_call_are_ignored_with_a_warning(
    deps: nd.Deps, logger: object
) -> None:
    store = nd.InMemorySessionStore()
    model = nd.ScriptedModel([nd.Turn.call("wipe", path="/tmp"), "done"])
    first = await nd.generate_text(
        model=model, messages="go", tools=[wipe], session=nd.DurableSession(store, "r"), deps=deps
    )
    approval = first.pending_approvals[0]
    done = await nd.resume_from_checkpoint(
        store,
        "r",
        model=model,
        tools=[wipe],
        deps=deps,
        approval_responses=[
            nd.ToolApprovalResponse(approval_id=approval.approval_id, approved=True),
            nd.ToolApprovalResponse(approval_id="approval_bogus", approved=True),
        ],
    )
    assert done.steps[0].text == "done" and done.messages[-2].tool_results[0].result == "wiped /tmp"
    assert any("approval_bogus" in w for w in logger.warnings)  # type: ignore[attr-defined]
    assert not any(approval.approval_id in w for w in logger.warnings)  # type: ignore[attr-defined]


async def test_a_leg_that_ends_before_any_step_still_records_completion() -> None:
    store = nd.InMemorySessionStore()
    model = nd.ScriptedModel([nd.Turn.call("add", a=1, b=1)] * 5)
    first = await nd.generate_text(
        model=model,
        messages="go",
        tools=[add],
        max_steps=5,
        stop_when=nd.step_count_is(2),
        session=nd.DurableSession(store, "r"),
    )
    assert first.finish_reason == "stop_condition" and first.step_index == 1
    store.save(store.load("r").model_copy(update={"status": "running"}))  # as if it had crashed
    for options in ({"max_steps": 2}, {"stop_when": nd.step_count_is(2)}):
        again = await nd.resume_from_checkpoint(store, "r", model=model, tools=[add], **options)
        assert again.status == "completed" and again.steps == ()
        latest = store.load("r")
        assert latest.status == "completed" and latest.step_index == again.step_index
        store.save(latest.model_copy(update={"status": "running", "step_index": 1, "step_id": ""}))
