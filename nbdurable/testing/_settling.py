"""Conformance: the write that finishes a graph node settles its dependents and says who did.

Two dependencies that finish in the same millisecond (a fixed clock, or two
fast runs) are told apart by ``settled_by``: only the one whose write settled
the dependent writes its state event, whatever order the finishers read the
graph in afterwards.
"""

from __future__ import annotations

from typing import Any

import pytest

from nbdurable.runs import RunPatch, RuntimeRun
from nbdurable.runtime._state_events import settled_nodes

from ._fixtures import NOW, new_run


def node(run_id: str, state: str = "pending", **fields: Any) -> RuntimeRun:
    return new_run(
        f"g:{run_id}", session_id=f"s-{run_id}", state=state, graph_id="g", node_id=run_id, **fields
    )


def diamond(store: Any) -> None:
    """Left and right, pending; join waits for both; after waits for join."""
    store.rt_insert_many(
        [
            node("left"),
            node("right"),
            node("join", "queued", depends_on=["g:left", "g:right"]),
            node("after", "queued", depends_on=["g:join"]),
        ],
        max_pending=100,
    )


@pytest.mark.parametrize("last", ["left", "right"])
def test_only_the_last_dependency_to_finish_settles_a_node_in_the_same_millisecond(
    runtime_store: Any, last: str
) -> None:
    diamond(runtime_store)
    first = "right" if last == "left" else "left"
    at = NOW + 7
    done_first = runtime_store.rt_update(f"g:{first}", RunPatch(state="completed", updated_at=at))
    done_last = runtime_store.rt_update(f"g:{last}", RunPatch(state="completed", updated_at=at))
    graph = runtime_store.rt_graph("g")
    join = next(run for run in graph if run.node_id == "join")
    assert join.state == "pending" and join.updated_at == at
    assert join.settled_by == f"g:{last}"
    # both finishers read the graph after both writes: one of them claims join
    assert settled_nodes(graph, done_first) == []
    assert [run.run_id for run in settled_nodes(graph, done_last)] == ["g:join"]


def test_a_node_claimed_in_the_same_millisecond_is_left_to_its_claimer(
    runtime_store: Any,
) -> None:
    """The finisher reads the graph after a worker claimed the node it settled.

    The node's state is the claim's now, and its claim writes the missing ``pending``.
    """
    diamond(runtime_store)
    at = NOW + 5
    runtime_store.rt_update("g:left", RunPatch(state="completed", updated_at=at))
    done = runtime_store.rt_update("g:right", RunPatch(state="completed", updated_at=at))
    claim = RunPatch(state="running", lease_owner="w", fence=1, updated_at=at)
    runtime_store.rt_update("g:join", claim)
    graph = runtime_store.rt_graph("g")
    assert next(run for run in graph if run.node_id == "join").settled_by == "g:right"
    assert settled_nodes(graph, done) == []


def test_a_failure_cascade_is_settled_by_the_node_that_failed(runtime_store: Any) -> None:
    diamond(runtime_store)
    at = NOW + 9
    ok = runtime_store.rt_update("g:left", RunPatch(state="completed", updated_at=at))
    failed = runtime_store.rt_update("g:right", RunPatch(state="failed", updated_at=at))
    graph = runtime_store.rt_graph("g")
    states = {run.node_id: (run.state, run.settled_by) for run in graph}
    assert states["join"] == ("failed", "g:right") and states["after"] == ("failed", "g:right")
    assert settled_nodes(graph, ok) == []
    assert [run.node_id for run in settled_nodes(graph, failed)] == ["join", "after"]


def test_a_record_without_settled_by_is_attributed_by_its_time() -> None:
    """Records a store settled its own way (no ``settled_by``) keep the older rule."""
    done = node("left", "completed", updated_at=NOW + 3)
    join = node("join", "pending", depends_on=["g:left"], updated_at=NOW + 3)
    stale = node("after", "pending", depends_on=["g:join"], updated_at=NOW + 1)
    assert settled_nodes([done, join, stale], done) == [join]
