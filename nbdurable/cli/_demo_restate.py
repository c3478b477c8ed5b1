"""``nbdurable demo --engine restate``: the seed's Restate lab in the terminal.

A local ``restate-server`` (free ports, a temporary base dir) and one endpoint
process (``nbdurable worker --engine restate``) serving the demo agent. The run
streams; the endpoint is killed by SIGKILL in the middle of step 1; it is
started again on its address; Restate invokes the leg again and the journal
replays step 0 (its tool does not run again); this process, a subscriber that
was following the stream, reconnects by offset. Then the approvals, as in the
embedded demo.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .._deps import new_id
from ..events._model import MODEL_DELTA
from ._demo import committed, phase, say, settle_approvals, temporary_store
from ._follow import EventPrinter, follow
from .demo_agent import AGENT_ID, CRASH_AFTER_DELTAS, PROMPT, janitor

__all__ = ["demo_restate"]

AGENTS = "nbdurable.cli.demo_agent:janitor"


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


async def _lab(url: str, assume_yes: bool) -> int:
    from ..restate import RestateEngine, RestateServer
    from ..restate._devserver import free_port, start_endpoint
    from ..runtime._runtime import DurableRuntime
    from ..stores import open_store

    started = time.monotonic()
    run_id = f"demo-{new_id()[:8]}"
    say(f"nbdurable demo on Restate: run {run_id} of agent {AGENT_ID!r} (ScriptedModel)")
    print(f"store: {url}")
    with (
        tempfile.TemporaryDirectory(prefix="nbdurable-restate-") as base,
        RestateServer(Path(base) / "server") as server,
    ):
        print(f"restate-server: ingress {server.ingress}, admin {server.admin}")
        listen = f"127.0.0.1:{free_port()}"
        endpoint = start_endpoint(server, url, AGENTS, listen)
        store: Any = open_store(url)
        engine = RestateEngine(server.ingress, server.admin)
        try:
            async with DurableRuntime(store=store, agents=[janitor()], engine=engine) as rt:
                phase("start", "the endpoint runs the run's leg; every step is journaled")
                run = await rt.submit(AGENT_ID, PROMPT, run_id=run_id)
                printer = EventPrinter(states=False)
                seen, offset = 0, 0
                async for event in run.stream():
                    printer.show(event)
                    offset = event.offset
                    if event.type == MODEL_DELTA and (event.step_index or 0) >= 1:
                        seen += 1
                    if seen >= CRASH_AFTER_DELTAS:
                        break
                _kill(endpoint)
                printer.end_text()
                phase("crash", "the endpoint was killed by SIGKILL in the middle of step 1")
                print(committed(store, run_id))
                phase(
                    "recover",
                    "the endpoint starts again on its address; Restate invokes the leg "
                    "again, the journal replays step 0 (its tool does not run again), and "
                    f"this subscriber reconnects after offset {offset}",
                )
                endpoint = start_endpoint(server, url, AGENTS, listen)
                record = await follow(run, offset)
                record = await settle_approvals(run, record, assume_yes)
        finally:
            _kill(endpoint)
            store.close()
    print()
    say(f"run {run_id} {record.state} in {time.monotonic() - started:.1f} s")
    say(f"final text: {record.result_text}")
    return 0 if record.state == "completed" else 1


def demo_restate(url: str | None, assume_yes: bool) -> int:
    """Run the Restate lab (in a fresh temporary store unless ``url`` is given)."""
    return asyncio.run(_lab(url or temporary_store(), assume_yes))
