"""An agent's origin is remembered between submissions, and follows its module's changes.

``Agent.origin`` scans the namespace of the module that built the agent for the
attribute holding it; each submission asks again (issue 42: the scan ran at
every submit). An attribute found is remembered with the namespace's size: a
name added or removed, or that attribute rebound, scans again.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

import nbdurable as nd
from nbdurable.runtime import Agent
from nbdurable.runtime._origin import Birthplace


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    made = types.ModuleType("nbdurable_origin_probe")
    sys.modules[made.__name__] = made
    yield made
    del sys.modules[made.__name__]


def _agent(module: types.ModuleType) -> Agent:
    agent = Agent("probe", nd.ScriptedModel(["ok"]), version="1")
    object.__setattr__(agent, "_birthplace", Birthplace(module.__name__, "probe.py", 3))
    return agent


def test_the_origin_follows_the_attribute_that_holds_the_agent(module: types.ModuleType) -> None:
    agent = _agent(module)
    assert agent.origin == "probe.py, line 3"  # not assigned yet: the file and line
    module.janitor = agent  # type: ignore[attr-defined]  # a name added: scanned again
    assert agent.origin == "nbdurable_origin_probe:janitor"
    assert agent.origin == "nbdurable_origin_probe:janitor"  # remembered
    module.janitor = None  # type: ignore[attr-defined]  # rebound, same size
    module.AGENTS = [agent]  # type: ignore[attr-defined]
    assert agent.origin == "nbdurable_origin_probe:AGENTS"
    module.AGENTS = []  # type: ignore[attr-defined]  # the remembered list no longer holds it
    assert agent.origin == "probe.py, line 3"
    module.AGENTS = {"probe": agent}  # type: ignore[attr-defined]  # bound again, same size
    assert agent.origin == "nbdurable_origin_probe:AGENTS"
