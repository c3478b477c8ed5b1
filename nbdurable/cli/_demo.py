"""``nbdurable demo``: a durable run in the terminal, offline, in a few seconds.

A worker process streams the run and is killed by SIGKILL in the middle of a
step; the committed checkpoints are still in the store; a runtime in this
process takes the run over, it stops for a human's approval, and a denial shows
the model reacting. Everything runs on the ScriptedModel, in a fresh temporary
SQLite store unless ``--store`` names one.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from .._deps import new_id
from ..messages import ToolApprovalRequest
from ..runs import EMBEDDED, RuntimeRun
from ..runtime._run import Run
from ._engines import ENGINES
from ._follow import call_text, follow, last_offset
from ._store import opened_store
from ._tables import render, terminal_width
from .demo_agent import AGENT_ID, LEASE_MS, janitor

__all__ = [
    "committed",
    "demo",
    "demo_embedded",
    "phase",
    "say",
    "settle_approvals",
    "temporary_store",
]

CHILD = "from nbdurable.cli.demo_agent import crash_leg; crash_leg()"
DENY_REASON = "orders is production data"
WORKER_TIMEOUT = 30.0


def say(text: str) -> None:
    print(textwrap.fill(text, width=terminal_width(), subsequent_indent="  "), flush=True)


def phase(title: str, explanation: str) -> None:
    text = textwrap.fill(
        f"== {title}: {explanation}", width=terminal_width(), subsequent_indent="   "
    )
    print(f"\n{text}", flush=True)


async def _answer(prompt: str, assume_yes: bool) -> bool:
    """Ask the human: a terminal prompt, or a line read from a piped stdin."""
    if assume_yes:
        print(f"{prompt}y (--yes)", flush=True)
        return True
    if sys.stdin.isatty():
        line = await asyncio.to_thread(input, prompt)
    else:
        print(prompt, end="", flush=True)
        line = await asyncio.to_thread(sys.stdin.readline)
        print(line.strip() if line.strip() else "(no answer: N)", flush=True)
    return line.strip().lower() in ("y", "yes")


def _check_shared(url: str) -> None:
    """The demo's two processes need one store: persistent, with run records."""
    from .._errors import ConfigurationError
    from ..durable.store import PERSISTENT, RunStore, supports

    with opened_store(url, create=True) as store:
        if not (isinstance(store, RunStore) and supports(store, PERSISTENT)):
            raise ConfigurationError(
                f"the demo needs a store two processes share, with run records "
                f"(sqlite:///... or postgresql://...), not {url!r}"
            )


async def _crashing_worker(url: str, run_id: str) -> int | None:
    sys.stdout.flush()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD, url, run_id)
    try:
        return await asyncio.wait_for(proc.wait(), WORKER_TIMEOUT)
    except TimeoutError:  # it should have died in step 1 long ago
        proc.kill()
        return await proc.wait()


def committed(store: Any, run_id: str) -> str:
    rows = [
        [info.step_index, info.status, info.message_count, len(info.pending_approvals)]
        for info in store.history(run_id)
    ]
    return render(["step", "status", "messages", "pending"], rows)


def _open_request(run_record: RuntimeRun, pending: tuple[ToolApprovalRequest, ...]) -> Any:
    return next(r for r in pending if r.approval_id not in run_record.verdicts)


async def settle_approvals(run: Run, record: RuntimeRun, assume_yes: bool) -> RuntimeRun:
    """Answer approvals until the run finishes.

    The human decides the first call (stg_2024); the demo denies the next one.
    """
    asked = False
    while record.state == "waiting_approval":
        request = _open_request(record, await run.pending_approvals())
        call = call_text(request.tool_name, request.input)
        after = await last_offset(run.runtime.event_store, run.run_id)
        if not asked:
            phase("approval", "the run is parked in the store; nothing runs until a human answers")
            asked = True
            approved = await _answer(f"Approve {call}? [y/N] ", assume_yes)
            if approved:
                await run.approve(request.approval_id)  # the signed token is verified first
            else:
                await run.deny(request.approval_id, reason="Denied by the operator.")
            verdict = "approved: the tool runs" if approved else "denied: the model must react"
            phase("resume", verdict)
        else:
            phase("denial", f"the demo denies {call} ({DENY_REASON!r}); the model reacts")
            say(f"Approve {call}? [y/N] n (the demo's answer)")
            await run.deny(request.approval_id, reason=DENY_REASON)
        record = await follow(run, after)
    return record


async def _demo(url: str, assume_yes: bool) -> int:
    from ..runtime._runtime import DurableRuntime

    _check_shared(url)
    started = time.monotonic()
    run_id = f"demo-{new_id()[:8]}"
    say(f"nbdurable demo: run {run_id} of agent {AGENT_ID!r} (ScriptedModel, offline)")
    print(f"store: {url}")

    phase("start", "a worker process submits the run and streams it; every step is committed")
    code = await _crashing_worker(url, run_id)
    print()
    how = "by SIGKILL" if code == -9 else f"(exit status {code})"
    phase("crash", f"the worker was killed {how} in the middle of step 1, mid-sentence")
    with opened_store(url) as store:
        say("the store kept every committed step (the half-streamed step 1 is not one):")
        print(committed(store, run_id))
        state = store.rt_get(run_id)
        say(f"run state: {state.state if state else '?'}, leased by the dead worker")
        after = await last_offset(store, run_id)
        phase(
            "recover",
            "a runtime in this process takes the run over: the dead worker's process is gone "
            f"(where that cannot be seen, once its {LEASE_MS} ms lease lapses); step 0 is not "
            "run again, step 1 is",
        )
        async with await DurableRuntime.open(
            store=store, agents=[janitor()], poll_interval=0.02
        ) as runtime:
            run = await runtime.get_run(run_id)
            record = await follow(run, after)
            record = await settle_approvals(run, record, assume_yes)
        print()
        took = time.monotonic() - started
        say(f"run {run_id} {record.state} in {took:.1f} s; its checkpoints:")
        print(committed(store, run_id))
    print()
    say(f"final text: {record.result_text}")
    print("\ninspect it:")
    for command in ("show", "history", "explain"):
        print(f"  nbdurable runs {command} {run_id} --store {url}")
    return 0 if record.state == "completed" else 1


def demo(args: argparse.Namespace) -> int:
    """Run the demo of ``--engine`` (in a fresh temporary store unless ``--store`` is given)."""
    entry = ENGINES[getattr(args, "engine", EMBEDDED)]
    entry.require("nbdurable demo")
    assert entry.demo is not None  # --engine offers only the engines with a demo
    return entry.demo(args.store, args.yes)


def temporary_store() -> str:
    """A fresh SQLite store in a temporary directory: the demos' default."""
    return f"sqlite:///{Path(tempfile.mkdtemp(prefix='nbdurable-demo-')) / 'runs.db'}"


def demo_embedded(url: str | None, assume_yes: bool) -> int:
    """The embedded demo (in a fresh temporary store unless ``url`` is given)."""
    return asyncio.run(_demo(url or temporary_store(), assume_yes))
