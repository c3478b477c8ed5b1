"""Many workers on one PostgreSQL: throughput, idle cost, statements per step, prune.

    python benchmarks/cluster_bench.py                     # every part, one run
    python benchmarks/cluster_bench.py --part statements   # one part

Parts (each on a fresh database of one throwaway server, tests/support/pgserver.py):

- ``statements``: one 21-step run of the embedded engine (zero-latency model)
  with ``log_statement=all``: statements, transactions and advisory-lock
  statements it issues, per step.
- ``throughput``: 1, 2, 4, 8 ``nbdurable worker`` processes on one database
  share ``--runs`` runs of the 21-step agent: steps/s per worker count.
- ``idle``: one idle worker with 0, 1,000 and 10,000 pending runs of an agent
  it does not serve: statements/s it sends (statement log) and its CPU.
- ``prune``: ``nbdurable store prune`` of 10,000 finished runs: time, and the
  tables' size before, after the delete and after the VACUUM it runs.

Figures are one run's, on the machine printed first; compare ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from machine_info import describe, machine, table  # noqa: E402
from support.pgserver import PgServer, start_server  # noqa: E402

_LOGGED = re.compile(r"LOG:  (?:statement|execute [^:]*): (.*)")
_ADVISORY = re.compile(r"pg_advisory", re.IGNORECASE)


def database(server: PgServer, name: str) -> str:
    """A fresh database on ``server``; its URL."""
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return f"postgresql://postgres@127.0.0.1:{server.port}/{name}"


def set_logging(server: PgServer, on: bool) -> None:
    """``log_statement`` all (with the process id in each line) or none, reloaded now."""
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET log_statement = '{'all' if on else 'none'}'")
        conn.execute("ALTER SYSTEM SET log_line_prefix = '%m [%p] %d '")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.3)


def log_size(server: PgServer) -> int:
    return (server.data_dir / "server.log").stat().st_size


def logged(server: PgServer, since: int, dbname: str) -> list[str]:
    """The statements logged on ``dbname`` after byte ``since`` of the server log."""
    with open(server.data_dir / "server.log", "rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    found = []
    for line in text.splitlines():
        if f" {dbname} LOG:  " not in line:
            continue
        match = _LOGGED.search(line)
        if match:
            found.append(match.group(1))
    return found


def statement_counts(statements: list[str]) -> dict[str, int]:
    """Statements, transactions (BEGINs) and advisory-lock statements among ``statements``."""
    return {
        "statements": len(statements),
        "transactions": sum(1 for s in statements if s.strip().upper().startswith("BEGIN")),
        "advisory": sum(1 for s in statements if _ADVISORY.search(s)),
    }


# -- statements per step -------------------------------------------------------------


async def one_run(url: str, steps: int) -> None:
    from support.cluster_agents import chain

    from nbdurable import open_store
    from nbdurable.runtime import DurableRuntime

    store = open_store(url)
    try:
        async with DurableRuntime(store=store, agents=[chain]) as runtime:
            run = await runtime.submit("chain", "go")
            record = await run.wait("completed", "failed", "needs_attention", timeout=120)
            assert record.state == "completed", record
    finally:
        store.close()


def part_statements(server: PgServer) -> dict[str, Any]:
    """One 21-step embedded run with every statement logged."""
    from support.cluster_agents import STEPS

    url = database(server, "bench_statements")
    asyncio.run(one_run(url, STEPS))  # schema migrated, imports warm: not counted
    set_logging(server, True)
    start = log_size(server)
    began = time.perf_counter()
    asyncio.run(one_run(url, STEPS))
    seconds = time.perf_counter() - began
    time.sleep(0.5)
    set_logging(server, False)
    counts = statement_counts(logged(server, start, "bench_statements"))
    return {"steps": STEPS, "seconds": seconds, **counts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--part", choices=["statements", "throughput", "idle", "prune", "all"], default="all"
    )
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--prune-runs", type=int, default=10_000)
    args = parser.parse_args()
    print(describe(machine(["psycopg", "psycopg-pool"])))
    server = start_server()
    try:
        if args.part in ("statements", "all"):
            f = part_statements(server)
            per = {k: f[k] / f["steps"] for k in ("statements", "transactions", "advisory")}
            print("\n== statements of one embedded run (log_statement=all)")
            print(
                table(
                    ["steps", "statements", "transactions", "advisory locks", "per step (s/t/a)"],
                    [
                        [
                            str(f["steps"]),
                            str(f["statements"]),
                            str(f["transactions"]),
                            str(f["advisory"]),
                            f"{per['statements']:.1f} / {per['transactions']:.1f} / "
                            f"{per['advisory']:.2f}",
                        ]
                    ],
                )
            )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
