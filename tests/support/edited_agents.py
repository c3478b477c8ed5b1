"""An agent with one gated, editable call, for the kill -9 tests of edits and replies.

`nbdurable worker` processes serve it. The tool and the model's answer append a
line to the file named by NBDURABLE_TEST_LOG (O_APPEND, fsync'd): ``tool RUN
TABLE`` when the tool starts, ``model RESULT`` when the model reads the call's
result. With NBDURABLE_TEST_HOLD=tool (or =model) the worker then holds
there for a long while, so the test can SIGKILL it at that point: after the
verdict, before the next checkpoint.
"""

from __future__ import annotations

import asyncio
import os
import time

import nbdurable as nd
from nbdurable.models._base import ModelRequest
from nbdurable.runtime import Agent


def _log(line: str) -> None:
    fd = os.open(os.environ["NBDURABLE_TEST_LOG"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _hold(point: str) -> bool:
    return os.environ.get("NBDURABLE_TEST_HOLD") == point


@nd.tool(needs_approval=True, allow_edit=True, recovery="safe")
async def drop_table(name: str, ctx: nd.ToolContext) -> str:
    """Drop a warehouse table."""
    _log(f"tool {ctx.run_id} {name}")
    if _hold("tool"):
        await asyncio.sleep(60)  # killed here
    return f"dropped {name}"


def _answer(request: ModelRequest) -> nd.Turn:
    [result] = request.messages[-1].tool_results
    _log(f"model {result.result}")
    if _hold("model"):
        time.sleep(60)  # killed here: the result is not checkpointed yet
    return nd.Turn(text=f"read: {result.result}")


editor = Agent(
    "editor",
    nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), _answer]),
    [drop_table],
    version="1",
)

agents = [editor]
