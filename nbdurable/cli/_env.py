"""Flags from the environment: ``NBDURABLE_<FLAG>`` for every flag of a command.

:func:`read_env` is applied to a subcommand's parser once all its flags are added
(``nbdurable worker`` and ``nbdurable serve``). Each long flag ``--some-flag`` can
then also come from ``NBDURABLE_SOME_FLAG`` (a few flags keep an older or clearer
name, see :data:`RENAMED`). A flag on the command line wins over its variable; a
repeatable flag takes a comma-separated list; an on/off flag takes
``1/0/true/false/yes/no``. A bad value stops the command with an error naming the
variable.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import ConfigurationError

__all__ = ["PREFIX", "RENAMED", "env_name", "env_variables", "read_env", "resolve_env"]

PREFIX = "NBDURABLE_"

RENAMED = {
    "--address": "NBDURABLE_TEMPORAL_ADDRESS",
    "--token": "NBDURABLE_SERVER_TOKEN",
}
"""Flags whose variable is not ``NBDURABLE_`` + the flag's name."""

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def env_name(flag: str) -> str:
    """The environment variable of a long flag: ``--task-queue`` -> ``NBDURABLE_TASK_QUEUE``."""
    return RENAMED.get(flag) or PREFIX + flag.lstrip("-").upper().replace("-", "_")


def _long_flag(action: argparse.Action) -> str | None:
    """The action's first ``--`` flag (None: a positional, ``--help`` or a counting flag)."""
    if action.nargs == 0 and not isinstance(action.const, bool):
        return None  # --help, --version, store_const and count take no value to read
    return next((flag for flag in action.option_strings if flag.startswith("--")), None)


def _repeatable(parser: argparse.ArgumentParser, action: argparse.Action) -> bool:
    """Whether each use of the flag adds to a list (``action="append"``, ``"extend"``)."""
    if action.nargs == 0:
        return False
    # Actions are callables taking parsed values: two calls on a scratch namespace
    # show whether the second replaces or adds to the first.
    scratch = argparse.Namespace()
    action(parser, scratch, "a")
    action(parser, scratch, "b")
    return (
        isinstance(getattr(scratch, action.dest, None), list)
        and len(getattr(scratch, action.dest)) > 1
    )


def env_variables(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """``(flag, variable)`` of every flag of ``parser`` that the environment can set."""
    pairs = []
    for action in parser._actions:
        flag = _long_flag(action)
        if flag is not None:
            pairs.append((flag, env_name(flag)))
    return pairs


class _FromEnv:
    """The default of a flag whose variable is set, read once the command line is parsed.

    A repeatable flag given on the command line starts from a copy of its default;
    the copy of this marker is an empty list, so the flag's own values replace the
    variable's instead of adding to them.
    """

    def __init__(self, variable: str, action: argparse.Action, repeatable: bool) -> None:
        self.variable = variable
        self.action = action
        self.repeatable = repeatable
        self.required = action.required

    def __copy__(self) -> list[Any]:
        return []

    def __repr__(self) -> str:
        return f"${self.variable}"


def _boolean(variable: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(
        f"{variable}={raw!r} is not a yes or no: use one of 1, 0, true, false, yes, no"
    )


def _one(variable: str, action: argparse.Action, raw: str) -> Any:
    """One value of ``action`` from the text ``raw``, converted and checked as the flag's."""
    flag = _long_flag(action)
    convert: Callable[[str], Any] = action.type if callable(action.type) else str
    try:
        value = convert(raw)
    except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
        kind = getattr(action.type, "__name__", "value")
        raise ConfigurationError(
            f"{variable}={raw!r} is not a valid {kind} for {flag} ({exc})"
        ) from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(str(choice) for choice in action.choices)
        raise ConfigurationError(f"{variable}={raw!r} is not one of {choices} (for {flag})")
    return value


def _value(marker: _FromEnv) -> Any:
    """The flag's value from its variable."""
    variable, action = marker.variable, marker.action
    raw = os.environ.get(variable, "")
    if marker.required and not raw.strip(" ,"):
        raise ConfigurationError(f"{variable} is empty: set it, or give {_long_flag(action)}")
    if action.nargs == 0:  # store_true, store_false: the variable says whether it is given
        return action.const if _boolean(variable, raw) else not action.const
    if marker.repeatable:
        items = [item.strip() for item in raw.split(",") if item.strip()]
        return [_one(variable, action, item) for item in items]
    return _one(variable, action, raw)


def resolve_env(args: argparse.Namespace) -> argparse.Namespace:
    """Replace the defaults taken from the environment with their converted values."""
    for name, value in vars(args).items():
        if isinstance(value, _FromEnv):
            setattr(args, name, _value(value))
    return args


def read_env(parser: argparse.ArgumentParser, *, skip: Sequence[str] = ()) -> None:
    """Let each long flag of ``parser`` (but those in ``skip``) come from its variable.

    Call it after the parser's last ``add_argument`` and ``set_defaults(handler=...)``:
    the handler is wrapped to read the variables (those set when the parser was
    built) after the command line is parsed, so a bad value is reported like any
    other error of the command.
    """
    for action in parser._actions:
        flag = _long_flag(action)
        if flag is None or flag in skip:
            continue
        variable = env_name(flag)
        note = f"[env {variable}]"
        action.help = f"{action.help} {note}" if action.help else note
        if os.environ.get(variable) is None:
            continue
        action.default = _FromEnv(variable, action, _repeatable(parser, action))
        action.required = False
    handler = parser.get_default("handler")
    if handler is not None:
        parser.set_defaults(handler=lambda args: handler(resolve_env(args)))
