"""HistoryBrowser: a run's checkpoints one step at a time, with "rewind from here"."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets
import pandas as pd

from ... import inspect as ins
from ...runtime.run import Run
from .actions import ActionRunner
from .run_widget import RunWidget

if TYPE_CHECKING:
    from ...runtime.runtime import DurableRuntime

__all__ = ["HistoryBrowser"]


class HistoryBrowser(ipywidgets.VBox):  # type: ignore[misc]
    """A slider over a run's checkpoints showing that step's messages and usage.

    **Rewind from here** forks the run at the chosen step (``edit_input``, when
    filled, replaces the step's last message, e.g. with a new user prompt),
    lets the runtime continue the fork and shows the fork's :class:`RunWidget`.

    Args:
        runtime: The runtime that owns the run and continues forks.
        run_id: The run to browse.

    Attributes:
        history: The checkpoints DataFrame (``nbdurable.inspect.history``).
        fork: The handle of the latest fork made here, if any.
        actions: Runs the button's action (``actions.last`` is the latest task).
    """

    def __init__(self, runtime: DurableRuntime, run_id: str, **kwargs: Any) -> None:
        self.runtime = runtime
        self.run_id = run_id
        self.fork: Run | None = None
        self.history: Any = ins.history(runtime.store, run_id)
        steps = [int(s) for s in self.history.index]
        self.slider = ipywidgets.SelectionSlider(
            options=steps or [0],
            value=steps[-1] if steps else 0,
            description="step",
            continuous_update=False,
        )
        self.summary = ipywidgets.HTML()
        self.messages = ipywidgets.HTML()
        self.edit_input = ipywidgets.Text(placeholder="edited last message (optional)")
        self.rewind_button = ipywidgets.Button(
            description="Rewind from here",
            icon="undo",
            tooltip="fork the run at this step and let the fork go on",
            layout=ipywidgets.Layout(width="auto", min_width="max-content"),  # never "Rewind fr…"
        )
        self.message = ipywidgets.HTML()
        self.detail = ipywidgets.VBox()
        self.actions = ActionRunner(self.message)
        self.slider.observe(lambda _change: self.render(), names="value")
        self.rewind_button.on_click(
            lambda _b: self.actions.start(self.rewind(edit=self.edit_input.value or None))
        )
        title = ipywidgets.HTML(f"<b>{html.escape(run_id)}</b>: {len(steps)} checkpoint(s)")
        rewind = ipywidgets.HBox([self.edit_input, self.rewind_button])
        children = [title, self.slider, self.summary, self.messages, rewind, self.message]
        super().__init__(children=[*children, self.detail], **kwargs)
        self.render()

    @property
    def step(self) -> int:
        """The step the slider is on."""
        return int(self.slider.value)

    def render(self) -> None:
        """Show the chosen step's usage and messages."""
        if self.step not in self.history.index:
            self.summary.value = "<i>no checkpoint</i>"
            self.messages.value = ""
            return
        row = self.history.loc[self.step]
        cost = row["cost"]
        cost_text = "" if pd.isna(cost) else f", ${cost:.4f}"  # NA: the model has no price
        self.summary.value = html.escape(
            f"step {self.step}: {row['status']}, {row['messages']} message(s) "
            f"(+{row['new_messages']}), tokens {row['total_tokens']} "
            f"(+{row['tokens_delta']} this step){cost_text}"
        )
        frame = ins.messages(self.runtime.store, self.run_id, self.step)
        self.messages.value = frame.to_html(classes="nbd-messages", na_rep="")

    async def rewind(self, step: int | None = None, edit: str | None = None) -> Run:
        """Fork the run at ``step`` (default: the slider's), show the fork's live view."""
        at = self.step if step is None else int(step)
        fork = await self.runtime.fork(self.run_id, at, edit=edit or None)
        self.fork = fork
        self.actions.say(f"forked {self.run_id} at step {at} as {fork.run_id}")
        for old in self.detail.children:
            old.close()
        self.detail.children = (RunWidget(self.runtime, fork.run_id),)
        return fork
