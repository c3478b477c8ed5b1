"""Inspection benchmark (issue 6): a run's checkpoints as a DataFrame, against LangGraph.

Builds the run shape of store_bench.py (a user message, N steps of one tool call
and its 200-character result, a final answer; a checkpoint at every step) once in
nbdurable's SqliteSessionStore and once in LangGraph's SqliteSaver, each a file in
a temp dir, then times reading every checkpoint back:

    nbdurable  nd.inspect.history(store, run_id)     the DataFrame, one row per checkpoint
               store.history(run_id)                 metadata only (reference)
               store.history + pd.DataFrame          the same by hand (reference)
    LangGraph  list(saver.list(config))              every checkpoint, each with its state
               saver.list + pd.DataFrame             ... turned into one row per checkpoint
               list(graph.get_state_history(config)) the graph-level API
               get_state_history + pd.DataFrame      ... turned into one row per checkpoint

    DBOS       DBOS.list_workflow_steps(workflow_id)  every step of the same loop run as a
                                                     DBOS workflow (store_bench_dbos.py: a
                                                     model turn and a tool result a step)

Cold: each repetition opens a new store / saver (and compiles the graph again),
so no in-process cache helps; opening is not timed. Warm: further calls on that
same object. Median and p95 of each, and the median CPU time of the calling
thread (what a read costs when other processes share the machine). With
``--dbos`` nbdurable's and DBOS's calls take turns in ``--rounds`` rounds.

    python benchmarks/inspect_bench.py                 # N = 500 (about 8 minutes, mostly LangGraph)
    python benchmarks/inspect_bench.py --quick         # N = 20, one or two repetitions (smoke test)
    python benchmarks/inspect_bench.py --nbdurable-only --steps 5000
    python benchmarks/inspect_bench.py --json figures.json --check
    python benchmarks/inspect_bench.py --dbos --nbdurable-only   # the issue-42 ratio alone

Targets: nd.inspect.history (cold, median) <= 50 ms at N = 500 (issue 6), and
with ``--dbos`` at most DBOS's step listing time (issue 42: the ratio, measured
in the same run; DBOS's listing is timed while its process still has DBOS
launched, as an application would call it, its first call apart as cold). LangGraph comes
with the bench dependency group (pip install --group bench -e .); without it the LangGraph rows
are skipped. Run as a script: it imports its run shape from store_bench.py
beside it. See benchmarks/README.md for the latest figures.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from machine_info import describe, machine
from store_bench import RUN_ID, langgraph_builder, langgraph_run, nbdurable_run

import nbdurable as nd

TARGET_STEPS = 500
TARGET_MS = 50.0
TARGET_NAME = f"nbdurable history DataFrame (cold) <= {TARGET_MS:.0f} ms at {TARGET_STEPS} steps"

NBDURABLE = "nbdurable"
LANGGRAPH = "langgraph"
DBOS_NAME = "dbos"


@dataclass
class Timing:
    """One read path's timings: the first call on each fresh object (cold), then warm calls."""

    system: str
    what: str
    cold_ms: list[float] = field(default_factory=list)
    warm_ms: list[float] = field(default_factory=list)
    # CPU time of the calling thread for the same calls: what the read costs on a
    # shared machine, whose other processes stretch the wall-clock times.
    cold_cpu_ms: list[float] = field(default_factory=list)
    warm_cpu_ms: list[float] = field(default_factory=list)
    rows: int | None = None  # DataFrame rows or checkpoints listed
    columns: list[str] | None = None  # the DataFrame's columns

    def stats(self) -> dict[str, float | None]:
        return {
            "cold_median_ms": median(self.cold_ms),
            "cold_p95_ms": p95(self.cold_ms),
            "warm_median_ms": median(self.warm_ms),
            "warm_p95_ms": p95(self.warm_ms),
            "cold_cpu_median_ms": median(self.cold_cpu_ms),
            "warm_cpu_median_ms": median(self.warm_cpu_ms),
        }

    def add(self, cold: bool, wall_ms: float, cpu_ms: float) -> None:
        """One call's wall-clock and CPU time."""
        (self.cold_ms if cold else self.warm_ms).append(wall_ms)
        (self.cold_cpu_ms if cold else self.warm_cpu_ms).append(cpu_ms)

    def merge(self, other: Timing) -> None:
        """Take another round's calls of the same read."""
        self.cold_ms += other.cold_ms
        self.warm_ms += other.warm_ms
        self.cold_cpu_ms += other.cold_cpu_ms
        self.warm_cpu_ms += other.warm_cpu_ms
        self.rows, self.columns = other.rows, other.columns


