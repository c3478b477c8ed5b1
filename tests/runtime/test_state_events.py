"""The run_state events of a claim: a claim writes the ``pending`` a promotion left to it."""

from __future__ import annotations

from typing import Any

import pytest

from nbdurable.events._model import RUN_STATE, NewEvent
from nbdurable.runs import RunPatch, RuntimeRun
from nbdurable.runtime import DurableRuntime
from nbdurable.runtime._state_events import claim_event

from .conftest import states_of

NOW = 1_800_000_000_000


def node(**fields: Any) -> RuntimeRun:
    values: dict[str, Any] = {
        "run_id": "g:join",
        "agent_id": "a",
        "agent_version": "1",
        "session_id": "s-join",
        "prompt": '"hi"',
        "state": "queued",
        "created_at": NOW,
        "updated_at": NOW,
        "graph_id": "g",
        "node_id": "join",
    }
    return RuntimeRun(**{**values, **fields})


@pytest.mark.parametrize(
    ("graph_id", "fence", "logged", "expected"),
    [
        ("g", 2, "queued", ["queued", "pending", "running"]),  # a graph node run again
        (None, 2, "queued", ["queued", "running"]),  # a later claim of a plain run reads no log
        (None, 1, "queued", ["queued", "pending", "running"]),  # a first claim
        # a node paused by a failed dependency, settled to pending by its retry
        ("g", 1, "needs_attention", ["needs_attention", "pending", "running"]),
    ],
)
async def test_a_claim_writes_the_pending_a_graph_node_promotion_left_to_it(
    store: Any, graph_id: str | None, fence: int, logged: str, expected: list[str]
) -> None:
    """A node retried back to ``queued`` and promoted again may be claimed in the
    millisecond of its promotion, before its finisher looked: the finisher leaves
    the node to its claimer, whose claim writes ``pending`` first."""
    store.rt_insert(node(graph_id=graph_id), enqueue=False, max_pending=10)
    last = {"state": logged, "reason": None, "next_attempt_at": None}
    store.append_events("g:join", [NewEvent(type=RUN_STATE, created_at=NOW, payload=last)])
    async with await DurableRuntime.open(store=store) as rt:
        claim = RunPatch(state="running", fence=fence, lease_owner=rt.owner_id)
        claim_event(rt, store.rt_update("g:join", claim))  # as the claim left it
    assert await states_of(store, "g:join") == expected
