"""Many agents on one worker: R runs x S steps submitted at once, each model call 50 ms.

Configurations, each in a fresh process (order rotated between rounds):

    runtime sqlite     nd.DurableRuntime (embedded engine) on nd.open_store("sqlite:///...")
    runtime postgres   the same on PostgreSQL (a throwaway server, tests/support/pgserver.py)
    session sqlite     nd.generate_text(session=nd.DurableSession(store)), one asyncio task a run
    langgraph async    a StateGraph (agent node, ToolNode) with AsyncSqliteSaver, ainvoke per run
    dbos sqlite        an async DBOS workflow per run, the model turn and the tool DBOS steps
    runtime single     one run alone (the baseline of "CPU per step under load")
    session single     the session API's run alone
    loop no store      nd.generate_text without a session: the agent loop alone, the floor
                       every durable configuration pays on top of (what the machine allows)

Figures: steps/s (tool steps of every run / wall time from the first submit to the
last result), CPU per step (the process's user+system time over the same span /
steps), and each step's overhead beyond the model: every interval of a run (submit
-> first tool call -> ... -> result) holds one 50 ms model call; the overhead is the
interval minus 50 ms; p50/p99 over every interval of every run.

    python benchmarks/concurrency_bench.py                 # 3 rounds, every configuration
    python benchmarks/concurrency_bench.py --rounds 1 --only "runtime sqlite" "session sqlite"
    python benchmarks/concurrency_bench.py --runs 50 --steps 20 --json out.json
    python benchmarks/concurrency_bench.py --resume        # adds cold resume at N = 500, 5,000
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODEL_S = 0.05
RUNTIME_SQLITE = "runtime sqlite"
RUNTIME_PG = "runtime postgres"
SESSION = "session sqlite"
LANGGRAPH = "langgraph async"
DBOS = "dbos sqlite"
SINGLE = "runtime single"
SESSION_SINGLE = "session single"
NO_STORE = "loop no store"
CONFIGS = [RUNTIME_SQLITE, SESSION, LANGGRAPH, DBOS, RUNTIME_PG, SINGLE, SESSION_SINGLE, NO_STORE]


def cpu_seconds() -> float:
    """User + system CPU time of this process (every thread), at the clock's resolution."""
    return time.process_time()


def tool_result(i: int) -> str:
    return f"probe {i}: " + "ok " * 60


# --- nbdurable ----------------------------------------------------------------------------


def slow_model(steps: int) -> Any:
    """A model that takes 50 ms a turn: ``steps`` tool calls, then a text answer."""
    import nbdurable as nd
    from nbdurable.messages import TextPart, ToolCallPart
    from nbdurable.models import ModelRequest, ModelResponse

    usage = nd.Usage(input_tokens=10, output_tokens=5, total_tokens=15)

    class SlowModel:
        provider = "bench"
        model_id = "slow-50ms"
        model_name = "slow-50ms"

        async def generate(self, request: ModelRequest) -> ModelResponse:
            await asyncio.sleep(MODEL_S)
            done = sum(1 for m in request.messages if m.role == "assistant")
            tag = request.messages[0].text
            if done < steps:
                call = ToolCallPart(
                    tool_call_id=f"call_{done}", tool_name="probe", args={"i": done, "tag": tag}
                )
                return ModelResponse(content=(call,), usage=usage, finish_reason="tool_calls")
            return ModelResponse(content=(TextPart(text="Done."),), usage=usage)

    return SlowModel()


def probe_tool(stamps: dict[str, list[float]]) -> Any:
    import nbdurable as nd

    @nd.tool
    def probe(i: int, tag: str) -> str:
        """Probe the system once."""
        stamps.setdefault(tag, []).append(time.perf_counter())
        return tool_result(i)

    return probe


async def run_runtime(runs: int, steps: int, url: str, max_concurrent: int | None) -> dict:
    import nbdurable as nd

    stamps: dict[str, list[float]] = {}
    agent = nd.Agent(
        "bench", slow_model(steps), [probe_tool(stamps)], version="1", max_steps=steps + 1
    )
    store = nd.open_store(url)
    options: dict[str, Any] = {}
    if max_concurrent is not None:
        options["max_concurrent_runs"] = max_concurrent
    async with await nd.DurableRuntime.open(store=store, agents=[agent], **options) as runtime:
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        starts: dict[str, float] = {}
        ends: dict[str, float] = {}

        async def one(k: int) -> None:
            tag = f"run {k}"
            starts[tag] = time.perf_counter()
            run = await runtime.submit("bench", tag)
            result = await run.result()
            ends[tag] = time.perf_counter()
            assert result.text == "Done.", result

        await asyncio.gather(*(one(k) for k in range(runs)))
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    return figures(runs, steps, wall, cpu, starts, stamps, ends)


