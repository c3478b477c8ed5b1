"""A hand-written multi-step Claude conversation through the loop, resume and the runtime.

The replies follow Anthropic's documented wire format (tool_use blocks with
``toolu_`` ids, stop reasons, usage); the loopback server serves them as JSON or
SSE, and records what the adapter sent back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support.tiers import skip_without

import nbdurable as nd
from nbdurable.models._anthropic import AnthropicModel

from .anthropic_server import AnthropicServer, message, text, tool_use

skip_without("anthropic", reason="the anthropic extra is not installed")

MODEL = "claude-haiku-4-5"
PARIS, LONDON = "toolu_01A09q90qw90lq917835lq9", "toolu_01B7hdq2Fv8rVx2b1yQ9kKxF"
DROP = "toolu_01D7FLrfh4GYq7yT1ULFeyMV"


@nd.tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return {"Paris": "18°C, sunny", "London": "14°C, rain"}[city]


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a warehouse table."""
    return f"dropped {name}"


def weather_conversation() -> list[dict[str, Any]]:
    return [
        message(
            text("I'll check both cities."),
            tool_use(PARIS, "get_weather", city="Paris"),
            tool_use(LONDON, "get_weather", city="London"),
            stop_reason="tool_use",
            input_tokens=500,
            output_tokens=80,
            msg_id="msg_01Aq9w938a90dw8q",
        ),
        message(
            text("Paris: 18°C and sunny. London: 14°C with rain."),
            input_tokens=120,
            output_tokens=20,
            cache_read=500,
            msg_id="msg_01Bq9w938a90dw8r",
        ),
    ]


@pytest.fixture
async def served() -> AsyncIterator[tuple[AnthropicServer, AnthropicModel]]:
    server = AnthropicServer().start()
    model = AnthropicModel(MODEL, api_key="sk-ant-test", base_url=server.url)
    yield server, model
    await model.aclose()
    server.stop()


def assert_tool_results_sent_back(body: dict[str, Any]) -> None:
    user, assistant, results = body["messages"]
    assert user == {
        "role": "user",
        "content": [{"type": "text", "text": "Weather in Paris and London?"}],
    }
    assert [b.get("id") for b in assistant["content"]] == [None, PARIS, LONDON]
    assert results == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": PARIS, "content": "18°C, sunny"},
            {"type": "tool_result", "tool_use_id": LONDON, "content": "14°C, rain"},
        ],
    }
    assert body["system"] == "You are a weather bot."


async def test_generate_text_runs_the_conversation(served: Any) -> None:
    server, model = served
    server.add(*weather_conversation())
    result = await nd.generate_text(
        model=model,
        messages="Weather in Paris and London?",
        tools=[get_weather],
        instructions="You are a weather bot.",
    )
    assert result.text == "Paris: 18°C and sunny. London: 14°C with rain."
    assert result.finish_reason == "stop" and len(result.steps) == 2
    assert [c.tool_call_id for c in result.messages[1].tool_calls] == [PARIS, LONDON]
    assert len(server.requests) == 2
    assert_tool_results_sent_back(server.requests[1])
    assert [t["name"] for t in server.requests[0]["tools"]] == ["get_weather"]
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) == (1120, 100, 500)
    assert usage.cost == pytest.approx((1120 - 500 + 500 * 0.1 + 100 * 5) / 1e6)


