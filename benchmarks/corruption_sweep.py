"""Damage a store file at every N-th byte and check the promise each time.

A sample SQLite store (three runs, their checkpoints and events) is copied; in
each copy ``--length`` bytes from one offset are inverted. Every read of the
store API must then return exactly what the sound file returned, or raise
``StoreCorruptionError`` naming the file; and ``nbdurable store check`` must
report damage whenever a read failed or differed, naming the runs it hit.
``tests/stores/test_broken_files.py`` runs a handful of offsets; this script
runs them all (``--step 1``) or every N-th.

    python benchmarks/corruption_sweep.py                 # every 61st byte
    python benchmarks/corruption_sweep.py --step 1        # every byte (slow)
    python benchmarks/corruption_sweep.py --store jsonl   # the JSONL store's files

Prints how many copies read as the sound file with a clean check, how many were
detected, and any broken promise (the exit status is 1 when there is one).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

HARNESS = Path(__file__).resolve().parent.parent / "tests" / "support" / "broken_harness.py"


def load_harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("broken_harness", HARNESS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["broken_harness"] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", type=int, default=61, help="bytes between offsets (default 61)")
    parser.add_argument("--length", type=int, default=16, help="bytes inverted per copy")
    parser.add_argument("--store", choices=["sqlite", "jsonl"], default="sqlite")
    parser.add_argument("--dir", type=Path, default=None, help="where the copies go (a temp dir)")
    args = parser.parse_args()
    harness = load_harness()
    root = args.dir or Path(tempfile.mkdtemp(prefix="nbdurable-sweep-"))
    if args.store == "sqlite":
        base = root / "base.db"
        harness.build(f"sqlite:///{base}")
        files = [base]
    else:
        base = root / "base"
        harness.build(f"jsonl:///{base}")
        files = sorted(base.glob("*.jsonl"))
    sound, errors = harness.observe(f"{args.store}:///{base}")
    assert not errors, errors
    counts = {"identical, check clean": 0, "detected": 0, "broken promise": 0}
    started = time.perf_counter()
    copies = 0
    for number, target_file in enumerate(files):
        size = target_file.stat().st_size
        for offset in range(0, size, args.step):
            copy = root / "copy"
            shutil.rmtree(copy, ignore_errors=True)
            for leftover in root.glob("copy.db*"):
                leftover.unlink()
            if args.store == "sqlite":
                target = root / "copy.db"
                harness.damage(base, target, harness.flip(offset, args.length))
            else:
                shutil.copytree(base, copy)
                target = copy
                damaged = copy / target_file.name
                harness.damage(target_file, damaged, harness.flip(offset, args.length))
            outcome = harness.judge(f"{args.store}:///{target}", sound)
            found = harness.problems(outcome, target)
            copies += 1
            if found:
                counts["broken promise"] += 1
                print(f"file {number} offset {offset}: {found}")
            elif outcome.report.clean:
                counts["identical, check clean"] += 1
            else:
                counts["detected"] += 1
    elapsed = time.perf_counter() - started
    summary = ", ".join(f"{n} {what}" for what, n in counts.items())
    print(
        f"{args.store}: {copies} damaged copies ({args.length} bytes inverted every "
        f"{args.step} bytes) in {elapsed:.0f} s: {summary}"
    )
    shutil.rmtree(root, ignore_errors=True)
    return 1 if counts["broken promise"] else 0


if __name__ == "__main__":
    sys.exit(main())