async def run_session(runs: int, steps: int, db: Path | None) -> dict:
    """The session API on one SQLite store; without ``db`` the agent loop alone (the floor)."""
    import nbdurable as nd

    stamps: dict[str, list[float]] = {}
    model = slow_model(steps)
    probe = probe_tool(stamps)
    store = None if db is None else nd.SqliteSessionStore(db)
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}

    async def one(k: int) -> None:
        tag = f"run {k}"
        starts[tag] = time.perf_counter()
        result = await nd.generate_text(
            model=model,
            messages=tag,
            tools=[probe],
            max_steps=steps + 1,
            session=None if store is None else nd.DurableSession(store, run_id=f"run-{k}"),
        )
        ends[tag] = time.perf_counter()
        assert result.text == "Done.", result.finish_reason

    await asyncio.gather(*(one(k) for k in range(runs)))
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    if store is not None:
        store.close()
    return figures(runs, steps, wall, cpu, starts, stamps, ends)


# --- LangGraph ------------------------------------------------------------------------------


async def run_langgraph(runs: int, steps: int, db: Path) -> dict:
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    stamps: dict[str, list[float]] = {}
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}

    @tool
    def probe(i: int, tag: str) -> str:
        """Probe the system once."""
        stamps.setdefault(tag, []).append(time.perf_counter())
        return tool_result(i)

    async def agent(state: MessagesState) -> dict[str, Any]:
        await asyncio.sleep(MODEL_S)
        done = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        tag = str(state["messages"][0].content)
        if done < steps:
            call = {"name": "probe", "args": {"i": done, "tag": tag}, "id": f"call_{done}"}
            message = AIMessage(content="", tool_calls=[call], usage_metadata=usage)
        else:
            message = AIMessage(content="Done.", usage_metadata=usage)
        return {"messages": [message]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([probe]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_edge("tools", "agent")
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = builder.compile(checkpointer=saver)
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        starts: dict[str, float] = {}
        ends: dict[str, float] = {}

        async def one(k: int) -> None:
            tag = f"run {k}"
            starts[tag] = time.perf_counter()
            config = {"configurable": {"thread_id": f"run-{k}"}, "recursion_limit": 4 * steps + 10}
            out = await graph.ainvoke({"messages": [HumanMessage(content=tag)]}, config)
            ends[tag] = time.perf_counter()
            assert out["messages"][-1].content == "Done."

        await asyncio.gather(*(one(k) for k in range(runs)))
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    return figures(runs, steps, wall, cpu, starts, stamps, ends)


# --- DBOS -----------------------------------------------------------------------------------


async def run_dbos(runs: int, steps: int, db: Path) -> dict:
    from dbos import DBOS, DBOSConfig

    stamps: dict[str, list[float]] = {}
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    config: DBOSConfig = {"name": "nbdurable-bench", "system_database_url": f"sqlite:///{db}"}
    DBOS(config=config)

    @DBOS.step()
    async def model_turn(i: int) -> dict[str, Any]:
        await asyncio.sleep(MODEL_S)
        if i < steps:
            call = {"id": f"call_{i}", "name": "probe", "args": {"i": i}}
            return {"role": "assistant", "tool_calls": [call], "usage": usage}
        return {"role": "assistant", "content": "Done.", "usage": usage}

    @DBOS.step()
    async def probe(i: int, tag: str) -> str:
        stamps.setdefault(tag, []).append(time.perf_counter())
        return tool_result(i)

    @DBOS.workflow()
    async def agent(prompt: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for i in range(steps + 1):
            turn = await model_turn(i)
            messages.append(turn)
            for call in turn.get("tool_calls", ()):
                result = await probe(call["args"]["i"], prompt)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        return str(messages[-1]["content"])

    DBOS.launch()
    try:
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        starts: dict[str, float] = {}
        ends: dict[str, float] = {}

        async def one(k: int) -> None:
            tag = f"run {k}"
            starts[tag] = time.perf_counter()
            handle = await DBOS.start_workflow_async(agent, tag)
            answer = await handle.get_result()
            ends[tag] = time.perf_counter()
            assert answer == "Done.", answer

        await asyncio.gather(*(one(k) for k in range(runs)))
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    finally:
        DBOS.destroy(destroy_registry=True)
    return figures(runs, steps, wall, cpu, starts, stamps, ends)


# --- figures --------------------------------------------------------------------------------


def figures(
    runs: int,
    steps: int,
    wall: float,
    cpu: float,
    starts: dict[str, float],
    stamps: dict[str, list[float]],
    ends: dict[str, float],
) -> dict:
    overheads: list[float] = []
    firsts: list[float] = []
    # Where a run's overhead comes from: its first interval (submit, claim, leg
    # start), the steps between, its last (the final answer, the run's end, result()).
    by_part: dict[str, list[float]] = {"first": [], "middle": [], "last": []}
    for tag, start in starts.items():
        times = [start, *stamps.get(tag, []), ends[tag]]
        assert len(times) == steps + 2, (tag, len(times))
        firsts.append(times[1] - start)
        run = [(b - a - MODEL_S) * 1000 for a, b in itertools.pairwise(times)]
        overheads += run
        by_part["first"].append(run[0])
        by_part["middle"] += run[1:-1]
        by_part["last"].append(run[-1])
    overheads.sort()
    total_steps = runs * steps
    parts = {
        f"p{q}_{part}_ms": percentile(values, q / 100)
        for part, values in by_part.items()
        if values
        for q in (50, 99)
    }
    return {
        "runs": runs,
        "steps": steps,
        "wall_s": wall,
        "steps_per_s": total_steps / wall,
        "cpu_ms_per_step": cpu * 1000 / total_steps,
        "p50_overhead_ms": overheads[len(overheads) // 2],
        "p99_overhead_ms": overheads[min(len(overheads) - 1, int(len(overheads) * 0.99))],
        "last_first_step_s": max(firsts),
        **parts,
    }


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (the same rule as the overall p50/p99)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def one_config(name: str, runs: int, steps: int, work: Path, dsn: str | None) -> dict:
    """One configuration's figures, after a warm-up (imports, caches) on a throwaway database."""
    warm = work / "warm"
    warm.mkdir()
    measure(name, 1, 2, warm, None if dsn is None else dsn)
    if dsn is not None:
        dsn = fresh_pg_database_at(dsn, "measured")
    return measure(name, runs, steps, work, dsn)


def measure(name: str, runs: int, steps: int, work: Path, dsn: str | None) -> dict:
    if name == RUNTIME_SQLITE:
        return asyncio.run(run_runtime(runs, steps, f"sqlite:///{work / 'rt.db'}", runs))
    if name == SINGLE:
        return asyncio.run(run_runtime(1, steps, f"sqlite:///{work / 'rt1.db'}", None))
    if name == RUNTIME_PG:
        assert dsn is not None
        return asyncio.run(run_runtime(runs, steps, dsn, runs))
    if name == SESSION:
        return asyncio.run(run_session(runs, steps, work / "session.db"))
    if name == SESSION_SINGLE:
        return asyncio.run(run_session(1, steps, work / "session1.db"))
    if name == NO_STORE:
        return asyncio.run(run_session(runs, steps, None))
    if name == LANGGRAPH:
        return asyncio.run(run_langgraph(runs, steps, work / "lg.db"))
    if name == DBOS:
        return asyncio.run(run_dbos(runs, steps, work / "dbos.db"))
    raise SystemExit(f"unknown configuration {name!r}")


def child(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="nbd-conc-") as work:
        result = one_config(args.child, args.runs, args.steps, Path(work), args.dsn)
    print(json.dumps(result))
    return 0


BASELINE = "runtime sqlite (baseline)"


def spawn(name: str, args: argparse.Namespace, dsn: str | None) -> dict | None:
    env = dict(os.environ)
    if name == BASELINE:  # the same configuration on another checkout's nbdurable
        name = RUNTIME_SQLITE
        env["PYTHONPATH"] = str(args.baseline)
    command = [sys.executable, __file__, "--child", name, "--runs", str(args.runs)]
    command += ["--steps", str(args.steps)]
    if dsn is not None:
        command += ["--dsn", dsn]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        print(f"  {name}: failed\n{done.stderr[-3000:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def fresh_pg_database(server: Any, name: str) -> str:
    return fresh_pg_database_at(server.dsn, name)


def fresh_pg_database_at(dsn: str, name: str) -> str:
    """An empty database ``name`` on ``dsn``'s server; its DSN."""
    import psycopg

    admin = dsn.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return dsn.rsplit("/", 1)[0] + f"/{name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout: also run 'runtime sqlite' with its nbdurable (before/after)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--dsn", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)

    from machine_info import describe, machine

    names = list(args.only or CONFIGS)
    if args.baseline is not None:
        names.append(BASELINE)
    print(describe(machine(["langgraph", "langgraph-checkpoint-sqlite", "dbos", "aiosqlite"])))
    print(f"workload: {args.runs} runs x {args.steps} steps, model {MODEL_S * 1000:.0f} ms a turn")
    server = None
    if RUNTIME_PG in names:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support
        from tests.support.pgserver import start_server

        try:
            server = start_server()
        except Exception as exc:  # PostgreSQL not installed: the rest still runs
            print(f"  {RUNTIME_PG}: skipped ({exc})")
            names = [n for n in names if n != RUNTIME_PG]
    results: dict[str, list[dict]] = {name: [] for name in names}
    try:
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                dsn = fresh_pg_database(server, f"bench{r}") if name == RUNTIME_PG else None
                got = spawn(name, args, dsn)
                if got is not None:
                    results[name].append(got)
                    print(
                        f"  round {r + 1} {name:17} {got['steps_per_s']:7.0f} steps/s"
                        f"  {got['cpu_ms_per_step']:5.2f} ms CPU/step"
                        f"  p50/p99 {got['p50_overhead_ms']:6.0f}/{got['p99_overhead_ms']:6.0f} ms",
                        flush=True,
                    )
    finally:
        if server is not None:
            server.stop()
    report(results)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def median_of(rows: list[dict], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def report(results: dict[str, list[dict]]) -> None:
    print()
    head = f"{'configuration':17} {'steps/s':>8} {'[min-max]':>13} {'CPU ms/step':>11}"
    print(head + f" {'p50 ms':>7} {'p99 ms':>7} {'last 1st step s':>15}")
    med: dict[str, dict[str, float]] = {}
    for name, rows in results.items():
        if not rows:
            continue
        keys = ("steps_per_s", "cpu_ms_per_step", "p50_overhead_ms", "p99_overhead_ms")
        med[name] = {k: median_of(rows, k) for k in (*keys, "last_first_step_s")}
        lo = min(r["steps_per_s"] for r in rows)
        hi = max(r["steps_per_s"] for r in rows)
        m = med[name]
        print(
            f"{name:17} {m['steps_per_s']:8.0f} {f'[{lo:.0f}-{hi:.0f}]':>13}"
            f" {m['cpu_ms_per_step']:11.2f} {m['p50_overhead_ms']:7.0f}"
            f" {m['p99_overhead_ms']:7.0f} {m['last_first_step_s']:15.2f}"
        )
    print()
    print("p50/p99 overhead ms by a run's interval: first (submit -> first tool call),")
    print("middle (tool call -> tool call), last (last tool call -> result)")
    for name, rows in results.items():
        if not rows or "p50_first_ms" not in rows[0]:
            continue  # a baseline checkout older than these figures
        cells = [
            f"{median_of(rows, f'p50_{part}_ms'):.0f}/{median_of(rows, f'p99_{part}_ms'):.0f}"
            for part in ("first", "middle", "last")
        ]
        print(f"{name:17} first {cells[0]:>9}  middle {cells[1]:>9}  last {cells[2]:>9}")
    rt = med.get(RUNTIME_SQLITE)
    if rt is None:
        return
    print()
    checks = []
    if LANGGRAPH in med:
        ratio = rt["steps_per_s"] / med[LANGGRAPH]["steps_per_s"]
        checks.append((f"runtime / langgraph async throughput {ratio:.2f} >= 3", ratio >= 3))
    if SESSION in med:
        ratio = rt["steps_per_s"] / med[SESSION]["steps_per_s"]
        checks.append((f"runtime / session throughput {ratio:.2f} >= 0.8", ratio >= 0.8))
    if SINGLE in med:
        ratio = rt["cpu_ms_per_step"] / med[SINGLE]["cpu_ms_per_step"]
        checks.append((f"runtime CPU/step loaded / single {ratio:.2f} <= 1.5", ratio <= 1.5))
    p99 = rt["p99_overhead_ms"]
    checks.append((f"runtime p99 step overhead {p99:.0f} ms <= 100", p99 <= 100))
    for text, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")


if __name__ == "__main__":
    sys.exit(main())
