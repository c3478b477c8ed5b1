"""Agent ``steps`` in two versions, for workers that serve one version each.

``steps_v1`` and ``steps_v2`` answer with their own text, so a test sees which
version executed a run.
"""

from __future__ import annotations

import nbdurable as nd
from nbdurable.runtime import Agent

steps_v1 = [Agent("steps", nd.ScriptedModel(["steps v1 answered."]), version="1")]
steps_v2 = [Agent("steps", nd.ScriptedModel(["steps v2 answered."]), version="2")]


async def _tally(ctx: nd.TaskContext, state: object) -> object:
    """Version 1's only phase."""
    return {"tallied_by": "v1"}


async def _tally_v2(ctx: nd.TaskContext, state: object) -> object:
    """Version 2's only phase."""
    return {"tallied_by": "v2"}


tally_v1 = [nd.define_task("tally", _tally, version="1")]
tally_v2 = [nd.define_task("tally", _tally_v2, version="2")]
