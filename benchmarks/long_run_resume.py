"""Cold resume of a long run: a fresh process reopens it; how long to its first new step?

``long_run.py --resume`` runs this. For each N and configuration a child process
runs N tool steps and is killed (``os._exit``) when the model is asked for turn
N + 1: the run's last checkpoint holds N steps (1 + 2N messages). Then, for each
repetition, the database is copied and a fresh process reopens the run, timed
from just before it opens the store (imports done) to the first new step's tool
call; the model call that precedes it is timed too. The configurations:

    session resume     nd.resume_from_checkpoint(store, run_id, ...) on a fresh
                       nd.SqliteSessionStore (the session API's resume)
    session continue   store.load(run_id), then nd.generate_text(messages=[*history,
                       user(...)], session=nd.DurableSession(store, run_id)): a chat
                       continued in a new process (the load is timed)
    runtime            nd.DurableRuntime.open(store=nd.open_store("sqlite:///..."))
                       with the agent: the runtime finds the run whose owner is gone
                       and takes it over at once
    langgraph          graph.invoke(None, config) on a fresh SqliteSaver (LangGraph
                       1.x, durability="sync"); only up to N = 1,000 (its database
                       grows with N squared: 178 MB at N = 500)

The model answers in O(1) (it reads the history's length, not its messages), so
what is timed is the reopening. Medians of the repetitions, order rotated; also
the process's CPU time over the same span (steadier than the wall clock on a
shared machine; the goal is the wall clock).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUN_ID = "long"
SESSION = "session resume"
CONTINUE = "session continue"
RUNTIME = "runtime"
LANGGRAPH = "langgraph"
CONFIGS = (SESSION, CONTINUE, RUNTIME, LANGGRAPH)
LANGGRAPH_MAX = 1000  # LangGraph's database is ~178 MB at N = 500 and grows with N squared
GOAL_MS = 200.0  # issue 42: the first new step of a 5,000-step run within 0.2 s
RESULT = "probe {i}: " + "lorem ipsum dolor sit amet, consectetur adipiscing elit; " * 3


@dataclass
class Resume:
    """The medians (ms) of one configuration at one N over its fresh processes."""

    config: str
    steps: int
    messages: int
    first_step_ms: float  # store opened .. the first new tool call
    model_ms: float  # store opened .. the model's call of that step
    cpu_ms: float  # the process's CPU time over first_step_ms (all threads)
    runs_ms: list[float] = field(default_factory=list)


# --- the child processes ----------------------------------------------------------------


def _figures(stamps: dict[str, float], started: float, cpu: float) -> dict[str, float]:
    """The stamps as ms since the start (wall clock; ``tool_cpu`` in process CPU time)."""
    found = {key: (value - started) * 1000 for key, value in stamps.items() if key != "tool_cpu"}
    if "tool_cpu" in stamps:
        found["tool_cpu"] = (stamps["tool_cpu"] - cpu) * 1000
    return found


def _turn(length: int) -> int:
    """The model turn a history of ``length`` messages asks for (user, then call + result)."""
    return (length - 1) // 2


def _nd_model(steps: int, build: bool, stamps: dict[str, float]) -> Any:
    import nbdurable as nd
    from nbdurable.messages import TextPart, ToolCallPart
    from nbdurable.models import ModelRequest, ModelResponse

    usage = nd.Usage(input_tokens=10, output_tokens=5, total_tokens=15)

    class Probe:
        provider = "bench"
        model_id = "probe"
        model_name = "probe"

        async def generate(self, request: ModelRequest) -> ModelResponse:
            turn = _turn(len(request.messages))
            if build and turn == steps:
                os._exit(0)  # killed: the run's last checkpoint holds `steps` steps
            if build or "model" not in stamps:
                stamps.setdefault("model", time.perf_counter())
                call = ToolCallPart(
                    tool_call_id=f"call_{turn}", tool_name="probe", args={"i": turn}
                )
                return ModelResponse(content=(call,), usage=usage, finish_reason="tool_calls")
            return ModelResponse(content=(TextPart(text="Done."),), usage=usage)

    return Probe()


def _nd_tool(stamps: dict[str, float], build: bool) -> Any:
    import nbdurable as nd

    @nd.tool
    def probe(i: int) -> str:
        """Probe the system once."""
        if not build and "tool" not in stamps:
            stamps["tool"] = time.perf_counter()
            stamps["tool_cpu"] = time.process_time()
        return RESULT.format(i=i)

    return probe


async def _session(steps: int, db: Path, build: bool, config: str) -> dict[str, float]:
    import nbdurable as nd

    stamps: dict[str, float] = {}
    model, probe = _nd_model(steps, build, stamps), _nd_tool(stamps, build)
    started, cpu = time.perf_counter(), time.process_time()
    store = nd.SqliteSessionStore(db)
    if build:
        session = nd.DurableSession(store, run_id=RUN_ID)
        await nd.generate_text(
            model=model, messages="Probe.", tools=[probe], max_steps=steps + 5, session=session
        )
    elif config == SESSION:
        await nd.resume_from_checkpoint(
            store, RUN_ID, model=model, tools=[probe], max_steps=steps + 5
        )
    else:
        # One more user turn: the model sees 2 more messages, so the same turn number
        # plus one; it calls the tool once more, then answers.
        history = store.load(RUN_ID)
        assert history is not None
        messages = [*history.messages, nd.user("Probe once more.")]
        session = nd.DurableSession(store, run_id=RUN_ID)
        await nd.generate_text(
            model=model, messages=messages, tools=[probe], max_steps=steps + 5, session=session
        )
    store.close()
    return _figures(stamps, started, cpu)


async def _runtime(steps: int, db: Path, build: bool) -> dict[str, float]:
    import nbdurable as nd

    stamps: dict[str, float] = {}
    model, probe = _nd_model(steps, build, stamps), _nd_tool(stamps, build)
    agent = nd.Agent("prober", model, [probe], version="1", max_steps=steps + 5)
    limits = nd.Limits(max_payload_bytes=1 << 30, max_operations=8 * steps + 20)
    started, cpu = time.perf_counter(), time.process_time()
    store = nd.open_store(f"sqlite:///{db}")
    async with await nd.DurableRuntime.open(store=store, agents=[agent], limits=limits) as runtime:
        if build:
            run = await runtime.submit("prober", "Probe.")
            await run.result()
        else:
            # The runtime claims the run whose owner is gone; polled, not awaited,
            # so the wait does not change what the runtime does.
            while "tool" not in stamps:  # noqa: ASYNC110
                await asyncio.sleep(0.0005)
    return _figures(stamps, started, cpu)


def _langgraph(steps: int, db: Path, build: bool) -> dict[str, float]:
    import sqlite3

    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import MessagesState
    from store_bench import probe_graph

    stamps: dict[str, float] = {}
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}

    @tool
    def probe(i: int) -> str:
        """Probe the system once."""
        if not build and "tool" not in stamps:
            stamps["tool"] = time.perf_counter()
            stamps["tool_cpu"] = time.process_time()
        return RESULT.format(i=i)

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = _turn(len(state["messages"]))
        if build and turn == steps:
            os._exit(0)
        if build or "model" not in stamps:
            stamps.setdefault("model", time.perf_counter())
            call = {"name": "probe", "args": {"i": turn}, "id": f"call_{turn}", "type": "tool_call"}
            return {"messages": [AIMessage(content="", tool_calls=[call], usage_metadata=usage)]}
        return {"messages": [AIMessage(content="Done.", usage_metadata=usage)]}

    builder = probe_graph(agent, probe)
    config: dict[str, Any] = {"configurable": {"thread_id": RUN_ID}, "recursion_limit": 4 * steps}
    started, cpu = time.perf_counter(), time.process_time()
    saver = SqliteSaver(sqlite3.connect(str(db), check_same_thread=False))
    graph = builder.compile(checkpointer=saver)
    if build:
        graph.invoke({"messages": [HumanMessage("Probe.")]}, config, durability="sync")
    else:
        graph.invoke(None, config, durability="sync")
    saver.conn.close()
    return _figures(stamps, started, cpu)


def _warm_imports(config: str) -> None:
    """Import what the timed part would import lazily: a resume is timed, not Python's imports."""
    if config == LANGGRAPH:
        import langgraph.checkpoint.sqlite
        import langgraph.prebuilt  # noqa: F401

        return
    import nbdurable as nd
    import nbdurable.stores.sqlite

    nd.SqliteSessionStore, nd.DurableRuntime, nd.open_store  # noqa: B018  (lazy attributes)


