"""The widgets the magics display (``nbdurable.notebook.widgets``), imported when first shown."""

from __future__ import annotations

from typing import Any

__all__ = ["dashboard_view", "history_view", "run_view", "show"]


def run_view(runtime: Any, run_id: str) -> Any:
    """The live run widget: replays the run's event log, then follows it."""
    from .widgets import RunWidget

    return RunWidget(runtime, run_id)


def dashboard_view(runtime: Any) -> Any:
    """The runs dashboard of the runtime's store."""
    from .widgets import RunsDashboard

    return RunsDashboard(runtime)


def history_view(runtime: Any, run_id: str) -> Any:
    """The history browser of a run's checkpoints."""
    from .widgets import HistoryBrowser

    return HistoryBrowser(runtime, run_id)


def show(view: Any) -> None:
    """Display ``view`` as the cell's output."""
    from IPython.display import display

    display(view)  # type: ignore[no-untyped-call]
