"""The old store files' agents registered without streaming, for a Restate endpoint subprocess.

Their current fingerprints differ from the runs' old-scheme digests, and their
old-scheme digests (recomputed with a run's own ``stream``) match: what
``tests/restate/test_restate_legacy_fingerprints.py`` routes by.
"""

from __future__ import annotations

from stores.fixtures import store_agents

from nbdurable.runtime import Agent

agents = [
    Agent(a.id, a.model, a.tools, a.instructions, a.version, stream=False)
    for a in store_agents.agents
]
