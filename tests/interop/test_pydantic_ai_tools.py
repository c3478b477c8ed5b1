"""Pydantic AI tools (pydantic_ai.Tool and plain functions) in nbdurable runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import ModelRetry, RunContext, Tool, ToolReturn

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime


@dataclass
class Warehouse:
    name: str
    stock: dict[str, int]


async def stock_level(ctx: RunContext[Warehouse], sku: str) -> dict[str, Any]:
    """How many units of a SKU are in stock.

    Args:
        sku: The stock-keeping unit.
    """
    if sku not in ctx.deps.stock:
        raise ModelRetry(f"unknown SKU {sku!r}; known: {', '.join(sorted(ctx.deps.stock))}")
    return {"warehouse": ctx.deps.name, "sku": sku, "units": ctx.deps.stock[sku]}


class Point(BaseModel):
    x: float
    y: float


def distance(a: Point, b: Point) -> float:
    """Distance between two points."""
    return float(((a.x - b.x) ** 2 + (a.y - b.y) ** 2) ** 0.5)


def reads_the_model(ctx: RunContext[None]) -> str:
    """Read what only a Pydantic AI agent run has."""
    return str(ctx.model)


def with_return(n: int) -> ToolReturn:
    """Return a ToolReturn."""
    return ToolReturn(return_value={"n": n}, content="shown to the model separately")


def results(result: nd.GenerateTextResult) -> list[nd.ToolResultPart]:
    return [p for m in result.messages for p in m.content if isinstance(p, nd.ToolResultPart)]


async def run_calls(tools: list[nd.Tool], *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    script: list[Any] = [nd.Turn(tool_calls=[call]) for call in calls] + ["done"]
    result = await nd.generate_text(
        model=nd.ScriptedModel(script), messages=[nd.user("go")], tools=tools, max_steps=10
    )
    assert result.status == "completed"
    return results(result)


def test_the_schema_comes_from_pydantic_ai() -> None:
    tool = nd.Tool.from_pydantic_ai(stock_level, deps=Warehouse("north", {}))
    assert tool.name == "stock_level"
    assert tool.description == "How many units of a SKU are in stock."
    assert tool.parameters["properties"]["sku"] == {
        "description": "The stock-keeping unit.",
        "type": "string",
    }
    assert "ctx" not in tool.parameters["properties"]
    shaped = nd.Tool.from_pydantic_ai(Tool(distance, name="dist", description="How far."))
    assert (shaped.name, shaped.description) == ("dist", "How far.")
    assert set(shaped.parameters["properties"]) == {"a", "b"}


async def test_deps_reach_the_run_context_and_model_retry_is_an_is_error_result() -> None:
    deps = Warehouse("north", {"A-1": 12})
    tool = nd.Tool.from_pydantic_ai(Tool(stock_level), deps=deps)
    out = await run_calls([tool], ("stock_level", {"sku": "A-1"}), ("stock_level", {"sku": "Z"}))
    assert not out[0].is_error
    assert out[0].result == {"warehouse": "north", "sku": "A-1", "units": 12}
    assert out[1].is_error and out[1].result == "PydanticAIToolError: unknown SKU 'Z'; known: A-1"


async def test_arguments_are_validated_by_the_tools_own_schema() -> None:
    tool = nd.Tool.from_pydantic_ai(distance)
    out = await run_calls(
        [tool],
        ("distance", {"a": {"x": 0, "y": 0}, "b": {"x": 3, "y": 4}}),
        ("distance", {"a": {"x": 0}, "b": {"x": 3, "y": 4}}),
    )
    assert not out[0].is_error and out[0].result == 5.0
    assert out[1].is_error and "a.y: Field required" in out[1].result


async def test_context_fields_nbdurable_does_not_carry_fail_with_a_clear_message() -> None:
    tool = nd.Tool.from_pydantic_ai(reads_the_model, deps=None)
    (out,) = await run_calls([tool], ("reads_the_model", {}))
    assert out.is_error and "'model' is not available" in out.result
    (ret,) = await run_calls([nd.Tool.from_pydantic_ai(with_return)], ("with_return", {"n": 3}))
    assert ret.result == {"n": 3}


def test_a_tool_taking_a_run_context_without_deps_is_refused() -> None:
    with pytest.raises(nd.ConfigurationError, match=r"takes a RunContext.*deps="):
        nd.Tool.from_pydantic_ai(stock_level)
    with pytest.raises(nd.ConfigurationError, match=r"neither a pydantic_ai\.Tool"):
        nd.Tool.from_pydantic_ai(42)


async def test_requires_approval_carries_over_and_the_runtime_gates_it(tmp_path: Path) -> None:
    gated = nd.Tool.from_pydantic_ai(
        Tool(stock_level, requires_approval=True), deps=Warehouse("south", {"B-2": 1})
    )
    assert gated.needs_approval is True
    assert nd.Tool.from_pydantic_ai(distance, needs_approval=True).needs_approval is True
    agent = Agent(
        "stock",
        nd.ScriptedModel([nd.Turn.call("stock_level", sku="B-2"), "one left"]),
        [gated],
        version="1",
    )
    async with await DurableRuntime.open(
        store=nd.open_store(f"sqlite:///{tmp_path}/runs.db"), agents=[agent]
    ) as runtime:
        run = await runtime.submit("stock", "how many B-2?")
        await run.wait("waiting_approval", timeout=30)
        await run.approve()
        result = await run.result()
        assert result.text == "one left"
