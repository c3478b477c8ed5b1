"""Runs dashboard benchmark: one page out of a store with 5,000 runs.

Fills a SQLite store with N runs through a real DurableRuntime (default 5,000:
85% answered at once, 10% failed with a long error, 5% waiting for an approval),
then times what the dashboard does with it:

    read           DashboardSource.read: every run's row and every pending approval
                   from the store (what a refresh does, in a worker thread); cold =
                   a fresh store object, warm = the next reads (rows of runs that
                   did not change and the requests of waiting runs are kept)
    page           page_of: filter, search, sort and cut one page from the rows
                   (what a click on a header, the filter or the pager costs)
    query message  a "query" message from the view until the page's traits are set
    refresh stall  the longest the kernel's event loop waited during a refresh,
                   in a worker thread (refreshed()) and on the loop (refresh())

and how much the view is sent: one page against every row.

    python benchmarks/dashboard_bench.py                    # N = 5,000 (minutes to fill the store)
    python benchmarks/dashboard_bench.py --store runs.db    # keep the store, reuse it next time
    python benchmarks/dashboard_bench.py --quick            # N = 200, two repetitions (smoke test)
    python benchmarks/dashboard_bench.py --json figures.json

See benchmarks/README.md for the latest figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine_info import describe, machine, table

import nbdurable as nd
from nbdurable.notebook.widgets import RunsDashboard
from nbdurable.notebook.widgets._dashboard_rows import Query, page_of
from nbdurable.notebook.widgets._dashboard_source import DashboardSource

SECRET = "dashboard-bench-secret-0b1c"
LONG_ERROR = "The warehouse refused the connection: " + "credentials expired for etl; " * 12
QUERIES: dict[str, Query] = {
    "first page (newest first)": Query(),
    "sort by cost, descending": Query(sort_by="cost", descending=True),
    "filter failed": Query(status="failed"),
    "filter needs a look": Query(status="attention"),
    "search 'janitor 4'": Query(search="janitor 4"),
    "last page": Query(page=10**6),
}


@nd.tool
def lookup(table: str) -> dict[str, Any]:
    """Look a table up."""
    return {"table": table, "rows": 0}


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


def agents() -> list[nd.Agent]:
    price = (3.0, 15.0)
    greeter = nd.ScriptedModel(["Hello!"], price_per_million=price)
    flaky = nd.ScriptedModel(
        ["never"], fail_on={n: RuntimeError(LONG_ERROR) for n in range(1, 10**4)}
    )
    janitor = nd.ScriptedModel(
        [
            nd.Turn.call("lookup", "Looking at stg_2023.", table="stg_2023"),
            nd.Turn.call("drop_table", "stg_2023 is empty.", name="stg_2023"),
            "Done: dropped stg_2023.",
        ],
        price_per_million=price,
    )
    return [
        nd.Agent("greeter", greeter, [], version="1"),
        nd.Agent("flaky", flaky, [], version="1"),
        nd.Agent("janitor", janitor, [lookup, drop_table], version="1"),
    ]


def kind_of(i: int) -> str:
    if i % 20 == 7:
        return "janitor"
    if i % 10 == 3:
        return "flaky"
    return "greeter"


async def open_runtime(path: Path) -> Any:
    store = nd.open_store(f"sqlite:///{path}")
    return await nd.DurableRuntime.open(
        store=store,
        agents=agents(),
        approval_signer=nd.ApprovalSigner(SECRET),
        max_concurrent_runs=16,
    )


async def fill(path: Path, runs: int) -> float:
    """Submit runs until the store has ``runs``; wait until each is final or waiting."""
    started = time.perf_counter()
    runtime = await open_runtime(path)
    try:
        have = len(runtime.store.rt_list())
        if have >= runs:
            return 0.0
        print(f"filling {path} with {runs - have} runs...", flush=True)
        handles = []
        for i in range(have, runs):
            kind = kind_of(i)
            handles.append(await runtime.submit(kind, f"Task {i}.", run_id=f"{kind}-{i:05d}"))
        for n, handle in enumerate(handles):
            await handle.wait("completed", "failed", "waiting_approval")
            if n % 500 == 499:
                print(f"  {n + 1} runs done ({time.perf_counter() - started:.0f} s)", flush=True)
    finally:
        await runtime.close()
        runtime.store.close()
    return time.perf_counter() - started


def timed(action: Callable[[], Any], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return times


def median(times: list[float]) -> float:
    return statistics.median(times)


async def stall_during(work: Callable[[], Any]) -> tuple[float, float]:
    """(wall ms of ``await work()``, the longest the loop waited to run a 1 ms sleep)."""
    running = True
    worst = 0.0

    async def ticker() -> None:
        nonlocal worst
        while running:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, (time.perf_counter() - started) * 1000 - 1.0)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    result = work()
    if asyncio.iscoroutine(result):
        await result
    wall = (time.perf_counter() - started) * 1000
    await asyncio.sleep(0.01)
    running = False
    await tick
    return wall, worst


async def measure(path: Path, repeat: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    cold = []
    for _ in range(repeat):
        store = nd.open_store(f"sqlite:///{path}")
        started = time.perf_counter()
        source = DashboardSource(store)
        snapshot = source.read()
        cold.append((time.perf_counter() - started) * 1000)
        source.close()
        store.close()
    store = nd.open_store(f"sqlite:///{path}")
    source = DashboardSource(store)
    source.read()
    warm = timed(source.read, repeat)
    snapshot = source.read()
    source.close()
    store.close()
    figures["runs"] = len(snapshot.rows)
    figures["approvals"] = len(snapshot.approvals)
    figures["read_cold_ms"] = median(cold)
    figures["read_warm_ms"] = median(warm)
    figures["page_ms"] = {
        name: median(timed(lambda q=query: page_of(snapshot.rows, q), repeat * 10))
        for name, query in QUERIES.items()
    }
    page = page_of(snapshot.rows, Query())
    everything = page_of(snapshot.rows, Query(page_size=len(snapshot.rows) or 1))
    figures["page_bytes"] = len(json.dumps(page.rows))
    figures["all_rows_bytes"] = len(json.dumps(everything.rows))

    runtime = await open_runtime(path)
    try:
        started = time.perf_counter()
        dashboard = RunsDashboard(runtime, refresh_interval=3600)
        figures["construct_ms"] = (time.perf_counter() - started) * 1000
        view = dashboard.view
        message = {"content": {"data": {"method": "custom", "content": {}}}, "buffers": []}

        def query(**changes: Any) -> None:
            message["content"]["data"]["content"] = {"action": "query", **changes}
            view._handle_msg(message)

        figures["query_message_ms"] = median(
            timed(lambda: query(sort_by="cost", descending=True), repeat)
            + timed(lambda: query(page=3), repeat)
            + timed(lambda: query(status="failed"), repeat)
            + timed(lambda: query(status="", search="greeter 1"), repeat)
        )
        stalls = [await stall_during(dashboard.refreshed) for _ in range(repeat)]
        figures["refresh_thread_ms"] = median([wall for wall, _ in stalls])
        figures["refresh_thread_stall_ms"] = median([stall for _, stall in stalls])
        blocking = [await stall_during(dashboard.refresh) for _ in range(repeat)]
        figures["refresh_on_loop_stall_ms"] = median([stall for _, stall in blocking])
        dashboard.close()
    finally:
        await runtime.close()
        runtime.store.close()
    return figures


def report(figures: dict[str, Any]) -> str:
    rows = [
        ["read (cold): every row and approval", f"{figures['read_cold_ms']:.0f}"],
        ["read (warm)", f"{figures['read_warm_ms']:.0f}"],
        *[[f"page: {name}", f"{ms:.1f}"] for name, ms in figures["page_ms"].items()],
        ["query message -> page traits set", f"{figures['query_message_ms']:.1f}"],
        ["RunsDashboard(runtime): first read and page", f"{figures['construct_ms']:.0f}"],
        ["refreshed(): read in a worker thread, wall", f"{figures['refresh_thread_ms']:.0f}"],
        ["  longest event-loop stall during it", f"{figures['refresh_thread_stall_ms']:.0f}"],
        ["refresh(): read on the loop, stall", f"{figures['refresh_on_loop_stall_ms']:.0f}"],
    ]
    head = (
        f"{figures['runs']:,} runs, {figures['approvals']} pending approvals; "
        f"one page sent: {figures['page_bytes']:,} bytes of JSON "
        f"(every row would be {figures['all_rows_bytes']:,})"
    )
    return head + "\n\n" + table(["what", "median ms"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--store", type=Path, help="keep the filled store here (reused if full)")
    parser.add_argument("--quick", action="store_true", help="200 runs, two repetitions")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.repeat = 200, 2
    info = machine(["anywidget", "ipywidgets"])
    print(describe(info), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        path = args.store or Path(folder) / "runs.db"
        filled = asyncio.run(fill(path, args.runs))
        if filled:
            print(f"filled in {filled:.0f} s", flush=True)
        figures = asyncio.run(measure(path, args.repeat))
    print()
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
