"""``--agents module:attr``: import the agents a command serves."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from .._errors import ConfigurationError

__all__ = ["load_agents", "load_all", "load_tasks"]


def load_agents(spec: str) -> list[Any]:
    """Import ``module:attr``: an Agent, a list of Agents, or a callable returning either.

    Raises:
        ConfigurationError: The spec cannot be imported or holds no agents.
    """
    from ..runtime.agent import Agent

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
    from ..runtime.tasks import TaskDefinition

    tasks: list[Any] = []
    for spec in specs or ():
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise ConfigurationError(f"--tasks takes module:attribute, not {spec!r}")
        try:
            value: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
        for part in attr.split("."):
            if not hasattr(value, part):
                raise ConfigurationError(f"{module_name!r} has no attribute {attr!r}")
            value = getattr(value, part)
        found = [value] if isinstance(value, TaskDefinition) else list(value)
        if not found or not all(isinstance(t, TaskDefinition) for t in found):
            raise ConfigurationError(f"{spec!r} holds no task (or list of tasks)")
        tasks.extend(found)
    return tasks
