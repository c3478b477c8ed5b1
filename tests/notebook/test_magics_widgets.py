"""The magics display the real widgets of ``nbdurable.notebook.widgets``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from support.waiting import busy_store_threads

from nbdurable.notebook import NotebookSession, _views
from nbdurable.notebook.widgets import HistoryBrowser, RunsDashboard, RunWidget

from .conftest import eventually, janitor, state

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def shown(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The widgets the magics display (displayed for real), closed after the test."""
    widgets: list[Any] = []
    display = _views.show

    def record(view: Any) -> None:
        widgets.append(view)
        display(view)

    monkeypatch.setattr(_views, "show", record)
    yield widgets
    for widget in widgets:
        widget.close()


def explain(widget: RunWidget, nb: NotebookSession) -> str:
    """What a widget that did not get there was doing (once seen in CI, never alone)."""
    task = widget.task
    ended = task.done() and not task.cancelled()
    error = repr(task.exception()) if ended else None
    tasks = sorted({t.get_coro().__qualname__ for t in asyncio.all_tasks()})  # type: ignore[union-attr]
    return (
        f"widget status={widget.status!r} following={widget.following} task_done={task.done()} "
        f"task_error={error}; the store says {state(nb, widget.run_id)!r}; tasks: {tasks}; "
        + busy_store_threads()
    )


def model_ids(out: Any) -> list[str]:
    return [o.data[WIDGET_VIEW]["model_id"] for o in out.displayed if WIDGET_VIEW in o.data]


async def test_agent_cell_displays_the_live_run_widget(
    ip: Any, nb: NotebookSession, magic: Any, shown: list[Any]
) -> None:
    ip.user_ns["janitor"] = janitor()
    out = magic("agent", "janitor --run-id r1", "Clean up the staging tables.")
    [widget] = shown
    assert isinstance(widget, RunWidget) and widget.run_id == "r1"
    assert model_ids(out) == [widget.model_id]
    await eventually(lambda: widget.status == "waiting_approval" and bool(widget.approvals))
    assert widget.approvals[0]["tool_name"] == "drop_table"
    magic("durable", "approve r1")
    await eventually(lambda: widget.status == "completed", explain=lambda: explain(widget, nb))
    assert "Done: dropped stg_2023." in widget.text
    assert state(nb, "r1") == "completed"


async def test_show_replays_a_finished_run_and_follows_a_live_one(
    ip: Any, nb: NotebookSession, magic: Any, shown: list[Any]
) -> None:
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id r1", "Clean up.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    out = magic("durable", "show r1")
    again = shown[-1]
    assert isinstance(again, RunWidget) and model_ids(out) == [again.model_id]
    await eventually(lambda: again.status == "waiting_approval")
    assert "stg_2023" in again.text
    magic("durable", "approve r1")
    await eventually(lambda: again.status == "completed")


async def test_history_browser_and_dashboard(
    ip: Any, nb: NotebookSession, magic: Any, shown: list[Any]
) -> None:
    # an unpriced model: the browser shows no cost rather than failing on pd.NA
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id r1", "Clean up.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    out = magic("durable", "history r1 --browse")
    assert isinstance(shown[-1], HistoryBrowser) and model_ids(out) == [shown[-1].model_id]
    assert "tokens" in shown[-1].summary.value and "$" not in shown[-1].summary.value
    out = magic("durable", "dashboard")
    assert isinstance(shown[-1], RunsDashboard) and model_ids(out) == [shown[-1].model_id]
