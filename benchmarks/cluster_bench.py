"""Many workers on one PostgreSQL: throughput, idle cost, statements per step, prune.

    python benchmarks/cluster_bench.py                     # every part, one run
    python benchmarks/cluster_bench.py --part statements   # one part

Parts (each on a fresh database of one throwaway server, tests/support/pgserver.py):

- ``statements``: one 21-step run of the embedded engine (zero-latency model)
  with ``log_statement=all``: statements, transactions and advisory-lock
  statements it issues, per step; then the same run on the Temporal engine (a
  dev server, one ``nbdurable worker --engine temporal`` process mirroring into
  the same kind of database, a client runtime submitting and waiting), its
  statements split by process (``application_name``): the worker's are the
  mirror's cost. Needs the temporal-dev extra for the Temporal half.
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
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from machine_info import describe, machine, table  # noqa: E402
from support.pgserver import PgServer, start_server  # noqa: E402

_LOGGED = re.compile(r"\] (\S+) (\S*) ?LOG:  (?:statement|execute [^:]*): (.*)")
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
        conn.execute("ALTER SYSTEM SET log_line_prefix = '%m [%p] %d %a '")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.3)


def log_size(server: PgServer) -> int:
    return (server.data_dir / "server.log").stat().st_size


def logged(server: PgServer, since: int, dbname: str, app: str | None = None) -> list[str]:
    """The statements logged on ``dbname`` after byte ``since`` of the server log.

    ``app``: only those of connections with this ``application_name``.
    """
    with open(server.data_dir / "server.log", "rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    found = []
    for line in text.splitlines():
        match = _LOGGED.search(line)
        if match and match.group(1) == dbname and (app is None or match.group(2) == app):
            found.append(match.group(3))
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


def part_statements(server: PgServer, dump: Path | None = None) -> dict[str, Any]:
    """One 21-step embedded run with every statement logged (written to ``dump``)."""
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
    statements = logged(server, start, "bench_statements")
    if dump is not None:
        dump.write_text("\n".join(statements) + "\n")
    return {"steps": STEPS, "seconds": seconds, **statement_counts(statements)}


def temporal_worker(address: str, queue: str, url: str, code: Path) -> subprocess.Popen[str]:
    """An ``nbdurable worker --engine temporal`` serving the benchmark agents, polling."""
    env = {**os.environ, "PYTHONPATH": f"{code}:{HERE.parent / 'tests'}"}
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "nbdurable.cli", "worker", "--engine", "temporal"),
            *("--address", address, "--task-queue", queue, "--store", url),
            *("--agents", "support.cluster_agents:agents", "--log-level", "warning"),
        ],
        env=env,
        cwd=code,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for _ in range(50):
        line = proc.stdout.readline()
        if "polling" in line or not line:
            break
    if "polling" not in line:
        proc.kill()
        raise RuntimeError(f"the Temporal worker did not start: {line}")
    return proc


async def one_temporal_run(url: str, address: str, queue: str) -> None:
    from support.cluster_agents import chain

    from nbdurable import open_store
    from nbdurable.runtime import DurableRuntime
    from nbdurable.temporal import TemporalEngine

    store = open_store(url)
    try:
        engine = TemporalEngine(address=address, task_queue=queue)
        async with DurableRuntime(store=store, agents=[chain], engine=engine) as runtime:
            run = await runtime.submit("chain", "go")
            record = await run.wait("completed", "failed", "needs_attention", timeout=120)
            assert record.state == "completed", record
    finally:
        store.close()


def part_statements_temporal(
    server: PgServer, code: Path, idle: float = 5.0, dump: Path | None = None
) -> dict[str, Any]:
    """One 21-step Temporal run, every statement logged, split by process.

    The worker and the client connect with ``application_name`` ``worker`` and
    ``client``; the worker's statements during the run are the mirror's work
    (its idle statements/s, measured after the run over ``idle`` seconds, are
    printed too, so what polling adds can be told apart). ``dump``: a file to
    write the worker's statements to, one a line.
    """
    from support.cluster_agents import STEPS

    from nbdurable.temporal._devserver import DevServer, stop_process

    base = database(server, "bench_statements_temporal")
    worker_url, client_url = (f"{base}?application_name={app}" for app in ("worker", "client"))
    with DevServer() as dev:
        proc = temporal_worker(dev.address, "bench", worker_url, code)
        try:
            asyncio.run(one_temporal_run(client_url, dev.address, "bench"))  # warm: not counted
            time.sleep(1.0)
            set_logging(server, True)
            start = log_size(server)
            began = time.perf_counter()
            asyncio.run(one_temporal_run(client_url, dev.address, "bench"))
            seconds = time.perf_counter() - began
            time.sleep(0.5)
            middle = log_size(server)
            time.sleep(idle)
            set_logging(server, False)
        finally:
            stop_process(proc)
    name = "bench_statements_temporal"
    worker_statements = logged(server, start, name, "worker")
    worker = statement_counts(worker_statements)
    client = statement_counts(logged(server, start, name, "client"))
    if dump is not None:
        dump.write_text("\n".join(worker_statements) + "\n")
    quiet = statement_counts(logged(server, middle, name, "worker"))
    return {
        "steps": STEPS,
        "seconds": seconds,
        "worker": worker,
        "client": client,
        "worker_idle_per_s": quiet["statements"] / idle,
    }


# -- processes and CPU ----------------------------------------------------------------


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids`` (seconds; gone processes count 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def postgres_cpu() -> dict[int, float]:
    """CPU seconds of every postgres process, by pid (deltas: sum over the later snapshot)."""
    return {pid: cpu_seconds([pid]) for pid in postgres_pids()}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU the processes of ``after`` used since ``before`` (new ones: all of theirs)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def postgres_pids() -> list[int]:
    """Every process named postgres (the server and its backends)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def worker(url: str, code: Path, *extra: str) -> subprocess.Popen[bytes]:
    """An ``nbdurable worker`` (embedded) serving the benchmark agents, from ``code``."""
    env = {**os.environ, "PYTHONPATH": f"{code}:{HERE.parent / 'tests'}"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nbdurable.cli",
            "worker",
            "--store",
            url,
            "--engine",
            "embedded",
            "--agents",
            "support.cluster_agents:agents",
            "--log-level",
            "warning",
            *extra,
        ],
        env=env,
        cwd=code,  # python -m puts the working directory first on the path
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def scalar(url: str, statement: str) -> Any:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(statement).fetchone()
    return found[0] if found else None


