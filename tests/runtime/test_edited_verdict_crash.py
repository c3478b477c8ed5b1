"""Edited arguments and replies survive SIGKILL between the verdict and the next checkpoint.

A worker process runs the ``editor`` agent (tests/support/edited_agents.py) to
its approval; the test records an approval with edited arguments, or a reply;
a second worker takes the run on and is SIGKILLed at a point after the verdict
and before the checkpoint that would record its outcome: inside the edited
tool call (``safe`` recovery: it runs again, edited), or in the model call that
reads the call's result. A third worker finishes the run. The edited call is
the only one that ever ran (never the model's own arguments), the reply is the
result the model read, and the history and the record keep both.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import edited_agents
from support.runtime_harness import worker

import nbdurable as nd
from nbdurable.runtime import DurableRuntime

AGENTS = "support.edited_agents:agents"


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _wait_for(log: Path, prefix: str, proc: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any(line.startswith(prefix) for line in _lines(log)):
            return
        if proc.poll() is not None:
            raise AssertionError(f"the worker exited early: {proc.communicate()[1]}")
        time.sleep(0.02)
    raise AssertionError(f"no {prefix!r} in {_lines(log)}")


def _finish(url: str, log: Path) -> None:
    proc = worker(url, log, "--exit-when-idle", agents=AGENTS)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


@pytest.mark.parametrize(
    ("verdict", "hold"), [("edit", "tool"), ("edit", "model"), ("reply", "model")]
)
async def test_a_verdict_survives_sigkill_before_the_next_checkpoint(
    tmp_path: Path, verdict: str, hold: str
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=edited_agents.agents)  # decides, executes nothing
    run = await client.submit("editor", "Clean up.")
    _finish(url, log)  # to the approval
    assert run.status == "waiting_approval"
    [request] = await run.pending_approvals()
    if verdict == "edit":
        await run.approve(request.approval_id, arguments={"name": "stg_2023"}, by="ana")
        expected = "dropped stg_2023"
    else:
        await run.respond(request.approval_id, "keep it: use stg_2023 instead", by="ana")
        expected = "keep it: use stg_2023 instead"

    doomed = worker(url, log, agents=AGENTS, env={"NBDURABLE_TEST_HOLD": hold})
    _wait_for(log, hold, doomed)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    assert store.load(run.run_id).status == "suspended"  # nothing checkpointed past the verdict

    _finish(url, log)
    record = run.record()
    assert record.state == "completed", record
    tools = [line.split()[2] for line in _lines(log) if line.startswith("tool ")]
    models = [line.split(" ", 1)[1] for line in _lines(log) if line.startswith("model ")]
    if verdict == "edit":
        assert tools and set(tools) == {"stg_2023"}  # only ever the edited call ("safe": again)
    else:
        assert tools == []  # a reply: the tool never ran
    assert set(models) == {expected}  # every model call read the verdict's result
    decision = record.decided[request.approval_id]
    assert decision.kind == ("edited" if verdict == "edit" else "replied")
    assert decision.source is not None and decision.source.by == "ana"
    checkpoint = store.load(run.run_id)
    assert checkpoint.messages[-1].text == f"read: {expected}"
    [assistant] = [m for m in checkpoint.messages if m.role == "assistant" and m.tool_calls]
    ran = {"name": "stg_2023"} if verdict == "edit" else {"name": "stg"}
    assert assistant.tool_calls[0].args == ran
    [tool_message] = [m for m in checkpoint.messages if m.role == "tool"]
    assert tool_message.tool_results[0].result == expected
    assert tool_message.tool_results[0].is_error is False
    store.close()


@pytest.mark.parametrize("verdict", ["edit", "reply"])
async def test_a_verdict_survives_sigkill_at_every_moment_of_the_leg_that_carries_it(
    tmp_path: Path, verdict: str
) -> None:
    """Workers SIGKILLed one after another, each a little later after it came up.

    The held points above are two moments; this sweeps the rest of the leg that
    carries the verdict (the claim, the checkpoint's read, the verdict applied,
    the tool's intent, the tool, the result's commit): worker after worker is
    killed 0, 2, 4, 6, ... ms after it announced itself (the whole leg takes
    about 10-20 ms here; 4 ms steps hit fewer than three moments once claims got
    faster), until one lives long enough to finish the run. Whatever moment each kill hit, the call that ran (if
    any) is the edited one, the reply is the result, and each shows once in the
    history.
    """
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=edited_agents.agents)
    run = await client.submit("editor", "Clean up.")
    _finish(url, log)
    [request] = await run.pending_approvals()
    if verdict == "edit":
        await run.approve(request.approval_id, arguments={"name": "stg_2023"}, by="ana")
        expected = "dropped stg_2023"
    else:
        await run.respond(request.approval_id, "keep it: use stg_2023 instead", by="ana")
        expected = "keep it: use stg_2023 instead"

    kills = 0
    for delay_ms in range(0, 400, 2):
        if run.record().state == "completed":
            break
        doomed = worker(url, log, agents=AGENTS)
        assert doomed.stdout is not None
        doomed.stdout.readline()  # "nbdurable worker ... serving": its runtime is open
        await asyncio.sleep(delay_ms / 1000)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        kills += 1
    assert kills >= 3  # the run outlived several kills before the workers got to finish it
    _finish(url, log)

    record = run.record()
    assert record.state == "completed", record
    tools = [line.split()[2] for line in _lines(log) if line.startswith("tool ")]
    models = [line.split(" ", 1)[1] for line in _lines(log) if line.startswith("model ")]
    assert set(tools) == ({"stg_2023"} if verdict == "edit" else set())
    assert set(models) == {expected}
    assert record.decided[request.approval_id].kind == (
        "edited" if verdict == "edit" else "replied"
    )
    checkpoint = store.load(run.run_id)
    [tool_message] = [m for m in checkpoint.messages if m.role == "tool"]
    assert [r.result for r in tool_message.tool_results] == [expected]
    assert checkpoint.messages[-1].text == f"read: {expected}"
    store.close()
