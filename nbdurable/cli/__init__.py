"""The ``nbdurable`` command: a thin layer over the library.

- ``nbdurable worker --store URL --agents module:attr``: a headless runtime that
  executes queued and recovered runs (runs go on while a kernel restarts).
- ``nbdurable runs [list|graphs|show|history|explain|approvals|rewind] ...``: inspect a store.
- ``nbdurable runs approve|deny|respond|resume|cancel|retry RUN ...``: steer a run.
- ``nbdurable demo``: a durable run in the terminal: crash, recovery, approvals.
- ``nbdurable serve --store URL --agents module:attr``: the HTTP bridge (``server`` extra).
- ``nbdurable store check [URL]``: what is damaged in a store (exit 1 when something is).
- ``nbdurable store prune [URL] --older-than AGE``: delete finished runs.

Errors print one line, ``nbdurable: ...``, and exit with status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from .._errors import NbdurableError
from ._agents import load_agents
from ._logs import report_error
from ._store import STORE_HELP, default_store

__all__ = ["load_agents", "main"]

DESCRIPTION = """\
Durable, inspectable LLM agent runs, from a shell.

  nbdurable demo                         crash, recovery, approval: offline
  nbdurable runs [list|graphs|approvals] what is in a store, what waits
  nbdurable runs show|history|explain RUN
                                         one run: summary, steps, in words
  nbdurable runs approve|deny|respond|resume|cancel|retry|rewind|move RUN ...
                                         steer a run
  nbdurable worker --store URL --agents MODULE:ATTR
                                         execute queued and recovered runs
  nbdurable serve --store URL --agents MODULE:ATTR
                                         the HTTP bridge (runs, SSE, links)
  nbdurable store check [URL]            what is damaged, and where
  nbdurable store prune [URL] --older-than AGE
                                         delete finished runs

Store: --store URL, else $NBDURABLE_STORE, else sqlite:///.nbdurable/runs.db.
Errors print one line, "nbdurable: ...", and exit with status 2."""


def _option(flag: str, **options: Any) -> argparse.ArgumentParser:
    """A parent parser holding one option, accepted before and after a subcommand."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(flag, default=argparse.SUPPRESS, **options)
    return parent


STORE = _option("--store", metavar="URL", help=STORE_HELP)
JSON = _option("--json", action="store_true", help="print JSON instead of a table")
AGENTS_HELP = "module:attribute holding an Agent (or a list) to execute the run here (repeatable)"
AGENTS = _option("--agents", action="append", metavar="MODULE:ATTR", help=AGENTS_HELP)
TIMEOUT = _option("--timeout", type=float, metavar="SECONDS", help="stop waiting after this long")


def _sync(handler: Any) -> Any:
    return lambda args: asyncio.run(handler(args))


