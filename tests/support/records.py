"""Run records the store and runtime tests insert by hand: a pending run, fields as given."""

from __future__ import annotations

from typing import Any

from nbdurable.runs import RuntimeRun


def pending_run(
    run_id: str = "r1", *, at: int = 1, agent_id: str = "a", prompt: str = '"hi"', **fields: Any
) -> RuntimeRun:
    """A ``pending`` record of ``agent_id`` v1 created and updated at ``at`` (epoch ms).

    ``fields``: any other field of :class:`~nbdurable.runs.RuntimeRun`.
    """
    return RuntimeRun(
        run_id=run_id,
        agent_id=agent_id,
        agent_version="1",
        session_id=f"s-{run_id}",
        prompt=prompt,
        state="pending",
        created_at=at,
        updated_at=at,
        **fields,
    )
