"""The ``nbdurable`` command: a thin layer over the library.

``nbdurable worker --store URL --agents module:attr`` runs a headless runtime that
executes queued and recovered runs (so runs go on while a notebook kernel
restarts). ``nbdurable runs --store URL`` lists runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import signal
import sys
from collections.abc import Sequence
from typing import Any

from ._errors import ConfigurationError, NbdurableError

__all__ = ["load_agents", "main"]


def load_agents(spec: str) -> list[Any]:
    """Import ``module:attr``: an Agent, a list of Agents, or a callable returning either.

    Raises:
        ConfigurationError: The spec cannot be imported or holds no agents.
    """
    from .runtime.agent import Agent

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"--agents takes module:attribute, not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ConfigurationError(f"{module_name!r} has no attribute {attr!r}")
        value = getattr(value, part)
    if callable(value) and not isinstance(value, Agent):
        value = value()
    agents = [value] if isinstance(value, Agent) else list(value)
    if not agents or not all(isinstance(a, Agent) for a in agents):
        raise ConfigurationError(f"{spec!r} holds no Agent (or list of Agents)")
    return agents


async def _worker(args: argparse.Namespace) -> int:
    from .runtime.runtime import DurableRuntime
    from .stores import open_store

    agents: list[Any] = []
    for spec in args.agents:
        agents.extend(load_agents(spec))
    store = open_store(args.store)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    runtime = await DurableRuntime.open(
        store=store,
        agents=agents,
        max_concurrent_runs=args.max_concurrent_runs,
        lease_ms=args.lease_ms,
        owner_id=args.owner_id,
        poll_interval=args.poll_interval,
    )
    print(
        f"nbdurable worker {runtime.owner_id} serving {len(agents)} agent(s) from {args.store}",
        flush=True,
    )
    try:
        busy = ["queued", "pending", "running", "retry_wait", "cancelling"]
        while not (args.exit_when_idle and not runtime.list_runs(busy)):
            # Wake at least every poll interval to notice idleness; a signal wakes at once.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), args.poll_interval)
            if stop.is_set():
                break
    finally:
        await runtime.close()  # in-flight steps are abandoned cleanly, leases released
        close = getattr(store, "close", None)
        if close is not None:
            close()
    return 0


def _runs(args: argparse.Namespace) -> int:
    from .durable.store import RUNTIME, supports
    from .stores import open_store

    store = open_store(args.store)
    try:
        if supports(store, RUNTIME):
            rows = [
                {
                    "run_id": r.run_id,
                    "agent": r.agent_id,
                    "state": r.state,
                    "reason": r.reason,
                    "session": r.session_id,
                }
                for r in store.rt_list()  # type: ignore[attr-defined]
            ]
        else:
            rows = [
                {"run_id": r.run_id, "state": r.status, "steps": r.step_count}
                for r in store.list_runs()
            ]
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print("  ".join(f"{k}={v}" for k, v in row.items()))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nbdurable", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="execute queued and recovered runs")
    worker.add_argument("--store", required=True, help="store URL, e.g. sqlite:///runs.db")
    worker.add_argument(
        "--agents",
        required=True,
        action="append",
        help="module:attribute holding an Agent or a list of Agents",
    )
    worker.add_argument("--max-concurrent-runs", type=int, default=4)
    worker.add_argument("--lease-ms", type=int, default=30_000)
    worker.add_argument("--poll-interval", type=float, default=0.05)
    worker.add_argument("--owner-id", default=None)
    worker.add_argument(
        "--exit-when-idle", action="store_true", help="stop once no run is waiting to execute"
    )
    runs = commands.add_parser("runs", help="list the runs of a store")
    runs.add_argument("--store", default="sqlite:///.nbdurable/runs.db")
    runs.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "worker":
            return asyncio.run(_worker(args))
        return _runs(args)
    except NbdurableError as exc:
        print(f"nbdurable: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