def median(times: list[float]) -> float | None:
    return statistics.median(times) if times else None


def p95(times: list[float]) -> float | None:
    """The 95th percentile (linear interpolation between the closest ranks)."""
    if not times:
        return None
    if len(times) == 1:
        return times[0]
    return statistics.quantiles(times, n=20, method="inclusive")[18]


def measure(
    timing: Timing,
    action: Callable[[Any], Any],
    fresh: Callable[[], Any],
    close: Callable[[Any], None],
    *,
    repeat: int,
    warm: int,
) -> Any:
    """Time ``action(handle)``: ``repeat`` fresh handles, the first call cold, ``warm`` more.

    Garbage is collected before every call (not timed), so one call's garbage is
    not another's pause. Returns the last call's result.
    """
    result = None
    for _ in range(repeat):
        handle = fresh()
        try:
            for k in range(1 + warm):
                result = None
                gc.collect()
                cpu = time.thread_time()
                started = time.perf_counter()
                result = action(handle)
                elapsed = (time.perf_counter() - started) * 1000
                timing.add(not k, elapsed, (time.thread_time() - cpu) * 1000)
        finally:
            close(handle)
    return result


def measure_phases(
    listing: Timing,
    frame: Timing,
    action: Callable[[Any], Any],
    to_frame: Callable[[Any], Any],
    fresh: Callable[[], Any],
    close: Callable[[Any], None],
    *,
    repeat: int,
    warm: int,
) -> Any:
    """Like ``measure``, timing ``action`` (the listing) and ``to_frame(listed)`` in one go.

    ``listing`` gets the listing's time, ``frame`` the listing's plus building the
    DataFrame from what it listed: one pass serves both rows, since a LangGraph
    listing of 500 steps takes tens of seconds. Returns the last DataFrame.
    """
    df = None
    for _ in range(repeat):
        handle = fresh()
        try:
            for k in range(1 + warm):
                listed = df = None
                gc.collect()
                cpu = time.thread_time()
                started = time.perf_counter()
                listed = action(handle)
                middle, cpu_middle = time.perf_counter(), time.thread_time()
                df = to_frame(listed)
                ended, cpu_ended = time.perf_counter(), time.thread_time()
                listing.add(not k, (middle - started) * 1000, (cpu_middle - cpu) * 1000)
                frame.add(not k, (ended - started) * 1000, (cpu_ended - cpu) * 1000)
                listing.rows = len(listed)
        finally:
            close(handle)
    return df


# --- nbdurable ---------------------------------------------------------------------------


def inspect_history() -> Callable[..., Any] | None:
    """``nd.inspect.history``, or None while this commit has no such function."""
    try:
        from nbdurable import inspect as nd_inspect
    except ImportError:
        return None
    found = getattr(nd_inspect, "history", None)
    return found if callable(found) else None


def info_rows(infos: list[Any]) -> list[dict[str, Any]]:
    """One flat row per CheckpointInfo: what a by-hand DataFrame of the history would hold."""
    return [
        {
            "step_index": info.step_index,
            "step_id": info.step_id,
            "status": str(info.status),
            "message_count": info.message_count,
            "input_tokens": info.usage.input_tokens,
            "output_tokens": info.usage.output_tokens,
            "total_tokens": info.usage.total_tokens,
            "pending_approvals": len(info.pending_approvals),
            "created_at": info.created_at,
            "finish_reason": info.finish_reason,
        }
        for info in infos
    ]


