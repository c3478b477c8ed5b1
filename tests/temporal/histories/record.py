"""Record the Temporal workflow histories that tests/temporal/test_replay.py replays.

Run from the repository root: ``python tests/temporal/histories/record.py``.
It starts a dev server and one ``nbdurable worker --engine temporal`` subprocess
serving :mod:`history_agents`, runs each scenario through a client runtime, and
writes every workflow's history as ``<name>.json`` beside this file, with
``index.json`` naming each file's workflow id and what it shows.

Recordings are kept, never refreshed: a new one is added when a deliberate new
workflow type or patch is introduced: pass the scenario names to record only
those and ``--suffix`` to name the new files (an existing file is never
overwritten), ``--out DIR`` to write elsewhere. See docs/temporal.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(HERE), str(ROOT)]

import history_agents  # noqa: E402
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle  # noqa: E402

import nbdurable as nd  # noqa: E402
from nbdurable.durable._signer import ApprovalSigner  # noqa: E402
from nbdurable.runtime import DurableRuntime, GraphNode  # noqa: E402
from nbdurable.temporal import TemporalEngine  # noqa: E402
from nbdurable.temporal._devserver import DevServer, stop_process  # noqa: E402

WAIT = 60.0
Scenario = Callable[[DurableRuntime], Awaitable[dict[str, str]]]
"""Runs one scenario to its end; {workflow id: what its history shows}."""


async def approval(rt: DurableRuntime) -> dict[str, str]:
    run = await rt.submit("janitor", "Clean up stale staging tables.", run_id="approval")
    await asyncio.wait_for(run.wait("waiting_approval"), WAIT)
    await run.approve()
    assert (await asyncio.wait_for(run.result(), WAIT)).text == "Done: dropped stg_2023."
    return {"approval": "a streamed run parked on an approval, approved, then completed"}


async def denial(rt: DurableRuntime) -> dict[str, str]:
    run = await rt.submit("janitor", "Clean up stale staging tables.", run_id="denial")
    await asyncio.wait_for(run.wait("waiting_approval"), WAIT)
    await run.deny(reason="keep it")
    await asyncio.wait_for(run.result(), WAIT)
    return {"denial": "a run parked on an approval, denied, then completed"}


async def model_retry(rt: DurableRuntime) -> dict[str, str]:
    run = await rt.submit("flaky", "Answer, eventually.", run_id="model-retry")
    assert (await asyncio.wait_for(run.result(), WAIT)).text == "Answered on a later attempt."
    return {"model-retry": "a model call failing retryably (503), a timer, then answering"}


async def subagent(rt: DurableRuntime) -> dict[str, str]:
    run = await rt.submit("delegator", "Tidy the warehouse with help.", run_id="subagent")
    await asyncio.wait_for(run.wait("waiting_approval"), WAIT)
    await run.approve()
    text = (await asyncio.wait_for(run.result(), WAIT)).text
    assert "researcher OK" in text and "oracle ERROR" in text, text
    return {
        "subagent": "three sub-agents (one answering, one failing, one parked on an "
        "approval in its own loop), approved, then completed"
    }


async def graph(rt: DurableRuntime) -> dict[str, str]:
    nodes = [
        GraphNode("a", "echo", "alpha"),
        GraphNode("b", "echo", "beta"),
        GraphNode("c", "echo", "gamma", depends_on=["a", "b"]),
    ]
    results = await asyncio.wait_for(
        (await rt.submit_graph(nodes, graph_id="graph")).result(), WAIT
    )
    assert "Result of a:\necho(alpha)" in results["c"].text
    return {
        "graph:a": "a graph's root node",
        "graph:c": "a graph node started with its two dependencies' results",
    }


async def task(rt: DurableRuntime) -> dict[str, str]:
    run = await rt.submit_task("digest", {"topic": "tables"}, run_id="task")
    state = await asyncio.wait_for(run.result(), WAIT)
    assert state["parts"] == 2, state
    return {
        "task": "a two-phase custom task (TaskRunWorkflow) completed",
        "task:split:0": "an owned run of a task's phase",
    }


async def task_cancelled(rt: DurableRuntime) -> dict[str, str]:
    run = await rt.submit_task("waiter", None, run_id="task-cancelled")
    child_id = "task-cancelled:wait_for_approval:0"
    while rt.store.rt_get(child_id) is None:
        await asyncio.sleep(0.1)
    child = await rt.get_run(child_id)
    await asyncio.wait_for(child.wait("waiting_approval"), WAIT)
    await run.cancel()
    assert (await asyncio.wait_for(run.wait(), WAIT)).state == "cancelled"
    assert (await asyncio.wait_for(child.wait(), WAIT)).state == "cancelled"
    return {
        "task-cancelled": "a task cancelled while its owned run waits for an approval",
        child_id: "an owned run parked on an approval, cancelled",
    }


async def hand_back(rt: DurableRuntime) -> dict[str, str]:
    engine = rt.engine
    assert isinstance(engine, TemporalEngine)
    client = await engine.client()
    other = start_worker(engine.address, engine.task_queue, STORE["url"], "history_agents_other")
    try:
        # The other worker takes about half of the activities: runs go on until it
        # handed one back and the call went to the definition's queue.
        for i in range(20):
            run_id = f"echo-{i}"
            run = await rt.submit("echo", f"hand back {i}", run_id=run_id)
            assert (await asyncio.wait_for(run.result(), WAIT)).text == f"echo(hand back {i})"
            history = await client.get_workflow_handle(run_id).fetch_history()
            queues = {
                event.activity_task_scheduled_event_attributes.task_queue.name
                for event in history.events
            }
            if queues - {"", engine.task_queue}:
                return {
                    run_id: "a model call a worker of another definition handed back, "
                    "sent to the definition's queue, then completed"
                }
    finally:
        stop_process(other)
    raise RuntimeError("no call was handed back in 20 runs")


async def tool_started(rt: DurableRuntime, run_id: str) -> None:
    """Wait until the run's slow tool call has started (history_agents' mark)."""
    while not (Path(os.environ["NBDURABLE_HISTORY_MARKS"]) / run_id).exists():
        await asyncio.sleep(0.05)


def replace_worker(*, kill: bool) -> None:
    """Stop the recording's worker (SIGKILL, or SIGTERM: a 1-s drain), then start another."""
    first = WORKERS[-1]
    if kill:
        first.kill()
        first.wait()
    else:
        stop_process(first)
    WORKERS.append(start_worker(STORE["address"], STORE["queue"], STORE["url"]))


