"""Another definition of :mod:`history_agents`' ``echo`` v1, for the hand-back recording.

Its model answers differently, so its fingerprint differs: a worker serving it
hands the runs of ``history_agents``' ``echo`` back. Frozen with the recording
(``echo-4.nbdurable-definition-queues.json``), like :mod:`history_agents`.
"""

from __future__ import annotations

import nbdurable as nd
from nbdurable.runtime import Agent

agents = [Agent("echo", nd.ScriptedModel(["another echo"] * 1000, mode="sequential"), version="1")]
