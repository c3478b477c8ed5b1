"""Runs on Temporal (the ``temporal`` extra): the same step machine, workers anywhere.

``TemporalEngine`` plugs into :class:`~nbdurable.DurableRuntime` as its engine:
submitting a run starts a Temporal workflow whose id is the run id.
``nbdurable worker --engine temporal`` serves the workflows and their activities
(agent runs, graph nodes among them, and custom tasks).
Checkpoints, events and run records are mirrored into the nbdurable store by
the activities, so inspection, the widget, reconnect by offset and replay work
unchanged. Importing ``nbdurable`` never imports this package (nor temporalio).
"""

from __future__ import annotations

from ._config import TemporalConfig
from ._connection import TemporalConnection, TemporalConnectionError
from ._engine import TemporalEngine
from ._worker import (
    TASK_WORKFLOW_NAME,
    WORKFLOW_NAME,
    build_definition_workers,
    build_worker,
    serve,
)

__all__ = [
    "TASK_WORKFLOW_NAME",
    "WORKFLOW_NAME",
    "TemporalConfig",
    "TemporalConnection",
    "TemporalConnectionError",
    "TemporalEngine",
    "build_definition_workers",
    "build_worker",
    "serve",
]
