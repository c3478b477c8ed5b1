"""Long crash torture of the runtime: SIGKILL `nbdurable worker` processes many times.

    python benchmarks/runtime_crash_torture.py --kills 200 --runs 40

Reports kills, runs completed, explicit retries of interrupted manual tools, and
how often safe and manual tools ran again; checks every history. The fast
version runs in the test suite (tests/runtime/test_crash.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.runtime_harness import check_histories, executions, torture

import nbdurable as nd


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="nbdurable-torture-"))
    url = f"sqlite:///{directory / 'runs.db'}"
    log = directory / "executions.log"
    report = asyncio.run(torture(url, log, runs=args.runs, kills=args.kills, seed=args.seed))
    store = nd.open_store(url)
    run_ids = [r.run_id for r in store.rt_list()]  # type: ignore[attr-defined]
    store.close()
    check_histories(url, run_ids)
    counts = executions(log)
    manual_ok = all(
        n <= 1 + report.retries[run_id]
        for (kind, run_id, _), n in counts.items()
        if kind == "manual"
    )
    print(f"kills: {report.kills}")
    print(f"runs completed: {report.completed}/{report.runs}")
    print(f"explicit retries of interrupted manual tools: {sum(report.retries.values())}")
    print(f"safe tool re-runs: {report.safe_reruns}; manual tool re-runs: {report.manual_reruns}")
    print(f"histories exact: yes; manual never re-ran without a retry: {manual_ok}")
    print(f"seconds: {report.seconds:.1f}")
    return 0 if report.completed == report.runs and manual_ok else 1


if __name__ == "__main__":
    sys.exit(main())