async def test_stream_chat_runs_the_conversation(served: Any) -> None:
    server, model = served
    server.add(*weather_conversation())
    stream = nd.stream_chat(
        model=model,
        messages="Weather in Paris and London?",
        tools=[get_weather],
        instructions="You are a weather bot.",
    )
    parts = [part async for part in stream.full_stream]
    assert await stream.text == "Paris: 18°C and sunny. London: 14°C with rain."
    assert all(body["stream"] is True for body in server.requests)
    kinds = [p.type for p in parts]
    assert kinds.count("step-start") == 2 and kinds[-1] == "finish"
    assert [p.tool_call.tool_call_id for p in parts if p.type == "tool-call"] == [PARIS, LONDON]
    deltas = "".join(p.delta for p in parts if p.type == "text-delta")
    assert deltas == "I'll check both cities.Paris: 18°C and sunny. London: 14°C with rain."
    assert_tool_results_sent_back(server.requests[1])


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "denied"])
async def test_suspend_on_approval_and_resume_from_sqlite(
    served: Any, tmp_path: Path, approved: bool
) -> None:
    server, model = served
    server.add(
        message(
            text("I'll drop it."),
            tool_use(DROP, "drop_table", name="stg_2023"),
            stop_reason="tool_use",
        ),
        message(text("Done." if approved else "Understood, I left it.")),
    )
    store = nd.SqliteSessionStore(tmp_path / "runs.db")
    signer = nd.ApprovalSigner(secret="test secret")
    first = await nd.generate_text(
        model=model,
        messages="Drop stg_2023.",
        tools=[drop_table],
        session=nd.DurableSession(store, run_id="run-claude"),
        approval_signer=signer,
    )
    assert first.status == "suspended"
    [request] = first.pending_approvals
    assert request.tool_call_id == DROP and request.token is not None
    assert store.load("run-claude").messages[-1].tool_calls[0].tool_call_id == DROP

    # another process: a fresh store handle and a fresh model (a new SDK client)
    reopened = nd.SqliteSessionStore(tmp_path / "runs.db")
    fresh = AnthropicModel(MODEL, api_key="sk-ant-test", base_url=server.url)
    verdict = nd.ToolApprovalResponse(
        approval_id=request.approval_id, approved=approved, token=request.token
    )
    done = await nd.resume_from_checkpoint(
        reopened, "run-claude", model=fresh, tools=[drop_table], approval_signer=signer,
        approval_responses=[verdict],
    )  # fmt: skip
    await fresh.aclose()
    assert done.status == "completed"
    assert done.text == ("Done." if approved else "Understood, I left it.")
    assert len(server.requests) == 2
    _, assistant, results = server.requests[1]["messages"]
    assert assistant["content"][1] == {
        "type": "tool_use", "id": DROP, "name": "drop_table", "input": {"name": "stg_2023"}
    }  # fmt: skip
    [result] = results["content"]
    assert result["tool_use_id"] == DROP
    if approved:
        assert result == {"type": "tool_result", "tool_use_id": DROP, "content": "dropped stg_2023"}
    else:
        assert result["is_error"] is True
    history = reopened.load("run-claude").messages
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[2].tool_results[0].tool_call_id == DROP


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
async def test_a_durable_runtime_run_completes(served: Any, tmp_path: Path, stream: bool) -> None:
    server, model = served
    server.add(*weather_conversation())
    agent = nd.Agent(
        "weather",
        model,
        [get_weather],
        "You are a weather bot.",
        version="1",
        stream=stream,
        tool_recovery={"get_weather": "safe"},
    )
    store = nd.open_store(f"sqlite:///{tmp_path / 'runtime.db'}")
    async with await nd.DurableRuntime.open(store=store, agents=[agent]) as runtime:
        run = await runtime.submit("weather", "Weather in Paris and London?")
        result = await run.result()
    assert result.text == "Paris: 18°C and sunny. London: 14°C with rain."
    assert len(server.requests) == 2
    assert_tool_results_sent_back(server.requests[1])


class Forecast(BaseModel):
    city: str
    temp_c: int


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
async def test_output_type_through_the_loop_with_tools(served: Any, streaming: bool) -> None:
    server, model = served
    server.add(
        message(tool_use(PARIS, "get_weather", city="Paris"), stop_reason="tool_use"),
        message(
            tool_use("toolu_01Fc", "Forecast", city="Paris", temp_c=18), stop_reason="tool_use"
        ),
    )
    options: dict[str, Any] = {
        "model": model, "messages": "Paris?", "tools": [get_weather], "output_type": Forecast,
    }  # fmt: skip
    if streaming:
        stream = nd.stream_chat(**options)
        output = await stream.output
    else:
        output = (await nd.generate_text(**options)).output
    assert output == Forecast(city="Paris", temp_c=18)
    first, second = server.requests
    assert [t["name"] for t in first["tools"]] == ["get_weather", "Forecast"]
    assert first["tool_choice"] == {"type": "any"}
    assert second["messages"][-1]["content"][0]["tool_use_id"] == PARIS
