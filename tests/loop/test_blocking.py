"""The blocking API outside a kernel: a plain script, and sync code called inside a running loop.

Each case runs in its own interpreter: the first sync call inside a running loop
makes that loop reentrant (nest_asyncio2), which must not leak into other tests.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NEEDS_NEST_ASYNCIO = pytest.mark.skipif(
    importlib.util.find_spec("nest_asyncio2") is None,
    reason="a sync call inside a running loop needs nest-asyncio2 (ipykernel installs it)",
)

AGENTS = """
import asyncio, sys
import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime

@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    \"\"\"Drop a table (a human approves each call).\"\"\"
    return f"dropped {name}"

janitor = Agent(
    "janitor",
    nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), "done"]),
    [drop_table],
    version="1",
)
talker = Agent("talker", nd.ScriptedModel(["hello"] * 5, mode="sequential"), version="1")
"""


def _python(code: str, tmp_path: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = tmp_path / "script.py"
    script.write_text(AGENTS + textwrap.dedent(code))
    done = subprocess.run(
        [sys.executable, str(script), f"sqlite:///{tmp_path}/runs.db"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_script_without_a_loop_submits_waits_stops_on_approval_and_resumes(
    tmp_path: Path,
) -> None:
    out = _python(
        """
        rt = nd.run_sync(DurableRuntime.open(store=nd.open_store(sys.argv[1]), agents=[janitor, talker]))
        # the runtime's scheduler lives on the thread's persistent loop, used by every call
        run = nd.run_sync(rt.submit("talker", "Hi."))
        print(run.result_sync(timeout=60).text)
        job = nd.run_sync(rt.submit("janitor", "Clean up."))
        try:
            job.result_sync(timeout=60)
        except nd.WaitingForHumanError as error:
            print(error.run_id == job.run_id, error.state, len(error.approval_ids))
        print(job.wait_sync("waiting_approval", timeout=60).state)
        nd.run_sync(job.approve())
        print(job.result_sync(timeout=60).text)
        try:
            job.wait_sync("failed", timeout=60)
        except nd.RunEndedError as error:
            print(error.state, error.wanted)
        print(nd.generate_text_sync(model=nd.ScriptedModel(["hey"]), messages="x").text)
        nd.run_sync(rt.close())
        """,
        tmp_path,
    )
    assert out.splitlines() == [
        "hello",
        "True waiting_approval 1",
        "waiting_approval",
        "done",
        "completed ('failed',)",
        "hey",
    ]


@NEEDS_NEST_ASYNCIO
def test_sync_code_inside_a_running_loop_waits_while_the_loops_tasks_progress(
    tmp_path: Path,
) -> None:
    # what a notebook cell or a widget callback does: plain (non-async) code
    # called by a task of a running loop, on which the runtime executes runs
    out = _python(
        """
        def blocking_cell(rt):
            run = nd.run_sync(rt.submit("talker", "Hi."))
            text = run.result_sync(timeout=60).text
            job = nd.run_sync(rt.submit("janitor", "Clean up."))
            try:
                job.result_sync(timeout=60)
            except nd.WaitingForHumanError as error:
                state = error.state
            nd.run_sync(job.approve())
            return text, state, job.result_sync(timeout=60).text

        async def main():
            async with await DurableRuntime.open(
                store=nd.open_store(sys.argv[1]), agents=[janitor, talker]
            ) as rt:
                ticks = 0
                async def ticker():
                    nonlocal ticks
                    while True:
                        ticks += 1
                        await asyncio.sleep(0.001)
                beat = asyncio.create_task(ticker())
                await asyncio.sleep(0.01)
                before = ticks
                print(*blocking_cell(rt))
                print(ticks > before)  # the loop's other tasks ran while the code blocked
                beat.cancel()

        asyncio.run(main())
        """,
        tmp_path,
    )
    assert out.splitlines() == ["hello waiting_approval done", "True"]


@NEEDS_NEST_ASYNCIO
def test_a_running_loop_is_left_unpatched_until_a_sync_call_needs_it(tmp_path: Path) -> None:
    out = _python(
        """
        async def main():
            loop = asyncio.get_running_loop()
            print(hasattr(loop, "_nest_patched"))
            print(nd.run_sync(asyncio.sleep(0, "slept")))
            print(hasattr(loop, "_nest_patched"))

        asyncio.run(main())
        """,
        tmp_path,
    )
    assert out.splitlines() == ["False", "slept", "True"]


@NEEDS_NEST_ASYNCIO
def test_the_first_sync_call_leaves_the_loops_current_batch_of_callbacks_whole(
    tmp_path: Path,
) -> None:
    # The first sync call patches a loop that is inside asyncio's own _run_once,
    # which counted its batch of ready callbacks before running them. The nested
    # run drains that queue; the outer _run_once must not then pop an empty one
    # (IndexError out of run_forever: how a Jupyter kernel died on a first cell
    # that came with other messages).
    out = _python(
        """
        loop = asyncio.new_event_loop()
        ran = []

        def cell():
            ran.append(nd.run_sync(asyncio.sleep(0, "cell")))

        loop.call_soon(ran.append, "before")
        loop.call_soon(cell)
        for name in ("a", "b", "c"):
            loop.call_soon(ran.append, name)
        loop.call_later(0.2, loop.stop)
        loop.run_forever()
        print(sorted(ran))
        """,
        tmp_path,
    )
    assert out.splitlines() == ["['a', 'b', 'before', 'c', 'cell']"]


@NEEDS_NEST_ASYNCIO
def test_a_blocking_wait_runs_on_the_loop_the_runtime_was_opened_on(tmp_path: Path) -> None:
    # a runtime opened on a loop of the caller's own (not the thread's sync loop):
    # the blocking wait must drive that loop, or the run never moves
    out = _python(
        """
        loop = asyncio.new_event_loop()
        rt = loop.run_until_complete(
            DurableRuntime.open(store=nd.open_store(sys.argv[1]), agents=[talker])
        )
        run = loop.run_until_complete(rt.submit("talker", "Hi."))
        print(run.result_sync(timeout=30).text)
        loop.run_until_complete(rt.close())
        loop.close()
        """,
        tmp_path,
    )
    assert out.splitlines() == ["hello"]
