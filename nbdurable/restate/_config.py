"""The engine's name and what a leg's invocation carries."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ..runs import RESTATE

__all__ = ["RESTATE", "RUN_OBJECT", "TASK_OBJECT", "RestateConfig", "run_service", "task_service"]

RUN_OBJECT = "nbdurable.Run"
"""The virtual objects' name prefix: one object per definition, keyed by run id."""
TASK_OBJECT = "nbdurable.Task"
"""The task objects' name prefix: one object per task version, keyed by run id."""


def run_service(agent_id: str, version: str, fingerprint: str | None) -> str:
    """The virtual object that runs legs of this agent definition (version-aware routing).

    An endpoint registers one per definition it serves, so Restate itself sends
    a run only to an endpoint serving its definition: a run recorded without a
    fingerprint (before fingerprints) goes to any endpoint serving its version.
    """
    key = json.dumps([agent_id, version, fingerprint or ""], separators=(",", ":"))
    return f"{RUN_OBJECT}_{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def task_service(name: str, version: str) -> str:
    """The virtual object that runs this custom task version's runs (version-aware routing)."""
    key = json.dumps([name, version], separators=(",", ":"))
    return f"{TASK_OBJECT}_{hashlib.sha256(key.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class RestateConfig:
    """What the dispatcher hands a leg's invocation.

    Attributes:
        tool_retries: Attempts of a ``safe`` or ``idempotent`` tool step after
            its endpoint was lost (a ``manual`` one: one attempt, then the run
            needs attention).
    """

    tool_retries: int = 5
