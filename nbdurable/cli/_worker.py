"""``nbdurable worker``: a headless runtime executing queued and recovered runs."""

from __future__ import annotations

import argparse
import asyncio
import math
import signal
from typing import Any

from .._aio import wait_event
from ..durable._offload import offload
from ..durable._transient import DEFAULT_STORE_RETRY_MS, StoreRetry, StoreUnavailableError
from ..runs import BUSY_STATES, EMBEDDED
from ..runtime._limits import DEFAULT_MAX_CONCURRENT_RUNS, Limits
from ._agents import load_all, load_tasks
from ._engines import ENGINES, WorkerSetup, engine_help
from ._env import read_env
from ._logs import add_log_options, announce, configure_logging
from ._notify_options import add_notify_options, notifier_from_args
from ._probes import add_probe_options, start_probes

__all__ = ["DEFAULT_DRAIN_SECONDS", "add_parser", "serve_embedded", "worker"]

DEFAULT_DRAIN_SECONDS = 25.0
"""How long a stopping worker lets its calls in flight finish (Kubernetes waits 30 s)."""

CLOSE_STORE_SECONDS = 3.0
"""After the drain, how long a stopping worker's last writes wait for a store that fails.

Handing runs back and releasing leases are given up then (the runs stay as
stored, their leases lapse and another worker continues them), so a worker
stops within about ``--drain-seconds`` plus this, whatever ``--store-retry-ms``.
"""


def add_parser(commands: Any) -> None:
    """Add the ``worker`` command to the subcommands ``commands``."""
    worker_ = commands.add_parser("worker", help="execute queued and recovered runs")
    worker_.add_argument("--store", required=True, help="store URL, e.g. sqlite:///runs.db")
    worker_.add_argument(
        "--agents",
        required=True,
        action="append",
        help="module:attribute holding an Agent or a list of Agents",
    )
    worker_.add_argument(
        "--tasks",
        action="append",
        help="module:attribute holding a task (nbdurable.define_task) or a list of tasks",
    )
    worker_.add_argument(
        "--engine", choices=list(ENGINES), default=EMBEDDED, help=engine_help(list(ENGINES))
    )
    for entry in ENGINES.values():
        entry.add_options(worker_)
    worker_.add_argument("--max-concurrent-runs", type=int, default=DEFAULT_MAX_CONCURRENT_RUNS)
    worker_.add_argument("--max-concurrent-tasks", type=int, default=4)
    worker_.add_argument("--lease-ms", type=int, default=30_000)
    worker_.add_argument(
        "--store-retry-ms",
        type=int,
        default=DEFAULT_STORE_RETRY_MS,
        help="how long store calls failing for connection-level reasons are retried before "
        "the worker stops (default 60000)",
    )
    worker_.add_argument(
        "--max-operations", type=int, default=None, help="model + tool calls allowed per run"
    )
    worker_.add_argument(
        "--max-payload-bytes", type=int, default=None, help="largest checkpoint or delta"
    )
    worker_.add_argument("--poll-interval", type=float, default=0.05)
    worker_.add_argument("--owner-id", default=None)
    worker_.add_argument(
        "--exit-when-idle", action="store_true", help="stop once no run is waiting to execute"
    )
    worker_.add_argument(
        "--drain-seconds",
        type=seconds,
        default=DEFAULT_DRAIN_SECONDS,
        help="on SIGTERM or SIGINT, stop claiming and let the model and tool calls in flight "
        "finish for up to this long before handing the rest back; a second signal exits at "
        "once (default 25, inside Kubernetes' default 30 s grace period)",
    )
    add_notify_options(worker_, public_url=True)
    add_probe_options(worker_)
    add_log_options(worker_)
    worker_.set_defaults(handler=lambda args: asyncio.run(worker(args)))
    read_env(worker_)  # last: every flag above can come from NBDURABLE_<FLAG>


