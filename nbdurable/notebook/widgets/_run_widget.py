"""RunWidget: the live view of one run, following its event log on the kernel's loop."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import time
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from ..._errors import ApproverNotAllowedError, NbdurableError
from ...durable._offload import offload
from ...durable.store import RunStore
from ...events._fold import RunView
from ...events._model import RUN_STARTED, RUN_STATE, Event
from ...events._subscribe import subscribe
from ...runs import ACTIONS, BUSY_STATES, AttentionAction, RuntimeRun, Stalled, stalled
from ...runtime._attention import attention_token
from ...runtime._checked_verdicts import Outcome
from ...runtime._in_flight import verdict_in_flight
from ...runtime._run import Run
from .._lease import LeaseWait, lease_wait
from .._next_step import attended, confirmed
from .._session import deciding_user
from ._assets import view_module, view_style
from ._fallback import FallbackDisplay, run_summary, with_summary
from ._messages import Ack, Attend, Edit, Pong, Reply, Snapshot, Verdict, received
from ._run_delta import StepDeltas
from ._run_forming import add_forming_calls
from ._run_state import ANSWERED_CARD, Cards, Clock, run_state
from ._verdict_kinds import VerdictKind, submit_kind, verdict_kind

if TYPE_CHECKING:
    from ...runtime._runtime import DurableRuntime

__all__ = ["FLUSH_INTERVAL", "RunWidget"]

FLUSH_INTERVAL = 1 / 30
CARD_GRANT_MINUTES = 30.0
"""How long the card's "Approve all <tool> for 30 min" grant covers the tool's calls."""
"""Seconds between two front-end updates at most (about 30 per second at any token rate)."""


class RunWidget(anywidget.AnyWidget):
    """The live view of a run: status, steps, streamed text, tool calls, usage, approvals.

    Construct it in a notebook cell (or any coroutine): it starts a task on the
    running event loop that replays the run's event log from offset 0, then
    follows it live, folding it with :class:`nbdurable.events.RunView`. The
    front-end is updated at most every :data:`FLUSH_INTERVAL` seconds whatever
    the token rate: the small traits (status, usage, cards, ...) by trait
    changes, the steps by deltas (appended text and changed steps only, custom
    messages numbered in sequence, see :mod:`.run_delta`). A front end's model
    asks for a snapshot when it is created (and when it missed a delta) and gets
    every step; from then on it composes the ``snapshot`` trait itself from the
    deltas (set on the front end, which is what its widget manager saves in a
    notebook), so the kernel never sends the whole run again. ``text``, ``steps``
    and ``last_offset`` are kernel-side traits (not synced). While no front end
    has asked (a notebook executed headless by nbclient or ``nbconvert
    --execute``, whose saved widget state is what the kernel synced), the kernel
    syncs ``snapshot`` with every step whenever the run is not busy (it waits, or
    it ended) and when following stops, so a saved notebook shows the whole run
    either way.
    Closing the widget stops the task; a new ``RunWidget`` for the same run
    replays the log, then follows it.

    Approval cards carry the request's signed token, never the secret. A click
    sends a verdict (``grant``: a standing approval of the card's tool in this
    run for :data:`CARD_GRANT_MINUTES`, which approves this call and covers the
    run's next ones); the kernel acknowledges it at once and verifies the token
    with the runtime's signer before approving (see :func:`submit_verdict`). An
    answered card collapses to one line ("approved at 12:03").

    The front-end also pings the kernel when it renders and whenever the widget
    manager says the kernel connection changed. A view that gets no answer (the kernel
    was restarted, or the notebook was reopened from its saved widget state
    without this kernel) says "disconnected" and disables its buttons; a fresh
    view (re-run the cell, or ``%durable show RUN``) follows the run again.
    The messages (:mod:`._messages`) are listed in docs/notebook.md, "Widget messages".

    Args:
        runtime: The runtime that owns the run (its store, signer and handles).
        run_id: The run to show.

    Raises:
        RuntimeError: No event loop is running (call it from a cell or a coroutine).
    """

    _esm = view_module("run_view.js")
    _css = view_style("run_view.css")

    run_id = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Unicode("unknown").tag(sync=True)
    step = traitlets.Int(0).tag(sync=True)
    steps = traitlets.List(traitlets.Dict())
    """Every step as the view shows it (kernel-side: the front-end gets deltas)."""
    text = traitlets.Unicode("")
    """The run's full text so far (kernel-side)."""
    snapshot = traitlets.Dict().tag(sync=True)
    """``{"seq", "steps"}``: every step (saved state).

    Composed by the front end from the deltas once it asked for a snapshot; synced
    by the kernel when the run is not busy only while no front end has asked."""
    usage = traitlets.Dict().tag(sync=True)
    approvals = traitlets.List(traitlets.Dict()).tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    takeover = traitlets.Unicode("").tag(sync=True)
    late_results = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """A line per call an owner that had lost the run finished anyway (``tool_late_result``)."""
    started_at = traitlets.Int(0).tag(sync=True)
    ended_at = traitlets.Int(0).tag(sync=True)
    last_offset = traitlets.Int(0)
    """The offset of the last event folded (kernel-side: the view needs none)."""
    following = traitlets.Bool(False).tag(sync=True)
    max_steps = traitlets.Int(0).tag(sync=True)
    progress = traitlets.Unicode("").tag(sync=True)
    summary = traitlets.Unicode("").tag(sync=True)
    lease_until = traitlets.Int(0).tag(sync=True)
    lease_owner = traitlets.Unicode("").tag(sync=True)
    stalled = traitlets.Bool(False).tag(sync=True)
    attention = traitlets.Dict().tag(sync=True)
    """A needs_attention stop's Retry / Settle: ``{"state", "message", "retry", "settle"}``.

    ``retry`` and ``settle`` are the signed tokens of the two buttons (never the
    secret); ``state`` is ``open``, ``sending``, ``retried``, ``settled``, or
    what stopped a click (``stale``, ``invalid token``, ...). Empty: no stop."""

    def __init__(self, runtime: DurableRuntime, run_id: str, **kwargs: Any) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "RunWidget follows a run on the running event loop: create it in a "
                "notebook cell or a coroutine"
            ) from None
        super().__init__(run_id=run_id, **kwargs)
        self.runtime = runtime
        self.view = RunView(run_id=run_id)
        self._cards = Cards()
        self._clock = Clock()
        self._last_flush = 0.0
        self._deltas = StepDeltas()
        self._quiet_seq: int | None = None  # the delta number of the last pause or end noted
        self._composed = False  # a front end asked for a snapshot: it composes the trait
        self._flush_handle: asyncio.TimerHandle | None = None
        self._verdicts: set[asyncio.Task[Outcome]] = set()
        self._opened_at = _now_ms()
        self._max_steps = 0
        self._lease: LeaseWait | None = None
        self._stalled: Stalled | None = None
        self._lease_check: asyncio.TimerHandle | None = None
        self._attention: dict[str, Any] = {}
        self._fallback = FallbackDisplay(self._repr_mimebundle_)
        self._read_record()
        self.on_msg(self._on_front_end_message)
        self.following = True
        self.task: asyncio.Task[None] = self._loop.create_task(self._follow())

    def _read_record(self) -> None:
        """Note the run's step budget, and whether another runtime's lease still holds it."""
        store = self.runtime.store  # loop-API runs have no record
        record = store.rt_get(self.run_id) if isinstance(store, RunStore) else None
        if record is None:
            self._lease = None
            return
        self._max_steps = record.max_steps
        self._offer_attention(record)
        self._stalled = stalled(record)
        self._lease = (
            None if self._stalled is not None else lease_wait(record, self.runtime.owner_id)
        )
        if self._lease is not None and self._lease_check is None:
            # look again once it lapsed: taken over (an event says so) or still held
            delay = max(0.0, (self._lease.until - _now_ms()) / 1000) + 0.5
            self._lease_check = self._loop.call_later(delay, self._lease_lapsed)

    def _offer_attention(self, record: RuntimeRun | None = None) -> None:
        """Sign the Retry and Settle tokens of the run's current needs_attention stop, if any."""
        if record is None:
            store = self.runtime.store
            record = store.rt_get(self.run_id) if isinstance(store, RunStore) else None
        if record is None or record.state != "needs_attention":
            return
        tokens = {a: attention_token(self.runtime, record, a) for a in ("retry", "settle")}
        if self._attention.get("state") == "sending":
            return  # a click is being handled: its outcome decides what shows next
        self._attention = {"state": "open", "message": "", **tokens}

    def _lease_lapsed(self) -> None:
        self._lease_check = None
        if self._lease is not None:
            self._read_record()
            self._schedule_flush()

    # -- following the log ---------------------------------------------------------------

    async def _follow(self) -> None:
        try:
            async for event in subscribe(
                self.runtime.event_store,
                self.run_id,
                after=self.view.last_offset,
                wait=True,
                poll_interval=self.runtime.poll_interval,
            ):
                self.apply(event)
        finally:
            self.following = False
            self.flush()

    def apply(self, event: Event) -> None:
        """Fold one event into the view and schedule a (throttled) front-end update."""
        self.view.apply(event)
        if (
            self._lease is not None
            and event.type in (RUN_STARTED, RUN_STATE)
            and event.created_at >= self._opened_at
        ):
            self._lease = None  # a runtime took the run over (or it moved on)
        if (
            self._stalled is not None
            and event.type in (RUN_STARTED, RUN_STATE)
            and event.created_at >= self._opened_at
        ):
            self._stalled = None  # someone took it over (or it moved on)
        if event.type == RUN_STATE and event.payload.get("state") == "needs_attention":
            self._offer_attention()  # a new stop: its buttons get tokens for it
        self._cards.observe(self.view, event)
        self._clock.observe(event)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if self._flush_handle is not None:
            return  # a flush is already due: it will send the latest state
        wait = self._last_flush + FLUSH_INTERVAL - time.monotonic()
        self._flush_handle = self._loop.call_later(max(0.0, wait), self.flush)

    def flush(self) -> None:
        """Send the current state now (traits that did not change are not sent)."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._last_flush = time.monotonic()
        if self.comm is None:
            return  # closed
        state = run_state(
            self.view,
            self._cards,
            self._clock,
            max_steps=self._max_steps,
            lease=self._lease,
            stalled=self._stalled,
        )
        add_forming_calls(state["steps"], self.view)
        state["attention"] = self._attention_shown(state["status"])
        context = _latest_request_context()
        if context is None:
            self._publish(state)
            return
        try:
            context.run(self._publish, state)
        except RuntimeError:  # that context is entered right now: this is the request
            self._publish(state)

    def _publish(self, state: dict[str, Any]) -> None:
        delta = self._deltas.delta(state["steps"])
        if delta is not None:
            self.send(delta)
        with self.hold_sync():
            for name, value in state.items():
                setattr(self, name, value)
            quiet = not self.following or state["status"] not in BUSY_STATES
            if quiet and self._quiet_seq != self._deltas.seq:
                self._quiet_seq = self._deltas.seq
                if not self._composed:
                    # once per pause or end, and only while no front end composes it:
                    # what a notebook saved headless shows (a front end that asked
                    # for a snapshot keeps its own current, so the whole run never
                    # crosses the comm again once a view rendered)
                    self.snapshot = dict(self._deltas.snapshot())
                self._fallback.refresh()  # the saved output says where the run is now

    def _attention_shown(self, status: str) -> dict[str, Any]:
        """What the Retry / Settle panel shows: the open stop, a click's outcome, or nothing."""
        shown = self._attention
        if shown.get("state") == "open" and status != "needs_attention":
            return {}  # decided elsewhere (another view, a magic, a process): the run moved on
        return {k: v for k, v in shown.items() if status == "needs_attention" or k not in ACTIONS}

    # -- what a saved notebook shows without a kernel ---------------------------------------

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        summary = run_summary(
            self.run_id,
            self.status,
            summary=self.summary,
            progress=self.progress,
            text=self.text,
            approvals=self.approvals,
        )
        return with_summary(super()._repr_mimebundle_(**kwargs), summary)

    def _ipython_display_(self) -> None:
        self._fallback.show()  # with a display id: updated in place when the run pauses or ends

    # -- verdicts from the cards ---------------------------------------------------------

    def _on_front_end_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        message = received(content)
        if message is None:
            return
        if message["type"] == "ping":
            self.send(Pong(type="pong", nonce=message.get("nonce")))
        elif message["type"] == "snapshot":  # a front end's model: it gets every step
            self._composed = True  # ...and composes the saved snapshot from the deltas
            self.send(Snapshot(type="snapshot", **self._deltas.snapshot()))
        elif message["type"] in ("approve", "deny", "grant", "edit", "reply"):
            self._on_verdict(message)
        elif message["type"] in ACTIONS:
            self._on_attention(message)

    # -- Retry / Settle of a needs_attention stop -------------------------------------------

    def _on_attention(self, click: Attend) -> None:
        self.send(Ack(type="ack", approval_id="attention"))  # this kernel got the click
        if self._attention.get("state") != "open":
            return  # a second click, or no stop to decide
        action: AttentionAction = "retry" if click["type"] == "retry" else "settle"
        reason = click.get("reason")
        self._attention = {**self._attention, "state": "sending", "message": "checking..."}
        self.flush()
        task = self._loop.create_task(
            attended(
                self.runtime,
                self.run_id,
                action,
                token=click.get("token"),
                reason=str(reason) if reason else None,
            )
        )
        self._verdicts.add(task)
        task.add_done_callback(self._attended)

    def _attended(self, task: asyncio.Task[Outcome]) -> None:
        self._verdicts.discard(task)
        if task.cancelled():
            self._attention = {**self._attention, "state": "open", "message": ""}
        else:
            outcome = task.result()
            state = {"approved": "retried", "denied": "settled"}.get(outcome.state, outcome.state)
            if outcome.state in ("error", "invalid token", "not allowed", "expired"):
                state = "open"  # nothing changed: the stop still waits for a decision
                self._attention = {**self._attention, "state": state}
                self._offer_attention()  # with fresh tokens (an expired one, say)
            self._attention = {**self._attention, "state": state, "message": outcome.message}
        self.flush()

    def _on_verdict(self, verdict: Verdict | Edit | Reply) -> None:
        approval_id = str(verdict.get("approval_id", ""))
        self.send(Ack(type="ack", approval_id=approval_id))  # this kernel got the click
        if approval_id not in self._cards.requests:
            return  # not a card of this view
        current = self._cards.outcomes.get(approval_id)
        if current is not None and current[0] in ("sending", *ANSWERED_CARD):
            return  # a second click: this card already answered (or is answering)
        kind = verdict_kind(verdict)
        if isinstance(kind, str):  # a malformed edit or reply: said on the card, nothing sent
            self._cards.outcomes[approval_id] = ("error", kind)
            self.flush()
            return
        self._cards.outcomes[approval_id] = ("sending", "checking...")
        self.flush()
        coroutine = (
            self._grant(approval_id)
            if verdict["type"] == "grant"
            else self._answer(approval_id, kind, token=verdict.get("token"))
        )
        task = self._loop.create_task(coroutine)
        self._verdicts.add(task)
        task.add_done_callback(lambda done: self._verdict_done(approval_id, done, kind))

    async def _answer(self, approval_id: str, kind: VerdictKind, *, token: object) -> Outcome:
        tool_name = self._cards.requests[approval_id].tool_name
        outcome = await submit_kind(
            self.runtime, self.run_id, approval_id, kind, token=token, tool_name=tool_name
        )
        if outcome.state == "expired":
            # this kernel holds the secret: show the request again with a fresh token
            for request in await Run(self.runtime, self.run_id).pending_approvals():
                if request.approval_id == approval_id:
                    self._cards.requests[approval_id] = request
        return outcome

    async def _grant(self, approval_id: str) -> Outcome:
        """A standing approval of the card's tool in this run; it approves this call too."""
        request = self._cards.requests[approval_id]
        run = Run(self.runtime, self.run_id)
        try:
            with verdict_in_flight(self.run_id):
                grant = await run.grant(
                    request.tool_name,
                    minutes=CARD_GRANT_MINUTES,
                    agent_path=request.agent_path,
                    by=deciding_user(),
                    via="widget",
                )
        except ApproverNotAllowedError as exc:
            return Outcome("not allowed", str(exc), refusal=exc)
        except NbdurableError as exc:  # the run finished meanwhile, ...
            return Outcome("error", f"{type(exc).__name__}: {exc}")
        record = await offload(run.record)
        entry = record.decided.get(approval_id)
        if entry is None or entry.source is None or entry.source.grant_id != grant.grant_id:
            # another verdict on this call was recorded first: it stands
            winner = "approved" if entry is not None and entry.approved else "denied"
            return Outcome("stale", f"decided already ({winner})", winner=winner)
        message = (
            f"approved by grant {grant.grant_id}: every {request.tool_name} call for "
            f"{CARD_GRANT_MINUTES:g} min"
        )
        return Outcome("approved", await confirmed(self.runtime, self.run_id, message))

    def _verdict_done(
        self, approval_id: str, task: asyncio.Task[Outcome], kind: VerdictKind
    ) -> None:
        self._verdicts.discard(task)
        if task.cancelled():
            self._cards.outcomes.pop(approval_id, None)
        else:
            outcome = task.result()
            state: str = outcome.state
            if outcome.state == "stale" and outcome.winner is not None:
                state = outcome.winner  # another view, process or person decided first
            elif outcome.state == "expired":
                state = "pending"  # asked again, with the fresh token
            elif outcome.recorded and kind.reply is not None:
                state = "replied"
            self._cards.outcomes[approval_id] = (state, outcome.message)
            if outcome.recorded:
                self._cards.decided[approval_id] = (_now_ms(), kind)
        self.flush()

    async def settled(self) -> None:
        """Wait until every verdict sent from this view's cards has been handled."""
        while self._verdicts:
            await asyncio.gather(*self._verdicts, return_exceptions=True)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop following the run and close the widget."""
        task = getattr(self, "task", None)
        if task is not None and not task.done():
            task.cancel()
        for name in ("_flush_handle", "_lease_check"):
            handle = getattr(self, name, None)
            if handle is not None:
                handle.cancel()
                setattr(self, name, None)
        super().close()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _latest_request_context() -> contextvars.Context | None:
    """The kernel's context of the request it handles last (ipykernel keeps one), if any.

    The following task was started by the cell that made the widget, and ipykernel
    tags messages with the request of the context they are sent from: without
    this, every update would claim to come from that finished cell, and clients
    that keep only the running cell's messages (nbclient, ``nbconvert --execute``,
    hence the widget state saved in executed notebooks) would drop them all.
    """
    kernelbase = sys.modules.get("ipykernel.kernelbase")
    if kernelbase is None:
        return None
    kernel_class: Any = kernelbase.Kernel
    if not kernel_class.initialized():
        return None
    context = getattr(kernel_class.instance(), "_shell_context", None)
    return context if isinstance(context, contextvars.Context) else None
