"""Agent ``steps`` in two versions, for workers that serve one version each.

``steps_v1`` and ``steps_v2`` answer with their own text, so a test sees which
version executed a run.
"""

from __future__ import annotations

import nbdurable as nd
from nbdurable.runtime import Agent

steps_v1 = [Agent("steps", nd.ScriptedModel(["steps v1 answered."]), version="1")]
steps_v2 = [Agent("steps", nd.ScriptedModel(["steps v2 answered."]), version="2")]
