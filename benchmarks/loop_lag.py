"""Event-loop lag during a runtime run: how long the loop is held by store I/O.

A ticker task sleeps 10 ms at a time on the runtime's event loop and records
how late each wake-up is (its scheduling delay). Meanwhile an embedded
runtime runs an agent through a tool call, an approval (decided through
``Run.approve``) and its final answer. Reported: the worst and the p99 delay,
and the run's wall time, for

    PostgreSQL + 200 ms   the PostgreSQL store behind a loopback proxy adding
                          200 ms to every round trip (tests/support/latency_proxy.py)
    SQLite                a local SQLite file

Store calls made from async code run on store threads, so the loop's worst
lag stays near the machine's scheduling noise whatever the store's latency;
before that, every round trip held the loop. Figures are reported, never
asserted (benchmarks/README.md keeps them).

    python benchmarks/loop_lag.py            # three runs per store
    python benchmarks/loop_lag.py --quick    # one run per store (smoke)
    python benchmarks/loop_lag.py --json figures.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import psycopg
from machine_info import describe, machine, table
from support.latency_proxy import latency_proxy
from support.pgserver import find_pg_bin, start_server

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime
from nbdurable.stores import open_store

TICK = 0.01
DELAY = 0.2


def _agent() -> Agent:
    @nd.tool
    async def look(path: str) -> str:
        """Look at a path."""
        return f"{path}: 3 files"

    @nd.tool(needs_approval=True)
    def drop(path: str) -> str:
        """Drop a path."""
        return f"dropped {path}"

    return Agent(
        "janitor",
        nd.ScriptedModel(
            [nd.Turn.call("look", path="/tmp"), nd.Turn.call("drop", path="/tmp"), "done"]
        ),
        [look, drop],
        version="1",
    )


async def _one_run(url: str) -> dict[str, Any]:
    lags: list[float] = []
    running = True

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        while running:
            start = loop.time()
            await asyncio.sleep(TICK)
            lags.append(max(loop.time() - start - TICK, 0.0))

    store = open_store(url)
    tick = asyncio.get_running_loop().create_task(ticker())
    began = time.perf_counter()
    try:
        async with await DurableRuntime.open(
            store=store,
            agents=[_agent()],
            approval_signer=nd.ApprovalSigner("loop lag bench"),
            poll_interval=0.2,
        ) as rt:
            run = await rt.submit("janitor", "Clean up /tmp.")
            await run.wait("waiting_approval", timeout=300)
            await run.approve()
            record = await run.wait("completed", timeout=300)
            assert record.state == "completed"
        wall = time.perf_counter() - began
    finally:
        running = False
        await tick
        store.close()
    ordered = sorted(lags)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0
    return {
        "worst_ms": round(max(lags, default=0.0) * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        "ticks": len(lags),
        "wall_s": round(wall, 2),
    }


def _measure(label: str, make_url: Any, runs: int) -> dict[str, Any]:
    results = []
    for _ in range(runs):
        with make_url() as url:
            results.append(asyncio.run(_one_run(url)))
    return {
        "store": label,
        "runs": results,
        "worst_ms": max(r["worst_ms"] for r in results),
        "p99_ms": max(r["p99_ms"] for r in results),
        "wall_s": round(sum(r["wall_s"] for r in results) / len(results), 2),
    }


class _SqliteUrl:
    def __enter__(self) -> str:
        self.folder = tempfile.TemporaryDirectory()
        return f"sqlite:///{self.folder.name}/bench.db"

    def __exit__(self, *exc: object) -> None:
        self.folder.cleanup()


class _SlowPgUrl:
    def __init__(self, dsn: str, delay: float = DELAY) -> None:
        self.dsn = dsn
        self.delay = delay

    def __enter__(self) -> str:
        self.name = f"lag_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.name}")
        port = urlsplit(self.dsn).port
        assert port is not None
        self.proxy = latency_proxy("127.0.0.1", port, self.delay)
        proxy = self.proxy.__enter__()
        return f"postgresql://postgres@127.0.0.1:{proxy.port}/{self.name}"

    def __exit__(self, *exc: object) -> None:
        self.proxy.__exit__(None, None, None)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {self.name} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one run per store")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--delay-ms", type=float, default=DELAY * 1000, help="the proxy's added round-trip delay"
    )
    args = parser.parse_args()
    delay = args.delay_ms / 1000
    runs = 1 if args.quick else 3
    figures = []
    if find_pg_bin() is not None:
        server = start_server()
        try:
            figures.append(
                _measure(
                    f"PostgreSQL + {delay * 1000:.0f} ms",
                    lambda: _SlowPgUrl(server.dsn, delay),
                    runs,
                )
            )
        finally:
            server.stop()
    else:
        print("PostgreSQL is not installed: its row is skipped")
    figures.append(_measure("SQLite", _SqliteUrl, runs))
    info = machine(["psycopg"])
    print(describe(info))
    print(f"loop lag during a runtime run (tool, approval, answer); {runs} run(s) per store")
    rows = [
        [f["store"], f"{f['worst_ms']:.1f}", f"{f['p99_ms']:.1f}", f"{f['wall_s']:.2f}"]
        for f in figures
    ]
    print(table(["store", "worst lag ms", "p99 lag ms", "run wall s"], rows))
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": info, "figures": figures}, indent=2))


if __name__ == "__main__":
    main()
