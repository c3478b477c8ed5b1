"""Results have a short repr whatever the run's length (asyncio's runner reprs them)."""

from __future__ import annotations

import dataclasses

import nbdurable as nd
from nbdurable.runtime._run import RunResult


@nd.tool
def lookup(table: str) -> str:
    """Look a table up."""
    return f"{table}: " + "row " * 50


async def long_result() -> nd.GenerateTextResult:
    """A real two-step result stretched to 5,000 messages and steps, its text 20,000 chars."""
    model = nd.ScriptedModel([nd.Turn.call("lookup", table="t"), "y" * 20_000])
    result = await nd.generate_text(model=model, messages="Look.", tools=[lookup])
    messages = (result.messages * 2500)[:5000]
    steps = (result.steps * 2500)[:5000]
    return dataclasses.replace(result, messages=messages, steps=steps)


async def test_a_5000_message_generate_result_has_a_short_repr() -> None:
    result = await long_result()
    line = repr(result)
    assert len(result.messages) == 5000 and len(repr(result.messages)) > 500_000
    assert len(line) < 400, line
    assert line.startswith("GenerateTextResult(text='yyyy")
    for part in ("(20,000 chars)", "status='completed'", "finish_reason='stop'", "steps=5000"):
        assert part in line
    assert "messages=5000" in line and " in + " in line


async def test_a_5000_message_run_result_has_a_short_repr() -> None:
    result = await long_result()
    run = RunResult(run_id="r1", text=result.text, messages=result.messages, usage=result.usage)
    line = repr(run)
    assert len(line) < 300, line
    assert line.startswith("RunResult(run_id='r1', text='yyyy")
    assert "messages=5000" in line and "(20,000 chars)" in line


async def test_a_short_text_is_shown_whole() -> None:
    model = nd.ScriptedModel(["Hello!"])
    result = await nd.generate_text(model=model, messages="Hi.")
    assert "text='Hello!'," in repr(result)
