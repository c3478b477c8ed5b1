"""Plots of a run: one call away from the history DataFrame."""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd
from nbdurable import inspect as ins

from .conftest import make_run

pytest.importorskip("matplotlib")


async def test_timeline_stacks_model_tool_and_other_time(clock: Any, deps: nd.Deps) -> None:
    import matplotlib

    store = nd.InMemorySessionStore()
    await make_run(store, "r", deps=deps)
    frame = ins.history(store, "r")
    figure = ins.plot_timeline(frame)
    assert isinstance(figure, matplotlib.figure.Figure)
    (axes,) = figure.axes
    labels = [t.get_text() for t in axes.get_legend().get_texts()]
    assert labels == ["model", "tools", "other"]
    assert len(axes.patches) == 3 * len(frame)
    assert axes.get_title() == "Time per step"
    figure.savefig(__import__("io").BytesIO(), format="png")  # it renders


async def test_usage_plot_has_tokens_and_cost() -> None:
    store = nd.InMemorySessionStore()
    await make_run(store, "r")
    figure = ins.plot_usage(ins.history(store, "r"))
    axes = figure.axes
    assert len(axes) == 2  # tokens and a cost axis
    line = axes[0].get_lines()[0]
    assert list(line.get_ydata()) == ins.history(store, "r")["total_tokens"].astype(float).tolist()
    figure.savefig(__import__("io").BytesIO(), format="png")  # lay it out as shown
    tokens, cost = axes
    assert cost.get_ylabel() == "US$" and cost.get_ylim()[0] == 0 and tokens.get_ylim()[0] == 0
    # cost and tokens do not overlap: the cost panel lies wholly below the tokens one
    assert cost.get_position().y1 < tokens.get_position().y0
    free = nd.InMemorySessionStore()
    await make_run(free, "r", price=None)
    assert len(ins.plot_usage(free, "r").axes) == 1  # no cost known: no cost axis
    assert len(ins.plot_usage(ins.usage(free, "r")).axes) == 1


def test_plots_refuse_other_input() -> None:
    with pytest.raises(nd.ConfigurationError, match="spans\\(\\) or history"):
        ins.plot_timeline([1, 2, 3])
    import pandas as pd

    with pytest.raises(nd.ConfigurationError, match="total_tokens"):
        ins.plot_usage(pd.DataFrame({"x": [1]}))
