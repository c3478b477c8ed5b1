"""Long-run benchmark: does a step cost the same at step 5,000 as at step 1?

Runs an agent for N steps in one process: a zero-latency scripted model calls
a trivial tool N-1 times, then answers. ``generate_text`` without a store and
with a SQLite session, and a run of a ``DurableRuntime`` on SQLite (what
``%%agent`` uses); with ``--pg`` (a throwaway server, tests/support/pgserver.py)
or ``--pg-url`` also ``generate_text`` with a PostgreSQL session. For each it
reports the median step time of the first and of the last decile of steps,
their ratio (1.0 means a step costs the same at any history length), how much
the process's resident memory grew over the run and, on SQLite, the
transactions committed per step (counted by a trace callback on every
connection the run opens).

    python benchmarks/long_run.py                 # N = 5,000
    python benchmarks/long_run.py --steps 500     # a quick run
    python benchmarks/long_run.py --steps 20000   # the long one
    python benchmarks/long_run.py --pg            # also on PostgreSQL
    python benchmarks/long_run.py --repeat 3      # the median-ratio run of three
    python benchmarks/long_run.py --json out.json
    python benchmarks/long_run.py --resume        # cold resume at N = 500 and 5,000

``--resume`` (long_run_resume.py) times something else: a run killed after N
steps, reopened in a fresh process, to its first new step; nbdurable's session
API and runtime and LangGraph (N <= 1,000), medians of 5 fresh processes each.

See benchmarks/README.md ("Long runs") for the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from machine_info import describe, machine, table

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime, Limits
from nbdurable.stores import open_store

RUN_ID = "long"
NO_STORE = "no store"
SQLITE = "sqlite session"
RUNTIME = "runtime sqlite"
POSTGRES = "postgres session"
CONFIGS = (NO_STORE, SQLITE, RUNTIME, POSTGRES)
PG_URL_ENV = "LONG_RUN_PG_URL"  # how the parent hands the server to a child


class CommitCounter:
    """Counts COMMITs on every sqlite3 connection opened while it is installed."""

    def __init__(self) -> None:
        self.commits = 0
        self._connect = sqlite3.connect

    def _trace(self, statement: str) -> None:
        if statement.lstrip()[:6].upper() == "COMMIT":
            self.commits += 1

    def install(self) -> None:
        """Wrap ``sqlite3.connect`` so each new connection reports its statements."""
        original = self._connect

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = original(*args, **kwargs)
            conn.set_trace_callback(self._trace)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]


@dataclass
class Figures:
    """What one configuration measured (times in ms unless named _s)."""

    config: str
    steps: int
    total_s: float
    first_decile_ms: float  # median step time over the first tenth of the steps
    last_decile_ms: float  # ... and over the last tenth
    rss_growth_mb: float  # resident memory after the run minus before it
    commits_per_step: float | None = None  # SQLite transactions per step (None: not counted)
    # The same deciles in process CPU time (all threads): steadier on a shared machine.
    first_decile_cpu_ms: float = float("nan")
    last_decile_cpu_ms: float = float("nan")

    @property
    def cpu_ratio(self) -> float:
        """Last decile over first decile in CPU time."""
        first, last = self.first_decile_cpu_ms, self.last_decile_cpu_ms
        return last / first if first else float("nan")

    @property
    def ratio(self) -> float:
        """Last decile over first decile: 1.0 is a flat per-step cost."""
        return self.last_decile_ms / self.first_decile_ms if self.first_decile_ms else float("nan")


def rss_mb() -> float:
    """The process's resident set size now, in MiB (Linux /proc; 0 elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def deciles(stamps: list[float]) -> tuple[float, float]:
    """Median step time (ms) of the first and last tenth of the intervals between tool calls."""
    steps = [(b - a) * 1000 for a, b in itertools.pairwise(stamps)]
    if not steps:
        return float("nan"), float("nan")
    tenth = max(1, len(steps) // 10)
    return statistics.median(steps[:tenth]), statistics.median(steps[-tenth:])


def scripted(steps: int, stamps: list[float], cpu: list[float]) -> tuple[nd.ScriptedModel, Any]:
    """The model (N-1 tool calls, then an answer) and the tool that stamps each step."""

    @nd.tool
    def ping(i: int) -> str:
        """Answer a ping."""
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        return f"pong {i}"

    # Fixed usage: the scripted model then costs the same at every step.
    usage = nd.Usage(input_tokens=10, output_tokens=5, total_tokens=15)
    turns: list[Any] = [
        nd.Turn(tool_calls=[("ping", {"i": i})], usage=usage) for i in range(steps - 1)
    ]
    turns.append(nd.Turn(text="Done.", usage=usage))
    return nd.ScriptedModel(turns, mode="sequential"), ping


async def session_run(steps: int, model: Any, ping: Any, store: Any) -> tuple[str, int]:
    """``generate_text``, with a session on ``store`` unless it is None."""
    session = nd.DurableSession(store, run_id=RUN_ID) if store is not None else None
    result = await nd.generate_text(
        model=model,
        messages="Ping until done.",
        tools=[ping],
        max_steps=steps,
        session=session,
    )
    # Only small values leave the coroutine: the runner need not repr a long result.
    return result.text, len(result.messages)


async def runtime_run(steps: int, model: Any, ping: Any, store: Any) -> tuple[str, int]:
    """One run of a DurableRuntime on ``store`` (limits raised for the run's length)."""
    agent = Agent(id="pinger", model=model, tools=[ping], version="1", max_steps=steps)
    limits = Limits(max_payload_bytes=1 << 30, max_operations=4 * steps)
    try:
        async with await DurableRuntime.open(store=store, agents=[agent], limits=limits) as runtime:
            run = await runtime.submit("pinger", "Ping until done.")
            result = await run.result()
            return result.text, len(result.messages)
    finally:
        await asyncio.sleep(0)


def run(steps: int, config: str, folder: Path, pg_url: str | None = None) -> Figures:
    """One run of ``steps`` steps in the configuration ``config``."""
    stamps: list[float] = []
    cpu: list[float] = []
    model, ping = scripted(steps, stamps, cpu)
    counter = CommitCounter() if config in (SQLITE, RUNTIME) else None
    if counter is not None:
        counter.install()
    store: Any = None
    if config == SQLITE:
        store = nd.SqliteSessionStore(folder / "long.db")
    elif config == RUNTIME:
        # Opened before the RSS baseline: its first open imports the migration tools.
        store = open_store(f"sqlite:///{folder}/rt.db")
    elif config == POSTGRES:
        assert pg_url is not None
        store = open_store(pg_url)
        if RUN_ID in store.list():  # left by an earlier run on this database (--repeat)
            store.delete(RUN_ID)

    async def go() -> tuple[float, str, int]:
        started = time.perf_counter()
        if config == RUNTIME:
            text, messages = await runtime_run(steps, model, ping, store)
        else:
            text, messages = await session_run(steps, model, ping, store)
        return time.perf_counter() - started, text, messages

    gc.collect()
    before = rss_mb()
    commits_before = counter.commits if counter is not None else 0
    total, text, messages = asyncio.run(go())
    after = rss_mb()
    if store is not None:
        store.close()
    calls = steps - 1
    assert len(stamps) == calls, f"expected {calls} tool calls, saw {len(stamps)}"
    assert text == "Done.", text
    assert messages == 2 * steps, messages
    first, last = deciles(stamps)
    per_step = (counter.commits - commits_before) / steps if counter is not None else None
    first_cpu, last_cpu = deciles(cpu)
    return Figures(config, steps, total, first, last, after - before, per_step, first_cpu, last_cpu)


def in_fresh_process(steps: int, config: str, pg_url: str | None = None) -> Figures:
    """Run one configuration in a child process: the heap of one run does not hide the other's."""
    env = dict(os.environ)
    if pg_url is not None:
        env[PG_URL_ENV] = pg_url
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--steps", str(steps), "--config", config],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{config} run failed:\n{done.stdout}{done.stderr}")
    return Figures(**json.loads(done.stdout.splitlines()[-1]))


