"""A tool call forming in JupyterLab: the run widget draws the arguments the model streams.

A Pydantic AI FunctionModel writes a call's JSON arguments a few characters at a
time; the view shows the call as it forms (name, the arguments so far, marked
``forming``), the arguments growing, then the complete call in its place once the
model's turn is complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .harness import Server
from .pages import LAB, diagnosed, run_cell
from .test_run_stream import notebook

ARGS = '{"table": "' + "stg_" * 30 + 'orders"}'
SETUP = f"""\
%load_ext nbdurable
import asyncio
import nbdurable as nd
from nbdurable.models import PydanticAIModel
from nbdurable.notebook import session
from nbdurable.notebook.widgets import RunWidget
from pydantic_ai.messages import ModelRequest, ToolReturnPart
from pydantic_ai.models.function import DeltaToolCall, FunctionModel

ARGS = {ARGS!r}

@nd.tool
def lookup(table: str) -> str:
    \"\"\"Look a table up.\"\"\"
    return "no rows"

async def writer(messages, info):
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        yield "It has no rows."
        return
    for i in range(0, len(ARGS), 4):
        await asyncio.sleep(0.15)
        first = i == 0
        yield {{0: DeltaToolCall(name="lookup" if first else None, json_args=ARGS[i : i + 4],
                                tool_call_id="call_1" if first else None)}}

model = PydanticAIModel(FunctionModel(stream_function=writer, model_name="writer"))
agent = nd.Agent("writer", model, [lookup], version="1", stream=True)"""
START = """\
run = session().submit(agent, "Rows in the table?", run_id="f1")
widget = RunWidget(session().runtime, run.run_id)
widget"""


def test_a_tool_call_forms_then_is_complete(jupyter: Server, page: Any, folder: Path) -> None:
    import nbformat

    nbformat.write(notebook(SETUP, START), folder / "forming.ipynb")
    with diagnosed(page, jupyter, "jupyterlab-forming"):
        LAB.open(page, jupyter, f"{folder.name}/forming.ipynb")
        run_cell(page, 0)
        view = run_cell(page, 1).locator(".nbd-run")
        forming = view.locator(".nbd-forming")
        forming.wait_for(timeout=60_000)
        assert "forming" in forming.inner_text() and "lookup(" in forming.inner_text()
        args = forming.locator(".nbd-forming-args")
        before = args.inner_text()
        assert ARGS.startswith(before)
        # the arguments grow while the model writes them
        page.wait_for_function(
            "(n) => { const a = document.querySelector('.nbd-forming-args');"
            " return a && a.textContent.length > n; }",
            arg=len(before),
            timeout=30_000,
        )
        assert ARGS.startswith(args.inner_text())
        view.locator(".nbd-badge.nbd-status-completed").wait_for(timeout=60_000)
        assert forming.count() == 0  # the complete call took its place
        summary = view.locator(".nbd-tool-summary").first.inner_text()
        assert "lookup(table=" in summary and "orders" in summary