def time_nbdurable(db: Path, n: int, *, repeat: int, warm: int) -> tuple[list[Timing], float]:
    """nbdurable's read paths on the run in ``db``; also the process's first inspect call (ms)."""

    def fresh() -> nd.SqliteSessionStore:
        return nd.SqliteSessionStore(db)

    def close(store: nd.SqliteSessionStore) -> None:
        store.close()

    found: list[Timing] = []
    first_ms = float("nan")
    history = inspect_history()
    if history is not None:
        # The first call of the process: what a fresh kernel pays once (the lazy
        # imports included). Not in the figures. pandas itself is usually loaded
        # already: sqlite-utils imports it when installed, so opening the store did.
        store = fresh()
        try:
            gc.collect()
            started = time.perf_counter()
            history(store, RUN_ID)
            first_ms = (time.perf_counter() - started) * 1000
        finally:
            store.close()
        timing = Timing(NBDURABLE, "nd.inspect.history -> DataFrame")
        df = measure(timing, lambda s: history(s, RUN_ID), fresh, close, repeat=repeat, warm=warm)
        timing.rows, timing.columns = len(df), [str(c) for c in df.columns]
        assert timing.rows == n + 1, f"expected {n + 1} rows, the DataFrame has {timing.rows}"
        found.append(timing)

    import pandas as pd

    timing = Timing(NBDURABLE, "store.history (metadata)")
    infos = measure(timing, lambda s: s.history(RUN_ID), fresh, close, repeat=repeat, warm=warm)
    timing.rows = len(infos)
    assert timing.rows == n + 1, f"expected {n + 1} checkpoints, history lists {timing.rows}"
    found.append(timing)

    timing = Timing(NBDURABLE, "store.history + pd.DataFrame (by hand)")
    df = measure(
        timing,
        lambda s: pd.DataFrame(info_rows(s.history(RUN_ID))),
        fresh,
        close,
        repeat=repeat,
        warm=warm,
    )
    timing.rows, timing.columns = len(df), [str(c) for c in df.columns]
    found.append(timing)
    return found, first_ms


# --- LangGraph ---------------------------------------------------------------------------


def total_tokens(messages: list[Any]) -> int:
    """Tokens used so far: what nbdurable's checkpoint carries as ``usage``."""
    return sum((m.usage_metadata or {}).get("total_tokens", 0) for m in messages if m.type == "ai")


def tuple_rows(listed: list[Any]) -> list[dict[str, Any]]:
    """One row per CheckpointTuple, with the columns nbdurable's rows have where LangGraph can."""
    rows = []
    for t in listed:
        messages = t.checkpoint["channel_values"].get("messages", [])
        parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        rows.append(
            {
                "step": t.metadata.get("step"),
                "checkpoint_id": t.config["configurable"]["checkpoint_id"],
                "parent_checkpoint_id": parent,
                "source": t.metadata.get("source"),
                "message_count": len(messages),
                "total_tokens": total_tokens(messages),
                "pending_writes": len(t.pending_writes or ()),
                "created_at": t.checkpoint["ts"],
            }
        )
    return rows


def snapshot_rows(listed: list[Any]) -> list[dict[str, Any]]:
    """One row per StateSnapshot (get_state_history), the same columns plus the next node."""
    rows = []
    for s in listed:
        messages = s.values.get("messages", [])
        parent = s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None
        rows.append(
            {
                "step": s.metadata.get("step") if s.metadata else None,
                "checkpoint_id": s.config["configurable"]["checkpoint_id"],
                "parent_checkpoint_id": parent,
                "source": s.metadata.get("source") if s.metadata else None,
                "next": ",".join(s.next),
                "message_count": len(messages),
                "total_tokens": total_tokens(messages),
                "created_at": s.created_at,
            }
        )
    return rows