async def needs_attention(rt: DurableRuntime) -> dict[str, str]:
    runs = [await rt.submit("careful", "Do the manual step.", run_id=i) for i in ATTENTION]
    for run in runs:
        await asyncio.wait_for(tool_started(rt, run.run_id), WAIT)
    replace_worker(kill=True)  # the manual calls are interrupted
    for run in runs:
        await asyncio.wait_for(run.wait("needs_attention"), WAIT)
    retried, denied = runs
    await retried.retry()
    await denied.deny(reason="settled by hand")
    assert (await asyncio.wait_for(retried.result(), WAIT)).text == "Manual step settled."
    await asyncio.wait_for(denied.result(), WAIT)
    return {
        ATTENTION[0]: "a manual call interrupted by a killed worker (needs_attention), "
        "retried, then completed",
        ATTENTION[1]: "a manual call interrupted by a killed worker (needs_attention), "
        "denied, then completed",
    }


async def continued(rt: DurableRuntime) -> dict[str, str]:
    import history_agents_other

    engine = rt.engine
    assert isinstance(engine, TemporalEngine)
    # a client with another definition of echo: the worker hands its run on
    client = TemporalEngine(address=engine.address, task_queue=engine.task_queue)
    async with DurableRuntime(
        store=rt.store, agents=history_agents_other.agents, engine=client
    ) as other:
        run = await other.submit("echo", "moved on", run_id="moved")
        while rt.store.rt_get("moved").waiting_reason is None:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)  # the first hand-on's wait (1 s), then continue-as-new
        WORKERS.append(
            start_worker(STORE["address"], STORE["queue"], STORE["url"], "history_agents_other")
        )
        assert (await asyncio.wait_for(run.result(), WAIT)).text == "another echo"
    # its last run ran under history_agents_other's echo: only the first one replays here
    return {
        "moved#continued": "a run a worker of another definition left: continued as new "
        "after the hand-on wait (cut short by a resume)"
    }


async def timeout(rt: DurableRuntime) -> dict[str, str]:
    run = await rt.submit("sleeper", "Sleep past the deadline.", run_id="timeout", timeout=2)
    record = await asyncio.wait_for(run.wait("failed", "completed"), WAIT)
    assert (record.state, record.reason) == ("failed", "timeout"), record
    return {"timeout": "a run whose timeout fires during a slow tool: failed (timeout)"}


async def cancel(rt: DurableRuntime) -> dict[str, str]:
    run = await rt.submit("janitor", "Clean up stale staging tables.", run_id="cancel")
    await asyncio.wait_for(run.wait("waiting_approval"), WAIT)
    await run.cancel()
    assert (await asyncio.wait_for(run.wait(), WAIT)).state == "cancelled"
    return {"cancel": "a run parked on an approval, cancelled"}


async def drain(rt: DurableRuntime) -> dict[str, str]:
    run = await rt.submit("sleeper", "Sleep through a drain.", run_id="drain")
    await asyncio.wait_for(tool_started(rt, "drain"), WAIT)
    replace_worker(kill=False)  # SIGTERM: the call is cut after the 1-s drain
    assert (await asyncio.wait_for(run.result(), WAIT)).text == "Slept."
    return {
        "drain": "a safe call cut by its worker's drain (SIGTERM), run again on another "
        "worker, then completed"
    }


SCENARIOS: dict[str, Scenario] = {
    "approval": approval,
    "denial": denial,
    "model-retry": model_retry,
    "subagent": subagent,
    "graph": graph,
    "task": task,
    "task-cancelled": task_cancelled,
    "hand-back": hand_back,
    "needs-attention": needs_attention,
    "continue-as-new": continued,
    "timeout": timeout,
    "cancel": cancel,
    "drain": drain,
}
STORE: dict[str, str] = {}
"""The store's URL, the server's address and the queue while recording (more workers need them)."""
WORKERS: list[subprocess.Popen[str]] = []
"""The recording's workers, the one polling last at the end."""
ATTENTION = ("attention-retry", "attention-deny")


