"""Tracing on in a Temporal worker subprocess: its spans appended as JSON lines.

Given to `nbdurable worker --engine temporal` as a second ``--agents`` module:
importing it calls ``nbdurable.instrument()`` with a provider whose exporter
appends every finished span to the file NBDURABLE_TEST_SPANS names (as each
span ends: the worker exits with ``os._exit``, and may be SIGKILLed).
"""

from __future__ import annotations

import nbdurable as nd
from nbdurable.runtime import Agent
from support.tracing_harness import JsonLinesExporter, instrument_from_env, read_spans

__all__ = ["JsonLinesExporter", "agents", "read_spans"]

instrument_from_env()

agents = [Agent("traced-echo", nd.ScriptedModel(["ok"]), version="1")]