def child(config: str, steps: int, db: Path, build: bool) -> dict[str, float]:
    """Build (``build``) or resume one configuration's run in this process."""
    _warm_imports(config)
    if config == LANGGRAPH:
        return _langgraph(steps, db, build)
    if config == RUNTIME:
        return asyncio.run(_runtime(steps, db, build))
    return asyncio.run(_session(steps, db, build, config))


# --- the parent ---------------------------------------------------------------------------


def _spawn(config: str, steps: int, db: Path, build: bool) -> dict[str, float]:
    command = [sys.executable, __file__, "--config", config, "--steps", str(steps), "--db", str(db)]
    if build:
        command.append("--build")
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{config} at N = {steps} failed:\n{done.stdout}{done.stderr}")
    if build:
        return {}
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _copy(base: Path, to: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{base}{suffix}")
        target = Path(f"{to}{suffix}")
        if target.exists():
            target.unlink()
        if source.exists():
            shutil.copyfile(source, target)


def measure(steps_list: list[int], configs: list[str], repeat: int, folder: Path) -> list[Resume]:
    """Build each run once, then resume a copy of it ``repeat`` times in fresh processes."""
    bases: dict[tuple[str, int], Path] = {}
    # Both session configurations resume the same kind of run: built once.
    for n in steps_list:
        for config in configs:
            if config == LANGGRAPH and n > LANGGRAPH_MAX:
                continue
            kind = SESSION if config == CONTINUE else config
            base = folder / f"{kind.replace(' ', '_')}_{n}.db"
            if not base.exists():
                print(f"  building {kind} N = {n} ...", file=sys.stderr, flush=True)
                _spawn(kind, n, base, build=True)
            bases[config, n] = base
    found: dict[tuple[str, int], list[dict[str, float]]] = {key: [] for key in bases}
    keys = list(bases)
    for r in range(repeat):
        for config, n in keys[r % len(keys) :] + keys[: r % len(keys)]:
            copy = folder / "resumed.db"
            _copy(bases[config, n], copy)
            found[config, n].append(_spawn(config, n, copy, build=False))
    results = []
    for (config, n), runs in found.items():
        results.append(
            Resume(
                config=config,
                steps=n,
                messages=2 * n + 1,
                first_step_ms=statistics.median(run["tool"] for run in runs),
                model_ms=statistics.median(run["model"] for run in runs),
                cpu_ms=statistics.median(run["tool_cpu"] for run in runs),
                runs_ms=[run["tool"] for run in runs],
            )
        )
    return results


def report(results: list[Resume]) -> list[tuple[str, bool]]:
    """Print the table and the issue-42 checks; return the checks."""
    from machine_info import table

    header = [
        "config",
        "N",
        "messages",
        "first new step ms",
        "[min-max]",
        "CPU ms",
        "model call ms",
    ]
    body = [
        [
            r.config,
            f"{r.steps:,}",
            f"{r.messages:,}",
            f"{r.first_step_ms:.1f}",
            f"[{min(r.runs_ms):.0f}-{max(r.runs_ms):.0f}]",
            f"{r.cpu_ms:.1f}",
            f"{r.model_ms:.1f}",
        ]
        for r in results
    ]
    print(table(header, body))
    by = {(r.config, r.steps): r.first_step_ms for r in results}
    checks: list[tuple[str, bool]] = []
    for config in (SESSION, RUNTIME):
        if (config, 5000) in by:
            ms = by[config, 5000]
            checks.append((f"{config} N = 5,000: {ms:.0f} ms <= {GOAL_MS:.0f}", ms <= GOAL_MS))
        if (config, 500) in by and (LANGGRAPH, 500) in by:
            ratio = by[config, 500] / by[LANGGRAPH, 500]
            checks.append((f"{config} / langgraph at N = 500: {ratio:.2f} <= 1", ratio <= 1))
    print()
    for text, ok in checks:
        print(f"  {'PASS' if ok else 'MISS'}  {text}")
    return checks


def run(steps_list: list[int], configs: list[str], repeat: int, json_path: Path | None) -> int:
    """What ``long_run.py --resume`` does."""
    from machine_info import describe, machine

    info = machine(["langgraph", "langgraph-checkpoint-sqlite"])
    print(describe(info))
    print(
        f"cold resume: a run killed after N tool steps, reopened in {repeat} fresh processes each"
    )
    with tempfile.TemporaryDirectory(prefix="nbd-resume-") as folder:
        results = measure(steps_list, configs, repeat, Path(folder))
    checks = report(results)
    if json_path is not None:
        payload = {"machine": info, "resume": [asdict(r) for r in results], "checks": checks}
        json_path.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="one child of long_run.py --resume")
    parser.add_argument("--config", choices=CONFIGS, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--build", action="store_true")
    args = parser.parse_args()
    print(json.dumps(child(args.config, args.steps, args.db, args.build)))
