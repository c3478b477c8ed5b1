"""Where a step on Restate goes: the leg's ``ctx.run`` steps timed on the endpoint, beside
the bare handler's floor (issue 38; ``restate_bench.py`` gives the ratio).

The endpoint is ``nbdurable worker --engine restate`` started by this script with its
journaled-step helper (``nbdurable.restate._handler.step``) wrapped to log, per step,
when it was called, when its body started and ended, and when it returned (monotonic
clock, shared by the processes of this machine). Per agent step it prints:

- **body**: the step's own work (the store's writes and reads, the model, the tool),
  by kind: ``mirror`` (the outbox's write), ``model``, ``tool``;
- **ctx.run around it**: the rest of each step's time, what the SDK and the server
  do to journal it, the part the bare handler's floor also pays;
- **handler**: the step machine between steps;

and per run: from ``submit`` to the leg's first step, and from its last step to
``result()`` returning. ``--rounds`` runs (medians); the floor is measured beside
each run, as in ``restate_bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KINDS = ("mirror", "model", "tool")


def _probe(path: str) -> None:
    """In the endpoint: log each journaled step's times to ``path`` (JSON lines)."""
    from nbdurable.restate import _handler

    out = open(path, "a")  # noqa: SIM115 (open for the process's life)
    original = _handler.step

    async def step(ctx: Any, run_id: str, name: str, body: Any) -> Any:
        called = time.perf_counter()
        times: list[float] = []

        async def timed() -> Any:
            times.append(time.perf_counter())
            try:
                return await body()
            finally:
                times.append(time.perf_counter())

        try:
            return await original(ctx, run_id, name, timed)
        finally:
            done = time.perf_counter()
            line = {"kind": name.split(" ")[0], "called": called, "done": done, "body": times}
            out.write(json.dumps(line) + "\n")
            out.flush()

    _handler.step = step  # type: ignore[assignment]


def _serve(argv: list[str]) -> int:
    """``--serve TRACE worker args...``: the worker, its steps logged to TRACE."""
    _probe(argv[0])
    from nbdurable.cli import main

    return main(argv[1:])


def _start_worker(
    server: Any, url: str, listen: str, trace: Path, steps: int
) -> subprocess.Popen[str]:
    """The endpoint, its steps logged to ``trace``; returns once it serves."""
    command = [sys.executable, str(Path(__file__)), "--serve", str(trace), "worker"]
    command += ["--engine", "restate", "--listen", listen, "--ingress", server.ingress]
    command += ["--admin", server.admin, "--store", url, "--agents", "restate_bench:agents"]
    path = os.pathsep.join([str(HERE), *sys.path])
    env = {**os.environ, "PYTHONPATH": path, "RESTATE_BENCH_STEPS": str(steps)}
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "serving" in line, line
    return proc


def _leg(lines: list[dict[str, Any]], steps: int) -> dict[str, float]:
    """Ms per agent step of each part of one leg (its lines, ``begin`` to ``finish``)."""
    parts = {f"body {kind}": 0.0 for kind in KINDS}
    parts["ctx.run around the bodies"] = 0.0
    for line in lines:
        start, end = line["body"] if len(line["body"]) == 2 else (line["called"],) * 2
        if line["kind"] in KINDS:
            parts[f"body {line['kind']}"] += end - start
        parts["ctx.run around the bodies"] += (line["done"] - line["called"]) - (end - start)
    parts["handler between steps"] = sum(
        b["called"] - a["done"] for a, b in itertools.pairwise(lines)
    )
    parts["begin and finish bodies"] = sum(
        (line["body"][1] - line["body"][0]) for line in lines if line["kind"] in ("begin", "finish")
    )
    parts["leg, first step to last"] = lines[-1]["done"] - lines[0]["called"]
    return {name: seconds * 1000 / steps for name, seconds in parts.items()}


async def main() -> None:
    """Print the breakdown."""
    import restate_bench as bench

    import nbdurable as nd
    from nbdurable.restate import RestateEngine, RestateServer
    from nbdurable.restate._devserver import free_port, stop_process
    from nbdurable.runtime import DurableRuntime

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=bench.STEPS)
    args = parser.parse_args()
    steps = args.steps
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, RestateServer(Path(tmp) / "server") as server:
        trace = Path(tmp) / "trace.jsonl"
        url = f"sqlite:///{Path(tmp) / 'steps.db'}"
        served = bench._agents(steps)
        proc = _start_worker(server, url, f"127.0.0.1:{free_port()}", trace, steps)
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(stop_process, proc)
            floor = await stack.enter_async_context(bench.RestateFloor(server))
            store = nd.open_store(url)
            stack.callback(store.close)
            engine = RestateEngine(server.ingress, server.admin)
            rt = await stack.enter_async_context(
                DurableRuntime(store=store, agents=served, engine=engine)
            )
            await bench.run_ms_per_step(rt, "steps", steps)  # warm-up
            for _ in range(args.rounds):
                rows.setdefault("floor (bare handler, 4 ctx.run)", []).append(
                    await floor.ms_per_step(steps)
                )
                trace.write_text("")
                submitted = time.perf_counter()
                total = await bench.run_ms_per_step(rt, "steps", steps)
                returned = time.perf_counter()
                lines = [json.loads(line) for line in trace.read_text().splitlines()]
                for name, value in _leg(lines, steps).items():
                    rows.setdefault(name, []).append(value)
                rows.setdefault("submit to the leg's first step (per run)", []).append(
                    (lines[0]["called"] - submitted) * 1000
                )
                rows.setdefault("last step to result() (per run)", []).append(
                    (returned - lines[-1]["done"]) * 1000
                )
                rows.setdefault("nbdurable on Restate, submit to result()", []).append(total)
    print(f"{'ms per agent step (median of rounds)':<48} {'value':>8}")
    for name, values in rows.items():
        unit = " ms" if "per run" in name else ""
        print(f"{name:<48} {statistics.median(values):>8.2f}{unit}")
        rounds = " ".join(f"{v:.2f}" for v in values)
        print(f"rounds, {name}: {rounds}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        sys.exit(_serve(sys.argv[2:]))
    sys.path.insert(0, str(HERE))
    asyncio.run(main())
