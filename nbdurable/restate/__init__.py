"""Runs on Restate (the ``restate`` extra): the same step machine, endpoints anywhere.

``RestateEngine`` plugs into :class:`~nbdurable.DurableRuntime` as its engine:
submitting a run invokes the ``leg`` handler of a Restate virtual object whose
key is the run id. ``nbdurable worker --engine restate`` serves those handlers
as an SDK endpoint and registers its deployment with the server. Each model
call and tool call is a journaled step (``ctx.run``); checkpoints, events and
run records are mirrored into the nbdurable store by the steps, so inspection,
the widget, reconnect by offset and replay work unchanged. Importing
``nbdurable`` never imports this package (nor the Restate SDK).
"""

from __future__ import annotations

from ._config import RESTATE
from ._devserver import RestateServer
from ._engine import RestateEngine
from ._errors import RestateDeploymentError, RestateUnavailableError

__all__ = [
    "RESTATE",
    "RestateDeploymentError",
    "RestateEngine",
    "RestateServer",
    "RestateUnavailableError",
]