def median_run(steps: int, config: str, pg_url: str | None, repeat: int) -> Figures:
    """Of ``repeat`` fresh runs of a configuration, the one with the median ratio."""
    runs = sorted(
        (in_fresh_process(steps, config, pg_url) for _ in range(repeat)), key=lambda f: f.ratio
    )
    return runs[len(runs) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5000, help="steps per run (default 5000)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--pg", action="store_true", help="also on a throwaway PostgreSQL server")
    parser.add_argument("--pg-url", help="also on this PostgreSQL database (postgresql://...)")
    parser.add_argument(
        "--only",
        choices=(*CONFIGS, "session resume", "session continue", "runtime", "langgraph"),
        action="append",
        help="run only these configurations",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="fresh runs per configuration; the one with the median ratio is shown"
        " (--resume: fresh resumes per configuration and N, default 5)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="time a cold resume to the first new step instead (long_run_resume.py)",
    )
    parser.add_argument(
        "--resume-steps",
        type=int,
        nargs="+",
        default=[500, 5000],
        help="the N of --resume (default 500 5000)",
    )
    parser.add_argument("--config", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 3:
        parser.error("--steps must be at least 3")
    if args.resume:
        import long_run_resume

        configs = list(args.only or long_run_resume.CONFIGS)
        return long_run_resume.run(args.resume_steps, configs, args.repeat or 5, args.json)
    args.repeat = args.repeat or 1

    if args.config is not None:
        # One configuration in this fresh process (its RSS growth is its own).
        with tempfile.TemporaryDirectory() as folder:
            figures = run(args.steps, args.config, Path(folder), os.environ.get(PG_URL_ENV))
        print(json.dumps(asdict(figures)))
        return 0

    info = machine()
    print(describe(info))
    print()
    configs = [NO_STORE, SQLITE, RUNTIME]
    server = None
    pg_url = args.pg_url
    if args.pg and pg_url is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from support.pgserver import start_server

        server = start_server()
        pg_url = server.dsn
    if pg_url is not None:
        configs.append(POSTGRES)
    if args.only:
        configs = [c for c in configs if c in args.only]
    try:
        rows = [median_run(args.steps, config, pg_url, args.repeat) for config in configs]
    finally:
        if server is not None:
            server.stop()

    header = [
        "config",
        "steps",
        "total s",
        "first decile ms",
        "last decile ms",
        "ratio",
        "cpu ratio",
        "RSS +MB",
        "commits/step",
    ]
    body = [
        [
            f.config,
            str(f.steps),
            f"{f.total_s:.2f}",
            f"{f.first_decile_ms:.3f}",
            f"{f.last_decile_ms:.3f}",
            f"{f.ratio:.2f}",
            f"{f.cpu_ratio:.2f}",
            f"{f.rss_growth_mb:.1f}",
            "-" if f.commits_per_step is None else f"{f.commits_per_step:.2f}",
        ]
        for f in rows
    ]
    print(table(header, body))
    print()
    for f in rows:
        print(
            f"{f.config}: a step in the last decile costs {f.ratio:.2f}x one in the first"
            f" ({f.cpu_ratio:.2f}x in CPU time)"
        )
    if args.json is not None:
        figures = [{**asdict(f), "ratio": f.ratio, "cpu_ratio": f.cpu_ratio} for f in rows]
        payload = {"machine": info, "figures": figures}
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