def code_version() -> str:
    """The commit of the checkout the histories are recorded from."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


def file_name(workflow_id: str, suffix: str = "") -> str:
    """The history file of ``workflow_id`` (``<id>.<suffix>.json`` with a suffix)."""
    return workflow_id.replace(":", "--") + (f".{suffix}" if suffix else "") + ".json"


def start_worker(
    address: str, queue: str, store_url: str, agents: str = "history_agents"
) -> subprocess.Popen[str]:
    """A ``nbdurable worker --engine temporal`` subprocess serving ``agents`` (a module)."""
    path = os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "NBDURABLE_APPROVAL_SECRET": history_agents.SECRET}
    command = [sys.executable, "-m", "nbdurable.cli", "worker", "--engine", "temporal"]
    command += ["--address", address, "--task-queue", queue, "--store", store_url]
    command += ["--agents", f"{agents}:agents", "--drain-seconds", "1"]
    if agents == "history_agents":
        command += ["--tasks", "history_agents:tasks"]
    proc = subprocess.Popen(
        command,
        cwd=str(ROOT),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "polling" not in line:
        stop_process(proc)
        raise RuntimeError(f"the worker did not start: {line}{proc.stdout.read()}")
    return proc


async def first_run(client: Client, workflow_id: str) -> WorkflowHandle[Any, Any]:
    """The handle of the first run of ``workflow_id`` (it continued as new)."""
    runs = [e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    first = min(runs, key=lambda e: e.start_time)
    assert first.status == WorkflowExecutionStatus.CONTINUED_AS_NEW, first.status
    return client.get_workflow_handle(workflow_id, run_id=first.run_id)


async def closed(handle: WorkflowHandle[Any, Any]) -> None:
    """Wait until the workflow has closed (its history is complete)."""
    while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        await asyncio.sleep(0.1)


async def record(names: list[str], out: Path, suffix: str = "") -> dict[str, dict[str, str]]:
    """Run the scenarios ``names``; write their histories into ``out``; the index entries."""
    entries: dict[str, dict[str, str]] = {}
    # Activities go through the task queue, not eagerly to the worker that scheduled
    # them: a second worker sees them too (the hand-back scenario needs it).
    eager_off = ["--dynamic-config-value", "system.enableActivityEagerExecution=false"]
    with tempfile.TemporaryDirectory() as tmp, DevServer(extra_args=eager_off) as server:
        os.environ["NBDURABLE_HISTORY_MARKS"] = tmp  # the workers inherit it
        os.environ.setdefault("NBDURABLE_HISTORY_SLOW", "8")
        url = STORE["url"] = f"sqlite:///{Path(tmp) / 'runs.db'}"
        queue = STORE["queue"] = f"histories-{uuid.uuid4().hex[:8]}"
        STORE["address"] = server.address
        WORKERS.append(start_worker(server.address, queue, url))
        try:
            engine = TemporalEngine(address=server.address, task_queue=queue, heartbeat_timeout=2)
            rt = DurableRuntime(
                store=nd.open_store(url),
                agents=history_agents.agents,
                tasks=history_agents.tasks,
                engine=engine,
                approval_signer=ApprovalSigner(history_agents.SECRET),
            )
            async with rt:
                client = await engine.client()
                for name in names:
                    shown = await SCENARIOS[name](rt)
                    for key, description in shown.items():
                        workflow_id, _, which = key.partition("#")
                        handle = client.get_workflow_handle(workflow_id)
                        await asyncio.wait_for(closed(handle), WAIT)
                        if which == "continued":  # the first run, not the last
                            handle = await first_run(client, workflow_id)
                        history = await handle.fetch_history()
                        path = out / file_name(key, suffix)
                        if path.exists():  # recorded histories are kept as they are
                            raise FileExistsError(f"{path} exists: pass another --suffix")
                        text = json.dumps(json.loads(history.to_json()), indent=1)
                        path.write_text(text + "\n")
                        entries[file_name(key, suffix)] = {
                            "workflow_id": workflow_id,
                            "scenario": name,
                            "shows": description,
                            "recorded_from": code_version(),
                        }
                        print(f"recorded {workflow_id}: {len(history.events)} events")
        finally:
            for worker in WORKERS:
                stop_process(worker)
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help=f"of {', '.join(SCENARIOS)} (default all)")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument(
        "--suffix", default="", help="added to the file names (e.g. the patch they record)"
    )
    args = parser.parse_args(argv)
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"no scenario {', '.join(sorted(unknown))}")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    entries = asyncio.run(record(list(args.scenarios or SCENARIOS), out, args.suffix))
    index_path = out / "index.json"
    index: dict[str, Any] = json.loads(index_path.read_text()) if index_path.exists() else {}
    index.update(entries)
    index_path.write_text(json.dumps(dict(sorted(index.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