def time_langgraph(db: Path, n: int, *, repeat: int, warm: int) -> list[Timing]:
    """LangGraph's read paths on the run in ``db``: saver.list and graph.get_state_history."""
    import sqlite3

    import pandas as pd
    from langgraph.checkpoint.sqlite import SqliteSaver

    config = {"configurable": {"thread_id": RUN_ID}}
    builder = langgraph_builder(n)

    def fresh() -> tuple[Any, Any]:
        saver = SqliteSaver(sqlite3.connect(str(db), check_same_thread=False))
        return saver, builder.compile(checkpointer=saver)

    def close(handle: tuple[Any, Any]) -> None:
        handle[0].conn.close()

    found: list[Timing] = []
    for what, action, rows in (
        ("saver.list", lambda h: list(h[0].list(config)), tuple_rows),
        ("graph.get_state_history", lambda h: list(h[1].get_state_history(config)), snapshot_rows),
    ):
        listing = Timing(LANGGRAPH, f"list({what}(config))")
        frame = Timing(LANGGRAPH, f"{what} + pd.DataFrame")
        df = measure_phases(
            listing,
            frame,
            action,
            lambda listed, rows=rows: pd.DataFrame(rows(listed)),
            fresh,
            close,
            repeat=repeat,
            warm=warm,
        )
        frame.rows, frame.columns = len(df), [str(c) for c in df.columns]
        assert df["message_count"].max() == 2 * n + 2, "the latest checkpoint lacks messages"
        found += [listing, frame]
        print(f"  {what}: {statistics.median(listing.cold_ms):,.0f} ms", file=sys.stderr)
    return found


# --- DBOS ---------------------------------------------------------------------------------


def build_dbos(db: Path, n: int) -> None:
    """The same run as a DBOS workflow in ``db`` (store_bench_dbos.py), checked."""
    from store_bench import tool_result
    from store_bench_dbos import dbos_run

    ran = dbos_run(n, db, tool_result)
    assert ran.steps_recorded == 2 * n + 1, ran.steps_recorded


def time_dbos(db: Path, n: int, *, repeat: int, warm: int) -> list[Timing]:
    """``DBOS.list_workflow_steps`` of the run :func:`build_dbos` wrote to ``db``.

    As nbdurable's reads: cold is the first call after DBOS is launched anew on
    the run's database (DBOS is one per process; launching is not timed), warm
    the calls after it. DBOS records two steps per loop step (the model turn and
    the tool's result) and the final answer: 2N + 1 rows.
    """
    from dbos import DBOS, DBOSConfig

    listing = Timing(DBOS_NAME, "DBOS.list_workflow_steps(workflow_id)")
    config: DBOSConfig = {"name": "nbdurable-bench", "system_database_url": f"sqlite:///{db}"}
    steps: list[Any] = []
    for _ in range(repeat):
        DBOS(config=config)
        DBOS.launch()
        try:
            (workflow,) = DBOS.list_workflows(load_input=False, load_output=False)
            for k in range(1 + warm):
                steps = []
                gc.collect()
                cpu = time.thread_time()
                started = time.perf_counter()
                steps = DBOS.list_workflow_steps(workflow.workflow_id)
                elapsed = (time.perf_counter() - started) * 1000
                listing.add(not k, elapsed, (time.thread_time() - cpu) * 1000)
        finally:
            DBOS.destroy(destroy_registry=True)
    listing.rows = len(steps)
    assert listing.rows == 2 * n + 1, f"expected {2 * n + 1} DBOS steps, listed {listing.rows}"
    return [listing]


def merged(rounds: list[list[Timing]]) -> list[Timing]:
    """Each read's calls of every round in one Timing, in the first round's order."""
    first, *rest = rounds
    for later in rest:
        for timing, more in zip(first, later, strict=True):
            timing.merge(more)
    return first


# --- report ------------------------------------------------------------------------------


