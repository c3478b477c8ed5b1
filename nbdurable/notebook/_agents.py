"""Agents a notebook defines: found in the user namespace, registered with clear messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._errors import ConfigurationError, DurableConflictError
from ..runs import RuntimeRun
from ..runtime._agent import Agent
from ..runtime._origin import import_agent

__all__ = ["agent_named", "agents_in", "next_version", "register", "run_agent"]


def agent_named(namespace: Mapping[str, Any], name: str) -> Agent:
    """The :class:`~nbdurable.Agent` a notebook variable holds.

    Raises:
        ConfigurationError: No such variable, or it holds something else.
    """
    if name not in namespace:
        raise ConfigurationError(
            f"no variable {name!r} in this notebook: define it first, e.g. "
            f"{name} = nd.Agent({name!r}, model, tools, version='1')"
        )
    value = namespace[name]
    if not isinstance(value, Agent):
        raise ConfigurationError(f"{name!r} is a {type(value).__name__}, not an nbdurable.Agent")
    return value


def agents_in(namespace: Mapping[str, Any]) -> list[Agent]:
    """Every agent the notebook's variables hold (one per id and version)."""
    found: dict[tuple[str, str], Agent] = {}
    for name, value in namespace.items():
        if not name.startswith("_") and isinstance(value, Agent):
            found.setdefault((value.id, str(value.version)), value)
    return list(found.values())


def next_version(version: str) -> str:
    """A suggestion for the next version: ``'1'`` -> ``'2'``, ``'v1'`` -> ``'v1.1'``."""
    return str(int(version) + 1) if version.isdigit() else f"{version}.1"


def register(runtime: Any, agent: Agent) -> Agent:
    """Register ``agent``; an unchanged re-definition reuses its registration.

    Raises:
        ConfigurationError: An invalid agent.
        DurableConflictError: The agent changed but kept its version.
    """
    if not isinstance(agent, Agent):
        raise ConfigurationError(f"not an nbdurable.Agent: {agent!r}")
    try:
        runtime.register_agents([agent])
    except DurableConflictError:
        version = str(agent.version)
        raise DurableConflictError(
            f"agent {agent.id!r} changed since version {version!r} was registered in this "
            f"kernel: bump version= in its cell (e.g. version={next_version(version)!r}) "
            "and run the cell again"
        ) from None
    return agent


def run_agent(
    runtime: Any, record: RuntimeRun, namespace: Mapping[str, Any], *, imports: bool = False
) -> Agent | None:
    """The agent that executes ``record``: registered, in the namespace, or imported.

    With ``imports``, from the module its run records it was defined in
    (``module:attribute``): ``%durable resume`` does, a verdict does not (the run
    may belong to a worker that serves it).
    Runs resume under the version they were submitted under, so after a kernel
    restart re-running the agent's defining cell (or nothing, for an agent defined
    in a module) is enough.

    Returns:
        The registered agent, or None when neither the runtime, the notebook nor the
        recorded module has it.

    Raises:
        ConfigurationError: The recorded module cannot be imported or lacks the attribute.
    """
    known: Agent | None = runtime.registry.get(record.agent_id, record.agent_version)
    if known is not None:
        return known
    for agent in agents_in(namespace):
        if agent.id == record.agent_id and str(agent.version) == record.agent_version:
            return register(runtime, agent)
    # not in the notebook: the module its runs say it was defined in, when they name one
    if not imports:
        return None
    imported = import_agent(record.agent_origin, record.agent_id, record.agent_version)
    return None if imported is None else register(runtime, imported)
