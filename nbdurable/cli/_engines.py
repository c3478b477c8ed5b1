"""The engines of the command line, in one place: every ``--engine`` asks :data:`ENGINES`.

One :class:`EngineEntry` per engine: its name (what a run records as its
``engine``), the extra that installs it (a clear one-line error when absent),
its worker's options, how its worker serves, and its demo. ``nbdurable worker
--engine``, ``nbdurable demo --engine`` and ``nbdurable runs move --engine``
take their choices here; no other CLI module lists the engines. An entry
imports its framework only when used: ``import nbdurable`` and ``nbdurable
--help`` import neither temporalio nor the Restate SDK. A new engine is one
entry here (and its package).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._extras import require
from ..runs import EMBEDDED, RESTATE, TEMPORAL
from ._logs import announce

if TYPE_CHECKING:
    from ..runtime._agent import Agent
    from ..runtime._limits import Limits
    from ..runtime._notify import Notifier
    from ..runtime._tasks import TaskDefinition
    from ..temporal._connection import TemporalConnection
    from ._probes import Probes

__all__ = ["ENGINES", "EngineEntry", "WorkerSetup", "connection_from_args", "engine_help"]


@dataclass(frozen=True)
class WorkerSetup:
    """What ``nbdurable worker`` prepared, whichever engine serves.

    Attributes:
        args: The parsed command line (the engine's own options among them).
        store: The opened store.
        agents: The agents it serves.
        tasks: The custom tasks it serves.
        limits: The runtime limits of the runs it executes.
        notify: Who is told when a run starts waiting on a human.
        probes: The ``--metrics-port`` routes, if any.
        new: `` (a new store, created now)`` when the store did not exist, else empty.
    """

    args: argparse.Namespace
    store: Any
    agents: Sequence[Agent]
    tasks: Sequence[TaskDefinition]
    limits: Limits
    notify: Notifier | None
    probes: Probes | None
    new: str

    def common(self) -> dict[str, Any]:
        """The keywords every external engine's ``serve`` takes."""
        return {
            "store": self.store,
            "agents": self.agents,
            "tasks": self.tasks,
            "limits": self.limits,
            "drain_seconds": self.args.drain_seconds,
            "notify": self.notify,
            "say": announce,
        }


@dataclass(frozen=True)
class EngineEntry:
    """One engine as the command line knows it.

    Attributes:
        name: What ``--engine`` takes and a run records as its ``engine``.
        help: What its worker is, in a few words (``--engine``'s help).
        serve: Serves a worker of the engine until it stops; the exit status.
        extra: The extra installing its framework (None: nothing to install).
        add_options: Adds its worker's options to ``nbdurable worker``.
        demo: ``demo(store_url, assume_yes)``, its ``nbdurable demo``; None: none.
    """

    name: str
    help: str
    serve: Callable[[WorkerSetup], Awaitable[int]]
    extra: str | None = None
    add_options: Callable[[Any], None] = lambda parser: None
    demo: Callable[[str | None, bool], int] | None = None

    def require(self, command: str) -> None:
        """Stop ``command`` with one line naming the extra when it is not installed.

        Raises:
            ConfigurationError: The engine's extra is missing.
        """
        if self.extra is not None:
            require(self.extra, f"{command} --engine {self.name}")


def _lazy(module: str, name: str) -> Any:
    """``module.name``, imported when first called: an engine loads only when used."""
    return lambda *args: getattr(importlib.import_module(module, __package__), name)(*args)


def _exit_now(code: int) -> None:
    """Exit with ``code`` after flushing, skipping the interpreter's teardown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def task_queue(text: str) -> str:
    """A task queue's name: not empty (a worker would poll the queue ``""``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a task queue's name is not empty")
    return text


def _temporal_options(parser: Any) -> None:
    """The Temporal frontend, queue, namespace, deployment and the connection's security."""
    parser.add_argument("--address", default="127.0.0.1:7233", help="Temporal frontend")
    parser.add_argument(
        "--task-queue", type=task_queue, default="nbdurable", help="Temporal task queue"
    )
    parser.add_argument("--namespace", default="default", help="Temporal namespace")
    parser.add_argument(
        "--deployment",
        default=None,
        help="Temporal Worker Deployment this worker declares a version of (its build id "
        "derived from the nbdurable code and the definitions it serves): runs stay on the "
        "release they started on, a new release's worker becomes the current version",
    )
    parser.add_argument("--tls-ca", metavar="PEM", help="CA of the Temporal server (turns TLS on)")
    parser.add_argument("--tls-cert", metavar="PEM", help="client certificate (mutual TLS)")
    parser.add_argument("--tls-key", metavar="PEM", help="client private key (mutual TLS)")
    parser.add_argument(
        "--tls-server-name", metavar="NAME", help="name the server certificate is checked against"
    )
    parser.add_argument(
        "--api-key", metavar="KEY", help="Temporal Cloud API key (turns TLS on; prefer the env)"
    )


def connection_from_args(args: argparse.Namespace) -> TemporalConnection:
    """The connection options the flags give (TLS, API key)."""
    from ..temporal._connection import TemporalConnection

    names = ("tls_ca", "tls_cert", "tls_key", "tls_server_name", "api_key")
    return TemporalConnection(**{name: getattr(args, name, None) for name in names})


async def _serve_temporal(setup: WorkerSetup) -> int:
    from ..temporal._worker import serve

    args = setup.args
    code = await serve(
        **setup.common(),
        probe=setup.probes.probe if setup.probes is not None else None,
        address=args.address,
        task_queue=args.task_queue,
        namespace=args.namespace,
        connection=connection_from_args(args),
        deployment=args.deployment,
        ready=f"nbdurable worker (temporal) polling {args.task_queue} at {args.address}{setup.new}",
    )
    # The worker has shut down and the store is closed. Skip interpreter
    # teardown: temporalio's Rust threads may still hold Python thread states
    # then, which aborts the process (SIGABRT, temporalio/sdk-python#300).
    _exit_now(code)
    return code


def _restate_options(parser: Any) -> None:
    """The Restate server's URLs and where the endpoint listens."""
    parser.add_argument(
        "--ingress", default="http://127.0.0.1:8080", help="Restate ingress URL (--engine restate)"
    )
    parser.add_argument(
        "--admin", default="http://127.0.0.1:9070", help="Restate admin API URL (--engine restate)"
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:0",
        help="where the Restate endpoint binds, host:port (port 0: a free one)",
    )
    parser.add_argument(
        "--advertise",
        default=None,
        help="the URL the Restate server reaches the endpoint at (default: http://LISTEN)",
    )


async def _serve_restate(setup: WorkerSetup) -> int:
    from ..restate._worker import serve

    args = setup.args
    code = await serve(
        **setup.common(),
        ingress=args.ingress,
        admin=args.admin,
        listen=args.listen,
        advertise=args.advertise,
        ready=f"nbdurable worker (restate) serving {{uri}} for {args.admin}{setup.new}",
    )
    # Legs cut by the exit are Restate's to invoke again: no interpreter teardown
    # waits on their connections (Hypercorn's h2 streams log errors then).
    _exit_now(code)
    return code


ENGINES: dict[str, EngineEntry] = {
    entry.name: entry
    for entry in (
        EngineEntry(
            EMBEDDED,
            "this process claims runs",
            _lazy("._worker", "serve_embedded"),
            demo=_lazy("._demo", "demo_embedded"),
        ),
        EngineEntry(
            TEMPORAL,
            "a Temporal worker",
            _serve_temporal,
            extra="temporal",
            add_options=_temporal_options,
        ),
        EngineEntry(
            RESTATE,
            "a Restate SDK endpoint",
            _serve_restate,
            extra="restate",
            add_options=_restate_options,
            demo=_lazy("._demo_restate", "demo_restate"),
        ),
    )
}
"""Every engine the command line runs, by name (the default, ``embedded``, first)."""


def engine_help(names: Sequence[str]) -> str:
    """``--engine``'s help: each of ``names`` and what its worker is."""
    each = [f"{name} ({ENGINES[name].help})" for name in names]
    return ", ".join(each[:-1]) + f" or {each[-1]}" if len(each) > 1 else each[0]
