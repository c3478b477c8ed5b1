"""Store benchmark: nbdurable's SQLite store against LangGraph's SqliteSaver and DBOS.

Runs the same ReAct loop (a zero-latency scripted model, one tool call per
step, 200-character tool results) for N steps in one process and one run, with:

    no store          nbdurable's loop without a session
    nbdurable         nbdurable's loop with nd.SqliteSessionStore (default settings)
    langgraph sync    a LangGraph StateGraph with SqliteSaver, durability="sync"
    langgraph default the same graph with LangGraph's default durability ("async")
    dbos sqlite       a DBOS Transact workflow on SQLite, its default settings
                      (store_bench_dbos.py: each model turn and tool result a durable step)

and then: the same loop with four parallel tool calls per step (bytes against
LangGraph), step times per decile of the long runs, and the cold load of a
1,000-message checkpoint against its floor (store_bench_cold.py), and persistence's
cost per step at N = 500 split into SQL (replayed alone) and Python
(store_bench_split.py).

    python benchmarks/store_bench.py                    # N = 10, 100, 500 (+ 5,000, 20,000)
    python benchmarks/store_bench.py --quick            # N = 10, 100 only
    python benchmarks/store_bench.py --nbdurable-only   # skip LangGraph and DBOS
    python benchmarks/store_bench.py --json figures.json
    python benchmarks/store_bench.py --incompressible   # random hex tool results (bytes)

LangGraph and DBOS come with the bench dependency group: pip install --group bench -e .
See benchmarks/README.md for what is measured and the latest figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from machine_info import describe, machine
from store_bench_cold import ColdLoad, cold_load
from store_bench_report import (
    DBOS,
    LG_SYNC,
    LG_SYNC_PAR,
    NBDURABLE,
    NBDURABLE_PAR,
    NO_STORE,
    PARALLEL,
    bytes_per_message,
    decile_table,
    ratios,
    table,
    targets,
)
from store_bench_split import Split, split

import nbdurable as nd

RUN_ID = "bench"
RESULT_CHARS = 200
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit; "
REPEATS = 5  # history and load are timed up to this many times, each on a fresh store
REPEAT_BUDGET_S = 2.0  # ... but no more once the timings add up to this (LangGraph's history)

NO_EVENTS = "nbdurable, no event log"  # --breakdown: checkpoints only
LG_DEFAULT = "langgraph default"
CONFIGS = (NO_STORE, NBDURABLE, LG_SYNC, LG_DEFAULT, DBOS, NBDURABLE_PAR, LG_SYNC_PAR)


INCOMPRESSIBLE = False  # --incompressible: random hex results instead of lorem ipsum


def tool_result(i: int) -> str:
    """The tool's 200-character result for call ``i`` (distinct per step).

    Repeated lorem ipsum compresses unusually well; with ``--incompressible`` the
    result is random hex of the same length (seeded per call, so every run and
    every configuration gets the same text).
    """
    if INCOMPRESSIBLE:
        text = f"probe {i}: " + random.Random(i).randbytes(RESULT_CHARS).hex()
    else:
        text = f"probe {i}: " + FILLER * 5
    return text[:RESULT_CHARS]


@dataclass
class Figures:
    """What one configuration measured at one N (times in seconds unless named _ms)."""

    config: str
    n: int
    total_s: float
    first10_ms: float  # median step time over the first 10 steps
    last10_ms: float  # ... and over the last 10
    messages: int
    bytes_on_disk: int | None = None  # db + wal + shm, store still open after the run
    bytes_closed: int | None = None  # the same after closing the store (WAL checkpointed)
    checkpoints: int | None = None
    history_ms: float | None = None
    load_ms: float | None = None  # on a freshly opened store: nothing cached
    load_warm_ms: float | None = None  # on the store that wrote the run (nbdurable caches it)
    files: dict[str, int] = field(default_factory=dict)  # db, wal, shm bytes after the run
    tables: dict[str, int] = field(default_factory=dict)  # bytes per table and index (closed)
    step_ms: list[float] = field(default_factory=list)  # between consecutive tool calls

    @property
    def ratio(self) -> float:
        return self.last10_ms / self.first10_ms if self.first10_ms else float("nan")

    def deciles(self) -> list[float]:
        """Median step time (ms) of each tenth of the run, first to last."""
        k = len(self.step_ms)
        if k < 10:
            return []
        return [statistics.median(self.step_ms[k * d // 10 : k * (d + 1) // 10]) for d in range(10)]

    @property
    def decile_ratio(self) -> float:
        found = self.deciles()
        return found[-1] / found[0] if found and found[0] else float("nan")

    def means(self) -> dict[str, float]:
        """Mean step times over the first and last 10 steps (in the JSON, beside the medians)."""
        if not self.step_ms:
            return {}
        return {
            "first10_mean_ms": statistics.fmean(self.step_ms[:10]),
            "last10_mean_ms": statistics.fmean(self.step_ms[-10:]),
        }


def step_figures(stamps: list[float]) -> tuple[list[float], float, float]:
    """Intervals between consecutive tool calls (ms); the median of the first and last 10.

    Medians, not means: SQLite folds its WAL into the database every ~1,000 pages
    written, an fsync that makes one step 10-20 ms on a slow disk, and whether one
    lands in a 10-step window is chance. The total time carries that cost.
    """
    steps = [(b - a) * 1000 for a, b in itertools.pairwise(stamps)]
    if not steps:
        return steps, float("nan"), float("nan")
    return steps, statistics.median(steps[:10]), statistics.median(steps[-10:])


def disk_files(db: Path) -> dict[str, int]:
    """Bytes of a SQLite database's files: the database, its WAL, its shared-memory index."""
    found = {}
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{db}{suffix}")
        if path.exists():
            found[suffix.lstrip("-") or "db"] = path.stat().st_size
    return found


