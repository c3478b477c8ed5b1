"""``--agents module:attr`` and ``--tasks module:attr``: import what a command serves.

The module is looked up in the working directory first, then on ``sys.path``,
as ``python -m`` and uvicorn do: ``nbdurable worker --agents mymodule:agents``
works from the folder that holds ``mymodule.py``, whichever way the command
was started (the ``nbdurable`` console script does not put that folder on the
path by itself).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from .._errors import ConfigurationError

__all__ = ["load_agents", "load_all", "load_tasks", "resolve"]


def _working_directory_on_path() -> None:
    here = os.getcwd()
    if not any(os.path.abspath(entry or os.curdir) == here for entry in sys.path):
        sys.path.insert(0, here)


def resolve(spec: str, option: str) -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted).

    Raises:
        ConfigurationError: Not ``module:attr``, or it cannot be imported or found.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"{option} takes module:attribute, not {spec!r}")
    _working_directory_on_path()
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import {module_name!r}: {exc} "
            f"(looked in the working directory {os.getcwd()} and on sys.path)"
        ) from exc
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ConfigurationError(f"{module_name!r} has no attribute {attr!r}")
        value = getattr(value, part)
    return value


def load_agents(spec: str) -> list[Any]:
    """Import ``module:attr``: an Agent, a list of Agents, or a callable returning either.

    Raises:
        ConfigurationError: The spec cannot be imported or holds no agents.
    """
    from ..runtime._agent import Agent

    value = resolve(spec, "--agents")
    if callable(value) and not isinstance(value, Agent):
        value = value()
    agents = [value] if isinstance(value, Agent) else list(value)
    if not agents or not all(isinstance(a, Agent) for a in agents):
        raise ConfigurationError(f"{spec!r} holds no Agent (or list of Agents)")
    return agents


def load_all(specs: Sequence[str] | None) -> list[Any]:
    """The agents of every ``--agents`` spec, in order."""
    agents: list[Any] = []
    for spec in specs or ():
        agents.extend(load_agents(spec))
    return agents


def load_tasks(specs: Sequence[str] | None) -> list[Any]:
    """The task definitions of every ``--tasks module:attr`` spec, in order.

    Raises:
        ConfigurationError: A spec cannot be imported or holds no task.
    """
    from ..runtime._tasks import TaskDefinition

    tasks: list[Any] = []
    for spec in specs or ():
        value = resolve(spec, "--tasks")
        found = [value] if isinstance(value, TaskDefinition) else list(value)
        if not found or not all(isinstance(t, TaskDefinition) for t in found):
            raise ConfigurationError(f"{spec!r} holds no task (or list of tasks)")
        tasks.extend(found)
    return tasks