# -- throughput ------------------------------------------------------------------------


async def submit_many(url: str, runs: int) -> None:
    from support.cluster_agents import chain

    from nbdurable import open_store
    from nbdurable.runtime import DurableRuntime

    store = open_store(url)
    try:
        client = DurableRuntime(store=store, agents=[chain])  # submits only
        for i in range(runs):
            await client.submit("chain", f"go {i}")
    finally:
        store.close()


def part_throughput(
    server: PgServer, code: Path, counts: list[int], runs: int
) -> list[dict[str, Any]]:
    """Steps/s of N worker processes sharing ``runs`` runs of the 21-step agent."""
    from support.cluster_agents import STEPS

    rows = []
    for n in counts:
        name = f"bench_tp_{n}"
        url = database(server, name)
        asyncio.run(submit_many(url, runs))
        busy0 = machine_busy()
        pg0 = postgres_cpu()
        procs = [worker(url, code, "--max-concurrent-runs", "4") for _ in range(n)]
        pids = [p.pid for p in procs]
        try:
            # from the first claim (imports and start-up are not the cluster's cost)
            while (
                scalar(url, "SELECT count(*) FROM nbdurable.rt_runs WHERE state <> 'pending'") == 0
            ):
                time.sleep(0.01)
            began = time.perf_counter()
            done_sql = "SELECT count(*) FROM nbdurable.rt_runs WHERE state = 'completed'"
            deadline = began + 900
            worker_cpu = 0.0
            while scalar(url, done_sql) < runs:
                worker_cpu = cpu_seconds(pids)
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{n} workers did not finish in 900 s")
                time.sleep(0.05)
            seconds = time.perf_counter() - began
            busy1 = machine_busy()
            pg_cpu = cpu_delta(pg0, postgres_cpu())
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        share = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1])
        rows.append(
            {
                "workers": n,
                "runs": runs,
                "steps": runs * STEPS,
                "seconds": seconds,
                "steps_per_s": runs * STEPS / seconds,
                "machine_busy": share,
                "postgres_cpu_s": pg_cpu,
                "workers_cpu_s": worker_cpu,
            }
        )
        print(
            f"  {n} workers: {runs * STEPS / seconds:.0f} steps/s, machine busy {share:.0%}",
            flush=True,
        )
    return rows


# -- idle cost ---------------------------------------------------------------------------


def unserved(count: int) -> list[Any]:
    import json

    from nbdurable.runs import RuntimeRun

    now = int(time.time() * 1000)
    return [
        RuntimeRun(
            run_id=f"other-{i}",
            agent_id="other",
            agent_version="1",
            session_id=f"s-other-{i}",
            prompt=json.dumps("x"),
            state="pending",
            created_at=now,
            updated_at=now,
            engine="embedded",
        )
        for i in range(count)
    ]


