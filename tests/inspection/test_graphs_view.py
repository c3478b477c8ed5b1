"""``inspect.graphs``: one row per graph, folded from the runs view, on every store.

The graphs are real: submitted to an embedded ``DurableRuntime`` whose agents run
on the ScriptedModel; next to them sit a runtime run and a loop-API run that are
no graph's nodes.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

import nbdurable as nd
from nbdurable import inspect as ins
from nbdurable.inspect._frame import InspectFrame
from nbdurable.models._base import ModelRequest

from .conftest import drop_table, make_run

PRICE = (3.0, 15.0)


def _answer(request: ModelRequest) -> nd.Turn:
    """``[prompt]``; a prompt starting with "broken" makes the model raise."""
    first = next(m for m in request.messages if m.role == "user")
    head = first.text.split()[0]
    if head == "broken":
        raise RuntimeError("the model broke")
    return nd.Turn(text=f"[{head}]")


def _agents() -> list[nd.Agent]:
    writer = nd.Agent("writer", nd.ScriptedModel([_answer], price_per_million=PRICE), version="1")
    janitor = nd.Agent(
        "janitor",
        nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), "Dropped."]),
        [drop_table],
        version="1",
    )
    return [writer, janitor]


async def build(store: Any) -> None:
    """Runs ``solo`` and ``loop-1`` (no graph), then graphs ``done``, ``broken``, ``gated``.

    - ``done``: fetch and clean, then report after both: completed;
    - ``broken``: root fails, child and grandchild fail after it (cascade), other
      completes: failed;
    - ``gated``: gate waits for approval, after is queued behind it, side completes.
    """
    await make_run(store, "loop-1")
    async with await nd.DurableRuntime.open(
        store=store, agents=_agents(), poll_interval=0.01
    ) as runtime:
        solo = await runtime.submit("writer", "solo", run_id="solo")
        await solo.wait()
        done = await runtime.submit_graph(
            [
                nd.GraphNode("fetch", "writer", "fetch"),
                nd.GraphNode("clean", "writer", "clean"),
                nd.GraphNode("report", "writer", "report", depends_on=["fetch", "clean"]),
            ],
            graph_id="done",
        )
        assert await done.wait() == "completed"
        broken = await runtime.submit_graph(
            [
                nd.GraphNode("root", "writer", "broken root"),
                nd.GraphNode("child", "writer", "child", depends_on=["root"]),
                nd.GraphNode("grandchild", "writer", "grandchild", depends_on=["child"]),
                nd.GraphNode("other", "writer", "other"),
            ],
            graph_id="broken",
        )
        assert await broken.wait() == "failed"
        gated = await runtime.submit_graph(
            [
                nd.GraphNode("gate", "janitor", "Drop stg."),
                nd.GraphNode("after", "writer", "after", depends_on=["gate"]),
                nd.GraphNode("side", "writer", "side"),
            ],
            graph_id="gated",
        )
        await gated.node("side").wait()
        assert await gated.wait("waiting_approval") == "waiting_approval"


async def test_one_typed_row_per_graph_folded_from_the_runs_view(runs_store: Any) -> None:
    await build(runs_store)
    frame = ins.graphs(runs_store)
    runs = ins.runs(runs_store)

    assert frame.index.name == "graph_id"
    assert list(frame.index) == ["done", "broken", "gated"]
    assert list(frame.columns) == [
        "status",
        "nodes",
        "completed",
        "running",
        "queued",
        "waiting",
        "failed",
        "cancelled",
        "total_tokens",
        "cost",
        "submitted_at",
        "finished_at",
        "failed_nodes",
    ]
    assert isinstance(frame["status"].dtype, pd.CategoricalDtype)
    assert list(frame["status"].cat.categories)[:6] == [
        "running",
        "waiting_approval",
        "needs_attention",
        "completed",
        "failed",
        "cancelled",
    ]
    assert str(frame["nodes"].dtype) == "Int64" and str(frame["cost"].dtype) == "Float64"
    for column in ("submitted_at", "finished_at"):
        assert isinstance(frame[column].dtype, pd.DatetimeTZDtype)
        assert str(frame[column].dtype.tz) == "UTC"

    counts = ["nodes", "completed", "running", "queued", "waiting", "failed", "cancelled"]
    assert frame.loc["done", counts].tolist() == [3, 3, 0, 0, 0, 0, 0]
    assert frame.loc["broken", counts].tolist() == [4, 1, 0, 0, 0, 3, 0]
    assert frame.loc["gated", counts].tolist() == [3, 1, 0, 1, 1, 0, 0]
    assert frame["status"].tolist() == ["completed", "failed", "waiting_approval"]
    assert frame.loc["broken", "failed_nodes"] == "root, child, grandchild"
    assert frame.loc["done", "failed_nodes"] == ""

    for graph_id in frame.index:
        nodes = runs[runs["graph_id"] == graph_id]
        row = frame.loc[graph_id]
        assert row["total_tokens"] == nodes["total_tokens"].sum() > 0
        assert row["submitted_at"] == nodes["created_at"].min()
    done = runs[runs["graph_id"] == "done"]
    assert frame.loc["done", "cost"] == pytest.approx(done["cost"].sum())
    assert frame.loc["done", "finished_at"] == done["updated_at"].max()
    assert frame.loc["broken", "finished_at"] >= frame.loc["broken", "submitted_at"]
    assert pd.isna(frame.loc["gated", "finished_at"])
    # Only the writer has a price: the janitor's gate adds tokens, not cost.
    gated = runs[runs["graph_id"] == "gated"]
    assert frame.loc["gated", "cost"] == pytest.approx(gated["cost"].sum())


async def test_runs_of_one_graph_come_in_topological_order(runs_store: Any) -> None:
    await build(runs_store)
    nodes = ins.runs(runs_store, graph="broken")
    # The order submit_graph wrote them in: each wave of ready nodes in the given order.
    assert nodes["node_id"].tolist() == ["root", "other", "child", "grandchild"]
    assert list(nodes.index) == [f"broken:{node}" for node in nodes["node_id"]]
    failed = ins.runs(runs_store, status="failed", graph="broken")
    assert list(failed.index) == ["broken:root", "broken:child", "broken:grandchild"]
    assert ins.runs(runs_store, graph="nope").empty
    assert set(ins.runs(runs_store).index) >= {"solo", "loop-1", "done:report", "gated:gate"}


async def test_a_store_without_graphs_gives_an_empty_typed_frame(any_store: Any) -> None:
    await make_run(any_store, "r1")
    frame = ins.graphs(any_store)
    assert frame.empty and frame.index.name == "graph_id"
    assert isinstance(frame["status"].dtype, pd.CategoricalDtype)
    assert str(frame["nodes"].dtype) == "Int64"
    assert isinstance(frame["finished_at"].dtype, pd.DatetimeTZDtype)


async def test_graphs_accepts_a_url_and_renders_one_line_rows(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = nd.open_store(url)
    try:
        await build(store)
    finally:
        store.close()
    frame = ins.graphs(url)
    assert list(frame.index) == ["done", "broken", "gated"]
    page = frame._repr_html_()
    assert "nbdurable-frame" in page and "root, child, grandchild" in page
    assert "color: #cf222e" in page  # the failed graph's status, in the runs view's colours
    assert isinstance(frame[frame["status"] == "failed"], InspectFrame)


def test_graphs_is_public() -> None:
    assert "graphs" in ins.__all__ and ins.graphs.__module__ == "nbdurable.inspect._views"


async def test_cancelled_and_paused_graphs() -> None:
    """A cancelled graph is finished (its finished_at is set); a node paused by a
    failed dependency (on_dependency_failure="pause") counts as waiting."""
    store = nd.InMemorySessionStore()
    async with await nd.DurableRuntime.open(
        store=store, agents=_agents(), poll_interval=0.01
    ) as runtime:
        stopped = await runtime.submit_graph(
            [
                nd.GraphNode("gate", "janitor", "Drop stg."),
                nd.GraphNode("after", "writer", "after", depends_on=["gate"]),
            ],
            graph_id="stopped",
        )
        await stopped.wait("waiting_approval")
        await stopped.cancel()
        assert await stopped.wait() == "cancelled"
        paused = await runtime.submit_graph(
            [
                nd.GraphNode("root", "writer", "broken root"),
                nd.GraphNode("next", "writer", "next", ["root"], on_dependency_failure="pause"),
            ],
            graph_id="paused",
        )
        assert await paused.wait("needs_attention") == "needs_attention"
    frame = ins.graphs(store)
    counts = ["nodes", "completed", "waiting", "failed", "cancelled"]
    assert frame.loc["stopped", counts].tolist() == [2, 0, 0, 0, 2]
    assert frame.loc["paused", counts].tolist() == [2, 0, 1, 1, 0]
    assert frame["status"].tolist() == ["cancelled", "needs_attention"]
    assert not pd.isna(frame.loc["stopped", "finished_at"])
    assert pd.isna(frame.loc["paused", "finished_at"])
    assert pd.isna(frame.loc["stopped", "cost"])  # the janitor's model has no price
    assert frame.loc["paused", "failed_nodes"] == "root"
