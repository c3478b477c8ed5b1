"""A ``%%agent`` cell's run, found again when the cell runs again.

Re-running a cell after a kernel restart is what people do to get their view back.
If that submitted a second run, the first (waiting for an approval, say) would be
orphaned. So every run a cell submits carries the cell's key in its request id
(``cell:<key>:<unique>``), and re-running the cell re-attaches to its unfinished
run instead; ``%%agent AGENT --new`` starts a fresh one on purpose. A finished run
is never re-attached: running the cell again then starts a new run, as before.

The key is a hash of the agent's id and version, the session, the prompt and,
when the front end sends it (JupyterLab, Notebook 7, nbclient), the cell's id: the
same cell with the same text finds its run; another cell, or an edited prompt,
does not.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .._deps import new_id
from ..durable.store import RunStore
from ..runs import UNFINISHED_STATES, RuntimeRun

__all__ = [
    "CELL_PREFIX",
    "cell_key",
    "cell_request_id",
    "front_end_cell_id",
    "unfinished_run_of",
]

CELL_PREFIX = "cell:"
"""How the request id of a run submitted by a ``%%agent`` cell starts."""


def cell_key(
    agent_id: str, version: str, prompt: str, session_id: str | None, cell_id: str | None
) -> str:
    """The identity of a ``%%agent`` cell's submission (a short hash)."""
    parts = [agent_id, version, session_id or "", prompt, cell_id or ""]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def cell_request_id(key: str) -> str:
    """A fresh request id for a run of the cell ``key`` (unique: never deduplicated)."""
    return f"{CELL_PREFIX}{key}:{new_id()[:12]}"


def unfinished_run_of(store: object, key: str) -> RuntimeRun | None:
    """The latest unfinished run the cell ``key`` submitted, if any."""
    if not isinstance(store, RunStore):
        return None
    prefix = f"{CELL_PREFIX}{key}:"
    found = [
        r
        for r in store.rt_list(sorted(UNFINISHED_STATES))
        if r.request_id is not None and r.request_id.startswith(prefix)
    ]
    return found[-1] if found else None


def front_end_cell_id(shell: Any) -> str | None:
    """The id of the cell being executed, when the front end sent one."""
    header = getattr(shell, "parent_header", None)
    if not isinstance(header, dict):
        return None
    metadata = header.get("metadata")
    cell_id = metadata.get("cellId") if isinstance(metadata, dict) else None
    return cell_id if isinstance(cell_id, str) and cell_id else None
