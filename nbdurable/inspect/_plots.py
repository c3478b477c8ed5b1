"""Plots of a run: where its time went (spans), and tokens/cost over the run.

Each takes a DataFrame (:func:`~nbdurable.inspect.spans`,
:func:`~nbdurable.inspect.history`) or a store and a run id, and returns a
:class:`matplotlib.figure.Figure`, which a notebook shows as the cell's output.
matplotlib is imported only when a plot is drawn.
"""

from __future__ import annotations

from typing import Any

from .._errors import ConfigurationError
from .._extras import import_for
from ._source import StoreLike

__all__ = ["plot_timeline", "plot_usage"]


def _history(history: Any, run_id: str | None) -> Any:
    if run_id is not None:
        from ._views import history as load

        return load(history, run_id)
    if not hasattr(history, "columns") or "duration_ms" not in history.columns:
        raise ConfigurationError(
            "pass the DataFrame nbdurable.inspect.spans() or history() returns, "
            "or a store and a run id"
        )
    return history


def _figure(title: str) -> tuple[Any, Any]:
    plt: Any = import_for("inspect", "nbdurable.inspect's plots", "matplotlib.pyplot")
    figure, axes = plt.subplots(figsize=(9, 3.6), layout="constrained")
    plt.close(figure)  # returned, not left in pyplot's list (a notebook shows it once)
    axes.set_title(title)
    return figure, axes


def plot_timeline(frame: Any | StoreLike, run_id: str | None = None) -> Any:
    """Where a run's time went: a Gantt chart of its spans, one row per step.

    Each step's row shows its model calls, tool calls (concurrent calls in
    thinner lanes side by side) and the waits that delayed it (approval, model
    retry, attention, queue, takeover gap; hatched); the top row shows the
    run's legs. Every bar is at least a sliver wide, so a 0 ms call next to an
    hour-long approval wait stays visible. Given the frame of
    :func:`~nbdurable.inspect.history` instead, it draws stacked bars per step:
    model time, tool time and the rest of the step (ms).

    Args:
        frame: The DataFrame of :func:`~nbdurable.inspect.spans` (or of
            :func:`~nbdurable.inspect.history`), or a store (object or URL)
            when ``run_id`` is given.
        run_id: Read this run's spans from the store ``frame`` (its history
            when the store keeps no event log).

    Returns:
        A matplotlib ``Figure``.
    """
    spans = _spans(frame, run_id)
    if spans is not None:
        from ._timeline import draw_spans

        figure, axes = _figure("Where the run's time went")
        figure.set_size_inches(9, max(2.4, 1.2 + 0.45 * (spans["step_index"].nunique() + 1)))
        draw_spans(spans, axes)
        return figure
    return _step_bars(_history(frame, run_id))


def _spans(frame: Any, run_id: str | None) -> Any:
    """The spans frame to draw, or None to draw the history's step bars."""
    if run_id is None:
        has_columns = hasattr(frame, "columns")
        return frame if has_columns and {"kind", "start", "end"} <= set(frame.columns) else None
    from ..durable.store import EventLog
    from ._source import opened
    from ._spans import spans

    with opened(frame) as source:
        if not isinstance(source, EventLog):
            return None
        return spans(source, run_id)


def _step_bars(frame: Any) -> Any:
    steps = [str(step) for step in frame.index]
    model = frame["model_ms"].fillna(0).astype(float).to_numpy()
    tool = frame["tool_ms"].fillna(0).astype(float).to_numpy()
    total = frame["duration_ms"].fillna(0).astype(float).to_numpy()
    other = (total - model - tool).clip(min=0)
    figure, axes = _figure("Time per step")
    axes.bar(steps, model, label="model", color="#0969da")
    axes.bar(steps, tool, bottom=model, label="tools", color="#bf8700")
    axes.bar(steps, other, bottom=model + tool, label="other", color="#d0d7de")
    axes.set_xlabel("step")
    axes.set_ylabel("ms")
    axes.legend(loc="upper left")
    if len(steps) > 30:  # keep the step labels legible on long runs
        axes.set_xticks(steps[:: max(1, len(steps) // 20)])
    return figure


def plot_usage(history: Any | StoreLike, run_id: str | None = None) -> Any:
    """Cumulative tokens over the run (line), tokens per step (bars), and cost when known.

    Cost, when the model has a price, gets its own panel under the tokens (same
    steps), so the two lines never cross each other; both axes start at 0.

    Args:
        history: The DataFrame of :func:`~nbdurable.inspect.history` (or
            :func:`~nbdurable.inspect.usage`), or a store when ``run_id`` is given.
        run_id: Read the history of this run from the store ``history``.

    Returns:
        A matplotlib ``Figure``.
    """
    frame: Any = history
    if run_id is not None or not hasattr(history, "columns"):
        frame = _history(history, run_id)
    elif "total_tokens" not in history.columns:
        raise ConfigurationError("the frame has no total_tokens column")
    steps = [str(step) for step in frame.index]
    cost = frame["cost"]
    priced = bool(cost.notna().any())
    figure, axes = _figure("Tokens and cost" if priced else "Tokens")
    axes.bar(steps, frame["tokens_delta"].astype(float), color="#d0d7de", label="tokens per step")
    axes.plot(steps, frame["total_tokens"].astype(float), color="#0969da", label="total tokens")
    axes.set_ylabel("tokens")
    axes.set_ylim(bottom=0)
    axes.legend(loc="upper left")
    bottom = axes
    if priced:
        # A panel of its own below, sharing the steps: a twin axis drew the cost
        # line on top of the tokens line (both grow with every step).
        figure.set_size_inches(9, 5.4)
        spec = axes.get_subplotspec().get_gridspec()
        grid = spec.figure.add_gridspec(3, 1) if spec.nrows == 1 else spec
        axes.set_subplotspec(grid[0:2, 0])
        bottom = figure.add_subplot(grid[2, 0], sharex=axes)
        bottom.plot(steps, cost.astype(float), color="#1a7f37", marker=".", label="cost ($)")
        bottom.set_ylabel("US$")
        bottom.set_ylim(bottom=0)
        bottom.legend(loc="upper left")
        axes.tick_params(labelbottom=False)
    bottom.set_xlabel("step")
    if len(steps) > 30:
        bottom.set_xticks(steps[:: max(1, len(steps) // 20)])
    return figure
