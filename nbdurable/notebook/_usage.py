"""The magics' arguments: parsers that report mistakes as a short usage message."""

from __future__ import annotations

import argparse
import keyword
import shlex
from typing import Any, NoReturn

__all__ = ["AGENT_PARSER", "COMMANDS", "DURABLE_PARSER", "HelpShown", "UsageError", "parse"]


class UsageError(Exception):
    """Wrong or missing arguments: the message is the usage line and what was wrong."""


class HelpShown(Exception):
    """``--help`` printed the help; nothing else to do."""


def _wide(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=100)


class _Parser(argparse.ArgumentParser):
    """An argument parser that raises instead of exiting the kernel.

    Usage lines wrap at 100 columns (a notebook's output has no terminal width).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _wide)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.format_usage().rstrip()}\n{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            raise UsageError(message.rstrip())
        raise HelpShown


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


_positive.__name__ = "positive integer"  # argparse names the type in its message


def _variable(text: str) -> str:
    if not text.isidentifier() or keyword.iskeyword(text):
        raise ValueError(text)
    return text


_variable.__name__ = "variable name"


def _agent_parser() -> _Parser:
    parser = _Parser(
        prog="%%agent",
        description="Run AGENT (an nbdurable.Agent variable) on the cell's text as the prompt, "
        "in this kernel's runtime; the live run widget shows it and the cell returns at once.",
    )
    parser.add_argument("agent", metavar="AGENT", help="the variable holding the Agent")
    parser.add_argument("--run-id", metavar="ID", help="the run's id (default: generated)")
    parser.add_argument(
        "--as",
        dest="name",
        metavar="VAR",
        type=_variable,
        help="also keep the run's handle (an nbdurable Run) in the notebook variable VAR",
    )
    parser.add_argument(
        "--session", metavar="S", help="the runtime session: its runs go one after another"
    )
    parser.add_argument("--max-steps", metavar="N", type=_positive, help="this run's step budget")
    parser.add_argument(
        "--enqueue",
        action="store_true",
        help="queue behind an unfinished run of the session instead of refusing",
    )
    parser.add_argument(
        "--new",
        action="store_true",
        help="start a fresh run even when this cell's earlier run is unfinished "
        "(by default re-running the cell re-attaches to that run)",
    )
    return parser


_COMMANDS: list[tuple[str, str, list[tuple[tuple[str, ...], dict[str, Any]]]]] = [
    ("store", "show the store, or switch to URL", [(("url",), {"metavar": "URL", "nargs": "?"})]),
    (
        "runs",
        "every run of the store (a compact DataFrame; --all: every column); "
        "--graph ID: that graph's nodes",
        [
            (("--status",), {"metavar": "S"}),
            (("--graph",), {"metavar": "ID"}),
            (("--all",), {"action": "store_true"}),
        ],
    ),
    ("graphs", "every graph of the store, one row per graph (a DataFrame)", []),
    ("show", "display a run's live widget (replays its events, then follows)", []),
    (
        "history",
        "a run's checkpoints (a DataFrame); --browse shows the history browser",
        [(("--browse",), {"action": "store_true"})],
    ),
    ("explain", "why a run is where it is, and what moves it on", []),
    (
        "approvals",
        "the approvals waiting for a verdict, across every run (a DataFrame); "
        "--all: decided ones too; --run RUN: one run's",
        [
            (("--all",), {"action": "store_true"}),
            (("--run",), {"metavar": "RUN"}),
        ],
    ),
    (
        "approve",
        "approve a pending tool call (--deny [--reason R] denies it; --arguments JSON runs "
        "it with edited arguments; --reply TEXT answers it in place of the tool)",
        [
            (("approval_id",), {"metavar": "APPROVAL_ID", "nargs": "?"}),
            (("--deny",), {"action": "store_true"}),
            (("--reason",), {"metavar": "R"}),
            (("--fresh",), {"action": "store_true"}),
            (("--arguments",), {"metavar": "JSON"}),
            (("--reply",), {"metavar": "TEXT"}),
        ],
    ),
    (
        "grant",
        "approve every call of TOOL in the run for --minutes (default 30), optionally only "
        "calls whose arguments match: --match name=GLOB, name^=PREFIX or name==VALUE",
        [
            (("tool",), {"metavar": "TOOL"}),
            (("--minutes",), {"metavar": "N", "type": float}),
            (("--match",), {"metavar": "RULE", "action": "append", "default": []}),
            (("--agent",), {"metavar": "PATH"}),
        ],
    ),
    ("revoke", "revoke a standing approval of the run", [(("grant_id",), {"metavar": "GRANT_ID"})]),
    ("resume", "let an unfinished run go on in this kernel (after its agent cell ran)", []),
    (
        "rewind",
        "fork a new run from a step, optionally replacing its last message",
        [
            (("step",), {"metavar": "STEP", "type": int}),
            (("--run-id",), {"metavar": "NEW"}),
            (("--edit",), {"metavar": "TEXT"}),
        ],
    ),
    ("cancel", "cancel a run", []),
    (
        "retry",
        "let a failed or needs_attention run go on (--use-late-result settles an interrupted "
        "call with the result it gave late; --rerun runs it again anyway)",
        [
            (("--use-late-result",), {"action": "store_true"}),
            (("--rerun",), {"action": "store_true"}),
        ],
    ),
    (
        "settle",
        "settle a needs_attention run's interrupted call as denied (--reason R: what the "
        "model sees) and let the run go on",
        [(("--reason",), {"metavar": "R"})],
    ),
    ("worker", "execute queued and recovered runs of the notebook's agents here", []),
    ("dashboard", "display the runs dashboard", []),
]
"""Each subcommand of ``%durable``: name, help, arguments after RUN (when it takes one)."""

_NO_RUN = frozenset({"store", "runs", "graphs", "approvals", "worker", "dashboard"})


def _durable_parser() -> _Parser:
    parser = _Parser(
        prog="%durable",
        description="Inspect and steer the durable runs of this kernel's store.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, text, arguments in _COMMANDS:
        sub = commands.add_parser(name, help=text, description=text)
        if name not in _NO_RUN:
            sub.add_argument("run", metavar="RUN", help="the run id")
        for flags, options in arguments:
            sub.add_argument(*flags, **options)
    return parser


AGENT_PARSER = _agent_parser()
DURABLE_PARSER = _durable_parser()
COMMANDS = [name for name, _, _ in _COMMANDS]


def parse(parser: argparse.ArgumentParser, line: str) -> argparse.Namespace:
    """Parse a magic's line (shell-like quoting: ``--edit "Keep every table."``).

    Raises:
        UsageError: Wrong or missing arguments (or unbalanced quotes).
        HelpShown: ``--help`` was asked for and printed.
    """
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{parser.format_usage().rstrip()}\n{parser.prog}: {exc}") from None
    return parser.parse_args(words)
