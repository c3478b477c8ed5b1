"""Pause-and-takeover torture: SIGSTOP `nbdurable worker` processes past their lease.

    python benchmarks/lease_pause_torture.py --trials 20 --kills 10
    python benchmarks/lease_pause_torture.py --stores sqlite --trials 3 --kills 2 --json out.json

Pause trials (lease 1 s): a worker is paused at a random point inside a ``manual``
tool that works 1 s before its side effect (outside a store write transaction: a
pause inside one holds the store's write lock and blocks every worker until it
resumes, so the trial resumes it and pauses again, counted as "re-paused"); a
second worker takes the run over (``needs_attention``); a human retries; a third
worker runs the call again; the paused worker is woken before the retry, during
the retried call or after the run completed (random). Counted: how many trials had
the side effect exactly once, and whose result the store recorded. Variants:
``careful`` and ``threaded`` call ``ctx.ensure_owner()`` right before the effect
(on the loop, or from a worker thread); ``careless`` and ``careless_threaded`` do
not (how often a pause doubles an effect when a tool does not check).

Kill trials (default 30 s lease): a worker is SIGKILLed inside its tool while a
second one runs; timed from the kill to the second worker's claim in the store.

PostgreSQL trials start a throwaway server (tests/support/pgserver.py). The fast version
runs in the suite (tests/runtime/test_lease_takeover.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from machine_info import describe, machine
from support.lease_harness import kill_trial, pause_trial

CHECKED = ("careful", "threaded")
VARIANTS = ("careful", "threaded", "careless", "careless_threaded")
WAKES = ("before", "during", "after")


def _database(server: Any, name: str) -> str:
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"postgresql://postgres@127.0.0.1:{server.port}/{name}"


async def _pause_figures(
    kind: str, url_for: Any, variant: str, trials: int, rng: random.Random, root: Path
) -> dict[str, Any]:
    rows = []
    for i in range(trials):
        folder = root / f"{kind}-{variant}-{i}"
        folder.mkdir()
        wake = rng.choice(WAKES)
        pause_after = rng.uniform(0.0, 0.9)
        trial = await pause_trial(
            url_for(folder, f"p_{variant}_{i}"),
            folder / "log",
            variant,
            wake=wake,
            pause_after=pause_after,
        )
        rows.append(
            {
                "wake": wake,
                "pause_after": pause_after,
                "paused_pid": trial.paused_pid,
                "retried_pid": trial.retried_pid,
                "recorded_by": trial.recorded_by,
                "pause_tries": trial.pause_tries,
                "effects": trial.effects,
                "state": trial.final_state,
                "stale_recorded": trial.recorded_by == trial.paused_pid,
                "warned": "may have run twice" in trial.attention_reason,
            }
        )
    return {
        "store": kind,
        "variant": variant,
        "trials": trials,
        "once": sum(r["effects"] == 1 for r in rows),
        "twice": sum(r["effects"] >= 2 for r in rows),
        "completed": sum(r["state"] == "completed" for r in rows),
        "stale_recorded": sum(r["stale_recorded"] for r in rows),
        "warned": sum(r["warned"] for r in rows),
        "repaused": sum(r["pause_tries"] > 1 for r in rows),
        "rows": rows,
    }


async def _kill_figures(kind: str, url_for: Any, kills: int, root: Path) -> dict[str, Any]:
    seconds = []
    completed = 0
    for i in range(kills):
        folder = root / f"{kind}-kill-{i}"
        folder.mkdir()
        trial = await kill_trial(url_for(folder, f"k_{i}"), folder / "log")
        seconds.append(trial.seconds)
        completed += trial.final_state == "completed"
    return {
        "store": kind,
        "kills": kills,
        "completed": completed,
        "median_s": statistics.median(seconds) if seconds else None,
        "max_s": max(seconds) if seconds else None,
        "seconds": seconds,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="nbdurable-lease-"))
    results: dict[str, Any] = {"pause": [], "kill": []}
    for kind in args.stores.split(","):
        server = None
        if kind == "postgres":
            from support.pgserver import start_server

            server = start_server()

            def url_for(folder: Path, name: str, server: Any = server) -> str:
                return _database(server, name)

        else:

            def url_for(folder: Path, name: str) -> str:
                return f"sqlite:///{folder / 'runs.db'}"

        try:
            for variant in VARIANTS:
                count = args.trials if variant in CHECKED else args.unchecked_trials
                if count:
                    figures = await _pause_figures(kind, url_for, variant, count, rng, root)
                    results["pause"].append(figures)
                    print(_pause_line(figures), flush=True)
            if args.kills:
                figures = await _kill_figures(kind, url_for, args.kills, root)
                results["kill"].append(figures)
                print(_kill_line(figures), flush=True)
        finally:
            if server is not None:
                server.stop()
    return results


def _pause_line(f: dict[str, Any]) -> str:
    return (
        f"pause | {f['store']:<8} | {f['variant']:<17} | trials {f['trials']:>3} | "
        f"effect once {f['once']:>3} | twice {f['twice']:>3} | completed {f['completed']:>3} | "
        f"stale result recorded {f['stale_recorded']:>2} | 'may have run twice' {f['warned']:>3} | "
        f"re-paused {f['repaused']:>2}"
    )


def _kill_line(f: dict[str, Any]) -> str:
    return (
        f"kill  | {f['store']:<8} | kills {f['kills']:>3} | completed {f['completed']:>3} | "
        f"kill to claim: median {f['median_s']:.2f} s, max {f['max_s']:.2f} s (lease 30 s)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--trials", type=int, default=20, help="pause trials per checked variant")
    parser.add_argument(
        "--unchecked-trials", type=int, default=10, help="pause trials per unchecked variant"
    )
    parser.add_argument("--kills", type=int, default=10, help="dead-owner takeovers per store")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    info = machine()
    print(describe(info), flush=True)
    started = time.monotonic()
    results = asyncio.run(main_async(args))
    results["machine"] = info
    results["seconds"] = time.monotonic() - started
    print(f"seconds: {results['seconds']:.0f}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    checked = [f for f in results["pause"] if f["variant"] in CHECKED]
    ok = all(
        f["once"] == f["trials"] == f["completed"] and not f["stale_recorded"] for f in checked
    )
    ok = ok and all(f["max_s"] is None or f["max_s"] <= 3.0 for f in results["kill"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
