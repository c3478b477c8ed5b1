"""LangChain tools (langchain-core's own @tool, StructuredTool and BaseTool) in nbdurable runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.tools import (
    BaseTool,
    InjectedToolArg,
    InjectedToolCallId,
    StructuredTool,
    ToolException,
    tool,
)
from pydantic import BaseModel, Field

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime


@tool
def multiply(a: int, b: int = 2) -> int:
    """Multiply two integers."""
    return a * b


@tool(parse_docstring=True)
async def lookup(city: str, call_id: Annotated[str, InjectedToolCallId]) -> dict[str, Any]:
    """Look up a city's population.

    Args:
        city: The city's name.
    """
    return {"city": city, "population": 1_000_000, "call": call_id}


@tool
def keyed(item: str, ctx: Annotated[nd.ToolContext, InjectedToolArg]) -> str:
    """Book an item once (uses nbdurable's idempotency key)."""
    return f"booked {item} under {ctx.idempotency_key}"


class SearchArgs(BaseModel):
    query: str = Field(description="What to look for.")
    limit: int = Field(3, ge=1, le=10)


class Search(BaseTool):
    name: str = "search"
    description: str = "Search the catalogue."
    args_schema: type[BaseModel] = SearchArgs
    handle_tool_error: bool = True

    def _run(self, query: str, limit: int = 3) -> str:
        if query == "boom":
            raise ToolException("the catalogue is down")
        return f"{limit} results for {query}"


def results(result: nd.GenerateTextResult) -> list[nd.ToolResultPart]:
    return [p for m in result.messages for p in m.content if isinstance(p, nd.ToolResultPart)]


async def run_calls(tools: list[nd.Tool], *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    script: list[Any] = [nd.Turn(tool_calls=[call]) for call in calls] + ["done"]
    result = await nd.generate_text(
        model=nd.ScriptedModel(script), messages=[nd.user("go")], tools=tools, max_steps=10
    )
    assert result.status == "completed"
    return results(result)


def test_the_schema_and_description_come_from_the_langchain_tool() -> None:
    search = nd.Tool.from_langchain(Search())
    assert search.name == "search" and search.description == "Search the catalogue."
    props = search.parameters["properties"]
    assert props["query"]["description"] == "What to look for."
    assert props["limit"]["maximum"] == 10
    assert search.parameters["required"] == ["query"]
    found = nd.Tool.from_langchain(lookup)
    assert set(found.parameters["properties"]) == {"city"}  # injected arguments are hidden
    assert found.description == "Look up a city's population."
    ctx_tool = nd.Tool.from_langchain(keyed)
    assert set(ctx_tool.parameters["properties"]) == {"item"}


async def test_calls_run_through_langchain_and_results_are_its_tool_message_content() -> None:
    tools = [nd.Tool.from_langchain(t) for t in (multiply, lookup, Search())]
    out = await run_calls(
        tools,
        ("multiply", {"a": 6, "b": 7}),
        ("lookup", {"city": "Lyon"}),
        ("search", {"query": "maps"}),
    )
    assert [r.is_error for r in out] == [False, False, False]
    assert out[0].result == "42"  # what LangChain puts in its ToolMessage
    assert '"population": 1000000' in out[1].result and out[1].tool_call_id in out[1].result
    assert out[2].result == "3 results for maps"


async def test_errors_and_invalid_arguments_become_is_error_results() -> None:
    tools = [nd.Tool.from_langchain(Search()), nd.Tool.from_langchain(multiply)]
    out = await run_calls(
        tools,
        ("search", {"query": "boom"}),  # handle_tool_error: LangChain's error status
        ("search", {"query": "x", "limit": 99}),  # refused by the tool's own schema
        ("multiply", {"a": "six"}),
    )
    assert all(r.is_error for r in out)
    assert "the catalogue is down" in out[0].result
    assert "limit" in out[1].result and "less than or equal to 10" in out[1].result
    assert "a:" in out[2].result


async def test_the_tool_context_and_idempotency_key_reach_the_langchain_tool(
    tmp_path: Path,
) -> None:
    agent = Agent(
        "booker",
        nd.ScriptedModel([nd.Turn.call("keyed", item="seat 4A"), "booked"]),
        [nd.Tool.from_langchain(keyed, needs_approval=True, recovery="idempotent")],
        version="1",
    )
    assert agent.recovery_of("keyed") == "idempotent"
    async with await DurableRuntime.open(
        store=nd.open_store(f"sqlite:///{tmp_path}/runs.db"), agents=[agent]
    ) as runtime:
        run = await runtime.submit("booker", "book it")
        await run.wait("waiting_approval", timeout=30)  # approval stays nbdurable's
        await run.approve()
        await run.wait("completed", timeout=30)
        messages = runtime.store.load(run.run_id).messages
        (result,) = [p for m in messages for p in m.content if isinstance(p, nd.ToolResultPart)]
        assert result.result == f"booked seat 4A under {run.run_id}:{result.tool_call_id}"


def test_tools_that_cannot_be_wrapped_are_refused() -> None:
    with pytest.raises(nd.ConfigurationError, match="not a LangChain BaseTool"):
        nd.Tool.from_langchain(lambda x: x)

    def needs_store(key: str, store: Annotated[dict[str, Any], InjectedToolArg]) -> str:
        """Read from an injected store."""
        return store[key]

    with pytest.raises(nd.ConfigurationError, match="injects 'store'"):
        nd.Tool.from_langchain(StructuredTool.from_function(needs_store))
    with pytest.raises(nd.ConfigurationError, match="recovery"):
        nd.Tool.from_langchain(multiply, recovery="sometimes")
    with pytest.raises(TypeError, match="unexpected options: title"):
        nd.Tool.from_langchain(multiply, title="times")  # type: ignore[call-arg]


def test_name_and_description_can_be_overridden() -> None:
    wrapped = nd.Tool.from_langchain(multiply, name="times", description="a times b")
    assert (wrapped.name, wrapped.description) == ("times", "a times b")
