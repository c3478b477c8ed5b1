"""PostgreSQL restarted under `nbdurable worker` processes: no run fails or sticks, no tool twice.

    python benchmarks/pg_restart_torture.py --runs 100 --workers 3 --restarts 2
    python benchmarks/pg_restart_torture.py --runs 100 --repeat 5 --down-seconds 3

Starts a throwaway PostgreSQL server (tests/support/pgserver.py: needs PostgreSQL's binaries),
submits the runs (tests/support/runtime_agents.py `torture`: three tool calls each, one of them
`manual`), starts the workers, and runs `pg_ctl restart -m fast` each time another
`runs / (restarts + 1)` runs have finished, so runs are in flight at every restart.
Reports the runs' final states, the tool calls that started twice and the time taken;
exits 1 unless every run completed and no tool call started twice. The fast version
runs in the test suite (tests/runtime/test_store_outage.py, 20 runs).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import psycopg
from machine_info import describe, machine
from support.pg_restart_harness import RestartReport, restart_torture
from support.pgserver import find_pg_bin, start_server


async def one(args: argparse.Namespace, attempt: int) -> RestartReport:
    server = start_server()
    try:
        name = f"torture_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = f"postgresql://postgres@127.0.0.1:{server.port}/{name}"
        worker_args: tuple[str, ...] = ()
        if args.store_retry_ms is not None:
            worker_args = ("--store-retry-ms", str(args.store_retry_ms))
        with tempfile.TemporaryDirectory(prefix="nbdurable-pg-restart-") as folder:
            return await restart_torture(
                server,
                url,
                Path(folder) / "executions.log",
                runs=args.runs,
                workers=args.workers,
                restarts=args.restarts,
                down_seconds=args.down_seconds,
                worker_args=worker_args,
                lease_ms=args.lease_ms,
                settle_seconds=args.settle_seconds,
            )
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="fresh server and runs each time")
    parser.add_argument(
        "--down-seconds", type=float, default=0.0, help="keep the server stopped this long"
    )
    parser.add_argument("--lease-ms", type=int, default=10_000)
    parser.add_argument(
        "--store-retry-ms",
        type=int,
        default=None,
        help="passed to the workers (default: the worker's own, 60000)",
    )
    parser.add_argument("--settle-seconds", type=float, default=300.0)
    args = parser.parse_args()
    info = machine(["psycopg", "psycopg-pool"])
    bin_dir = find_pg_bin()
    if bin_dir is not None:
        info["postgres"] = bin_dir.parent.name
    print(describe(info), flush=True)
    ok = True
    for attempt in range(1, args.repeat + 1):
        report = asyncio.run(one(args, attempt))
        clean = report.completed == report.runs and report.doubled == 0
        ok = ok and clean
        print(f"#{attempt}: {report.summary()}", flush=True)
        if not clean:
            for i, text in enumerate(report.worker_logs):
                tail = [line for line in text.splitlines() if line.startswith("nbdurable")]
                print(f"  worker {i} (exit {report.worker_codes[i]}): {tail[-3:]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