def seconds(text: str) -> float:
    """A duration in seconds: a finite number, 0 or more."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 0 or more")
    return value


def _on_signals(stop: asyncio.Event, hurry: asyncio.Event) -> asyncio.Event:
    """SIGTERM or SIGINT sets ``stop`` (a drain begins), a second one ``hurry``.

    Returns:
        Set once a signal came (not by a fatal error's ``stop``).
    """
    signalled = asyncio.Event()

    def on_signal() -> None:
        if signalled.is_set():
            hurry.set()
        signalled.set()
        stop.set()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    return signalled


def _off_signals() -> None:
    """Remove the handlers :func:`_on_signals` added.

    A loop left holding them (a caller's, in tests) would try to reset them
    from whichever thread collects it, and fail there.
    """
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(signum)


async def _give_up_on(hurry: asyncio.Event, retry: StoreRetry) -> None:
    """Once a second signal came, stop every store retry: the worker exits at once."""
    await hurry.wait()
    retry.give_up_within(0.0)


def _limits(args: argparse.Namespace) -> Limits:
    """The runtime limits the flags set (defaults for the others)."""
    given = {
        "max_operations": args.max_operations,
        "max_payload_bytes": args.max_payload_bytes,
    }
    return Limits(**{name: value for name, value in given.items() if value is not None})


async def worker(args: argparse.Namespace) -> int:
    """Serve the agents until SIGTERM or SIGINT (or idleness with ``--exit-when-idle``)."""
    from ..stores import missing_path, open_store

    entry = ENGINES[getattr(args, "engine", EMBEDDED)]
    entry.require("nbdurable worker")
    configure_logging(getattr(args, "log_level", "info"), getattr(args, "log_format", "text"))
    agents = load_all(args.agents)
    notifier = notifier_from_args(args)
    new = " (a new store, created now)" if missing_path(args.store) is not None else ""
    store = open_store(args.store)
    limits = _limits(args)
    probes = await start_probes(args, store)
    tasks = load_tasks(args.tasks)
    setup = WorkerSetup(args, store, agents, tasks, limits, notifier, probes, new)
    return await entry.serve(setup)


async def serve_embedded(setup: WorkerSetup) -> int:
    """The embedded engine's worker: this process claims and executes runs."""
    from ..runtime._runtime import DurableRuntime

    args, store, probes = setup.args, setup.store, setup.probes
    stop, hurry = asyncio.Event(), asyncio.Event()
    signalled = _on_signals(stop, hurry)
    fatal: list[BaseException] = []

    def on_fatal_error(exc: BaseException) -> None:
        # The runtime stopped taking work (the store stayed unavailable past
        # --store-retry-ms): exit, so a supervisor starts a fresh worker.
        fatal.append(exc)
        stop.set()

    try:
        runtime = await DurableRuntime.open(
            store=store,
            agents=setup.agents,
            tasks=setup.tasks,
            max_concurrent_runs=args.max_concurrent_runs,
            max_concurrent_tasks=args.max_concurrent_tasks,
            limits=setup.limits,
            lease_ms=args.lease_ms,
            owner_id=args.owner_id,
            poll_interval=args.poll_interval,
            store_retry_ms=getattr(args, "store_retry_ms", DEFAULT_STORE_RETRY_MS),
            on_fatal_error=on_fatal_error,
            record_mirror=False,  # a worker makes no synchronous reads: no mirror to keep
            notify=setup.notify,
        )
    except BaseException:
        _off_signals()
        raise
    served = f"{len(setup.agents)} agent(s) from {args.store}{setup.new}"
    announce(f"nbdurable worker {runtime.owner_id} serving {served}")
    hurried = asyncio.get_running_loop().create_task(_give_up_on(hurry, runtime.store_retry))
    try:
        busy = sorted(BUSY_STATES)
        while not (args.exit_when_idle and not await offload(runtime.list_runs, busy)):
            # Wake at least every poll interval to notice idleness; a signal wakes at once.
            if await wait_event(stop, args.poll_interval):
                break
    except StoreUnavailableError as exc:
        fatal.append(exc)
    finally:
        drain = getattr(args, "drain_seconds", DEFAULT_DRAIN_SECONDS)
        if signalled.is_set():
            # A stopping worker is killed after its grace period: no store call
            # may go on retrying (60 s by default) past the drain and the close.
            runtime.store_retry.give_up_within(drain + CLOSE_STORE_SECONDS)
        if probes is not None:
            await probes.close()
        if signalled.is_set() and not fatal:  # the engine seam drains (the embedded one here)
            announce(f"nbdurable worker draining (up to {drain:g} s)")
            await runtime.engine.drain(drain, hurry)
        if signalled.is_set():
            runtime.store_retry.give_up_within(CLOSE_STORE_SECONDS)
        await runtime.close()  # what is still in flight is abandoned cleanly, leases released
        hurried.cancel()
        store.close()
        _off_signals()
    if fatal:
        raise fatal[0]  # one line on stderr, exit status 2; its runs wait for another worker
    return 0
