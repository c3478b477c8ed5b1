"""HistoryBrowser: a run's checkpoints one step at a time, with "rewind from here"."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import ipywidgets
import pandas as pd

from ... import inspect as ins
from ...durable._lookup import checkpoint_at
from ...messages import Message, TextPart, ToolResultPart
from ...runtime._run import Run
from ._actions import ActionRunner
from ._fallback import with_summary
from ._run_widget import RunWidget

if TYPE_CHECKING:
    from ...runtime._runtime import DurableRuntime

__all__ = ["HistoryBrowser"]

_ALWAYS = ("role", "text")
"""Message columns shown even when every row has the same value."""


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
        self.actions = ActionRunner(lambda text: self._say(text, error=True))
        self.slider.observe(lambda _change: self.render(), names="value")
        self.rewind_button.on_click(
            lambda _b: self.actions.start(self.rewind(edit=self.edit_input.value or None))
        )
        self.origin = _origin(runtime, run_id)
        heading = f"<b>{html.escape(run_id)}</b>: {len(steps)} checkpoint(s)"
        if self.origin:
            heading += f" · {html.escape(self.origin)}"
        title = ipywidgets.HTML(heading)
        # the rewind acts on the slider's step: it sits next to it, not below the messages
        controls = ipywidgets.HBox([self.slider, self.edit_input, self.rewind_button])
        children = [title, controls, self.message, self.summary, self.messages]
        super().__init__(children=[*children, self.detail], **kwargs)
        self.render()

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        # a saved notebook opened without a kernel shows this instead of the widget
        steps = len(self.history)
        plain = f"nbdurable history of {self.run_id}: {steps} checkpoint(s)"
        if self.origin:
            plain += f", {self.origin}"
        if steps:
            last = self.history.iloc[-1]
            plain += f"\n  latest: step {self.history.index[-1]}, {last['status']}"
        page = f"<pre>{html.escape(plain)}</pre>"
        shown = super()._repr_mimebundle_(**kwargs)
        return with_summary(shown, {"text/plain": plain, "text/html": page})

    def _say(self, text: str, *, error: bool = False) -> None:
        """Show one line (escaped) above the step's summary."""
        # the theme's error colour: legible in JupyterLab's light and dark themes
        color = "var(--jp-error-color1, #d32f2f)" if error else "inherit"
        self.message.value = f'<span style="color:{color}">{html.escape(text)}</span>'

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
        forked = f" ({self.origin})" if self.origin and self.step == self.history.index[0] else ""
        self.summary.value = html.escape(
            f"step {self.step}{forked}: {row['status']}, {row['messages']} message(s) "
            f"(+{row['new_messages']}), tokens {row['total_tokens']} "
            f"(+{row['tokens_delta']} this step){cost_text}"
        )
        frame = ins.messages(self.runtime.store, self.run_id, self.step)
        checkpoint = checkpoint_at(self.runtime.store, self.run_id, self.step)
        self.messages.value = messages_table(frame, checkpoint.messages)

    async def rewind(self, step: int | None = None, edit: str | None = None) -> Run:
        """Fork the run at ``step`` (default: the slider's), show the fork's live view."""
        at = self.step if step is None else int(step)
        fork = await self.runtime.fork(self.run_id, at, edit=edit or None)
        self.fork = fork
        self._say(f"forked {self.run_id} at step {at} as {fork.run_id}")
        for old in self.detail.children:
            old.close()
        self.detail.children = (RunWidget(self.runtime, fork.run_id),)
        return fork


def _origin(runtime: DurableRuntime, run_id: str) -> str:
    """``forked from RUN at step N`` for a fork, else blank."""
    infos = runtime.store.history(run_id)
    fork = infos[0].forked_from if infos else None
    if fork is None:
        return ""
    return f"forked from {fork.run_id} at step {fork.step_index}"


def _blank(value: Any) -> bool:
    return value is None or value is False or value == 0 or value == "" or bool(pd.isna(value))


def _full_text(message: Message) -> str:
    texts = [p.text for p in message.content if isinstance(p, TextPart)]
    texts += [str(p.result) for p in message.content if isinstance(p, ToolResultPart)]
    return "\n\n".join(texts)


def messages_table(frame: Any, messages: Sequence[Message]) -> str:
    """A checkpoint's messages as one HTML table a person reads.

    One header row (the position is a column, not a second header); columns
    with nothing to say in any row (no errors, no images, no tool calls) left
    out; a message whose preview was cut opens to its full text on a click.
    """
    shown = [c for c in frame.columns if c in _ALWAYS or not all(_blank(v) for v in frame[c])]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["#", *shown])
    body = []
    for position, row in frame.iterrows():
        cells = [f"<td>{html.escape(str(position))}</td>"]
        for column in shown:
            value = row[column]
            text = "" if _blank(value) and column != "role" else str(value)
            cell = html.escape(text)
            if column == "text" and int(position) < len(messages):
                full = _full_text(messages[int(position)])
                if full and full != text:
                    cell = (
                        f"<details><summary>{cell or '(text)'}</summary>"
                        f"<div style='white-space: pre-wrap'>{html.escape(full)}</div></details>"
                    )
            cells.append(f"<td style='text-align: left'>{cell}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<table class="nbd-messages"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )
