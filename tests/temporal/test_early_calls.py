"""Which calls of a step run in the activity that called the model, and how they run."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

import nbdurable as nd
from nbdurable.loop._effects import ToolInvocation
from nbdurable.loop._options import LoopOptions, build_options
from nbdurable.messages import ToolCallPart
from nbdurable.models._base import ModelResponse
from nbdurable.runtime import Agent
from nbdurable.temporal._prefetch import early_calls


@nd.tool
def fetch(n: int) -> str:
    """Fetch n."""
    return f"fetched {n}"


@nd.tool
def send(n: int) -> str:
    """Send n (manual recovery below)."""
    return f"sent {n}"


@nd.tool(needs_approval=True)
def drop(name: str) -> str:
    """Drop a table."""
    return name


@nd.tool(needs_approval=lambda args: args.get("n", 0) > 5)
def maybe(n: int) -> str:
    """Gated by its arguments."""
    return str(n)


SAFE = {"fetch": "safe", "drop": "safe", "maybe": "safe", "ask": "safe", "send": "manual"}
ASK = nd.client_tool("ask", "Ask the user.")


def _options(agent: Agent, **overrides: Any) -> LoopOptions:
    settings: dict[str, Any] = {
        "model": agent.model,
        "tools": agent.tools,
        "instructions": None,
        "max_steps": 10,
        "stop_when": None,
        "prepare_step": None,
        "max_tool_concurrency": None,
        "approve_tool_call": None,
        "approval_responses": None,
        "approval_signer": None,
        "approval_max_age_ms": None,
        "deps": None,
        **overrides,
    }
    return build_options(**settings)


def _agent() -> Agent:
    tools = [fetch, send, drop, maybe, ASK]
    return Agent("a", nd.ScriptedModel(["x"]), tools=tools, version="1", tool_recovery=SAFE)


def _response(*calls: tuple[str, dict[str, Any]]) -> ModelResponse:
    parts = tuple(
        ToolCallPart(tool_call_id=f"c{i}", tool_name=name, args=args)
        for i, (name, args) in enumerate(calls)
    )
    return ModelResponse(content=parts, finish_reason="tool_calls")


def _ids(invocations: list[ToolInvocation]) -> list[str]:
    return [inv.call.tool_call_id for inv in invocations]


def test_safe_ungated_calls_run_early_and_invalid_ones_do_not_block() -> None:
    agent = _agent()
    response = _response(
        ("fetch", {"n": 1}), ("nope", {}), ("fetch", {"n": "x"}), ("fetch", {"n": 2})
    )
    assert _ids(early_calls(agent, _options(agent), response)) == ["c0", "c3"]


@pytest.mark.parametrize(
    "other",
    [
        ("drop", {"name": "t"}),  # gated
        ("maybe", {"n": 1}),  # a gate that decides per call: the workflow evaluates it
        ("send", {"n": 1}),  # manual recovery
        ("ask", {}),  # a client tool
    ],
)
def test_one_call_that_may_wait_keeps_the_whole_step_to_the_workflow(
    other: tuple[str, dict[str, Any]],
) -> None:
    agent = _agent()
    response = _response(("fetch", {"n": 1}), other)
    assert early_calls(agent, _options(agent), response) == []


def test_prepare_step_keeps_the_step_to_the_workflow() -> None:
    agent = _agent()
    options = _options(agent, prepare_step=lambda ctx: None)
    assert early_calls(agent, options, _response(("fetch", {"n": 1}))) == []
