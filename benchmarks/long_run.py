"""Long-run benchmark: does a step cost the same at step 5,000 as at step 1?

Runs ``generate_text`` for N steps in one process: a zero-latency scripted
model calls a trivial tool N-1 times, then answers. Once without a store and
once with a SQLite session. For each it reports the median step time of the
first and of the last decile of steps, their ratio (1.0 means a step costs the
same at any history length) and how much the process's resident memory grew
over the run.

    python benchmarks/long_run.py                 # N = 5,000
    python benchmarks/long_run.py --steps 500     # a quick run
    python benchmarks/long_run.py --json out.json

See benchmarks/README.md ("Long runs") for the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
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

RUN_ID = "long"
NO_STORE = "no store"
SQLITE = "sqlite session"


@dataclass
class Figures:
    """What one configuration measured (times in ms unless named _s)."""

    config: str
    steps: int
    total_s: float
    first_decile_ms: float  # median step time over the first tenth of the steps
    last_decile_ms: float  # ... and over the last tenth
    rss_growth_mb: float  # resident memory after the run minus before it

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


def run(steps: int, db: Path | None) -> Figures:
    """One ``generate_text`` run of ``steps`` steps; with a SQLite session when ``db`` is given."""
    stamps: list[float] = []

    @nd.tool
    def ping(i: int) -> str:
        """Answer a ping."""
        stamps.append(time.perf_counter())
        return f"pong {i}"

    # Fixed usage: the scripted model then costs the same at every step.
    usage = nd.Usage(input_tokens=10, output_tokens=5, total_tokens=15)
    calls = steps - 1
    turns: list[Any] = [nd.Turn(tool_calls=[("ping", {"i": i})], usage=usage) for i in range(calls)]
    turns.append(nd.Turn(text="Done.", usage=usage))
    model = nd.ScriptedModel(turns, mode="sequential")
    store = nd.SqliteSessionStore(db) if db is not None else None
    session = nd.DurableSession(store, run_id=RUN_ID) if store is not None else None

    async def go() -> tuple[float, str, int]:
        started = time.perf_counter()
        result = await nd.generate_text(
            model=model,
            messages="Ping until done.",
            tools=[ping],
            max_steps=steps,
            session=session,
        )
        # Only small values leave the coroutine: the runner need not repr a long result.
        return time.perf_counter() - started, result.text, len(result.messages)

    gc.collect()
    before = rss_mb()
    total, text, messages = asyncio.run(go())
    after = rss_mb()
    if store is not None:
        store.close()
    assert len(stamps) == calls, f"expected {calls} tool calls, saw {len(stamps)}"
    assert text == "Done.", text
    assert messages == 2 * steps, messages
    first, last = deciles(stamps)
    config = NO_STORE if db is None else SQLITE
    return Figures(config, steps, total, first, last, after - before)


def in_fresh_process(steps: int, config: str) -> Figures:
    """Run one configuration in a child process: the heap of one run does not hide the other's."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--steps", str(steps), "--config", config],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{config} run failed:\n{done.stdout}{done.stderr}")
    return Figures(**json.loads(done.stdout.splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5000, help="steps per run (default 5000)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--config", choices=(NO_STORE, SQLITE), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 3:
        parser.error("--steps must be at least 3")

    if args.config is not None:
        # One configuration in this fresh process (its RSS growth is its own).
        with tempfile.TemporaryDirectory() as folder:
            db = Path(folder) / "long.db" if args.config == SQLITE else None
            figures = run(args.steps, db)
        print(json.dumps(asdict(figures)))
        return 0

    info = machine()
    print(describe(info))
    print()
    rows = [in_fresh_process(args.steps, config) for config in (NO_STORE, SQLITE)]

    header = ["config", "steps", "total s", "first decile ms", "last decile ms", "ratio", "RSS +MB"]
    body = [
        [
            f.config,
            str(f.steps),
            f"{f.total_s:.2f}",
            f"{f.first_decile_ms:.3f}",
            f"{f.last_decile_ms:.3f}",
            f"{f.ratio:.2f}",
            f"{f.rss_growth_mb:.1f}",
        ]
        for f in rows
    ]
    print(table(header, body))
    print()
    for f in rows:
        print(f"{f.config}: a step in the last decile costs {f.ratio:.2f}x one in the first")
    if args.json is not None:
        payload = {"machine": info, "figures": [{**asdict(f), "ratio": f.ratio} for f in rows]}
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
