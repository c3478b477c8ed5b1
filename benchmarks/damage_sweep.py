"""Damage a 12-run SQLite store page by page, 1,000+ ways, and count silent wrong reads.

Each variant damages one page of one table or index of a copy (a byte changed,
a bit flipped, the page zeroed, swapped with another, or the file truncated
there), reads everything back through the library and runs ``nbdurable store
check`` on it. The promise: no read returns different data without an error
(``silent`` is 0), no exception but ours (``untyped`` is 0), and the check says
damaged exactly when the library refused a read (``agrees`` on every variant).
The shared harness is ``tests/support/damage_harness.py``.

    python benchmarks/damage_sweep.py                  # 1,050 variants
    python benchmarks/damage_sweep.py --count 200 -v   # fewer, each failure printed

Exit status 1 when the promise breaks.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

HARNESS = Path(__file__).resolve().parent.parent / "tests" / "support" / "damage_harness.py"


def load_harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("damage_harness", HARNESS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["damage_harness"] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1050, help="variants (default 1050)")
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("-v", "--verbose", action="store_true", help="print each broken promise")
    args = parser.parse_args()
    harness = load_harness()
    root = Path(tempfile.mkdtemp(prefix="nbdurable-damage-"))
    base = root / "base.db"
    harness.build(base)
    sound = harness.observe(base)
    broken = [name for name, value in sound.items() if isinstance(value, BaseException)]
    assert not broken, broken
    page_size, pages = harness.page_map(base)
    print(f"store: {base.stat().st_size:,} bytes, {len(pages)} tables and indexes")
    found = harness.variants(base, args.count, args.seed)
    verdicts: collections.Counter[str] = collections.Counter()
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    disagree = unnamed = check_only = elsewhere = 0
    started = time.perf_counter()
    for n, variant in enumerate(found):
        outcome = harness.run_variant(
            base, root / "copy.db", variant, sound, args.seed + n, page_size
        )
        verdicts[outcome.verdict] += 1
        by_kind[variant.kind][outcome.verdict] += 1
        disagree += not outcome.agrees
        check_only += outcome.check_only
        elsewhere += bool(outcome.silent_elsewhere)
        unnamed += not outcome.runs_named
        bad = outcome.verdict in ("silent", "untyped") or not outcome.agrees
        bad = bad or not outcome.runs_named
        if args.verbose and bad:
            print(
                f"  {outcome.variant}: {outcome.verdict}, check clean={outcome.check_clean}"
                f" differed={outcome.differed[:4]} untyped={list(outcome.untyped.items())[:2]}"
                f" check_error={outcome.check_error!r}"
                f" refused={[(n, e.run_id) for n, e in outcome.refused.items()][:3]}"
                f" check_runs={outcome.check_runs}"
            )
    elapsed = time.perf_counter() - started
    print(f"variants: {len(found)} in {elapsed:.0f} s")
    for verdict in ("identical", "refused", "silent", "untyped"):
        print(f"  {verdict}: {verdicts[verdict]}")
    print(f"  silent in a read but {', '.join(harness.INDEX_FILTERED)}: {elsewhere}")
    for kind, counts in sorted(by_kind.items()):
        print(f"    {kind}: {dict(counts)}")
    print(f"library refused or misread, check clean: {disagree}")
    print(f"a run the library refused naming it, not named by the check: {unnamed}")
    print(f"reads as before, check reports damage (where no read goes): {check_only}")
    return 1 if verdicts["silent"] or verdicts["untyped"] or disagree else 0


if __name__ == "__main__":
    sys.exit(main())
