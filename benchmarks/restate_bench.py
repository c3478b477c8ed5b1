"""A step on Restate (issue 38): nbdurable's per-step cost against a bare handler's floor,
and the time a killed endpoint's run takes to resume.

- **floor**: an in-process SDK endpoint whose handler makes the same number of
  journaled ``ctx.run`` steps with nothing in them: four per agent step, as a
  leg journals them (the outbox's write and the model call, the outbox's write
  and the tool call);
- **nbdurable**: a run of ``STEPS`` tool-calling steps (ScriptedModel, a no-op tool) on
  a ``nbdurable worker --engine restate`` process, timed from ``submit`` to its result;
- **kill-and-resume**: the endpoint SIGKILLed during a slow tool, started again on its
  address: seconds from the restart to the run's next event in the store.

Both share one ``restate-server`` (``RestateServer``, free 127.0.0.1 ports) and one
machine; the ratio is the figure (ratios in one run). ``--quick``: a smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import restate

import nbdurable as nd
from nbdurable.runtime import Agent

STEPS = int(os.environ.get("RESTATE_BENCH_STEPS", "50"))
HERE = Path(__file__).resolve().parent
JOURNALED_PER_STEP = 4
"""``ctx.run`` steps a leg journals per agent step: mirror + model, mirror + tool."""


@nd.tool
async def noop(n: int) -> str:
    """Do nothing."""
    return "ok"


@nd.tool
async def slow(n: int) -> str:
    """Take a while (the endpoint is killed meanwhile)."""
    await asyncio.sleep(float(os.environ.get("RESTATE_BENCH_SLOW", "30")))
    return "ok"


agents = [
    Agent(
        "steps",
        model=nd.ScriptedModel([*(nd.Turn.call("noop", n=k) for k in range(STEPS)), "done"]),
        tools=[noop],
        version="1",
        tool_recovery={"noop": "safe"},
        max_steps=STEPS + 2,
    ),
    Agent(
        "killed",
        model=nd.ScriptedModel([nd.Turn.call("slow", n=1), "done"]),
        tools=[slow],
        version="1",
        tool_recovery={"slow": "safe"},
    ),
]


bare = restate.VirtualObject("bench_floor")


@bare.handler()
async def bare_run(ctx: restate.ObjectContext, count: int) -> int:
    """``count`` agent steps' worth of empty journaled steps."""
    for k in range(count):
        for _ in range(JOURNALED_PER_STEP):
            await ctx.run_typed("step", lambda k=k: k, restate.RunOptions())
    return count


async def floor(server: object, steps: int) -> float:
    """Ms per agent step of a bare handler making as many empty ``ctx.run`` steps."""
    import json
    import urllib.request

    from nbdurable.restate import _admin
    from nbdurable.restate._devserver import free_port
    from nbdurable.restate._endpoint import serving

    def call(count: int) -> None:
        target = f"{server.ingress}/bench_floor/{uuid.uuid4().hex}/bare_run"  # type: ignore[attr-defined]
        request = urllib.request.Request(target, data=json.dumps(count).encode())
        request.add_header("content-type", "application/json")
        urllib.request.urlopen(request, timeout=120).read()

    port = free_port()
    async with serving(restate.app([bare]), f"127.0.0.1:{port}"):
        admin = server.admin  # type: ignore[attr-defined]
        await asyncio.to_thread(_admin.register, admin, f"http://127.0.0.1:{port}")
        await asyncio.to_thread(call, 3)  # warm-up
        started = time.perf_counter()
        await asyncio.to_thread(call, steps)
        return (time.perf_counter() - started) * 1000 / steps


def _worker(server: object, url: str, listen: str, env: dict[str, str]) -> subprocess.Popen[str]:
    from nbdurable.restate._devserver import start_endpoint

    path = os.pathsep.join([str(HERE), *sys.path])
    return start_endpoint(server, url, "restate_bench:agents", listen, {"PYTHONPATH": path, **env})  # type: ignore[arg-type]


