"""Idle CPU of a process showing the runs dashboard: what a kernel pays for keeping one open.

Fills a SQLite store with N finished runs (default 200) through a real
DurableRuntime, then measures the process's CPU time (``time.process_time``) over
a quiet window in four set-ups, one after the other in this process:

    no dashboard    the runtime alone (its own polling)
    seen            a RunsDashboard whose view pings every 15 s, as a live view does
    hidden          the same, its view out of sight (a ``visibility`` message; a
                    package without it ignores the message and reads on)
    closed tab      the view stops pinging (after ``pause_after`` reads pause); a
                    window of 90 s at least

Nothing changes in the store during a window, as in a kernel left open with a
dashboard. Figures are % of one core; compare set-ups within one run, and two
package versions by running the script with each on ``PYTHONPATH``.

    python benchmarks/dashboard_idle_cpu.py                 # 200 runs, 40 s windows
    python benchmarks/dashboard_idle_cpu.py --runs 2000 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import nbdurable as nd
from nbdurable.notebook.widgets import RunsDashboard

PING_S = 15.0


def greeter() -> nd.Agent:
    """Answers at once."""
    return nd.Agent("greeter", nd.ScriptedModel(["Hello!"] * 100_000), [], version="1")


def send(dashboard: RunsDashboard, content: dict[str, Any]) -> None:
    """What the view's ``model.send`` does: a custom message to the kernel."""
    message = {"content": {"data": {"method": "custom", "content": content}}, "buffers": []}
    dashboard.view._handle_msg(message)


async def window(seconds: float, dashboard: RunsDashboard | None, *, ping: bool) -> float:
    """% of one core this process used over ``seconds`` of quiet."""
    started, cpu = time.monotonic(), time.process_time()
    nonce = 0
    while (left := seconds - (time.monotonic() - started)) > 0:
        if dashboard is not None and ping:
            nonce += 1
            send(dashboard, {"type": "ping", "nonce": nonce})
        await asyncio.sleep(min(PING_S, left))
    return 100 * (time.process_time() - cpu) / (time.monotonic() - started)


async def main(runs: int, seconds: float) -> None:
    folder = Path(tempfile.mkdtemp(prefix="nbd-idle-"))
    store = nd.open_store(f"sqlite:///{folder / 'runs.db'}")
    runtime = await nd.DurableRuntime.open(store=store, agents=[greeter()])
    try:
        handles = [await runtime.submit("greeter", "Hi.") for _ in range(runs)]
        for handle in handles:
            await handle.result()
        await asyncio.sleep(1)
        print(f"{runs} runs; {seconds:g} s windows; % of one core")
        print(f"  no dashboard  {await window(seconds, None, ping=False):5.2f}")
        dashboard = RunsDashboard(runtime)
        await asyncio.sleep(1)
        print(f"  seen          {await window(seconds, dashboard, ping=True):5.2f}")
        send(dashboard, {"type": "visibility", "visible": False})
        print(f"  hidden        {await window(seconds, dashboard, ping=True):5.2f}")
        send(dashboard, {"type": "visibility", "visible": True})
        closed = max(seconds, 90.0)  # past pause_after (60 s; 300 s before)
        print(f"  closed tab    {await window(closed, dashboard, ping=False):5.2f}  ({closed:g} s)")
        dashboard.close()
    finally:
        await runtime.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=40.0)
    options = parser.parse_args()
    asyncio.run(main(options.runs, options.seconds))