def disk_bytes(db: Path) -> int:
    """Bytes of a SQLite database on disk: db + wal + shm."""
    return sum(disk_files(db).values())


def table_bytes(db: Path) -> dict[str, int]:
    """Bytes per table and index of a closed database (empty when SQLite lacks dbstat)."""
    conn = sqlite3.connect(db)
    try:
        found = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()
    return {name: size for name, size in sorted(found, key=lambda row: -row[1])}


def time_ms(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def median_ms(
    action: Callable[[Any], Any], fresh: Callable[[], Any], close: Callable[[Any], None]
) -> float:
    """Median time (ms) of ``action(handle)``, each repeat on a freshly opened handle."""
    times: list[float] = []
    while len(times) < REPEATS and sum(times) < REPEAT_BUDGET_S * 1000:
        handle = fresh()
        try:
            started = time.perf_counter()
            action(handle)
            times.append((time.perf_counter() - started) * 1000)
        finally:
            close(handle)
    return statistics.median(times)


def median_run(run: Callable[[int], Figures], times: int) -> Figures:
    """Run ``times`` times; keep the run whose total time is the median."""
    found = sorted((run(i) for i in range(max(1, times))), key=lambda f: f.total_s)
    return found[(len(found) - 1) // 2]


# --- nbdurable ---------------------------------------------------------------------------


class CheckpointsOnly(nd.SqliteSessionStore):
    """The SQLite store without its event log capability: the loop writes checkpoints only."""

    capabilities = nd.SqliteSessionStore.capabilities - {"events"}


def run_nbdurable(n: int, db: Path | None, *, events: bool = True, calls: int = 1) -> Figures:
    """One run of n tool steps and a final answer; with a store when ``db`` is given."""
    figures = nbdurable_run(n, db, events=events, calls=calls)
    if db is None:
        return figures
    # Reads are timed once the run's objects are gone: a heap holding extra
    # copies of a long history makes every garbage collection cost more.
    gc.collect()
    return time_nbdurable_reads(figures, db)


def nbdurable_run(n: int, db: Path | None, *, events: bool, calls: int = 1) -> Figures:
    """The run itself, its bytes on disk and a check of what the store kept.

    Each step calls the tool ``calls`` times (in parallel when more than once).
    """
    stamps: list[float] = []

    @nd.tool
    def probe(i: int) -> str:
        """Probe the system once."""
        stamps.append(time.perf_counter())
        return tool_result(i)

    # Fixed usage and sequential mode: the model costs the same at step 500 as at step 1.
    usage = nd.Usage(input_tokens=10, output_tokens=5, total_tokens=15)
    turns: list[Any] = [
        nd.Turn(tool_calls=[("probe", {"i": i * calls + k}) for k in range(calls)], usage=usage)
        for i in range(n)
    ]
    turns.append(nd.Turn(text="Done.", usage=usage))
    model = nd.ScriptedModel(turns, mode="sequential")
    kind = nd.SqliteSessionStore if events else CheckpointsOnly
    store = kind(db) if db is not None else None
    session = nd.DurableSession(store, run_id=RUN_ID) if store is not None else None

    async def go() -> tuple[float, nd.GenerateTextResult]:
        started = time.perf_counter()
        result = await nd.generate_text(
            model=model,
            messages="Probe the system.",
            tools=[probe],
            max_steps=n + 1,
            session=session,
        )
        return time.perf_counter() - started, result

    gc.collect()
    total, result = asyncio.run(go())
    assert len(stamps) == n * calls, f"expected {n * calls} tool calls, saw {len(stamps)}"
    assert result.text == "Done.", result.finish_reason
    steps, first, last = step_figures(sorted(stamps)[::calls])
    config = NO_STORE if store is None else NBDURABLE if events else NO_EVENTS
    config = NBDURABLE_PAR if calls > 1 and store is not None else config
    figures = Figures(config, n, total, first, last, len(result.messages), step_ms=steps)
    if store is None or db is None:
        return figures

    figures.bytes_on_disk, figures.files = disk_bytes(db), disk_files(db)
    figures.load_warm_ms = time_ms(lambda: store.load(RUN_ID))
    store.close()
    figures.bytes_closed, figures.tables = disk_bytes(db), table_bytes(db)
    with nd.SqliteSessionStore(db) as check:
        infos = check.history(RUN_ID)
        latest = check.load(RUN_ID)
    assert latest is not None
    assert latest.messages == result.messages, "the latest checkpoint is not the run's history"
    assert infos[-1].message_count == len(result.messages)
    figures.checkpoints = len(infos)
    return figures


def time_nbdurable_reads(figures: Figures, db: Path) -> Figures:
    """Time history and latest load, each on a freshly opened store."""

    def fresh() -> nd.SqliteSessionStore:
        return nd.SqliteSessionStore(db)

    def close(s: nd.SqliteSessionStore) -> None:
        s.close()

    figures.history_ms = median_ms(lambda s: s.history(RUN_ID), fresh, close)
    figures.load_ms = median_ms(lambda s: s.load(RUN_ID), fresh, close)
    return figures


# --- LangGraph ---------------------------------------------------------------------------


def run_langgraph(n: int, db: Path, durability: str | None, calls: int = 1) -> Figures:
    """The same loop as a LangGraph StateGraph: agent node, ToolNode, SqliteSaver."""
    figures = langgraph_run(n, db, durability, calls)
    gc.collect()
    return time_langgraph_reads(figures, db)


def langgraph_builder(n: int, stamps: list[float] | None = None, calls: int = 1) -> Any:
    """The loop as an uncompiled StateGraph: agent node, ToolNode, tools_condition.

    The agent node plays n turns of ``calls`` tool calls and a final answer; the
    tool appends ``time.perf_counter()`` to ``stamps`` at each call.
    """
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import MessagesState

    @tool
    def probe(i: int) -> str:
        """Probe the system once."""
        if stamps is not None:
            stamps.append(time.perf_counter())
        return tool_result(i)

    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    played = itertools.count()

    def agent(state: MessagesState) -> dict[str, Any]:
        # Plays the same script as nbdurable's ScriptedModel in sequential mode.
        i = next(played)
        if i < n:
            made = [
                {"name": "probe", "args": {"i": j}, "id": f"call_{j}", "type": "tool_call"}
                for j in range(i * calls, (i + 1) * calls)
            ]
            message = AIMessage(content="", tool_calls=made, usage_metadata=usage)
        else:
            message = AIMessage(content="Done.", usage_metadata=usage)
        return {"messages": [message]}

    return probe_graph(agent, probe)


def probe_graph(agent: Callable[..., Any], probe: Any) -> Any:
    """The agent loop as an uncompiled StateGraph: ``agent`` node, a ToolNode of
    ``probe``, ``tools_condition`` between them (long_run_resume.py's too)."""
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([probe]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


def langgraph_run(n: int, db: Path, durability: str | None, calls: int = 1) -> Figures:
    """The run itself, its bytes on disk and a check of what the saver kept."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver

    stamps: list[float] = []
    builder = langgraph_builder(n, stamps, calls)

    conn = sqlite3.connect(str(db), check_same_thread=False)
    saver = SqliteSaver(conn)
    graph = builder.compile(checkpointer=saver)
    config: dict[str, Any] = {
        "configurable": {"thread_id": RUN_ID},
        "recursion_limit": 2 * n + 10,
    }
    kwargs = {"durability": durability} if durability is not None else {}
    saver.setup()  # creates the tables; LangGraph would do it on the first write

    gc.collect()
    started = time.perf_counter()
    state = graph.invoke({"messages": [HumanMessage("Probe the system.")]}, config, **kwargs)
    total = time.perf_counter() - started
    assert len(stamps) == n * calls, f"expected {n * calls} tool calls, saw {len(stamps)}"
    assert state["messages"][-1].content == "Done."
    steps, first, last = step_figures(sorted(stamps)[::calls])
    name = LG_SYNC if durability == "sync" else LG_DEFAULT
    name = LG_SYNC_PAR if calls > 1 else name
    figures = Figures(name, n, total, first, last, len(state["messages"]), step_ms=steps)
    figures.bytes_on_disk, figures.files = disk_bytes(db), disk_files(db)
    figures.load_warm_ms = time_ms(lambda: saver.get_tuple(config))
    conn.close()
    figures.bytes_closed, figures.tables = disk_bytes(db), table_bytes(db)

    check = SqliteSaver(sqlite3.connect(str(db), check_same_thread=False))
    try:
        latest = check.get_tuple(config)
        assert latest is not None
        assert len(latest.checkpoint["channel_values"]["messages"]) == len(state["messages"])
        figures.checkpoints = len(list(check.list(config)))
    finally:
        check.conn.close()
    return figures


def time_langgraph_reads(figures: Figures, db: Path) -> Figures:
    """Time the full history (saver.list) and the latest checkpoint (get_tuple), fresh savers."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    config = {"configurable": {"thread_id": RUN_ID}}

    def fresh() -> Any:
        return SqliteSaver(sqlite3.connect(str(db), check_same_thread=False))

    def close(s: Any) -> None:
        s.conn.close()

    figures.history_ms = median_ms(lambda s: list(s.list(config)), fresh, close)
    figures.load_ms = median_ms(lambda s: s.get_tuple(config), fresh, close)
    return figures


# --- DBOS --------------------------------------------------------------------------------


def run_dbos(n: int, db: Path) -> Figures:
    """The same loop as a DBOS workflow on SQLite (see store_bench_dbos.py)."""
    from store_bench_dbos import dbos_run

    gc.collect()
    run = dbos_run(n, db, tool_result, measure=lambda: (disk_bytes(db), disk_files(db)))
    steps, first, last = step_figures(run.stamps)
    figures = Figures(DBOS, n, run.total_s, first, last, run.messages, step_ms=steps)
    figures.bytes_on_disk, figures.files = run.measured
    figures.bytes_closed, figures.tables = disk_bytes(db), table_bytes(db)
    figures.checkpoints = run.steps_recorded
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10, 100 only (a smoke test)")
    parser.add_argument("--nbdurable-only", action="store_true", help="skip LangGraph and DBOS")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the raw figures here")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of each nbdurable configuration at N <= 500; the median total is kept",
    )
    parser.add_argument(
        "--long",
        type=int,
        nargs="*",
        default=[5000, 20000],
        help="long nbdurable runs (no store and SQLite), one each (default: 5000 20000)",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="also run nbdurable without its event log"
    )
    parser.add_argument("--dir", type=Path, help="where the databases go (default: a temp dir)")
    parser.add_argument(
        "--incompressible",
        action="store_true",
        help="tool results are random hex (incompressible) instead of repeated lorem ipsum",
    )
    args = parser.parse_args(argv)
    global INCOMPRESSIBLE
    INCOMPRESSIBLE = args.incompressible

    sizes = [10, 100] if args.quick else [10, 100, 500]
    long_runs = [] if args.quick else args.long
    others = not args.nbdurable_only
    if others:
        try:
            import dbos  # noqa: F401
            import langgraph.checkpoint.sqlite  # noqa: F401
        except ImportError:
            print("LangGraph or DBOS is missing: pip install --group bench -e ., "
                  "or pass --nbdurable-only")  # fmt: skip
            return 2

    info = machine(["langgraph", "langgraph-checkpoint-sqlite", "dbos"])
    print(describe(info), flush=True)
    print(f"tool results: {'random hex' if INCOMPRESSIBLE else 'lorem ipsum'}", flush=True)
    rows: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="nbdurable-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        for n in [*sizes, *long_runs]:
            # The cheap runs are repeated and the one with the median total kept.
            times = args.repeat if n in sizes else 1
            runs: list[Callable[[], Figures]] = [
                lambda n=n, k=times: median_run(lambda i: run_nbdurable(n, None), k),
                lambda n=n, k=times: median_run(
                    lambda i: run_nbdurable(n, root / f"nbdurable-{n}-{i}.db"), k
                ),
            ]
            if args.breakdown:
                runs.append(
                    lambda n=n, k=times: median_run(
                        lambda i: run_nbdurable(n, root / f"no-events-{n}-{i}.db", events=False), k
                    )
                )
            if others and n in sizes:
                runs.append(lambda n=n: run_langgraph(n, root / f"lg-sync-{n}.db", "sync"))
                runs.append(lambda n=n: run_langgraph(n, root / f"lg-default-{n}.db", None))
                runs.append(lambda n=n: run_dbos(n, root / f"dbos-{n}.db"))
            if n in sizes and n >= 100:
                # The parallel-tool workload: bytes against LangGraph's.
                runs.append(lambda n=n: run_nbdurable(n, root / f"par-{n}.db", calls=PARALLEL))
                if others:
                    runs.append(
                        lambda n=n: run_langgraph(n, root / f"lg-par-{n}.db", "sync", PARALLEL)
                    )
            for run in runs:
                figures = run()
                rows.append(figures)
                done = f"{figures.config} N={n}: {figures.total_s:.3f} s"
                print(f"  {done}", file=sys.stderr, flush=True)
        # A run of 1,000 messages (a user message, 499 steps of two, the answer).
        cold_db = root / "cold.db"
        nbdurable_run(499, cold_db, events=True)
        gc.collect()
        cold: ColdLoad | None = cold_load(cold_db, RUN_ID, repeats=7 if args.quick else 21)
        # Persistence's cost at N = 500: SQL replayed alone against the Python around it.
        costs: Split | None = None if args.quick else split(500, args.repeat, root)

    main_rows = [f for f in rows if f.config not in (NBDURABLE_PAR, LG_SYNC_PAR)]
    print()
    print(table(main_rows))
    flat = bytes_per_message(rows)
    if flat:
        print()
        print(f"{NBDURABLE}, bytes per message after close: {flat}")
    parallel = [f for f in rows if f.config in (NBDURABLE_PAR, LG_SYNC_PAR)]
    if parallel:
        print()
        print(f"{PARALLEL} parallel tool calls per step:")
        print(table(parallel))
    deciles = decile_table(rows)
    if deciles:
        print()
        print("ms/step, median of each decile of the run:")
        print(deciles)
    if cold is not None:
        print()
        print(f"cold load of {cold.messages:,} messages (median of {cold.repeats}): "
              f"load {cold.load_ms:.2f} ms, floor {cold.floor_ms:.2f} ms "
              f"(SQL {cold.floor_sql_ms:.2f} ms + json.loads), ratio {cold.ratio:.2f}")  # fmt: skip
    if costs is not None:
        print()
        print("Persistence's cost (store_bench_split.py):")
        print("\n".join(costs.lines()))
    stated = ratios(rows)
    if stated:
        print()
        print("Ratios at N = 500:")
        for line in stated:
            print(f"  {line}")
    found = targets(rows, cold)
    if found:
        print()
        print("Targets:")
        for t in found:
            print(f"  {'PASS' if t.passed else 'FAIL'}  {t.name}: {t.value} (target {t.limit})")
    if args.json:
        payload = {
            "machine": info,
            "figures": [
                asdict(f) | f.means() | {"last_first": f.ratio, "deciles_ms": f.deciles()}
                for f in rows
            ],
            "cold_load": asdict(cold) | {"ratio": cold.ratio} if cold is not None else None,
            "persistence": None
            if costs is None
            else asdict(costs) | {"python_ms": costs.python_ms, "ratio": costs.ratio},
            "targets": [asdict(t) for t in found],
        }
        args.json.write_text(json.dumps(payload, indent=2))
        print(f"\nraw figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
