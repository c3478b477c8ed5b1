"""OpenTelemetry traces: GenAI-convention spans, the caller's parent, one trace across processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.runtime_harness import executions, worker
from support.tracing_harness import janitor, read_spans, span_dicts

import nbdurable as nd
from nbdurable import tracing
from nbdurable.runtime import DurableRuntime
from nbdurable.tracing import LEG_KEY

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    nd.instrument(provider)
    try:
        yield provider, exporter
    finally:
        tracing.uninstrument()


def by_name(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        out.setdefault(span["name"], []).append(span)
    return out


@nd.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def test_without_instrument_opentelemetry_is_never_imported() -> None:
    code = (
        "import asyncio, sys, nbdurable as nd\n"
        "@nd.tool\n"
        "def add(a: int, b: int) -> int:\n"
        "    '''Add.'''\n"
        "    return a + b\n"
        "model = nd.ScriptedModel([nd.Turn.call('add', a=1, b=2), '3'])\n"
        "session = nd.DurableSession(nd.open_store('memory://'))\n"
        "r = asyncio.run(nd.generate_text(model=model, messages='1+2?', tools=[add],"
        " session=session))\n"
        "assert r.text == '3'\n"
        "print(','.join(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    # pydantic loads its plugins' entry points with the first model: where logfire is
    # installed, its plugin imports OpenTelemetry whatever nbdurable does, so plugins are off.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYDANTIC_DISABLE_PLUGINS": "__all__"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == ""


async def test_a_call_with_a_tool_is_one_agent_span_over_chat_and_tool_spans(traced: Any) -> None:
    provider, exporter = traced
    model = nd.ScriptedModel([nd.Turn.call("add", a=1, b=2), "3"])
    session = nd.DurableSession(nd.open_store("memory://"), run_id="run-add")
    with provider.get_tracer("caller").start_as_current_span("notebook cell") as cell:
        result = await nd.generate_text(
            model=model, messages="What is 1+2?", tools=[add], session=session
        )
    assert result.text == "3"
    spans = span_dicts(exporter.get_finished_spans())
    names = by_name(spans)
    assert sorted(names) == ["chat scripted", "execute_tool add", "invoke_agent", "notebook cell"]
    [agent] = names["invoke_agent"]
    [caller] = names["notebook cell"]
    assert agent["parent_id"] == f"{cell.get_span_context().span_id:016x}"
    assert {s["trace_id"] for s in spans} == {caller["trace_id"]}
    assert agent["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert agent["attributes"]["nbdurable.run_id"] == "run-add"
    assert agent["attributes"]["nbdurable.status"] == "completed"
    first, second = names["chat scripted"]
    for chat in (first, second):
        assert chat["parent_id"] == agent["span_id"]
        assert chat["kind"] == "CLIENT"
        attrs = chat["attributes"]
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "scripted"
        assert attrs["gen_ai.request.model"] == "scripted"
        assert attrs["gen_ai.usage.input_tokens"] >= 1
        assert attrs["gen_ai.usage.output_tokens"] >= 1
    assert first["attributes"]["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert second["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    assert (
        first["attributes"]["nbdurable.step_index"],
        second["attributes"]["nbdurable.step_index"],
    ) == (0, 1)
    [tool] = names["execute_tool add"]
    assert tool["parent_id"] == agent["span_id"]
    assert tool["attributes"]["gen_ai.tool.name"] == "add"
    assert tool["attributes"]["gen_ai.tool.call.id"] == result.steps[0].tool_calls[0].tool_call_id
    # no content unless asked for
    everything = json.dumps(spans)
    assert "1+2" not in everything
    assert "gen_ai.tool.call.arguments" not in everything
    assert "gen_ai.input.messages" not in everything


async def test_content_is_recorded_only_when_the_user_opts_in(traced: Any) -> None:
    provider, exporter = traced
    nd.instrument(provider, capture_content=True)
    model = nd.ScriptedModel([nd.Turn.call("add", a=1, b=2), "It is 3."])
    await nd.generate_text(
        model=model,
        messages="What is 1+2?",
        tools=[add],
        instructions="Use the tool.",
        session=nd.DurableSession(nd.open_store("memory://")),
    )
    names = by_name(span_dicts(exporter.get_finished_spans()))
    [tool] = names["execute_tool add"]
    assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"]) == {"a": 1, "b": 2}
    assert json.loads(tool["attributes"]["gen_ai.tool.call.result"]) == 3
    first = names["chat scripted"][0]["attributes"]
    assert "What is 1+2?" in first["gen_ai.input.messages"]
    assert "Use the tool." in first["gen_ai.system_instructions"]
    assert "It is 3." in names["chat scripted"][1]["attributes"]["gen_ai.output.messages"]


async def test_a_failing_tool_marks_its_span_as_an_error(traced: Any) -> None:
    _, exporter = traced

    @nd.tool
    def broken(x: int) -> int:
        """Always fails."""
        raise RuntimeError("disk full")

    model = nd.ScriptedModel([nd.Turn.call("broken", x=1), "sorry"])
    await nd.generate_text(model=model, messages="go", tools=[broken])
    [tool] = by_name(span_dicts(exporter.get_finished_spans()))["execute_tool broken"]
    assert tool["status"] == "ERROR"
    assert tool["attributes"]["error.type"] == "tool_error"


async def test_a_run_suspended_for_approval_and_resumed_in_another_process_is_one_trace(
    traced: Any, tmp_path: Path
) -> None:
    provider, exporter = traced
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with await DurableRuntime.open(store=nd.open_store(url), agents=[janitor()]) as rt:
        with provider.get_tracer("caller").start_as_current_span("submit") as submit:
            run = await rt.submit("janitor", "Clean up the staging tables.")
        await run.wait("waiting_approval")
        record = run.record()
    caller = submit.get_span_context()
    assert record.trace_context is not None
    assert record.trace_context["traceparent"].split("-")[1] == f"{caller.trace_id:032x}"

    out = tmp_path / "spans.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"}
    resume = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "support" / "tracing_harness.py"), url, str(out), env=env
    )
    assert await asyncio.wait_for(resume.wait(), 120) == 0
    first = span_dicts(exporter.get_finished_spans())
    later = json.loads(out.read_text())
    trace_id = f"{caller.trace_id:032x}"
    assert {s["trace_id"] for s in first + later} == {trace_id}

    [leg1] = by_name(first)["invoke_agent janitor"]
    [leg2] = by_name(later)["invoke_agent janitor"]
    submit_id = f"{caller.span_id:016x}"
    # both legs are children of the submitter's span; the second links to the first
    assert leg1["parent_id"] == submit_id
    assert leg2["parent_id"] == submit_id
    assert leg2["links"] == [leg1["span_id"]]
    assert leg1["attributes"]["nbdurable.run_id"] == run.run_id
    assert leg1["attributes"]["gen_ai.agent.name"] == "janitor"
    assert leg1["attributes"]["nbdurable.status"] == "suspended"
    [wait] = [e for e in leg1["events"] if e["name"] == "nbdurable.approval.wait"]
    assert wait["attributes"]["gen_ai.tool.name"] == "drop_table"
    approval_id = wait["attributes"]["nbdurable.approval.id"]
    assert leg2["attributes"]["nbdurable.resumed"] is True
    assert leg2["attributes"]["nbdurable.status"] == "completed"
    [answered] = [e for e in leg2["events"] if e["name"] == "nbdurable.approval.answered"]
    assert answered["attributes"] == {
        "nbdurable.approval.id": approval_id,
        "nbdurable.approval.approved": True,
    }
    # leg 1: list_tables ran; leg 2: the approved drop_table ran, then the answer
    first_names = by_name(first)
    [listing] = first_names["execute_tool list_tables"]
    assert listing["parent_id"] == leg1["span_id"]
    assert listing["attributes"]["nbdurable.tool.recovery"]
    later_names = by_name(later)
    [drop] = later_names["execute_tool drop_table"]
    assert drop["parent_id"] == leg2["span_id"]
    assert all(c["parent_id"] == leg2["span_id"] for c in later_names["chat scripted"])
    assert all(c["attributes"]["nbdurable.attempt"] == 1 for c in later_names["chat scripted"])


async def test_a_run_taken_over_after_a_crash_stays_in_the_callers_trace(
    traced: Any, tmp_path: Path
) -> None:
    """A traced worker is SIGKILLed inside the run's tool; a second traced worker takes
    the run over: its leg is a child of the submitter's span, in the same trace, links
    to the killed leg, is marked taken over, and holds the re-run's chat and tool spans."""
    from support import runtime_agents

    provider, _ = traced
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=runtime_agents.agents)  # submits only
    with provider.get_tracer("caller").start_as_current_span("submit") as submit:
        run = await client.submit("sleeper", "nap")
    caller = submit.get_span_context()
    trace_id, submit_id = f"{caller.trace_id:032x}", f"{caller.span_id:016x}"
    traced_agents = "support.embedded_traced:agents"

    first_spans, second_spans = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first = worker(url, log, agents=traced_agents, env={"NBDURABLE_TEST_SPANS": str(first_spans)})
    try:
        deadline = time.monotonic() + 60
        while not executions(log):  # the first leg is inside slow_step (2 s)
            assert time.monotonic() < deadline and first.poll() is None, first.stderr
            await asyncio.sleep(0.02)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    killed = run.record()
    assert killed.state == "running" and killed.fence == 1
    assert killed.trace_context is not None
    leg1_id = killed.trace_context[LEG_KEY].split("-")[2]
    assert killed.trace_context["traceparent"].split("-")[1:3] == [trace_id, submit_id]

    second = worker(
        url,
        log,
        "--exit-when-idle",
        agents=traced_agents,
        env={"NBDURABLE_TEST_SPANS": str(second_spans)},
    )
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    record = run.record()
    assert record.state == "completed" and record.fence == 2, err
    store.close()

    # the killed leg's span never ended; the model call it made did, under it
    before = by_name(read_spans(first_spans))
    assert "invoke_agent sleeper" not in before
    [chat1] = before["chat scripted"]
    assert (chat1["trace_id"], chat1["parent_id"]) == (trace_id, leg1_id)

    after = read_spans(second_spans)
    names = by_name(after)
    [leg2] = names["invoke_agent sleeper"]
    assert leg2["trace_id"] == trace_id
    assert leg2["parent_id"] == submit_id
    assert leg2["links"] == [leg1_id]
    assert leg2["span_id"] != leg1_id
    assert leg2["attributes"]["nbdurable.taken_over"] is True
    assert leg2["attributes"]["nbdurable.fence"] == 2
    assert leg2["attributes"]["nbdurable.run_id"] == run.run_id
    assert leg2["attributes"]["nbdurable.status"] == "completed"
    [tool] = names["execute_tool slow_step"]  # safe: run again by the new owner
    assert tool["parent_id"] == leg2["span_id"]
    assert tool["attributes"]["nbdurable.tool.recovery"] == "safe"
    assert names["chat scripted"]
    assert all(c["parent_id"] == leg2["span_id"] for c in names["chat scripted"])
    assert {s["trace_id"] for s in after} == {trace_id}
