"""RunsDashboard: pending approvals and a live, paged table of every run of a store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anywidget
import ipywidgets
import traitlets

from ..._aio import wait_event
from ...durable.store import watch
from ...runs import (
    ACTIONS,
    ACTIVE_STATES,
    BUSY_STATES,
    RETRYABLE_STATES,
    RUN_STATES,
    STALLED,
    AttentionAction,
)
from ...runtime._attention import attention_token
from ...runtime._checked_verdicts import Outcome
from ...runtime._run import Run
from .._next_step import attended
from ._actions import ActionRunner
from ._assets import view_module, view_style
from ._dashboard_rows import (
    COLUMNS,
    FILTERS,
    PAGE_SIZES,
    Column,
    PendingApproval,
    Query,
    approval_payload,
    page_of,
)
from ._dashboard_source import DashboardSource, Snapshot, pending_approval
from ._fallback import dashboard_summary, with_summary
from ._history import HistoryBrowser
from ._messages import Ack, Pong, received
from ._run_widget import RunWidget
from ._verdict_kinds import VerdictKind, submit_kind, verdict_kind

if TYPE_CHECKING:
    from ...runtime._runtime import DurableRuntime

__all__ = ["STATUSES", "DashboardView", "RunsDashboard"]

STATUSES: tuple[str, ...] = (*RUN_STATES, "suspended", STALLED)
"""Statuses a run can have: the runtime's run states, ``suspended`` for loop runs, and
``stalled`` for a running run whose owner stopped."""

IDLE_INTERVAL_S = 15.0
"""The longest pause between two reads of a store that did not change (from another process)."""
ANSWER_KEPT_S = 600.0
"""How long an approval answered from the dashboard stays listed with its outcome."""
ANSWERED = frozenset({"approved", "denied", "replied", "stale"})
"""Outcome states after which a request takes no verdict from this row."""
UNKNOWN_CALL = "(unknown call)"


class DashboardView(anywidget.AnyWidget):
    """The front end of :class:`RunsDashboard` (``static/dashboard_view.js``).

    Every trait is written by the kernel; the view sends custom messages
    (:mod:`._messages`, listed in docs/notebook.md, "Widget messages"). No trait
    ever holds an approval token or the secret.
    """

    _esm = view_module("dashboard_view.js")
    _css = view_style("dashboard_view.css")

    columns = traitlets.List(traitlets.Dict()).tag(sync=True)
    rows = traitlets.List(traitlets.Dict()).tag(sync=True)
    total = traitlets.Int(0).tag(sync=True)
    runs_total = traitlets.Int(0).tag(sync=True)
    page = traitlets.Int(0).tag(sync=True)
    pages = traitlets.Int(1).tag(sync=True)
    page_size = traitlets.Int(25).tag(sync=True)
    page_sizes = traitlets.List(traitlets.Int(), list(PAGE_SIZES)).tag(sync=True)
    sort_by = traitlets.Unicode("age").tag(sync=True)
    descending = traitlets.Bool(False).tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    search = traitlets.Unicode("").tag(sync=True)
    counts = traitlets.Dict().tag(sync=True)
    statuses = traitlets.List(traitlets.Unicode(), list(STATUSES)).tag(sync=True)
    filters = traitlets.List(traitlets.Unicode(), list(FILTERS)).tag(sync=True)
    approvals = traitlets.List(traitlets.Dict()).tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    detail = traitlets.Unicode("").tag(sync=True)
    message = traitlets.Unicode("").tag(sync=True)
    message_error = traitlets.Bool(False).tag(sync=True)
    updated_at = traitlets.Int(0).tag(sync=True)
    paused = traitlets.Bool(False).tag(sync=True)


@dataclass
class _Answer:
    """A verdict given from the dashboard: on which approval, and what became of it."""

    approval: PendingApproval
    state: str
    message: str
    at: float
    """When (``time.monotonic()``): answers are kept for :data:`ANSWER_KEPT_S`."""
    wall_ms: int
    """When (epoch ms), for the view."""


class RunsDashboard(ipywidgets.VBox):  # type: ignore[misc]
    """Pending approvals on top, then a live, sortable, filterable, paged table of runs.

    ``view`` (an anywidget) shows, first, every call a run waits to have
    approved (tool and arguments, run, agent, when it asked) with **Approve** and
    **Deny** (Deny asks for an optional reason) in its row; then the runs: status,
    agent, steps, tokens, cost, age and what a run waits for or why it stopped
    (one line, the full text on hover). A click on a header sorts; the status
    filter and the search narrow; the kernel sends one page at a time. A click on
    a run shows its live :class:`RunWidget` (a run the runtime does not know: its
    :class:`HistoryBrowser`) in ``detail`` below; **history** shows its history browser.

    The table follows the store: every ``refresh_interval`` seconds (longer for a
    store whose read takes long) it is read again in a worker thread (SQLite,
    PostgreSQL) and only what changed is sent. An idle kernel does not spin: a
    read that found nothing new doubles the pause before the next, up to
    :data:`IDLE_INTERVAL_S`, while a write of this process (its runtime's)
    brings the next read back to ``refresh_interval``; a view scrolled out of
    sight or in a hidden tab says so, and nothing is read until it is seen
    again (or a click asks). A verdict is checked like an
    approval card's: the view sends ``(run_id, approval_id, approve, reason)``
    and the kernel looks the request's signed token up and calls
    :func:`~nbdurable.runtime._checked_verdicts.submit_verdict`; tokens never reach the view.

    The view's messages (:mod:`._messages`) are listed in docs/notebook.md,
    "Widget messages"; its ping is the liveness probe: a view whose kernel is
    gone disables its buttons.

    Args:
        runtime: The runtime whose store is shown and which takes the verdicts.
        refresh_interval: Seconds between two reads of the store at least.
        page_size: Runs per page.
        columns: The runs table's columns (:data:`~.dashboard_rows.COLUMNS`).
        pause_after: Seconds without a message from any view after which the
            background reads pause (a dashboard whose output was cleared, a
            closed tab: a live view pings every 15 s); the next message from a
            view resumes them.

    Attributes:
        view: The anywidget showing approvals and runs.
        detail: Where a run's widget or history browser is shown.
        snapshot: The latest read of the store.
        query: The filter, search, order and page shown.
        task: The background refresh (None when created without a running loop).
    """

    def __init__(
        self,
        runtime: DurableRuntime,
        *,
        refresh_interval: float = 2.0,
        page_size: int = 25,
        columns: Sequence[Column] = COLUMNS,
        pause_after: float = 60.0,
        **kwargs: Any,
    ) -> None:
        self.runtime = runtime
        self.columns = tuple(columns)
        self.refresh_interval = refresh_interval
        self.pause_after = pause_after
        self.query = Query(page_size=min(max(page_size, 1), PAGE_SIZES[-1]))
        self.snapshot = Snapshot(rows=[], approvals=[], read_ms=0.0)
        self.view = DashboardView(columns=[c.spec() for c in self.columns])
        self.detail = ipywidgets.VBox()
        self.source = DashboardSource(runtime.store, self.columns)
        self._answers: dict[str, _Answer] = {}
        self._actions = ActionRunner(lambda text: self._say(text, error=True))
        self._closed = False
        self._contacted = False
        self._last_contact = time.monotonic()
        self._reading = asyncio.Lock()
        self._quiet: int = 0  # reads in a row that found nothing new
        self._changed = False  # this process wrote to the store since the last read
        self._hidden = False  # the view says nobody can see it
        self.view.on_msg(self._on_message)
        super().__init__(children=[self.view, self.detail], **kwargs)
        self.refresh()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None  # a script without a loop: refresh() by hand
        self._wakeup = asyncio.Event()
        self._unwatch = watch(runtime.store, self._store_written)
        self.task: asyncio.Task[None] | None = (
            loop.create_task(self._follow()) if loop is not None else None
        )

    # -- reading the store ---------------------------------------------------------------

    def refresh(self) -> None:
        """Read the store now (on this thread) and show what changed."""
        self._apply(self.source.read())

    async def refreshed(self) -> None:
        """Read the store now without holding the event loop, and show what changed."""
        async with self._reading:
            if self.source.threaded:  # the store guards its connections: read in a thread
                snapshot = await asyncio.to_thread(self.source.read)
            else:
                snapshot = self.source.read()
        if not self._closed:
            self._apply(snapshot)

    def poke(self) -> None:
        """Have the background refresh read the store now instead of at its next turn."""
        self._wakeup.set()

    def _interval(self) -> float:
        # a store whose read takes long is read less often: at most a tenth of the time
        return max(self.refresh_interval, 10 * self.snapshot.read_ms / 1000)

    def _idle_interval(self) -> float:
        """The pause before the next read when nothing is known to have changed."""
        base = self._interval()
        return min(base * float(2 ** min(self._quiet, 10)), max(base, IDLE_INTERVAL_S))

    def _store_written(self, _run_id: str | None) -> None:
        # on the writing thread (watch): note it only; the next turn reads at the base pace
        self._changed = True

    @property
    def paused(self) -> bool:
        """Whether the background reads wait for a view (none was heard of for a while)."""
        idle = time.monotonic() - self._last_contact
        return self._contacted and idle > self.pause_after

    async def _follow(self) -> None:
        last_read = time.monotonic()
        while not self._closed:
            poked = await wait_event(self._wakeup, self._interval())
            self._wakeup.clear()
            if self._closed:
                return
            self.view.paused = self.paused
            if self.view.paused or (self._hidden and not poked):
                continue
            waited = time.monotonic() - last_read
            if not (poked or self._changed or waited >= self._idle_interval()):
                continue  # nothing new is known of, and the idle pause is not over
            self._changed = False
            last_read = time.monotonic()
            try:
                before = self.snapshot
                await self.refreshed()
                same = self.snapshot.rows == before.rows
                self._quiet = self._quiet + 1 if same and not poked else 0
            except Exception as exc:  # the store is away: say so, try again next turn
                self._say(f"reading the store failed: {type(exc).__name__}: {exc}", error=True)

    def _apply(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        if self.view.message_error and self.view.message.startswith("reading the store failed"):
            self._say("")
        self._render(updated=True)

    def _render(self, *, updated: bool = False) -> None:
        """Send the page the query asks for and the approvals (unchanged traits are not sent)."""
        page = page_of(self.snapshot.rows, self.query)
        with self.view.hold_sync():
            self.view.rows = page.rows
            self.view.total = page.total
            self.view.runs_total = len(self.snapshot.rows)
            self.view.page = page.page
            self.view.pages = page.pages
            self.view.page_size = self.query.page_size
            self.view.sort_by = self.query.sort_by
            self.view.descending = self.query.descending
            self.view.status = self.query.status
            self.view.search = self.query.search
            self.view.counts = page.counts
            self.view.approvals = self._approval_rows()
            if updated:
                self.view.updated_at = int(time.time() * 1000)

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        # what a saved notebook opened without a kernel shows instead of the widget
        summary = dashboard_summary(self.view.counts, self.view.rows, self.view.approvals)
        return with_summary(super()._repr_mimebundle_(**kwargs), summary)

    def _approval_rows(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        for approval_id in [k for k, a in self._answers.items() if now - a.at > ANSWER_KEPT_S]:
            del self._answers[approval_id]
        rows: list[dict[str, Any]] = []
        pending = set()
        max_age, wall = self.runtime.approval_max_age_ms, int(time.time() * 1000)
        for approval in self.snapshot.approvals:
            pending.add(approval.approval_id)
            answer = self._answers.get(approval.approval_id)
            if answer is None:
                old = max_age is not None and wall - approval.requested_at >= max_age
                rows.append(approval_payload(approval, "pending", "", token_expired=old))
            else:
                rows.append(
                    approval_payload(approval, answer.state, answer.message, answer.wall_ms)
                )
        for approval_id, answer in self._answers.items():
            if approval_id not in pending:  # answered: kept with its outcome, no buttons
                state = answer.state if answer.state in ANSWERED else "resolved"
                message = answer.message or "no longer pending"
                rows.append(approval_payload(answer.approval, state, message, answer.wall_ms))
        rows.sort(key=lambda r: (r["requested_at"], r["run_id"], r["approval_id"]))
        return rows

    def _answer(self, approval: PendingApproval, state: str, message: str) -> None:
        now = time.monotonic()
        self._answers[approval.approval_id] = _Answer(
            approval, state, message, now, int(time.time() * 1000)
        )
        self._render()

    # -- messages from the view --------------------------------------------------------

    def _on_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        message = received(content)
        if message is None:
            return
        self._contacted = True
        was_paused = self.view.paused
        self._last_contact = time.monotonic()
        if message["type"] == "ping":
            self.view.send(Pong(type="pong", nonce=message.get("nonce")))
            if was_paused:
                self.view.paused = False
                self.poke()
        elif message["type"] == "query":
            self.query = self.query.updated(message, self.columns)
            self._render()
        elif message["type"] in ("approve", "deny", "edit", "reply"):
            run_id = str(message.get("run_id", ""))
            approval_id = str(message.get("approval_id", ""))
            self.view.send(Ack(type="ack", approval_id=approval_id))
            answer = self._answers.get(approval_id)
            if answer is not None and answer.state in ("sending", *ANSWERED):
                return  # a second click: this row answered already (or is answering)
            kind = verdict_kind(message)
            if isinstance(kind, str):  # a malformed edit or reply: said in the row, not sent
                known = self._known(run_id, approval_id)
                if known is not None:
                    self._answer(known, "error", kind)
                return
            approval = self._sending(run_id, approval_id)  # now: a second click sees it
            self._actions.start(self._verdict(approval, kind))
        elif message["type"] in ACTIONS:
            self.view.send(Ack(type="ack", approval_id="attention"))
            action: AttentionAction = "retry" if message["type"] == "retry" else "settle"
            reason = message.get("reason")
            run_id = str(message.get("run_id", ""))
            self._actions.start(self.attend(run_id, action, reason=str(reason) if reason else None))
        elif message["type"] == "open":
            run_id = str(message.get("run_id", ""))
            self._actions.start(
                self.history(run_id) if message.get("view") == "history" else self.show(run_id)
            )
        elif message["type"] == "close":
            self._show(None, "", "")
        elif message["type"] == "dismiss":
            self._answers.pop(str(message.get("approval_id", "")), None)
            self._render()
        elif message["type"] == "refresh":
            self.poke()
        elif message["type"] == "visibility":
            hidden = message.get("visible") is False
            if self._hidden and not hidden:
                self._quiet = 0
                self.poke()  # seen again: show what changed meanwhile now
            self._hidden = hidden

    async def settled(self) -> None:
        """Wait until every action the view asked for (verdicts, opening a run) is done."""
        await self._actions.settled()

    def _say(self, text: str, *, error: bool = False) -> None:
        with self.view.hold_sync():
            self.view.message = text
            self.view.message_error = error

    # -- verdicts --------------------------------------------------------------------------

    def _known(self, run_id: str, approval_id: str) -> PendingApproval | None:
        for approval in self.snapshot.approvals:
            if approval.run_id == run_id and approval.approval_id == approval_id:
                return approval
        answer = self._answers.get(approval_id)
        return answer.approval if answer is not None else None

    def _sending(self, run_id: str, approval_id: str) -> PendingApproval:
        """Mark the row as answering (its buttons go), before the verdict is checked."""
        approval = self._known(run_id, approval_id) or PendingApproval(
            run_id, approval_id, UNKNOWN_CALL, {}, "", int(time.time() * 1000)
        )
        self._answer(approval, "sending", "checking…")
        return approval

    async def _verdict(self, approval: PendingApproval, kind: VerdictKind) -> Outcome:
        """Look the request's token up (kernel side), submit the verdict, show its outcome."""
        run_id, approval_id = approval.run_id, approval.approval_id
        token: str | None = None
        try:
            record = self.runtime.runtime_store.rt_get(run_id)
            if record is None:
                outcome = Outcome("error", f"error: {run_id} is not a run of this runtime")
            else:
                for request in await Run(self.runtime, run_id).pending_approvals():
                    if request.approval_id == approval_id:
                        token = request.token
                        if approval.tool_name == UNKNOWN_CALL:  # asked for by a script
                            approval = pending_approval(record, request)
                tool_name = approval.tool_name
                outcome = await submit_kind(
                    self.runtime, run_id, approval_id, kind, token=token, tool_name=tool_name
                )
        except Exception as exc:  # shown in the row; the run is left as it was
            outcome = Outcome("error", f"error: {type(exc).__name__}: {exc}")
        replied = outcome.recorded and kind.reply is not None
        self._answer(approval, "replied" if replied else outcome.state, outcome.message)
        self.poke()
        return outcome

    async def approve(self, run_id: str, approval_id: str | None = None) -> list[Outcome]:
        """Approve one pending call of ``run_id`` (every one when ``approval_id`` is None).

        Each goes the way a row's Approve goes: the token is looked up here and verified.
        """
        return await self._verdicts(run_id, approval_id, VerdictKind(approve=True))

    async def deny(
        self, run_id: str, approval_id: str | None = None, reason: str | None = None
    ) -> list[Outcome]:
        """Deny one pending call of ``run_id`` (every one when ``approval_id`` is None)."""
        return await self._verdicts(run_id, approval_id, VerdictKind(approve=False, reason=reason))

    async def edit(self, run_id: str, approval_id: str, arguments: dict[str, Any]) -> Outcome:
        """Approve one pending call with edited ``arguments``, as a row's Edit form does.

        The token is looked up here; the arguments are checked against the tool's
        schema (a tool that does not allow editing, or arguments that do not fit:
        an ``error`` outcome, nothing recorded, the request still waits).
        """
        [outcome] = await self._verdicts(
            run_id, approval_id, VerdictKind(approve=True, arguments=dict(arguments))
        )
        return outcome

    async def reply(self, run_id: str, approval_id: str, text: str) -> Outcome:
        """Answer one pending call with ``text`` in place of its tool, as a row's Reply does."""
        [outcome] = await self._verdicts(
            run_id, approval_id, VerdictKind(approve=False, reply=text)
        )
        return outcome

    async def _verdicts(
        self, run_id: str, approval_id: str | None, kind: VerdictKind
    ) -> list[Outcome]:
        if approval_id is not None:
            ids = [approval_id]
        elif self.runtime.runtime_store.rt_get(run_id) is None:
            ids = []
            self._say(f"{run_id} is not a run of this runtime", error=True)
        else:
            ids = [r.approval_id for r in await Run(self.runtime, run_id).pending_approvals()]
            if not ids:
                self._say(f"{run_id} waits for no approval")
        return [await self._verdict(self._sending(run_id, i), kind) for i in ids]

    async def attend(
        self, run_id: str, action: AttentionAction, *, reason: str | None = None
    ) -> Outcome:
        """Retry or settle a needs_attention run as its row's buttons do; the outcome is said.

        The kernel signs the action's token for the run's current stop (the view
        never holds one) and :func:`~nbdurable.runtime._attention.decide_attention`
        verifies it, acts once and records who decided, via ``widget``.
        """
        record = self.runtime.runtime_store.rt_get(run_id)
        if record is None:
            outcome = Outcome("error", f"{run_id} is not a run of this runtime")
        else:
            token = attention_token(self.runtime, record, action)
            outcome = await attended(self.runtime, run_id, action, token=token, reason=reason)
        self._say(f"{run_id}: {outcome.message}", error=not outcome.recorded)
        self.poke()
        return outcome

    # -- a run's widget below ---------------------------------------------------------------

    def _show(self, widget: ipywidgets.Widget | None, run_id: str, kind: str) -> None:
        for old in self.detail.children:
            old.close()  # a RunWidget stops following its run
        self.detail.children = (widget,) if widget is not None else ()
        with self.view.hold_sync():
            self.view.selected = run_id
            self.view.detail = kind

    async def show(self, run_id: str) -> RunWidget | HistoryBrowser:
        """Show the run's live :class:`RunWidget` below (a loop run's :class:`HistoryBrowser`)."""
        if self.runtime.runtime_store.rt_get(run_id) is None:
            return await self.history(run_id)
        widget = RunWidget(self.runtime, run_id)
        self._show(widget, run_id, "run")
        return widget

    async def history(self, run_id: str) -> HistoryBrowser:
        """Show the run's :class:`HistoryBrowser` below (its checkpoints, rewind from one)."""
        browser = HistoryBrowser(self.runtime, run_id)
        self._show(browser, run_id, "history")
        return browser

    async def resume(self, run_id: str) -> str:
        """Let ``run_id`` go on as its state allows; returns what was done."""
        record = self.runtime.runtime_store.rt_get(run_id)
        if record is None:
            said = f"{run_id} is not a runtime run: resume it with resume_from_checkpoint"
        elif record.state == "needs_attention":
            return (await self.attend(run_id, "retry")).message
        elif record.state in RETRYABLE_STATES:
            await Run(self.runtime, run_id).retry()
            said = f"{run_id}: retried"
        elif record.state in BUSY_STATES - ACTIVE_STATES:
            self.runtime.wake()
            said = f"{run_id}: {record.state}, the runtime looks for work now"
        elif record.state == "waiting_approval":
            said = f"{run_id} waits for approvals: Approve or Deny them"
        else:
            said = f"{run_id} is {record.state}: nothing to resume"
        self._say(said)
        self.poke()
        return said

    async def rewind(self, run_id: str, step: int, edit: str | None = None) -> Run:
        """Fork ``run_id`` from ``step`` (``edit`` replaces its last message); show the fork."""
        fork = await self.runtime.fork(run_id, int(step), edit=edit or None)
        self._say(f"{run_id} forked at step {step} as {fork.run_id}")
        await self.show(fork.run_id)
        self.poke()
        return fork

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop following the store, close the run shown below and the view."""
        self._closed = True
        unwatch = getattr(self, "_unwatch", None)
        if unwatch is not None:
            unwatch()
        task = getattr(self, "task", None)
        if task is not None and not task.done():
            task.cancel()
        for child in getattr(self, "detail", ipywidgets.VBox()).children:
            child.close()
        source = getattr(self, "source", None)
        if source is not None:
            source.close()
        view = getattr(self, "view", None)
        if view is not None:
            view.close()
        super().close()
