"""``nbdurable runs graphs`` and ``nbdurable runs list --graph ID`` on real graphs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support import cli_agents as test_agents

import nbdurable as nd

from .conftest import fits


async def _build(url: str) -> None:
    """``solo`` (no graph); ``nightly`` (completed); ``weekly``: ``gate`` waits for an
    approval, ``after`` is queued behind it, ``broken`` failed and ``dependent``
    failed after it."""
    store = nd.open_store(url)
    try:
        async with await nd.DurableRuntime.open(
            store=store, agents=test_agents.agents(), poll_interval=0.01
        ) as runtime:
            await (await runtime.submit("helper", "What is the answer?", run_id="solo")).wait()
            nightly = await runtime.submit_graph(
                [
                    nd.GraphNode("fetch", "helper", "Fetch."),
                    nd.GraphNode("report", "helper", "Report.", depends_on=["fetch"]),
                ],
                graph_id="nightly",
            )
            assert await nightly.wait() == "completed"
            weekly = await runtime.submit_graph(
                [
                    nd.GraphNode("gate", "janitor", "Clean up stg_2024."),
                    nd.GraphNode("after", "helper", "Report.", depends_on=["gate"]),
                    nd.GraphNode("broken", "flaky", "Try."),
                    nd.GraphNode("dependent", "helper", "Use it.", depends_on=["broken"]),
                ],
                graph_id="weekly",
            )
            await weekly.node("dependent").wait()
            await weekly.wait("waiting_approval")
    finally:
        store.close()


@pytest.fixture
def graphs_store(tmp_path: Path) -> str:
    """A store URL holding the runs and graphs described in ``_build``."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    asyncio.run(_build(url))
    return url


def test_graphs_lists_one_line_per_graph_in_submission_order(
    cli, graphs_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, out, err = cli("runs", "graphs", "--store", graphs_store)
    assert status == 0 and err == "" and fits(out)
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["graph", "status", "done"]
    assert "running" not in lines[0] and "cancelled" not in lines[0]  # no graph has one
    assert [line.split()[0] for line in lines[1:]] == ["nightly", "weekly"]
    assert lines[1].split()[1:3] == ["completed", "2/2"] and lines[1].endswith(" s")
    assert lines[2].split()[1:6] == ["waiting_approval", "0/4", "1", "1", "2"]
    assert "broken" in lines[2]
    monkeypatch.setenv("COLUMNS", "160")
    _, wide, _ = cli("runs", "graphs", "--store", graphs_store)
    assert wide.splitlines()[0].rstrip().endswith("submitted        took  failed nodes")
    assert wide.splitlines()[2].rstrip().endswith("broken, dependent")


def test_graphs_json_has_every_column(cli, graphs_store: str) -> None:
    status, out, _ = cli("runs", "graphs", "--json", "--store", graphs_store)
    rows = {row["graph_id"]: row for row in json.loads(out)}
    assert status == 0 and list(rows) == ["nightly", "weekly"]
    weekly = rows["weekly"]
    assert weekly["status"] == "waiting_approval" and weekly["finished_at"] is None
    counts = [weekly[c] for c in ("nodes", "completed", "running", "queued", "waiting", "failed")]
    assert counts == [4, 0, 0, 1, 1, 2]
    assert rows["nightly"]["finished_at"].endswith("Z") and rows["nightly"]["total_tokens"] > 0


def test_graphs_fits_a_narrow_terminal_and_an_empty_store_says_so(
    cli, graphs_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "50")
    _, out, _ = cli("runs", "graphs", "--store", graphs_store)
    assert fits(out, 50) and "weekly" in out and "waiting_approval" in out
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    nd.open_store(empty).close()  # type: ignore[attr-defined]
    assert cli("runs", "graphs", "--store", empty) == (0, f"no graphs in {empty}\n", "")


def test_list_graph_shows_its_nodes_in_topological_order(cli, graphs_store: str) -> None:
    status, out, err = cli("runs", "list", "--graph", "weekly", "--store", graphs_store)
    assert status == 0 and err == "" and fits(out)
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["run", "node", "agent", "status"]
    rows = [line.split() for line in lines[1:]]
    # Each wave of ready nodes in the given order: gate and broken, then their dependents.
    assert [row[:2] for row in rows] == [
        ["weekly:gate", "gate"],
        ["weekly:broken", "broken"],
        ["weekly:after", "after"],
        ["weekly:dependent", "dependent"],
    ]
    assert [row[3] for row in rows] == ["waiting_approval", "failed", "queued", "failed"]
    assert lines[1].rstrip().endswith("1")  # gate's pending approval
    assert lines[2].rstrip().endswith("model_error")
    assert lines[4].rstrip().endswith("broken           dependency_failed")
    assert cli("runs", "--graph", "weekly", "--store", graphs_store) == (0, out, "")


def test_list_graph_with_a_status_and_as_json(cli, graphs_store: str) -> None:
    _, out, _ = cli(
        "runs", "list", "--graph", "weekly", "--status", "failed", "--store", graphs_store
    )
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["broken", "dependent"]
    args = ("runs", "list", "--graph", "nightly", "--status", "failed", "--store", graphs_store)
    assert cli(*args) == (0, "no node of graph nightly in status failed\n", "")
    _, out, _ = cli("runs", "list", "--graph", "nightly", "--json", "--store", graphs_store)
    rows = json.loads(out)
    assert [(r["run_id"], r["node_id"], r["depends_on"]) for r in rows] == [
        ("nightly:fetch", "fetch", ""),
        ("nightly:report", "report", "fetch"),
    ]


def test_an_unknown_graph_is_one_line_and_status_2(cli, graphs_store: str) -> None:
    status, out, err = cli("runs", "list", "--graph", "monthly", "--store", graphs_store)
    assert status == 2 and out == ""
    assert err == (
        f"nbdurable: no graph 'monthly' in {graphs_store} "
        "('nbdurable runs graphs' lists its graphs)\n"
    )
