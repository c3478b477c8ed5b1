"""stream_chat shows a tool call forming: the adapters' tool-argument deltas become
``tool-call-delta`` parts, and in a durable run ``tool_call_delta`` events of their attempt
(the log replays the stream exactly, the forming call included)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

import nbdurable as nd
from nbdurable.loop import ToolCallDeltaPart
from nbdurable.models import PydanticAIModel

CALL_ID = "call_count"


@nd.tool
def count(table: str) -> int:
    """Count rows."""
    return 12


async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        yield "It has 12 rows."
        return
    yield {0: DeltaToolCall(name="count", json_args='{"tab', tool_call_id=CALL_ID)}
    yield {0: DeltaToolCall(json_args='le": "a"}')}


def model() -> PydanticAIModel:
    return PydanticAIModel(FunctionModel(stream_function=stream))


def deltas(parts: Any) -> list[ToolCallDeltaPart]:
    return [p for p in parts if isinstance(p, ToolCallDeltaPart)]


async def test_stream_chat_emits_the_arguments_as_they_stream() -> None:
    result = nd.stream_chat(model=model(), messages="Rows in a?", tools=[count])
    parts = [part async for part in result.full_stream]
    forming = deltas(parts)
    assert {(p.tool_call_id, p.tool_name, p.step_index) for p in forming} == {(CALL_ID, "count", 0)}
    assert "".join(p.args_delta for p in forming) == '{"table": "a"}'
    kinds = [p.type for p in parts]
    # the call forms, then is complete
    assert kinds.index("tool-call-delta") < kinds.index("tool-call")
    assert await result.text == "It has 12 rows."


async def test_a_durable_run_logs_them_with_their_attempt_and_replays_them() -> None:
    store = nd.open_store("memory://")
    session = nd.DurableSession(store)
    result = nd.stream_chat(model=model(), messages="Rows in a?", tools=[count], session=session)
    parts = [part async for part in result.full_stream]
    live = deltas(parts)
    assert "".join(p.args_delta for p in live) == '{"table": "a"}'
    assert result.run_id is not None
    events = await nd.read_events(store, result.run_id)
    logged = [e for e in events if e.type == "tool_call_delta"]
    assert [e.payload["args_delta"] for e in logged] == ['{"tab', 'le": "a"}']
    attempts = {e.attempt_id for e in events if e.type == "model_attempt_started"}
    assert {e.attempt_id for e in logged} <= attempts
    # the log replays the stream exactly, the forming call included
    assert [p for p in (e.to_part() for e in events) if p is not None] == parts
    # model_delta events stay text; the call is logged complete, once
    assert all(e.payload["type"] == "text_delta" for e in events if e.type == "model_delta")
    assert nd.fold_events(events).text == "It has 12 rows."
    calls = [e for e in events if e.type == "tool_call"]
    assert [e.payload["tool_call"]["args"] for e in calls] == [{"table": "a"}]


async def test_a_viewer_sees_the_call_forming_until_the_attempt_completes() -> None:
    store = nd.open_store("memory://")
    session = nd.DurableSession(store)
    result = nd.stream_chat(model=model(), messages="Rows in a?", tools=[count], session=session)
    [_ async for _ in result.full_stream]
    assert result.run_id is not None
    events = await nd.read_events(store, result.run_id)
    view = nd.RunView()
    seen = []
    for event in events:
        view.apply(event)
        if event.type in ("tool_call_delta", "model_completed") and event.step_index == 0:
            step = view.steps[0]
            seen.append([(c["tool_name"], c["args_text"]) for c in step.forming_calls.values()])
    assert seen == [[("count", '{"tab')], [("count", '{"table": "a"}')], []]
    assert view.steps[0].tool_calls[0]["args"] == {"table": "a"}
