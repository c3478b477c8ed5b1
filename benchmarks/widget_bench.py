"""Run widget benchmark: what the live run view sends its front-end, measured at the comm.

Two runs on a real DurableRuntime (SQLite in a temporary folder), each followed
live by a ``RunWidget`` whose comm records every message it publishes (the
message's JSON as the kernel would send it; no browser):

    stream     one streamed answer of 30,000 tokens (ScriptedModel, a long turn,
               stream_delay small)
    300 steps  a run of 300 tool-calling steps, each streaming a short sentence

Each widget's front end renders when it is created: the benchmark sends the
kernel what run_view.js's model sends then (``{"type": "snapshot"}``) and counts
what follows its answer ("after the first render"). ``--headless`` sends
nothing, as nbclient or ``nbconvert --execute`` do: the kernel then syncs the
``snapshot`` trait (every step) when the run ends, since no front end composes it.

For each: the bytes sent, the updates (messages of one flush count as one) and
updates per second, the largest update after the first render (and what it
carried), the median and the last, and the goals: bytes sent for the stream
<= 2x its text + 200 bytes per update (issue 20); every update of the 300-step
run after the view's first render <= 2 KB (issue 42). Nothing is asserted: the
figures are printed (and written with ``--json``).

    python benchmarks/widget_bench.py                  # 30,000 tokens, 300 steps
    python benchmarks/widget_bench.py --quick          # 3,000 tokens, 40 steps (smoke test)
    python benchmarks/widget_bench.py --headless       # no front end: the nbclient case
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
ASK = {"content": {"data": {"method": "custom", "content": {"type": "snapshot"}}}, "buffers": []}
"""What a front end's model sends when it is created (run_view.js): every step, please."""

Sent = tuple[float, int, str]
"""(time, bytes, what) of one message or one update."""


def kind(data: dict[str, Any]) -> str:
    """What a message carries: the snapshot trait, a snapshot or steps delta, other traits."""
    if "snapshot" in data.get("state", {}):
        return "snapshot trait"
    content = data.get("content")
    if data.get("method") == "custom" and isinstance(content, dict):
        return {"steps": "steps delta", "snapshot": "snapshot message"}.get(
            str(content.get("type")), "custom"
        )
    return "traits" if data.get("method") == "update" else str(data.get("method", "open"))


class RecordingComm(BaseComm):
    """A comm that keeps (time, bytes, what) of every message it publishes."""

    log: ClassVar[list[Sent]] = []

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
        RecordingComm.log.append((time.monotonic(), size, kind(data or {})))


@nd.tool
def lookup(table: str) -> dict[str, Any]:
    """Look a table up."""
    return {"table": table, "rows": 42, "columns": ["id", "name", "created_at"]}


def updates(log: list[Sent]) -> list[Sent]:
    """(time, bytes, what) of each update: the messages of one flush summed.

    ``what`` names the largest message of the update.
    """
    grouped: list[tuple[float, int, str, int]] = []
    for at, size, what in log:
        if grouped and at - grouped[-1][0] < GAP:
            first, total, largest, largest_size = grouped[-1]
            if size > largest_size:
                largest, largest_size = what, size
            grouped[-1] = (first, total + size, largest, largest_size)
        else:
            grouped.append((at, size, what, size))
    return [(at, total, what) for at, total, what, _largest in grouped]


async def follow(folder: Path, agent: nd.Agent, *, render: bool) -> tuple[list[Sent], str, int]:
    """Run ``agent`` once with a widget following it: (updates, the run's text, first).

    ``first`` is the bytes of the answer to the front end's first render (0 headless);
    the updates are those after it (all of them headless, the widget's opening aside).
    """
    store = nd.open_store(f"sqlite:///{folder}/{agent.id}.db")
    runtime = await nd.DurableRuntime.open(store=store, agents=[agent], poll_interval=0.01)
    try:
        run = await runtime.submit(agent.id, "go")
        RecordingComm.log = []
        widget = RunWidget(runtime, run.run_id)
        opened = len(RecordingComm.log)  # the widget's comm_open
        first = 0
        if render:  # its front end's model is created and asks for every step
            widget._handle_msg(ASK)
            first = sum(size for _t, size, _w in RecordingComm.log[opened:])
            opened = len(RecordingComm.log)
        await run.result()
        await asyncio.wait_for(widget.task, 120)  # it stops following once the run ended
        text = widget.text
        log = list(RecordingComm.log[opened:])  # not the comm's close
        widget.close()
    finally:
        await runtime.close()
        store.close()
    return updates([entry for entry in log if entry[1]]), text, first