def fmt_ms(value: float | None) -> str:
    if value is None or value != value:  # None or nan
        return "-"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def table(timings: list[Timing]) -> str:
    head = (
        "system",
        "read",
        "rows",
        "cold median ms",
        "cold p95 ms",
        "warm median ms",
        "warm p95 ms",
        "cold CPU ms",
        "calls cold/warm",
    )
    body = []
    for t in timings:
        s = t.stats()
        body.append(
            (
                t.system,
                t.what,
                str(t.rows) if t.rows is not None else "-",
                fmt_ms(s["cold_median_ms"]),
                fmt_ms(s["cold_p95_ms"]),
                fmt_ms(s["warm_median_ms"]),
                fmt_ms(s["warm_p95_ms"]),
                fmt_ms(s["cold_cpu_median_ms"]),
                f"{len(t.cold_ms)}/{len(t.warm_ms)}",
            )
        )
    widths = [max(len(r[i]) for r in (head, *body)) for i in range(len(head))]
    lines = []
    for r in (head, *body):
        cells = [
            c.rjust(w) if i > 1 else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append(" | ".join(cells))
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass
class Target:
    name: str
    value: str
    limit: str
    passed: bool | None  # None: not measured (no nd.inspect.history, or N != 500)


def target(timings: list[Timing], n: int) -> Target:
    ours = next((t for t in timings if t.what.startswith("nd.inspect.history")), None)
    limit = f"<= {TARGET_MS:.0f} ms"
    if ours is None:
        return Target(TARGET_NAME, "nd.inspect.history is missing at this commit", limit, None)
    value = median(ours.cold_ms)
    assert value is not None
    shown = f"{value:.1f} ms (cold median, N = {n})"
    if n != TARGET_STEPS:
        return Target(TARGET_NAME, shown + f"; checked at N = {TARGET_STEPS} only", limit, None)
    return Target(TARGET_NAME, shown, limit, value <= TARGET_MS)


def dbos_ratio(timings: list[Timing], *, cpu: bool = False) -> tuple[float, float, float] | None:
    """nd.inspect.history's cold median, DBOS's first listing, their ratio; None without DBOS.

    Both cold: the first call on a freshly opened store, a freshly launched DBOS.
    Wall-clock times, or with ``cpu`` the calling thread's CPU time.
    """
    ours = next((t for t in timings if t.what.startswith("nd.inspect.history")), None)
    theirs = next((t for t in timings if t.system == DBOS_NAME), None)
    if ours is None or theirs is None or not ours.cold_ms:
        return None
    mine = statistics.median(ours.cold_cpu_ms if cpu else ours.cold_ms)
    other = statistics.median(theirs.cold_cpu_ms if cpu else theirs.cold_ms)
    return mine, other, mine / other


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=TARGET_STEPS, help="tool steps in the run")
    parser.add_argument(
        "--quick", action="store_true", help="N = 20, one or two calls per read (a smoke test)"
    )
    parser.add_argument("--nbdurable-only", action="store_true", help="skip LangGraph")
    parser.add_argument(
        "--dbos", action="store_true", help="also DBOS.list_workflow_steps (issue 42's ratio)"
    )
    parser.add_argument(
        "--repeat", type=int, default=20, help="fresh nbdurable stores (cold calls); default 20"
    )
    parser.add_argument(
        "--warm", type=int, default=3, help="warm nbdurable calls per fresh store; default 3"
    )
    parser.add_argument(
        "--lg-repeat",
        type=int,
        default=3,
        help="fresh LangGraph savers, each with one cold and one warm call; default 3",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="with --dbos: rounds the --repeat calls are split into, nbdurable's and DBOS's "
        "taking turns; default 3",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the raw figures here")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    parser.add_argument("--dir", type=Path, help="where the databases go (default: a temp dir)")
    args = parser.parse_args(argv)

    n = 20 if args.quick and args.steps == TARGET_STEPS else args.steps
    repeat, warm, lg_repeat = (2, 1, 1) if args.quick else (args.repeat, args.warm, args.lg_repeat)
    with_langgraph = not args.nbdurable_only
    if with_langgraph:
        try:
            import langgraph.checkpoint.sqlite  # noqa: F401
        except ImportError:
            print("LangGraph is missing (pip install --group bench -e .): nbdurable only")
            with_langgraph = False
    # Found, not imported here (sqlite-utils imports it anyway when the store opens).
    if importlib.util.find_spec("pandas") is None:
        print("pandas is missing: pip install pandas")
        return 2

    info = machine(["pandas", "langchain-core", "langgraph"]) | {"steps": n}
    print(describe(info), flush=True)
    timings: list[Timing] = []
    with tempfile.TemporaryDirectory(prefix="nbdurable-inspect-", dir=args.dir) as tmp:
        root = Path(tmp)
        ours_db = root / "nbdurable.db"
        nbdurable_run(n, ours_db, events=True)  # checks what the store kept
        dbos_db = root / "dbos.db"
        if args.dbos:
            print(f"  dbos: running {n} steps ...", file=sys.stderr, flush=True)
            build_dbos(dbos_db, n)
        gc.collect()
        # With DBOS the two listings take turns, round by round: on a shared
        # machine a burst of load then falls on both, not on one of them.
        rounds = max(1, min(args.rounds, repeat)) if args.dbos else 1
        ours: list[list[Timing]] = []
        theirs: list[list[Timing]] = []
        first_ms = float("nan")
        for r in range(rounds):
            per_round = repeat // rounds + (1 if r < repeat % rounds else 0)
            found, first = time_nbdurable(ours_db, n, repeat=per_round, warm=warm)
            first_ms = first if r == 0 else first_ms
            ours.append(found)
            if args.dbos:
                theirs.append(time_dbos(dbos_db, n, repeat=per_round, warm=warm))
        timings += merged(ours)
        if with_langgraph:
            lg_db = root / "langgraph.db"
            print(f"  langgraph: running {n} steps ...", file=sys.stderr, flush=True)
            langgraph_run(n, lg_db, "sync")  # checks the latest state; lists every checkpoint
            gc.collect()
            timings += time_langgraph(lg_db, n, repeat=lg_repeat, warm=1)
        if args.dbos:
            timings += merged(theirs)

    print()
    print(f"N = {n} steps: nbdurable keeps {n + 1} checkpoints, LangGraph two per step")
    print(table(timings))
    if first_ms == first_ms:
        print(f"\nnd.inspect.history, first call of the process (lazy imports): {first_ms:.1f} ms")
    verdict = target(timings, n)
    shown = {True: "PASS", False: "MISS", None: "n/a"}[verdict.passed]
    print(f"\nTarget: {verdict.name}: {verdict.value} (target {verdict.limit}) {shown}")
    ratio = dbos_ratio(timings)
    if ratio is not None:
        mine, other, value = ratio
        shown = "PASS" if value <= 1 else "MISS"
        print(
            f"Target (issue 42): nd.inspect.history {mine:.1f} ms / DBOS.list_workflow_steps"
            f" {other:.1f} ms = {value:.2f} (cold medians; target <= 1) {shown}"
        )
        mine, other, value = dbos_ratio(timings, cpu=True) or ratio
        print(
            f"  the same in CPU time: {mine:.1f} ms / {other:.1f} ms = {value:.2f}"
            " (the calling thread's, cold medians)"
        )
    if args.json:
        payload = {
            "machine": info,
            "steps": n,
            "first_call_ms": first_ms if first_ms == first_ms else None,
            "timings": [asdict(t) | t.stats() for t in timings],
            "target": asdict(verdict),
        }
        args.json.write_text(json.dumps(payload, indent=2))
        print(f"\nraw figures written to {args.json}")
    return 1 if args.check and verdict.passed is False else 0


if __name__ == "__main__":
    sys.exit(main())
