"""Tracing on in an embedded `nbdurable worker` subprocess: its spans appended as JSON lines.

Given to `nbdurable worker` as ``--agents support.embedded_traced:agents``:
importing it calls ``nbdurable.instrument()`` with a provider whose exporter
appends every finished span to the file NBDURABLE_TEST_SPANS names, as each span
ends (the worker may be SIGKILLed). It serves the agents of
tests/support/runtime_agents.py.
"""

from __future__ import annotations

from support.runtime_agents import agents
from support.tracing_harness import instrument_from_env

__all__ = ["agents"]

instrument_from_env()
