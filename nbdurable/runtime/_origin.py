"""Where an agent definition came from, recorded on its runs so a new kernel can find it.

A run outlives the process that submitted it; to resume it elsewhere, someone
must provide its agent again. The record says where the definition lives, in
one of three forms:

- ``module:attribute``: an agent importable from a module (``reports.agents:janitor``,
  or ``reports.agents:AGENTS`` for an agent inside a list or dict there): exactly
  what ``nbdurable worker --agents`` takes, and what :func:`import_agent` loads;
- ``notebook NAME.ipynb, cell [N]``: defined in a notebook cell (the name when
  the Jupyter server says it, the cell's execution count);
- ``PATH, line N``: anything else (a script, or a factory function).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["Birthplace", "OriginMemo", "agent_origin", "birthplace", "import_agent", "importable"]

_SELF = str(Path(__file__).parent.parent) + os.sep  # frames inside nbdurable are not the caller's


@dataclass(frozen=True)
class Birthplace:
    """The code that constructed an agent: its module, file and line, and the cell if any."""

    module: str
    path: str
    line: int
    cell: int | None = None
    notebook: str | None = None


def birthplace() -> Birthplace | None:
    """The first caller's frame outside nbdurable (and a dataclass's generated ``__init__``)."""
    frame: FrameType | None = inspect.currentframe()
    while frame is not None and (
        frame.f_code.co_filename.startswith(_SELF) or frame.f_code.co_filename == "<string>"
    ):
        frame = frame.f_back
    if frame is None:
        return None
    module = str(frame.f_globals.get("__name__", "?"))
    cell = notebook = None
    if module == "__main__" and "get_ipython" in frame.f_globals:
        shell = frame.f_globals["get_ipython"]()
        cell = getattr(shell, "execution_count", None)
        # set by jupyter_server for each kernel it starts: the notebook's path
        name = os.environ.get("JPY_SESSION_NAME")
        notebook = Path(name).name if name else None
    return Birthplace(module, frame.f_code.co_filename, frame.f_lineno, cell, notebook)


@dataclass
class OriginMemo:
    """The module attribute an agent was last found in, and its namespace as it was then.

    Kept by the agent (one each) so that :func:`agent_origin` need not scan the
    namespace at every submission (issue 42).
    """

    namespace_id: int = 0
    """The namespace's ``id`` (no reference to the module's contents is kept)."""
    size: int = -1
    """How many names it held."""
    name: str = ""
    """The attribute that held the agent."""


def agent_origin(
    agent: Agent, place: Birthplace | None, memo: OriginMemo | None = None
) -> str | None:
    """The origin line recorded on the agent's runs (see the module docstring).

    ``memo`` (the agent's own) remembers the attribute found between calls.
    """
    if place is None:
        return None
    if place.module != "__main__":
        attribute = _attribute_holding(sys.modules.get(place.module), agent, memo or OriginMemo())
        if attribute is not None:
            return f"{place.module}:{attribute}"
    if place.cell is not None:
        where = f"notebook {place.notebook}" if place.notebook else "a notebook"
        return f"{where}, cell [{place.cell}]"
    return f"{place.path}, line {place.line}"


def _attribute_holding(module: Any, agent: Agent, memo: OriginMemo) -> str | None:
    """The module attribute that is the agent, or a list/tuple/dict that holds it.

    Asked at every submission: an attribute found is remembered in ``memo``
    with the namespace's size, and the scan of the namespace (a Python loop over
    every name: 25 µs for 50 names) is made again only once the size changed (a
    name added or removed) or that attribute no longer holds the agent. None is
    not remembered: a name may be bound to the agent later without any added.
    """
    if module is None:
        return None
    namespace: Mapping[str, Any] = vars(module)
    same = memo.namespace_id == id(namespace) and memo.size == len(namespace)
    if same and _holds(namespace.get(memo.name), agent):
        return memo.name
    name = _scan(namespace, agent)
    if name is not None:
        memo.namespace_id, memo.size, memo.name = id(namespace), len(namespace), name
    return name


def _holds(value: Any, agent: Agent) -> bool:
    """Whether ``value`` is the agent, or a list/tuple/dict that holds it."""
    if value is agent:
        return True
    held = value.values() if isinstance(value, Mapping) else value
    return isinstance(value, (list, tuple, Mapping)) and any(v is agent for v in held)


def _scan(namespace: Mapping[str, Any], agent: Agent) -> str | None:
    """The first attribute that is the agent, else the first container holding it."""
    for name, value in namespace.items():
        if value is agent:
            return name
    for name, value in namespace.items():
        held = value.values() if isinstance(value, Mapping) else value
        if isinstance(value, (list, tuple, Mapping)) and any(v is agent for v in held):
            return name
    return None


def importable(origin: str | None) -> tuple[str, str] | None:
    """``(module, attribute)`` of an origin that names them, else None."""
    if not origin or " " in origin:
        return None
    module, _, attribute = origin.partition(":")
    return (module, attribute) if module and attribute else None


def import_agent(origin: str | None, agent_id: str, version: str) -> Agent | None:
    """The agent ``(agent_id, version)`` imported from a ``module:attribute`` origin.

    The module is imported as the kernel or process would import it (its
    ``sys.path``, the working directory first). None when the origin names no
    module, or what it holds is another agent or version.

    Raises:
        ConfigurationError: The module cannot be imported or lacks the attribute.
    """
    from ._agent import Agent

    found = importable(origin)
    if found is None:
        return None
    module_name, attribute = found
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load the agent from {origin}: {exc}") from exc
    held = value.values() if isinstance(value, Mapping) else value
    candidates = [value] if isinstance(value, Agent) else list(held)
    for agent in candidates:
        if isinstance(agent, Agent) and agent.id == agent_id and str(agent.version) == version:
            return agent
    return None