def _agents(steps: int) -> list[Agent]:
    """This module's agents as the endpoint processes import them (``restate_bench``).

    The client's definitions must be the endpoints' (same module, same script
    length), or the runs wait for an endpoint serving them.
    """
    os.environ["RESTATE_BENCH_STEPS"] = str(steps)
    sys.path.insert(0, str(HERE))
    sys.modules.pop("restate_bench", None)
    return list(importlib.import_module("restate_bench").agents)


async def nbdurable_steps(server: object, folder: Path, steps: int, runs: int) -> float:
    """Ms per step of a run of ``steps`` steps on an endpoint process (the best of ``runs``)."""
    from nbdurable.restate import RestateEngine
    from nbdurable.restate._devserver import free_port
    from nbdurable.runtime import DurableRuntime

    url = f"sqlite:///{folder / 'steps.db'}"
    store = nd.open_store(url)
    served = _agents(steps)
    proc = _worker(server, url, f"127.0.0.1:{free_port()}", {})
    engine = RestateEngine(server.ingress, server.admin)  # type: ignore[attr-defined]
    best = float("inf")
    try:
        async with DurableRuntime(store=store, agents=served, engine=engine) as rt:
            for _ in range(runs):
                started = time.perf_counter()
                run = await rt.submit("steps", "Go.")
                result = await asyncio.wait_for(run.result(), 600)
                assert result.text == "done", result.text  # every step ran
                best = min(best, (time.perf_counter() - started) * 1000 / steps)
    finally:
        proc.kill()
        proc.wait()
        store.close()
    return best


async def kill_and_resume(server: object, folder: Path) -> float:
    """Seconds from an endpoint's restart (after SIGKILL mid-tool) to the run's next event."""
    from nbdurable.restate import RestateEngine
    from nbdurable.restate._devserver import free_port
    from nbdurable.runtime import DurableRuntime

    url = f"sqlite:///{folder / 'killed.db'}"
    store = nd.open_store(url)
    listen = f"127.0.0.1:{free_port()}"
    served = _agents(STEPS)
    first = _worker(server, url, listen, {})
    engine = RestateEngine(server.ingress, server.admin)  # type: ignore[attr-defined]
    try:
        async with DurableRuntime(store=store, agents=served, engine=engine) as rt:
            run = await rt.submit("killed", "Go.")
            while not any(e.type == "tool_call" for e in store.read_events(run.run_id)):  # noqa: ASYNC110 (another process writes)
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # the slow tool runs
            first.kill()
            first.wait()
            last = store.read_events(run.run_id)[-1].offset
            started = time.perf_counter()
            second = _worker(server, url, listen, {"RESTATE_BENCH_SLOW": "0"})
            try:
                while not store.read_events(run.run_id, after=last):  # noqa: ASYNC110 (another process writes)
                    await asyncio.sleep(0.01)
                seconds = time.perf_counter() - started
                await asyncio.wait_for(run.result(), 60)
            finally:
                second.kill()
                second.wait()
    finally:
        store.close()
    return seconds


async def main() -> None:
    """Print the table."""
    from nbdurable.restate import RestateServer

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run (10 steps, 1 run)")
    args = parser.parse_args()
    steps, runs = (10, 1) if args.quick else (STEPS, 3)
    with tempfile.TemporaryDirectory() as tmp, RestateServer(Path(tmp) / "server") as server:
        folder = Path(tmp)
        bare = await floor(server, steps)
        ours = await nbdurable_steps(server, folder, steps, runs)
        resume = await kill_and_resume(server, folder)
    print(f"{'what':<44} {'value':>10}")
    print(f"{'floor: bare handler, ms per step (4 ctx.run)':<44} {bare:>10.2f}")
    print(f"{'nbdurable on Restate, ms per step':<44} {ours:>10.2f}")
    print(f"{'ratio (nbdurable / floor)':<44} {ours / bare:>10.2f}")
    print(f"{'kill-and-resume: restart to next event, s':<44} {resume:>10.2f}")


if __name__ == "__main__":
    asyncio.run(main())
