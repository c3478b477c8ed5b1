"""The run widget shows a tool call forming: the arguments the model streams, live,
until the attempt completes and the complete call takes its place.

No browser: ``FrontEndSteps`` rebuilds what a view holds from the kernel's messages
as run_view.js does; the model is Pydantic AI's own FunctionModel streaming a call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

import nbdurable as nd
from nbdurable.models import PydanticAIModel
from nbdurable.notebook.widgets import RunWidget

from ..widget_fixtures import (  # noqa: F401
    FrontEndSteps,
    comms_fixture,
    eventually,
    lookup,
    runtime_for,
    step_messages,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ARGS = '{"table": "stg_2023_orders"}'
PIECES = [ARGS[i : i + 8] for i in range(0, len(ARGS), 8)]


async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        yield "It has no rows."
        return
    for i, piece in enumerate(PIECES):
        await asyncio.sleep(0.06)  # a model writing its arguments, slowly
        name = "lookup" if i == 0 else None
        yield {
            0: DeltaToolCall(name=name, json_args=piece, tool_call_id="call_1" if i == 0 else None)
        }


def agent() -> nd.Agent:
    model = PydanticAIModel(FunctionModel(stream_function=stream, model_name="writer"))
    return nd.Agent("writer", model, [lookup], version="1", stream=True)


async def test_a_call_forms_in_the_view_then_is_complete(tmp_path: Path, comms: list[Any]) -> None:
    async with runtime_for(tmp_path, agent(), flush_interval=0.005) as runtime:
        run = await runtime.submit("writer", "Rows in stg_2023_orders?")
        widget = RunWidget(runtime, run.run_id)
        await run.result()
        await eventually(lambda: not widget.following)
    view = FrontEndSteps()
    forming: list[str] = []
    for _t, message in step_messages(comms, widget):
        view.receive(message)
        first = view.steps.get(0)
        if first and first["forming_calls"]:
            [call] = first["forming_calls"]
            assert (call["tool_call_id"], call["tool_name"]) == ("call_1", "lookup")
            forming.append(call["args_text"])
    # the view saw the arguments grow, a prefix at a time, before the call was complete
    assert len(set(forming)) >= 2
    assert all(ARGS.startswith(text) for text in forming)
    [step, _answer] = view.ordered()
    assert step["forming_calls"] == []
    assert [c["args"] for c in step["tool_calls"]] == [json.loads(ARGS)]
    assert widget.steps == view.ordered()
