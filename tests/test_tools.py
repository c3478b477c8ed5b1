"""@tool: schemas from type hints, pydantic validation, approval gates, client tools."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest
from pydantic import BaseModel

import nbdurable as nd
from nbdurable.tools import ToolArgumentsError, normalize_tools


class Window(BaseModel):
    start: str
    days: int = 30


def test_schema_from_type_hints_and_docstring() -> None:
    @nd.tool
    def query(table: str, limit: int = 10, mode: Literal["fast", "exact"] = "fast") -> list[str]:
        """Query a table.

        Args:
            table: The table to read.
            limit: How many rows at most.
        """
        return []

    spec = query.spec
    assert spec.name == "query" and spec.description == "Query a table."
    props = spec.parameters["properties"]
    assert props["table"] == {"type": "string", "description": "The table to read."}
    assert props["limit"]["type"] == "integer" and props["limit"]["default"] == 10
    assert props["mode"]["enum"] == ["fast", "exact"]
    assert spec.parameters["required"] == ["table"]
    assert spec.parameters["additionalProperties"] is False


def test_validation_coerces_and_rejects() -> None:
    @nd.tool
    def stale(window: Window, dry_run: bool = True) -> str:
        """Find stale tables."""
        return window.start

    kwargs = stale.validate_args({"window": {"start": "2024-01-01"}})
    assert isinstance(kwargs["window"], Window) and kwargs["window"].days == 30
    with pytest.raises(ToolArgumentsError, match=r"window\.days"):
        stale.validate_args({"window": {"start": "x", "days": "many"}})
    with pytest.raises(ToolArgumentsError, match="Extra inputs"):
        stale.validate_args({"window": {"start": "x"}, "oops": 1})
    with pytest.raises(ToolArgumentsError, match="JSON object"):
        stale.validate_args(["not", "a", "dict"])  # type: ignore[arg-type]


def test_context_parameter_is_injected_and_hidden() -> None:
    seen: list[nd.ToolContext] = []

    @nd.tool
    def charge(amount: int, ctx: nd.ToolContext) -> str:
        """Charge a card."""
        seen.append(ctx)
        return ctx.idempotency_key

    assert "ctx" not in charge.spec.parameters["properties"]
    context = nd.ToolContext(tool_call_id="c9", tool_name="charge", run_id="run-1")
    assert asyncio.run(charge.invoke({"amount": 5}, context)) == "run-1:c9"
    assert seen[0].tool_call_id == "c9"
    assert nd.ToolContext(tool_call_id="c9", tool_name="charge").idempotency_key == "c9"


def test_async_tools_and_pydantic_results() -> None:
    @nd.tool
    async def fetch(n: int) -> Window:
        """Fetch a window."""
        await asyncio.sleep(0)
        return Window(start=str(n))

    context = nd.ToolContext(tool_call_id="c1", tool_name="fetch")
    assert asyncio.run(fetch.invoke({"n": 3}, context)) == {"start": "3", "days": 30}


def test_non_json_results_become_text() -> None:
    @nd.tool
    def odd() -> object:
        """Return something JSON cannot hold."""
        return {1, 2}

    context = nd.ToolContext(tool_call_id="c1", tool_name="odd")
    assert asyncio.run(odd.invoke({}, context)) == "{1, 2}"


def test_needs_approval_bool_sync_and_async_callables() -> None:
    @nd.tool(needs_approval=True)
    def always(x: int) -> int:
        """Gate always."""
        return x

    @nd.tool(needs_approval=lambda args: args["x"] > 10)
    def big(x: int) -> int:
        """Gate big values."""
        return x

    async def async_gate(args: dict[str, object]) -> bool:
        return args["x"] == 7

    @nd.tool(needs_approval=async_gate)
    def lucky(x: int) -> int:
        """Gate seven."""
        return x

    run = asyncio.run
    assert run(always.requires_approval({"x": 1})) is True
    assert run(big.requires_approval({"x": 11})) is True
    assert run(big.requires_approval({"x": 1})) is False
    assert run(lucky.requires_approval({"x": 7})) is True
    assert run(lucky.requires_approval({"x": 8})) is False


def test_client_tools_have_no_execute() -> None:
    pick = nd.client_tool("pick_color", "Ask the user for a color.", Window)
    assert pick.is_client_tool and pick.execute is None
    assert pick.spec.parameters["properties"]["start"]["type"] == "string"
    raw = nd.client_tool("confirm", parameters={"type": "object", "properties": {}})
    assert raw.validate_args({"anything": 1}) == {"anything": 1}


def test_bad_definitions_are_configuration_errors() -> None:
    with pytest.raises(nd.ConfigurationError, match="invalid tool name"):
        nd.Tool(name="has space")

    def star(*args: int) -> None:
        """Variadic."""

    with pytest.raises(nd.ConfigurationError, match=r"\*args"):
        nd.tool(star)
    with pytest.raises(nd.ConfigurationError, match="two tools"):
        normalize_tools([nd.client_tool("a"), nd.client_tool("a")])
    with pytest.raises(nd.ConfigurationError, match="not a Tool"):
        normalize_tools([print])  # type: ignore[list-item]


def test_mapping_keys_rename_tools() -> None:
    tools = normalize_tools({"lookup": nd.client_tool("original")})
    assert list(tools) == ["lookup"] and tools["lookup"].name == "lookup"