def part_idle(
    server: PgServer, code: Path, backlog: list[int], window: float
) -> list[dict[str, Any]]:
    """One idle worker over ``backlog`` pending runs it does not serve: statements/s, CPU."""
    from nbdurable.stores.postgres import PostgresSessionStore

    rows = []
    for count in backlog:
        name = f"bench_idle_{count}"
        url = database(server, name)
        store = PostgresSessionStore(url)
        try:
            if count:
                store.rt_insert_many(unserved(count), max_pending=count + 1)
        finally:
            store.close()
        proc = worker(url, code)
        try:
            began = time.perf_counter()
            # start-up, then the waiting reasons an idle claim notes once, a batch per poll
            unnoted = (
                "SELECT count(*) FROM nbdurable.rt_runs WHERE state = 'pending' "
                'AND record NOT LIKE \'%"waiting_reason":"%\''
            )
            time.sleep(5)
            while scalar(url, unnoted) and time.perf_counter() - began < 300:
                time.sleep(0.5)
            noted = time.perf_counter() - began
            time.sleep(2)
            set_logging(server, True)
            start = log_size(server)
            cpu0, pg0 = cpu_seconds([proc.pid]), postgres_cpu()
            time.sleep(window)
            cpu1, pg1 = cpu_seconds([proc.pid]), postgres_cpu()
            set_logging(server, False)
            counts = statement_counts(logged(server, start, name))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        rows.append(
            {
                "pending_unserved": count,
                "statements_per_s": counts["statements"] / window,
                "transactions_per_s": counts["transactions"] / window,
                "worker_cpu": (cpu1 - cpu0) / window,
                "postgres_cpu": cpu_delta(pg0, pg1) / window,
                "noted_seconds": noted,
            }
        )
        print(f"  {rows[-1]}", flush=True)
    return rows


# -- prune -------------------------------------------------------------------------------