def _add_runs(commands: Any) -> None:
    from . import _approvals as approvals
    from . import _control as control
    from . import _runs as runs
    from ._engines import ENGINES

    status = _option("--status", metavar="S", help="only runs in this status")
    graph = _option("--graph", metavar="ID", help="only the nodes of this graph")
    parser = commands.add_parser(
        "runs", parents=[STORE, JSON, status, graph], help="inspect and steer the runs of a store"
    )
    parser.set_defaults(handler=runs.list_runs)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")

    def action(name: str, handler: Any, help_: str, *parents: argparse.ArgumentParser) -> Any:
        sub = actions.add_parser(name, parents=[STORE, *parents], help=help_, description=help_)
        sub.set_defaults(handler=handler)
        return sub

    action("list", runs.list_runs, "one line per run", JSON, status, graph)
    action("graphs", runs.graphs, "one line per graph", JSON)
    action("show", runs.show, "a run's summary and latest messages", JSON).add_argument("run")
    action("history", runs.history, "one line per checkpoint of a run", JSON).add_argument("run")
    action("explain", runs.explain, "what happened in a run, in words", JSON).add_argument("run")
    inbox = action(
        "approvals", approvals.list_approvals, "the approvals waiting for a verdict", JSON
    )
    inbox.add_argument("--all", action="store_true", help="every request, decided ones too")
    inbox.add_argument("--run", metavar="RUN", help="only this run's requests")
    for name, handler, help_ in (
        ("approve", control.approve, "approve a pending tool call (--arguments: edited)"),
        ("deny", control.deny, "deny a pending tool call"),
        ("respond", control.respond, "answer a pending tool call in place of the tool"),
    ):
        sub = action(name, _sync(handler), help_, AGENTS, TIMEOUT)
        sub.add_argument("run")
        sub.add_argument("approval_id", nargs="?", help="default: the only pending approval")
        sub.add_argument(
            "--as",
            dest="as_name",
            metavar="NAME",
            help="the name recorded as deciding (claimed, not authenticated; "
            "default: NBDURABLE_USER, else the OS user)",
        )
        if name == "deny":
            sub.add_argument("--reason", help="what the model is told")
        elif name == "respond":
            sub.add_argument(
                "--reply", required=True, metavar="TEXT", help="the call's result, not an error"
            )
        else:
            sub.add_argument(
                "--fresh",
                action="store_true",
                help="sign a fresh token when the request's own is past the maximum age",
            )
            kind = sub.add_mutually_exclusive_group()
            kind.add_argument(
                "--arguments",
                metavar="JSON",
                help="run the call with these arguments instead (a JSON object; the tool "
                "must allow edits, and they are checked against its schema)",
            )
            kind.add_argument(
                "--reply",
                metavar="TEXT",
                help="do not run the tool: answer the call with TEXT (as `runs respond`)",
            )
    resume = action("resume", _sync(control.resume), "execute a run here until it stops", TIMEOUT)
    resume.add_argument("run")
    resume.add_argument(
        "--agents", action="append", required=True, metavar="MODULE:ATTR", help=AGENTS_HELP
    )
    rewind = action("rewind", _sync(runs.rewind), "fork a new run from a step")
    rewind.add_argument("run")
    rewind.add_argument("step", type=int)
    rewind.add_argument("--run-id", help="the new run's id (default: generated)")
    edits = rewind.add_mutually_exclusive_group()
    edits.add_argument("--edit-user", metavar="TEXT", help="replace the last (user) message")
    edits.add_argument(
        "--edit-tool-result", metavar="TEXT", help="replace the last tool message's result"
    )
    action("cancel", _sync(control.cancel), "cancel a run").add_argument("run")
    retry = action(
        "retry", _sync(control.retry), "let a failed or needs_attention run go on", AGENTS, TIMEOUT
    )
    retry.add_argument("run")
    late = retry.add_mutually_exclusive_group()
    late.add_argument(
        "--use-late-result",
        action="store_true",
        help="settle the interrupted call with the result it already gave on a worker "
        "that had lost the run (its late result), instead of running it again",
    )
    late.add_argument(
        "--rerun",
        action="store_true",
        help="run the interrupted call again even though it already ran late once",
    )
    move = action(
        "move", _sync(control.move), "hand runs that no one executes now to another engine"
    )
    move.add_argument("run", nargs="+")
    move.add_argument("--engine", required=True, choices=list(ENGINES))


def _add_demo(commands: Any) -> None:
    from ._demo import demo
    from ._engines import ENGINES, engine_help

    parser = commands.add_parser(
        "demo", help="a durable run in the terminal: crash, recovery, approval, denial"
    )
    parser.add_argument("--yes", action="store_true", help="approve without asking")
    parser.add_argument("--store", default=None, help="store URL (default: a fresh temp SQLite)")
    with_demo = [name for name, entry in ENGINES.items() if entry.demo is not None]
    parser.add_argument(
        "--engine",
        choices=with_demo,
        default=with_demo[0],
        help=f"where the run executes: {engine_help(with_demo)}",
    )
    parser.set_defaults(handler=demo)


def _parser() -> argparse.ArgumentParser:
    from . import _serve as serve
    from . import _store_check as store_check
    from . import _worker as worker

    parser = argparse.ArgumentParser(
        prog="nbdurable",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    worker.add_parser(commands)
    serve.add_parser(commands)
    _add_runs(commands)
    _add_demo(commands)
    store_check.add_parser(commands)
    return parser


def _defaults(args: argparse.Namespace) -> None:
    for name, value in (
        ("store", default_store()),
        ("json", False),
        ("status", None),
        ("graph", None),
        ("agents", None),
        ("timeout", None),
    ):
        if not hasattr(args, name):
            setattr(args, name, value)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    _defaults(args)
    try:
        return int(args.handler(args))
    except NbdurableError as exc:
        report_error(f"nbdurable: {_one_line(exc)}")
        return 2
    except BrokenPipeError:  # `nbdurable runs | head`: the reader has gone, not an error
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        report_error("nbdurable: interrupted")
        return 130
    except Exception as exc:  # never a traceback on the terminal, unless asked for
        if os.environ.get("NBDURABLE_DEBUG"):
            raise
        report_error(
            f"nbdurable: {type(exc).__name__}: {_one_line(exc)} (NBDURABLE_DEBUG=1 shows where)"
        )
        return 2
