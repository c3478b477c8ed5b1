"""What row checksums and run heads (SQLite schema 7) cost: writes, reads, file bytes.

Runs the same work against two checkouts of nbdurable, each in its own process
(``--old DIR`` is a checkout of the previous schema, for example from ``git
archive``), interleaved, and prints medians side by side:

- a loop run of ``--steps`` tool steps with a durable session (each step's
  checkpoints and events: the write path of the loop);
- ``--commits`` runtime commits (a journaled response, two tool intents, an
  event each: the write path of the runtime);
- reads: the latest checkpoint (cold: a new store handle each time), a run's
  history, a checkpoint by step, a run's events, its intents, its record;
- the file's bytes once closed.

Times are CPU time of the process (its threads included) per operation: on a
shared machine wall time mostly measures the neighbours (the loop step and the
runtime commit are given in wall time too).

    python benchmarks/checksum_cost.py --old /tmp/old_nbd
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

WORK = r"""
import asyncio, json, sys, time, tempfile
from pathlib import Path
import nbdurable as nd
from nbdurable.runs import RuntimeRun, ToolIntent
from nbdurable.events._model import NewEvent

steps, commits = int(sys.argv[1]), int(sys.argv[2])
root = Path(tempfile.mkdtemp())
path = root / "cost.db"
out = {}

@nd.tool
def probe(i: int) -> str:
    "Probe."
    return f"result {i}: " + "abcdefghij" * 20

async def loop(store):
    turns = [nd.Turn.call("probe", f"step {i}", i=i) for i in range(steps)]
    await nd.generate_text(model=nd.ScriptedModel([*turns, "done"]), messages="Go.",
                           tools=[probe], session=nd.DurableSession(store, run_id="loop"))

store = nd.open_store(f"sqlite:///{path}")
t, w = time.process_time(), time.perf_counter()
asyncio.run(loop(store))
out["loop step, CPU (ms)"] = (time.process_time() - t) * 1000 / steps
out["loop step, wall (ms)"] = (time.perf_counter() - w) * 1000 / steps
now = 1_800_000_000_000
store.rt_insert(RuntimeRun(run_id="rt", agent_id="a", agent_version="1", session_id="s",
                prompt='"hi"', state="pending", created_at=now, updated_at=now),
                enqueue=False, max_pending=10)
claimed = store.rt_claim("me", now, 600_000, {("a", "1"): None})
t, w = time.process_time(), time.perf_counter()
for i in range(commits):
    intents = [ToolIntent(run_id="rt", tool_call_id=f"c{i}-{k}", tool_name="probe", step_index=i,
               state="completed", result={"content": "x" * 100}) for k in range(2)]
    store.rt_commit("rt", fence=claimed.fence, journal=(i, '{"text": "' + "y" * 200 + '"}'),
                    intents=intents,
                    events=[NewEvent(type="tool_call", step_index=i, payload={"i": i},
                                     created_at=now + i)])
out["runtime commit, CPU (ms)"] = (time.process_time() - t) * 1000 / commits
out["runtime commit, wall (ms)"] = (time.perf_counter() - w) * 1000 / commits
store.close()

def timed(name, action, n):
    t = time.process_time()
    for _ in range(n):
        action()
    out[name] = (time.process_time() - t) * 1000 / n

def cold_load():
    s = nd.open_store(f"sqlite:///{path}")
    s.load("loop")
    s.close()

timed("load latest, new handle, CPU (ms)", cold_load, 20)
store = nd.open_store(f"sqlite:///{path}")
timed("history, CPU (ms)", lambda: store.history("loop"), 50)
timed("load at a step, CPU (ms)", lambda: store.load("loop", steps // 2), 50)
timed("read events, CPU (ms)", lambda: asyncio.run(nd.events.read_events(store, "loop")), 20)
timed("rt_intents, CPU (ms)", lambda: store.rt_intents("rt"), 50)
timed("rt_get, CPU (ms)", lambda: store.rt_get("rt"), 200)
timed("rt_list(unfinished), CPU (ms)", lambda: store.rt_list(["pending", "running"]), 200)
timed("rt_session, CPU (ms)", lambda: store.rt_session("s", ["pending", "running"]), 200)
store.close()
out["file bytes"] = path.stat().st_size
print(json.dumps(out))
"""


def run(checkout: Path, steps: int, commits: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", WORK, str(steps), str(commits)],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="checkout of the previous schema")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    old: list[dict[str, float]] = []
    new: list[dict[str, float]] = []
    started = time.perf_counter()
    for _ in range(args.rounds):
        old.append(run(args.old, args.steps, args.commits))
        new.append(run(HERE, args.steps, args.commits))
    print(f"{args.rounds} rounds, {time.perf_counter() - started:.0f} s; medians")
    print(f"{'':32} {'schema 6':>10} {'schema 7':>10} {'ratio':>7}")
    for key in old[0]:
        a = statistics.median(r[key] for r in old)
        b = statistics.median(r[key] for r in new)
        fmt = "{:>10,.0f}" if key == "file bytes" else "{:>10.3f}"
        print(f"{key:32} {fmt.format(a)} {fmt.format(b)} {b / a:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