def part_prune(server: PgServer, code: Path, runs: int) -> dict[str, Any]:
    """``store prune`` of ``runs`` finished runs (2 checkpoints, 4 events each)."""
    import json

    import nbdurable as nd
    from nbdurable.events._model import NewEvent
    from nbdurable.runs import RuntimeRun
    from nbdurable.stores.postgres import PostgresSessionStore
    from nbdurable.testing._checkpoints import checkpoint, histories

    url = database(server, "bench_prune")
    store = PostgresSessionStore(url)
    began = time.perf_counter()
    then = int(time.time() * 1000) - 3_600_000
    records = []
    for i in range(runs):
        run_id = f"done-{i}"
        for step, messages in enumerate(histories(2, first=nd.user(f"Probe system {i}."))):
            events = [
                NewEvent(type="step", step_index=step, payload={"i": i, "n": n}, created_at=then)
                for n in range(2)
            ]
            status = "completed" if step == 1 else "running"
            store.save_with_events(
                checkpoint(run_id, step, messages, status=status, created_at=then), events
            )
        records.append(
            RuntimeRun(
                run_id=run_id,
                agent_id="chain",
                agent_version="1",
                session_id=f"s-{i}",
                prompt=json.dumps("go"),
                state="completed",
                created_at=then,
                updated_at=then,
            )
        )
        if len(records) == 1000:
            store.rt_insert_many(records, max_pending=10**9)
            records = []
    if records:
        store.rt_insert_many(records, max_pending=10**9)
    fill = time.perf_counter() - began
    size = (
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = 'nbdurable' AND c.relkind = 'r'"
    )
    before = scalar(url, size)
    store.close()
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "nbdurable.cli", "store", "prune", url, "--older-than", "1m"],
        capture_output=True,
        text=True,
        cwd=code,  # python -m puts the working directory first on the path
        env={**os.environ, "PYTHONPATH": str(code)},
    )
    seconds = time.perf_counter() - began
    after = scalar(url, size)
    return {
        "runs": runs,
        "fill_seconds": fill,
        "seconds": seconds,
        "bytes_before": int(before),
        "bytes_after": int(after),
        "output": (done.stdout + done.stderr).strip().splitlines()[-3:],
        "returncode": done.returncode,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--part", choices=["statements", "throughput", "idle", "prune", "all"], default="all"
    )
    parser.add_argument("--runs", type=int, default=200, help="runs of the throughput part")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--backlog", default="0,1000,10000")
    parser.add_argument("--window", type=float, default=30.0, help="idle seconds measured")
    parser.add_argument("--prune-runs", type=int, default=10_000)
    parser.add_argument(
        "--dump",
        type=Path,
        help="statements: write the Temporal worker's statements here (the embedded run's "
        "next to it, .embedded.sql)",
    )
    parser.add_argument(
        "--no-temporal", action="store_true", help="statements: the embedded engine's only"
    )
    parser.add_argument(
        "--code", type=Path, default=HERE.parent, help="checkout whose nbdurable the workers run"
    )
    args = parser.parse_args()
    print(describe(machine(["psycopg", "psycopg-pool"])))
    print(f"workers run the nbdurable of {args.code}", flush=True)
    server = start_server()
    parts = ["statements", "throughput", "idle", "prune"] if args.part == "all" else [args.part]
    try:
        if "statements" in parts:
            f = part_statements(server, args.dump and args.dump.with_suffix(".embedded.sql"))
            rows = [["embedded (one process)", f]]
            if not args.no_temporal:
                t = part_statements_temporal(server, args.code, dump=args.dump)
                both = {k: t["worker"][k] + t["client"][k] for k in t["worker"]}
                rows += [
                    ["temporal: worker (the mirror)", {**t, **t["worker"]}],
                    ["temporal: client (submit, wait)", {**t, **t["client"]}],
                    ["temporal: both", {**t, **both}],
                ]
            print("\n== statements of one 21-step run (log_statement=all)")
            print(
                table(
                    [
                        "",
                        "seconds",
                        "statements",
                        "transactions",
                        "advisory locks",
                        "per step (s/t/a)",
                    ],
                    [
                        [
                            label,
                            f"{r['seconds']:.1f}",
                            str(r["statements"]),
                            str(r["transactions"]),
                            str(r["advisory"]),
                            f"{r['statements'] / r['steps']:.1f} / "
                            f"{r['transactions'] / r['steps']:.1f} / "
                            f"{r['advisory'] / r['steps']:.2f}",
                        ]
                        for label, r in rows
                    ],
                ),
                flush=True,
            )
            if not args.no_temporal:
                print(f"  the temporal worker idle: {t['worker_idle_per_s']:.1f} statements/s")
        if "throughput" in parts:
            print("\n== throughput: N worker processes, one PostgreSQL, zero-latency model")
            rows = part_throughput(
                server, args.code, [int(n) for n in args.workers.split(",")], args.runs
            )
            base = rows[0]["steps_per_s"]
            print(
                table(
                    [
                        "workers",
                        "steps",
                        "seconds",
                        "steps/s",
                        "x 1 worker",
                        "machine busy",
                        "postgres CPU s",
                        "workers CPU s",
                    ],
                    [
                        [
                            str(r["workers"]),
                            str(r["steps"]),
                            f"{r['seconds']:.1f}",
                            f"{r['steps_per_s']:.0f}",
                            f"{r['steps_per_s'] / base:.2f}",
                            f"{r['machine_busy']:.0%}",
                            f"{r['postgres_cpu_s']:.1f}",
                            f"{r['workers_cpu_s']:.1f}",
                        ]
                        for r in rows
                    ],
                ),
                flush=True,
            )
        if "idle" in parts:
            print(
                f"\n== idle cost: one worker, pending runs it does not serve ({args.window:.0f} s)"
            )
            rows = part_idle(
                server, args.code, [int(n) for n in args.backlog.split(",")], args.window
            )
            print(
                table(
                    [
                        "pending unserved",
                        "statements/s",
                        "transactions/s",
                        "worker CPU",
                        "postgres CPU",
                        "start + notes s",
                    ],
                    [
                        [
                            str(r["pending_unserved"]),
                            f"{r['statements_per_s']:.1f}",
                            f"{r['transactions_per_s']:.1f}",
                            f"{r['worker_cpu']:.1%}",
                            f"{r['postgres_cpu']:.1%}",
                            f"{r['noted_seconds']:.0f}",
                        ]
                        for r in rows
                    ],
                ),
                flush=True,
            )
        if "prune" in parts:
            print(f"\n== store prune of {args.prune_runs} finished runs")
            f = part_prune(server, args.code, args.prune_runs)
            print(
                table(
                    ["runs", "prune seconds", "tables before", "tables after", "exit"],
                    [
                        [
                            str(f["runs"]),
                            f"{f['seconds']:.1f}",
                            f"{f['bytes_before'] / 1e6:.1f} MB",
                            f"{f['bytes_after'] / 1e6:.1f} MB",
                            str(f["returncode"]),
                        ]
                    ],
                )
            )
            for line in f["output"]:
                print(f"  {line}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
