"""Crash torture: SIGKILL a checkpoint writer many times and check what each store kept.

The long version of tests/stores/test_crash.py (same harness):

    python benchmarks/crash_torture.py                  # 100 kills each, SQLite and JSONL
    python benchmarks/crash_torture.py --kills 500 --store sqlite --max-delay 0.5

After every kill it reopens the store and checks that every checkpoint the
writer reported as saved loads intact, that the latest checkpoint is complete,
and that the history has every step in order. Exits non-zero on the first loss.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

HARNESS = Path(__file__).resolve().parent.parent / "tests" / "support" / "crash_harness.py"


def load_harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crash_harness", HARNESS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["crash_harness"] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100, help="kills per store (default 100)")
    parser.add_argument("--store", choices=["sqlite", "jsonl", "all"], default="all")
    parser.add_argument("--max-delay", type=float, default=0.3, help="max seconds before a kill")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="where the stores go (a temp dir)")
    args = parser.parse_args()
    harness = load_harness()
    root = args.dir or Path(tempfile.mkdtemp(prefix="nbdurable-torture-"))
    urls = {"sqlite": f"sqlite:///{root / 'runs.db'}", "jsonl": f"jsonl:///{root / 'runs'}"}
    names = ["sqlite", "jsonl"] if args.store == "all" else [args.store]
    for name in names:
        started = time.perf_counter()
        report = harness.torture(
            urls[name], "torture::run#1", args.kills, seed=args.seed, max_delay=args.max_delay
        )
        elapsed = time.perf_counter() - started
        print(
            f"{name}: {report.kills} kills in {elapsed:.1f} s, {report.committed} committed "
            f"checkpoints all intact ({report.steps_verified} loads checked), final step "
            f"{report.latest_steps[-1]}, torn JSONL lines ignored: {report.torn_warnings}"
        )
    print(f"stores kept in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
