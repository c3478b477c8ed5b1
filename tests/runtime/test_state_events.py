"""The run_state events of a claim: a claim writes the ``pending`` a promotion left to it."""

from __future__ import annotations

from typing import Any

import pytest

from nbdurable.events._model import RUN_STATE, NewEvent
from nbdurable.messages import ToolApprovalResponse
from nbdurable.runs import RunPatch, RuntimeRun
from nbdurable.runtime import DurableRuntime
from nbdurable.runtime._state_events import claim_event, unclaimed_event

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


async def test_a_claim_that_overtakes_a_verdicts_pending_writes_it_and_the_verdict_adds_none(
    store: Any,
) -> None:
    """A decider records the verdict, then appends its ``pending``; a runtime woken by
    the record may claim in between (seen on PostgreSQL). The claim, whose record
    carries the verdict, writes the ``pending``; the decider's append, fenced by the
    record it decided on, is refused: never ``running`` before ``pending``, nor after."""
    waiting = node(graph_id=None, node_id=None, run_id="r1", state="waiting_approval", fence=1)
    store.rt_insert(waiting, enqueue=False, max_pending=10)
    last = {"state": "waiting_approval", "reason": None, "next_attempt_at": None}
    store.append_events("r1", [NewEvent(type=RUN_STATE, created_at=NOW, payload=last)])
    verdict = ToolApprovalResponse(approval_id="a1", approved=True)
    decided = store.rt_update("r1", RunPatch(state="pending", verdicts={"a1": verdict}))
    async with await DurableRuntime.open(store=store) as rt:
        claim = RunPatch(state="running", fence=2, lease_owner=rt.owner_id)
        claim_event(rt, store.rt_update("r1", claim))  # the claim came first
        unclaimed_event(rt, decided)  # the decider's append, late
    assert await states_of(store, "r1") == ["waiting_approval", "pending", "running"]
