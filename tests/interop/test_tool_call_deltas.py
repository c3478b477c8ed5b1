"""stream_chat shows a tool call forming: the adapters' tool-argument deltas become
``tool-call-delta`` parts outside a durable run (whose stream is what its log replays)."""

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


async def test_a_durable_run_logs_text_only_and_replays_exactly() -> None:
    store = nd.open_store("memory://")
    session = nd.DurableSession(store)
    result = nd.stream_chat(model=model(), messages="Rows in a?", tools=[count], session=session)
    parts = [part async for part in result.full_stream]
    # the log keeps model_delta events of text (what its readers read) and the call, once,
    # complete; a durable stream shows what its log replays, so no argument fragments
    assert deltas(parts) == []
    assert result.run_id is not None
    events = await nd.read_events(store, result.run_id)
    assert all(e.payload.get("type") == "text_delta" for e in events if e.type == "model_delta")
    assert [p for p in (e.to_part() for e in events) if p is not None] == parts
    calls = [e for e in events if e.type == "tool_call"]
    assert [e.payload["tool_call"]["args"] for e in calls] == [{"table": "a"}]
