"""``nbdurable runs`` in a narrow terminal and without pandas (issue 23).

``runs list`` fits 80 columns by leaving out its least useful columns whole
(owner, after, graph, fork of, pending, tokens, steps) before it cuts anything,
so agent names and costs stay readable. ``runs list|show|history|graphs`` read
plain rows, so they work after a bare ``pip install nbdurable`` (pandas missing:
here a module on ``PYTHONPATH`` that refuses to import, as a missing one does).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.cli._tables import text_width

from .conftest import fits

ROOT = Path(__file__).resolve().parents[2]


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table (a human approves each call)."""
    return f"dropped {name}"


def _agents() -> list[nd.Agent]:
    price = (3.0, 15.0)
    janitor = nd.ScriptedModel(
        [nd.Turn.call("drop_table", name="stg_2023"), "Dropped."], price_per_million=price
    )
    writer = nd.ScriptedModel(["A section. " * 20] * 50, mode="sequential", price_per_million=price)
    return [
        nd.Agent("janitor", janitor, [drop_table], version="1"),
        nd.Agent("report-writer", writer, version="1"),
    ]


async def _write(ctx: nd.TaskContext, state: Any) -> Any:
    texts = [(await ctx.spawn_agent("report-writer", f"Write {s}.")).text for s in ("a", "b")]
    return {"texts": texts}


async def _build(url: str) -> None:
    store = nd.open_store(url)
    try:
        task = nd.define_task("report", _write, agents=["report-writer"])
        async with await nd.DurableRuntime.open(
            store=store, agents=_agents(), tasks=[task], poll_interval=0.01
        ) as runtime:
            waiting = await runtime.submit("janitor", "Clean up.", run_id="cleanup-1")
            await waiting.wait("waiting_approval", timeout=30)
            graph = await runtime.submit_graph(
                [
                    nd.GraphNode("draft", "report-writer", "Draft."),
                    nd.GraphNode("final", "report-writer", "Final.", depends_on=["draft"]),
                ],
                graph_id="nightly",
            )
            await graph.wait(timeout=30)
            await (await runtime.submit_task("report", {}, run_id="report-1")).result()
            fork = await runtime.fork("nightly:draft", 0, new_run_id="draft-again")
            await fork.wait(timeout=30)
    finally:
        store.close()


@pytest.fixture
def busy_store(tmp_path: Path) -> str:
    """Runs with every column of ``runs list`` filled: costs, a pending approval, a
    graph with a dependency, a task with owned runs, a fork."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    asyncio.run(_build(url))
    return url


def _table(out: str) -> tuple[list[str], list[str]]:
    lines = out.splitlines()
    return lines[0].split(), lines[1:]


@pytest.mark.parametrize("width", [80, 100])
def test_list_fits_the_width_without_cutting_agents_or_costs(
    cli: Any, busy_store: str, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    status, out, _ = cli("runs", "list", "--store", busy_store)
    assert status == 0 and fits(out, width)
    header, rows = _table(out)
    assert header[:3] == ["run", "agent", "status"] and {"cost", "age"} <= set(header)
    assert "…" not in out  # nothing cut: columns were left out instead
    assert sum("report-writer" in row for row in rows) == 5  # two nodes, two owned, the fork
    assert all("$0.0" in row for row in rows if "task" not in row and "report-1 " not in row)


def test_at_80_columns_the_least_useful_columns_go_first(
    cli: Any, busy_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _, wide, _ = cli("runs", "list", "--store", busy_store)
    every = ["run", "agent", "status", "steps", "tokens", "cost", "age", "pending", "fork", "of"]
    assert _table(wide)[0] == [*every, "graph", "after", "owner"]
    monkeypatch.setenv("COLUMNS", "80")
    _, narrow, _ = cli("runs", "list", "--store", busy_store)
    header = _table(narrow)[0]
    assert header[:3] == ["run", "agent", "status"]
    assert "owner" not in header and "after" not in header and "cost" in header
    assert max(text_width(line) for line in narrow.splitlines()) <= 80


def _no_pandas_cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    blocked = tmp_path / "blocked"
    blocked.mkdir(exist_ok=True)
    (blocked / "pandas.py").write_text("raise ImportError(\"No module named 'pandas'\")\n")
    env = {**os.environ, "PYTHONPATH": f"{blocked}{os.pathsep}{ROOT}", "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "nbdurable.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("runs", "list"), "cleanup-1"),
        (("runs", "list", "--graph", "nightly"), "nightly:final"),
        (("runs", "graphs"), "nightly"),
        (("runs", "show", "cleanup-1"), "drop_table(name='stg_2023')"),
        (("runs", "history", "nightly:draft"), "completed"),
        (("runs", "explain", "cleanup-1"), "drop_table"),
    ],
)
def test_every_runs_command_works_without_pandas(
    busy_store: str, tmp_path: Path, argv: tuple[str, ...], said: str
) -> None:
    done = _no_pandas_cli(tmp_path, *argv, "--store", busy_store)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and said in done.stdout


def test_json_without_pandas_has_iso_times_and_typed_values(
    busy_store: str, tmp_path: Path
) -> None:
    done = _no_pandas_cli(tmp_path, "runs", "list", "--json", "--store", busy_store)
    rows = {r["run_id"]: r for r in json.loads(done.stdout)}
    waiting = rows["cleanup-1"]
    assert waiting["status"] == "waiting_approval" and waiting["pending_approvals"] == 1
    assert waiting["created_at"].endswith("Z") and "T" in waiting["created_at"]
    assert isinstance(waiting["cost"], float) and waiting["cost"] > 0
    assert rows["draft-again"]["parent_run"] == "nightly:draft"
    assert rows["report-1:_write:0"]["owner_run"] == "report-1"
