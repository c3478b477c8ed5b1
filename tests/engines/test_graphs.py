"""Every engine: graph nodes are agent runs the store settles; a node starts with its
dependencies' results, a failed node fails or pauses its dependents."""

from __future__ import annotations

import asyncio

import pytest
from support.executions import run_states
from support.temporal_tasks import counted

import nbdurable as nd
from nbdurable.runtime import GraphNode, RunFailedError

from .conftest import EngineCase


async def test_a_dag_appends_dependency_results_and_goes_on_without_a_client(
    engine: EngineCase,
) -> None:
    """Two roots and a node depending on both: the client submits and goes away; the
    workers start the promoted node, whose prompt carries its dependencies' results."""
    store = engine.store
    engine.worker()
    nodes = [
        GraphNode("a", "echo", "alpha"),
        GraphNode("b", "echo", "beta"),
        GraphNode("c", "echo", "gamma", depends_on=["a", "b"]),
    ]
    async with engine.client() as client:
        await client.submit_graph(nodes, graph_id="g1")
    watcher = engine.reader()  # never opened: it only reads the store
    graph = watcher.graph("g1")
    results = await asyncio.wait_for(graph.result(), 60)
    assert results["a"].text == "echo(alpha)"
    assert results["c"].text.startswith("echo(gamma")
    assert "Result of a:\necho(alpha)" in results["c"].text
    assert "Result of b:\necho(beta)" in results["c"].text
    assert run_states(store, "g1:c") == ["queued", "pending", "running", "completed"]
    assert set(counted(engine.tools, "model").values()) == {1}
    frame = nd.inspect.runs(store)
    assert frame.loc["g1:c", "graph_status"] == "completed"
    assert frame.loc["g1:c", "depends_on"] == "a, b"
    assert {r.state for r in watcher.list_runs()} == {"completed"}


async def test_a_failed_node_fails_its_dependents_in_cascade(engine: EngineCase) -> None:
    """on_dependency_failure='fail' (the default): a failed node fails its dependents
    and theirs (reason dependency_failed); independent nodes go on; the graph is failed."""
    store, broken = engine.store, engine.tools.parent / "broken.txt"
    broken.write_text("root\n")
    engine.worker(NBDURABLE_TEST_BROKEN=str(broken))
    async with engine.client() as rt:
        graph = await rt.submit_graph(
            [
                GraphNode("root", "echo", "root"),
                GraphNode("child", "echo", "child", depends_on=["root"]),
                GraphNode("grandchild", "echo", "grandchild", depends_on=["child"]),
                GraphNode("other", "echo", "other"),
            ],
            graph_id="g2",
        )
        assert await asyncio.wait_for(graph.wait(), 60) == "failed"
        with pytest.raises(RunFailedError) as failed:
            await graph.result()
        assert failed.value.run_id == "g2:root"
        records = {r.node_id: r for r in graph.records()}
    assert (records["root"].state, records["root"].reason) == ("failed", "model_error")
    for node in ("child", "grandchild"):
        assert (records[node].state, records[node].reason) == ("failed", "dependency_failed")
    assert records["child"].error == "dependency 'root' failed"
    assert records["other"].state == "completed"
    assert not [k for k in counted(engine.tools, "model") if k.startswith(("child", "grand"))]
    assert run_states(store, "g2:child") == ["queued", "failed"]


async def test_a_paused_dependent_goes_on_once_the_failed_dependency_is_retried(
    engine: EngineCase,
) -> None:
    """on_dependency_failure='pause': the dependent waits in needs_attention (the
    graph too); retrying the failed dependency lets it complete, then the dependent
    starts with its result."""
    store, broken = engine.store, engine.tools.parent / "broken.txt"
    broken.write_text("flaky\n")
    engine.worker(NBDURABLE_TEST_BROKEN=str(broken))
    async with engine.client() as rt:
        graph = await rt.submit_graph(
            [
                GraphNode("flaky", "echo", "flaky"),
                GraphNode(
                    "after", "echo", "after", depends_on=["flaky"], on_dependency_failure="pause"
                ),
                GraphNode("last", "echo", "last", depends_on=["after"]),
            ],
            graph_id="g3",
        )
        assert await asyncio.wait_for(graph.wait("needs_attention"), 60) == "needs_attention"
        after = graph.node("after").record()
        assert (after.state, after.reason) == ("needs_attention", "dependency_failed")
        assert graph.node("last").status == "queued"
        paused = nd.inspect.explain(store, "g3:after")
        assert paused.summary.startswith("Paused") and "g3:flaky" in paused.actions[0]
        queued = nd.inspect.explain(store, "g3:last")
        assert queued.summary == "Queued in graph g3: waiting for after."
        broken.unlink()
        await graph.node("flaky").retry()
        results = await asyncio.wait_for(graph.result(), 60)
        assert graph.status == "completed"
    assert results["flaky"].text == "echo(flaky)"
    assert "Result of flaky:\necho(flaky)" in results["after"].text
    assert "Result of after:\necho(after" in results["last"].text
    # Its pending state is written after the graph settles, by the finisher or, when a
    # worker in another process claims the node first, by the claim (seen once in CI).
    assert run_states(store, "g3:after") == [
        "queued",
        "needs_attention",
        "pending",
        "running",
        "completed",
    ]
