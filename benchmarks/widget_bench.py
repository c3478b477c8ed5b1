"""Run widget benchmark: what the live run view sends its front-end, measured at the comm.

Two runs on a real DurableRuntime (SQLite in a temporary folder), each followed
live by a ``RunWidget`` whose comm records every message it publishes (the
message's JSON as the kernel would send it; no browser):

    stream     one streamed answer of 30,000 tokens (ScriptedModel, a long turn,
               stream_delay small)
    300 steps  a run of 300 tool-calling steps, each streaming a short sentence

For each: the bytes sent, the updates (messages of one flush count as one) and
updates per second, the largest and the last update, and the goals of issue 20:
bytes sent for the stream <= 2x its text + 200 bytes per update; an update of the
300-step run (past step 270) <= 2 KB.

    python benchmarks/widget_bench.py                  # 30,000 tokens, 300 steps
    python benchmarks/widget_bench.py --quick          # 3,000 tokens, 40 steps (smoke test)
    python benchmarks/widget_bench.py --json figures.json

See benchmarks/README.md for the latest figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import comm
from comm.base_comm import BaseComm
from machine_info import describe, machine, table

import nbdurable as nd
from nbdurable.notebook.widgets import RunWidget

GAP = 0.005
"""Messages closer than this (seconds) were sent by one flush: one update."""


class RecordingComm(BaseComm):
    """A comm that keeps (time, bytes, steps the widget had) of every message it publishes.

    An update that sets the ``snapshot`` trait (every step, synced once the run
    stops) is counted with ``steps`` negative, so the figures can tell it apart.
    """

    log: ClassVar[list[tuple[float, int, int]]] = []
    widget: ClassVar[Any] = None

    def publish_msg(
        self,
        msg_type: str,
        data: Any = None,
        metadata: Any = None,
        buffers: Any = None,
        **keys: Any,
    ) -> None:
        # the wire's JSON (jupyter_client packs with json.dumps, ensure_ascii off)
        size = len(json.dumps(data or {}, ensure_ascii=False, default=str).encode())
        widget = RecordingComm.widget
        steps = len(widget.view.steps) if widget is not None else 0
        if "snapshot" in (data or {}).get("state", {}):
            steps = -1 - steps
        RecordingComm.log.append((time.monotonic(), size, steps))


@nd.tool
def lookup(table: str) -> dict[str, Any]:
    """Look a table up."""
    return {"table": table, "rows": 42, "columns": ["id", "name", "created_at"]}


def updates(log: list[tuple[float, int, int]]) -> list[tuple[float, int, int]]:
    """(time, bytes, steps) of each update: the messages of one flush summed."""
    grouped: list[tuple[float, int, int]] = []
    for at, size, steps in log:
        if grouped and at - grouped[-1][0] < GAP:
            first, total, before = grouped[-1]
            grouped[-1] = (first, total + size, min(steps, before) if before < 0 else steps)
        else:
            grouped.append((at, size, steps))
    return grouped


async def follow(folder: Path, agent: nd.Agent) -> tuple[list[tuple[float, int, int]], str]:
    """Run ``agent`` once with a widget following it; (updates, the run's text)."""
    store = nd.open_store(f"sqlite:///{folder}/{agent.id}.db")
    runtime = await nd.DurableRuntime.open(store=store, agents=[agent], poll_interval=0.01)
    try:
        run = await runtime.submit(agent.id, "go")
        RecordingComm.log = []
        widget = RunWidget(runtime, run.run_id)
        RecordingComm.widget = widget
        await run.result()
        await asyncio.wait_for(widget.task, 120)  # it stops following once the run ended
        text = widget.text
        log = list(RecordingComm.log)  # not the comm's close
        widget.close()
    finally:
        RecordingComm.widget = None
        await runtime.close()
        store.close()
    sent = [entry for entry in log if entry[1]]
    return updates(sent)[1:], text  # the first is the widget's comm_open


def stream_figures(sent: list[tuple[float, int, int]], text: str) -> dict[str, Any]:
    total = sum(size for _t, size, _s in sent)
    snapshots = [size for _t, size, steps in sent if steps < 0]
    seconds = sent[-1][0] - sent[0][0] if len(sent) > 1 else 0.0
    text_bytes = len(text.encode())
    budget = 2 * text_bytes + 200 * len(sent)
    return {
        "text_bytes": text_bytes,
        "bytes_sent": total,
        "updates": len(sent),
        "seconds": round(seconds, 2),
        "updates_per_second": round(len(sent) / seconds, 1) if seconds else 0.0,
        "largest_update": max(size for _t, size, steps in sent if steps >= 0),
        "last_update": [size for _t, size, steps in sent if steps >= 0][-1],
        "snapshot_bytes": sum(snapshots),
        "budget": budget,
        "goal_met": total <= budget,
    }


def steps_figures(sent: list[tuple[float, int, int]], steps: int) -> dict[str, Any]:
    late = [size for _t, size, at in sent if at >= steps * 0.9]  # not the snapshot (at < 0)
    snapshots = [size for _t, size, at in sent if at < 0]
    seconds = sent[-1][0] - sent[0][0] if len(sent) > 1 else 0.0
    return {
        "steps": steps,
        "bytes_sent": sum(size for _t, size, _s in sent),
        "updates": len(sent),
        "updates_per_second": round(len(sent) / seconds, 1) if seconds else 0.0,
        "late_updates": len(late),
        "late_median_bytes": int(statistics.median(late)) if late else 0,
        "late_max_bytes": max(late) if late else 0,
        "last_update": sent[-1][1],
        "snapshot_bytes": sum(snapshots),
        "goal_met": bool(late) and max(late) <= 2048,
    }


async def measure(tokens: int, steps: int, folder: Path) -> dict[str, Any]:
    words = "".join(f"w{i} " for i in range(tokens))
    talker = nd.Agent(
        "talker", nd.ScriptedModel([words], stream_delay=0.0001), [], version="1", stream=True
    )
    sent, text = await follow(folder, talker)
    stream = stream_figures(sent, text)
    script: list[Any] = [
        nd.Turn.call("lookup", f"Looking at table t{i} now.", table=f"t{i}") for i in range(steps)
    ]
    model = nd.ScriptedModel([*script, "Done."], mode="sequential", stream_delay=0.01)
    worker = nd.Agent("worker", model, [lookup], version="1", stream=True, max_steps=steps + 5)
    sent, _text = await follow(folder, worker)
    return {"tokens": tokens, "stream": stream, "run": steps_figures(sent, steps + 1)}


def kb(size: int) -> str:
    return f"{size / 1024:,.1f} KB" if size < 1024 * 1024 else f"{size / 1024 / 1024:,.1f} MB"


def report(figures: dict[str, Any]) -> str:
    stream, run = figures["stream"], figures["run"]
    rows = [
        [f"{figures['tokens']:,}-token stream: text", kb(stream["text_bytes"])],
        ["  bytes sent", kb(stream["bytes_sent"])],
        ["  goal: 2x text + 200 B per update", kb(stream["budget"])],
        ["  updates (per second)", f"{stream['updates']} ({stream['updates_per_second']}/s)"],
        ["  largest update", kb(stream["largest_update"])],
        ["  last update", kb(stream["last_update"])],
        ["  snapshot trait, once at the end (in bytes sent)", kb(stream["snapshot_bytes"])],
        [f"{run['steps']}-step run: bytes sent", kb(run["bytes_sent"])],
        ["  updates (per second)", f"{run['updates']} ({run['updates_per_second']}/s)"],
        ["  update past 90% of the steps, median", kb(run["late_median_bytes"])],
        ["  update past 90% of the steps, largest", kb(run["late_max_bytes"])],
        ["  last update", kb(run["last_update"])],
        ["  snapshot trait, once at the end (in bytes sent)", kb(run["snapshot_bytes"])],
    ]
    goals = (
        f"goals: stream {'met' if stream['goal_met'] else 'MISSED'}, "
        f"update of a {run['steps']}-step run <= 2 KB {'met' if run['goal_met'] else 'MISSED'}"
    )
    return table(["what", "value"], rows) + "\n\n" + goals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tokens", type=int, default=30_000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="3,000 tokens, 40 steps")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens, args.steps = 3000, 40
    info = machine(["anywidget", "ipywidgets"])
    print(describe(info), flush=True)
    original = comm.create_comm
    comm.create_comm = lambda **kw: RecordingComm(**kw)
    try:
        with tempfile.TemporaryDirectory() as folder:
            figures = asyncio.run(measure(args.tokens, args.steps, Path(folder)))
    finally:
        comm.create_comm = original
    print()
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