def common_figures(sent: list[Sent], first: int) -> dict[str, Any]:
    """What every run reports: totals, rate, and the updates after the first render."""
    seconds = sent[-1][0] - sent[0][0] if len(sent) > 1 else 0.0
    largest = max(sent, key=lambda update: update[1])
    return {
        "first_render_bytes": first,
        "bytes_sent": sum(size for _t, size, _w in sent),
        "updates": len(sent),
        "seconds": round(seconds, 2),
        "updates_per_second": round(len(sent) / seconds, 1) if seconds else 0.0,
        "median_update": int(statistics.median(size for _t, size, _w in sent)),
        "largest_update": largest[1],
        "largest_update_carries": largest[2],
        "last_update": sent[-1][1],
        "snapshot_bytes": sum(size for _t, size, what in sent if what == "snapshot trait"),
    }


def stream_figures(sent: list[Sent], text: str, first: int) -> dict[str, Any]:
    figures = common_figures(sent, first)
    text_bytes = len(text.encode())
    budget = 2 * text_bytes + 200 * len(sent)
    return {
        "text_bytes": text_bytes,
        **figures,
        "budget": budget,
        "goal_met": figures["bytes_sent"] <= budget,
    }


def steps_figures(sent: list[Sent], steps: int, first: int) -> dict[str, Any]:
    figures = common_figures(sent, first)
    return {"steps": steps, **figures, "goal_met": figures["largest_update"] <= 2048}


async def measure(tokens: int, steps: int, folder: Path, *, render: bool) -> dict[str, Any]:
    words = "".join(f"w{i} " for i in range(tokens))
    talker = nd.Agent(
        "talker", nd.ScriptedModel([words], stream_delay=0.0001), [], version="1", stream=True
    )
    sent, text, first = await follow(folder, talker, render=render)
    stream = stream_figures(sent, text, first)
    script: list[Any] = [
        nd.Turn.call("lookup", f"Looking at table t{i} now.", table=f"t{i}") for i in range(steps)
    ]
    model = nd.ScriptedModel([*script, "Done."], mode="sequential", stream_delay=0.01)
    worker = nd.Agent("worker", model, [lookup], version="1", stream=True, max_steps=steps + 5)
    sent, _text, first = await follow(folder, worker, render=render)
    return {
        "tokens": tokens,
        "front_end": render,
        "stream": stream,
        "run": steps_figures(sent, steps + 1, first),
    }


def kb(size: int) -> str:
    return f"{size / 1024:,.1f} KB" if size < 1024 * 1024 else f"{size / 1024 / 1024:,.1f} MB"


def report(figures: dict[str, Any]) -> str:
    stream, run = figures["stream"], figures["run"]
    after = "after the first render" if figures["front_end"] else "headless"

    def rows_of(part: dict[str, Any]) -> list[list[str]]:
        return [
            ["  updates (per second)", f"{part['updates']} ({part['updates_per_second']}/s)"],
            ["  first render: the snapshot answer", kb(part["first_render_bytes"])],
            [f"  update {after}, median", kb(part["median_update"])],
            [
                f"  update {after}, largest",
                f"{kb(part['largest_update'])} ({part['largest_update_carries']})",
            ],
            ["  last update", kb(part["last_update"])],
            ["  snapshot trait synced (in bytes sent)", kb(part["snapshot_bytes"])],
        ]

    rows = [
        [f"{figures['tokens']:,}-token stream: text", kb(stream["text_bytes"])],
        ["  bytes sent", kb(stream["bytes_sent"])],
        ["  goal: 2x text + 200 B per update", kb(stream["budget"])],
        *rows_of(stream),
        [f"{run['steps']}-step run: bytes sent", kb(run["bytes_sent"])],
        *rows_of(run),
    ]
    goals = (
        f"goals: stream {'met' if stream['goal_met'] else 'MISSED'}, "
        f"every update of a {run['steps']}-step run {after} <= 2 KB "
        f"{'met' if run['goal_met'] else 'MISSED'}"
    )
    return table(["what", "value"], rows) + "\n\n" + goals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tokens", type=int, default=30_000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="3,000 tokens, 40 steps")
    parser.add_argument(
        "--headless", action="store_true", help="no front end asks for a snapshot (nbclient)"
    )
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
            figures = asyncio.run(
                measure(args.tokens, args.steps, Path(folder), render=not args.headless)
            )
    finally:
        comm.create_comm = original
    print()
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
