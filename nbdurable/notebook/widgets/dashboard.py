"""RunsDashboard: the runs table with status filters and row actions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, get_args

import ipywidgets

from ... import inspect as ins
from ...runtime.records import RunState
from ...runtime.run import Run
from ...runtime.verdicts import Outcome, submit_verdict
from .actions import ActionRunner
from .run_widget import RunWidget

if TYPE_CHECKING:
    from ...runtime.runtime import DurableRuntime

__all__ = ["ALL", "RunsDashboard", "STATUSES"]

ALL = "all"
STATUSES: tuple[str, ...] = (*get_args(RunState), "suspended")
"""Statuses the filter offers: the runtime's run states, and ``suspended`` for loop runs."""

_COLUMNS = [
    "agent",
    "status",
    "steps",
    "pending_approvals",
    "total_tokens",
    "cost",
    "updated_at",
    "parent_run",
    "reason",
    "waiting_reason",
]


class RunsDashboard(ipywidgets.VBox):  # type: ignore[misc]
    """Every run of the runtime's store, filtered by status, with row actions.

    Pick a run in ``selector``, then: **Show** (its :class:`RunWidget` below the
    table), **Resume** (``retry()`` a failed or needs_attention run, wake the
    engine for a pending or retry_wait one), **Approve** / **Deny** (every
    pending approval of the run, each with its own signed token, checked as a
    card's click is), **Rewind** (fork from ``step_input`` with the optional
    ``edit_input`` as the new last message, then show the fork). Each action is
    also a coroutine method, for scripts and tests.

    Args:
        runtime: The runtime whose store is listed and which executes actions.

    Attributes:
        frame: The runs DataFrame currently shown.
        actions: Runs the buttons' actions (``actions.last`` is the latest task).
    """

    def __init__(self, runtime: DurableRuntime, **kwargs: Any) -> None:
        self.runtime = runtime
        self.frame: Any = None
        self.status_filter = ipywidgets.Dropdown(
            options=[ALL, *STATUSES], value=ALL, description="status"
        )
        self.refresh_button = ipywidgets.Button(description="Refresh", icon="refresh")
        self.table = ipywidgets.HTML()
        self.selector = ipywidgets.Select(options=[], rows=6, description="run")
        self.show_button = ipywidgets.Button(description="Show")
        self.resume_button = ipywidgets.Button(description="Resume")
        self.approve_button = ipywidgets.Button(description="Approve", button_style="success")
        self.deny_button = ipywidgets.Button(description="Deny", button_style="danger")
        self.reason_input = ipywidgets.Text(placeholder="reason for a denial (optional)")
        self.step_input = ipywidgets.IntText(value=0, description="step")
        self.edit_input = ipywidgets.Text(placeholder="edited last message (optional)")
        self.rewind_button = ipywidgets.Button(description="Rewind")
        self.message = ipywidgets.HTML()
        self.detail = ipywidgets.VBox()
        self.actions = ActionRunner(self.message)

        self.status_filter.observe(lambda _change: self.refresh(), names="value")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.show_button.on_click(lambda _b: self.actions.start(self.show()))
        self.resume_button.on_click(lambda _b: self.actions.start(self.resume()))
        self.approve_button.on_click(lambda _b: self.actions.start(self.approve()))
        self.deny_button.on_click(
            lambda _b: self.actions.start(self.deny(reason=self.reason_input.value or None))
        )
        self.rewind_button.on_click(
            lambda _b: self.actions.start(
                self.rewind(step=self.step_input.value, edit=self.edit_input.value or None)
            )
        )
        controls = ipywidgets.HBox([self.status_filter, self.refresh_button])
        verdicts = ipywidgets.HBox([self.approve_button, self.deny_button, self.reason_input])
        rewind = ipywidgets.HBox([self.step_input, self.edit_input, self.rewind_button])
        row = ipywidgets.HBox([self.show_button, self.resume_button])
        children = [controls, self.table, self.selector, row, verdicts, rewind, self.message]
        super().__init__(children=[*children, self.detail], **kwargs)
        self.refresh()

    # -- the table ---------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the runs again (with the status filter) and redraw the table."""
        status = None if self.status_filter.value == ALL else self.status_filter.value
        frame = ins.runs(self.runtime.store, status=status, all_columns=True)
        self.frame = frame
        shown = frame[[c for c in _COLUMNS if c in frame.columns]]
        self.table.value = (
            shown.to_html(classes="nbd-runs", na_rep="", float_format=lambda v: f"{v:.4g}")
            if len(frame)
            else "<i>no runs</i>"
        )
        selected = self.selector.value
        options = [(f"{rid}  [{frame.loc[rid, 'status']}]", rid) for rid in frame.index]
        self.selector.options = options
        ids = [rid for _label, rid in options]
        self.selector.value = selected if selected in ids else (ids[-1] if ids else None)

    def _selected(self, run_id: str | None) -> str:
        chosen = run_id or self.selector.value
        if not chosen:
            raise ValueError("select a run first")
        return str(chosen)

    def _show_widget(self, widget: ipywidgets.Widget) -> None:
        for old in self.detail.children:
            old.close()  # a RunWidget stops following its run
        self.detail.children = (widget,)

    # -- row actions -----------------------------------------------------------------------

    async def show(self, run_id: str | None = None) -> RunWidget:
        """Show the selected run's live :class:`RunWidget` below the table."""
        widget = RunWidget(self.runtime, self._selected(run_id))
        self._show_widget(widget)
        return widget

    async def resume(self, run_id: str | None = None) -> str:
        """Let the selected run go on as its state allows; returns what was done."""
        chosen = self._selected(run_id)
        record = self.runtime.runtime_store.rt_get(chosen)
        if record is None:
            said = f"{chosen} is not a runtime run: resume it with resume_from_checkpoint"
        elif record.state in ("failed", "needs_attention"):
            await Run(self.runtime, chosen).retry()
            said = f"{chosen}: retried"
        elif record.state in ("pending", "retry_wait", "queued"):
            self.runtime.wake()
            said = f"{chosen}: {record.state}, the runtime looks for work now"
        elif record.state == "waiting_approval":
            said = f"{chosen} waits for approvals: Approve or Deny them"
        else:
            said = f"{chosen} is {record.state}: nothing to resume"
        self.actions.say(said)
        if record is not None:
            await self.show(chosen)
        self.refresh()
        return said

    async def approve(self, run_id: str | None = None) -> list[Outcome]:
        """Approve every pending approval of the selected run (each token is verified)."""
        return await self._verdicts(self._selected(run_id), approve=True, reason=None)

    async def deny(self, run_id: str | None = None, reason: str | None = None) -> list[Outcome]:
        """Deny every pending approval of the selected run, with an optional reason."""
        return await self._verdicts(self._selected(run_id), approve=False, reason=reason)

    async def _verdicts(self, run_id: str, *, approve: bool, reason: str | None) -> list[Outcome]:
        if self.runtime.runtime_store.rt_get(run_id) is None:
            self.actions.say(f"{run_id} is not a runtime run", error=True)
            return []
        pending = await Run(self.runtime, run_id).pending_approvals()
        if not pending:
            self.actions.say(f"{run_id} waits for no approval")
            return []
        outcomes = [
            await submit_verdict(
                self.runtime,
                run_id,
                request.approval_id,
                approve=approve,
                token=request.token,
                reason=reason,
            )
            for request in pending
        ]
        lines = [f"{r.tool_name}: {o.message}" for r, o in zip(pending, outcomes, strict=True)]
        self.actions.say(f"{run_id}: " + "; ".join(lines))
        await self.show(run_id)
        self.refresh()
        return outcomes

    async def rewind(
        self, run_id: str | None = None, step: int | None = None, edit: str | None = None
    ) -> Run:
        """Fork the selected run from ``step`` (``edit`` replaces its last message); show it."""
        chosen = self._selected(run_id)
        fork = await self.runtime.fork(
            chosen, int(step if step is not None else self.step_input.value), edit=edit or None
        )
        self.actions.say(f"{chosen} forked at step {step} as {fork.run_id}")
        self.refresh()
        self.selector.value = fork.run_id if fork.run_id in self.frame.index else None
        await self.show(fork.run_id)
        return fork
