"""The OpenAI Agents SDK (the real ``openai-agents`` package): its function tools and Agent
definitions run durably, with nbdurable's approvals; a run parked on an approval survives a
SIGKILL of its worker and is resumed by another process, the tool running once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import runtime_harness

pytest.importorskip("agents")

import agents as sdk
from agents.tool_context import ToolContext
from pydantic import BaseModel

import nbdurable as nd
from nbdurable.runtime import DurableRuntime

from . import openai_agents_defs
from .openai_agents_defs import CALL_ID, Cleanup

HERE = Path(__file__).resolve().parent


@sdk.function_tool
def count_rows(ctx: ToolContext[None], table: str) -> int:
    """Count the rows of a table.

    Args:
        table: The table's name.
    """
    assert ctx.tool_name == "count_rows" and ctx.tool_call_id
    return {"a": 12, "b": 0}[table]


@sdk.function_tool
def broken(table: str) -> int:
    """Always fails."""
    raise RuntimeError(f"no such table {table}")


def test_a_function_tool_keeps_its_name_description_and_strict_schema() -> None:
    tool = nd.Tool.from_openai_agents(count_rows)
    assert tool.name == "count_rows"
    assert tool.description == "Count the rows of a table."
    assert tool.parameters == count_rows.params_json_schema
    assert tool.parameters["properties"]["table"]["description"] == "The table's name."
    gated = nd.Tool.from_openai_agents(openai_agents_defs.drop_table)
    assert gated.needs_approval is True


async def test_function_tools_run_through_their_own_invoke() -> None:
    model = nd.ScriptedModel(
        [nd.Turn.call("count_rows", table="a"), nd.Turn.call("broken", table="z"), "a has 12."]
    )
    result = await nd.generate_text(
        model=model,
        messages="How many rows in a?",
        tools=[nd.Tool.from_openai_agents(count_rows), nd.Tool.from_openai_agents(broken)],
    )
    assert result.text == "a has 12."
    first, second = (m.tool_results[0] for m in result.messages if m.role == "tool")
    assert first.result == 12
    # the SDK's own failure handling: the error text its default failure function writes
    assert str(second.result).startswith("An error occurred while running the tool.")


async def test_a_callable_needs_approval_gates_by_the_arguments() -> None:
    async def only_prod(ctx: Any, args: dict[str, Any], call_id: str) -> bool:
        return bool(args["table"].startswith("prod"))

    tool = nd.Tool.from_openai_agents(
        sdk.FunctionTool(
            name="peek",
            description="Peek.",
            params_json_schema=count_rows.params_json_schema,
            on_invoke_tool=count_rows.on_invoke_tool,
            needs_approval=only_prod,
        )
    )
    assert callable(tool.needs_approval)
    assert await tool.needs_approval({"table": "prod_x"}) is True  # type: ignore[misc,operator]
    assert await tool.needs_approval({"table": "stg_x"}) is False  # type: ignore[misc,operator]


async def test_an_agent_with_instructions_tools_output_type_and_a_handoff() -> None:
    class Report(BaseModel):
        rows: int

    auditor = sdk.Agent(
        name="Row Auditor",
        instructions="You count rows.",
        handoff_description="Counts the rows of tables.",
        tools=[count_rows],
    )
    triage = sdk.Agent(
        name="triage", instructions="Route the question.", handoffs=[auditor], output_type=Report
    )
    auditor.handoffs.append(triage)  # back and forth: the way back is left out
    model = nd.ScriptedModel(
        [
            nd.Turn.call("transfer_to_row_auditor", prompt="Count the rows of a."),
            nd.Turn.call("count_rows", table="a"),
            "a has 12 rows.",
            '{"rows": 12}',
        ],
        mode="sequential",
        keep_requests=None,
    )
    agent = nd.Agent.from_openai_agents(triage, model=model, version="1")
    assert agent.id == "triage"
    assert agent.instructions == "Route the question."
    assert agent.output_type is Report
    [handoff] = agent.tool_map.values()
    assert handoff.name == "transfer_to_row_auditor"
    assert handoff.description == "Counts the rows of tables."
    result = await nd.generate_text(messages="How many rows in a?", **agent.loop_options())
    assert result.output == Report(rows=12)
    assert "You count rows." in str(model.requests[1].instructions)
    assert [t.name for t in model.requests[1].tools] == ["count_rows"]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: sdk.Agent(name="a", instructions=lambda ctx, agent: "hi"), "callable"),
        (lambda: sdk.Agent(name="a", tools=[sdk.WebSearchTool()]), "hosted"),
        (lambda: sdk.Agent(name="a", tool_use_behavior="stop_on_first_tool"), "tool_use_behavior"),
        (lambda: sdk.Agent(name="a", handoffs=[sdk.handoff(sdk.Agent(name="b"))]), "Handoff"),
        (lambda: sdk.Agent(name="a", model=None), "model="),
    ],
)
def test_what_does_not_map_is_refused(make: Any, match: str) -> None:
    agent = make()
    model = None if match == "model=" else nd.ScriptedModel(["x"])
    with pytest.raises(nd.ConfigurationError, match=match):
        nd.Agent.from_openai_agents(agent, model=model, version="1")


def executions(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def test_a_run_parked_on_approval_survives_sigkill_and_resumes_once_in_another_process(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=openai_agents_defs.agents)

    def worker(*extra: str) -> subprocess.Popen[str]:
        return runtime_harness.worker(
            url, log, *extra, agents="interop.openai_agents_defs:agents", path=HERE.parent
        )

    first = worker()
    try:
        run = await client.submit("janitor", "Drop the stale staging tables.")
        await asyncio.wait_for(run.wait("waiting_approval"), 60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    assert first.returncode == -signal.SIGKILL
    [request] = await run.pending_approvals()
    assert (request.tool_call_id, request.tool_name) == (CALL_ID, "drop_table")
    assert request.input == {"name": "stg_2023"}
    assert executions(log) == []  # nothing ran before the verdict

    await run.approve(request.approval_id)
    second = worker("--exit-when-idle")
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert run.status == "completed"
    result = await run.result()
    assert result.output == Cleanup(dropped=["stg_2023"])
    assert executions(log) == [f"drop {CALL_ID} stg_2023"]  # once, after the approval
    store.close()  # type: ignore[attr-defined]
