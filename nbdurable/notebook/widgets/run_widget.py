"""RunWidget: the live view of one run, following its event log on the kernel's loop."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from ...events.fold import RunView
from ...events.model import Event
from ...events.subscribe import subscribe
from ...runtime.verdicts import Outcome, submit_verdict
from .assets import frontend_file
from .run_state import Cards, Clock, run_state

if TYPE_CHECKING:
    from ...runtime.runtime import DurableRuntime

__all__ = ["FLUSH_INTERVAL", "RunWidget"]

FLUSH_INTERVAL = 1 / 30
"""Seconds between two front-end updates at most (about 30 per second at any token rate)."""


class RunWidget(anywidget.AnyWidget):
    """The live view of a run: status, steps, streamed text, tool calls, usage, approvals.

    Construct it in a notebook cell (or any coroutine): it starts a task on the
    running event loop that replays the run's event log from offset 0, then
    follows it live, folding it with :class:`nbdurable.events.RunView`. The
    front-end is updated by trait changes only, at most every
    :data:`FLUSH_INTERVAL` seconds whatever the token rate; the full text and
    every step stay in synced traits, so a late or re-rendered view is complete.
    Closing the widget stops the task; a new ``RunWidget`` for the same run
    replays the log, then follows it.

    Approval cards carry the request's signed token, never the secret. The
    front-end answers with a custom message ``{"action": "approve" | "deny",
    "approval_id", "token", "reason"}``; the kernel verifies the token with the
    runtime's signer before approving (see :func:`submit_verdict`).

    Args:
        runtime: The runtime that owns the run (its store, signer and handles).
        run_id: The run to show.

    Raises:
        RuntimeError: No event loop is running (call it from a cell or a coroutine).
    """

    _esm = frontend_file("run_view.js")
    _css = frontend_file("run_view.css")

    run_id = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Unicode("unknown").tag(sync=True)
    step = traitlets.Int(0).tag(sync=True)
    steps = traitlets.List(traitlets.Dict()).tag(sync=True)
    text = traitlets.Unicode("").tag(sync=True)
    usage = traitlets.Dict().tag(sync=True)
    approvals = traitlets.List(traitlets.Dict()).tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    takeover = traitlets.Unicode("").tag(sync=True)
    started_at = traitlets.Int(0).tag(sync=True)
    ended_at = traitlets.Int(0).tag(sync=True)
    last_offset = traitlets.Int(0).tag(sync=True)
    following = traitlets.Bool(False).tag(sync=True)

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
        self._flush_handle: asyncio.TimerHandle | None = None
        self._verdicts: set[asyncio.Task[Outcome]] = set()
        self.on_msg(self._on_front_end_message)
        self.following = True
        self.task: asyncio.Task[None] = self._loop.create_task(self._follow())

    # -- following the log ---------------------------------------------------------------

    async def _follow(self) -> None:
        try:
            async for event in subscribe(
                self.runtime.store,
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
        state = run_state(self.view, self._cards, self._clock)
        with self.hold_sync():
            for name, value in state.items():
                setattr(self, name, value)

    # -- verdicts from the cards ---------------------------------------------------------

    def _on_front_end_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict) or content.get("action") not in ("approve", "deny"):
            return
        approval_id = str(content.get("approval_id", ""))
        if approval_id not in self._cards.requests:
            return  # not a card of this view
        current = self._cards.outcomes.get(approval_id)
        if current is not None and current[0] in ("sending", "approved", "denied"):
            return  # a second click: this card already answered (or is answering)
        self._cards.outcomes[approval_id] = ("sending", "checking...")
        self.flush()
        reason = content.get("reason")
        coroutine = submit_verdict(
            self.runtime,
            self.run_id,
            approval_id,
            approve=content["action"] == "approve",
            token=content.get("token"),
            reason=str(reason) if reason else None,
        )
        task = self._loop.create_task(coroutine)
        self._verdicts.add(task)
        task.add_done_callback(lambda done: self._verdict_done(approval_id, done))

    def _verdict_done(self, approval_id: str, task: asyncio.Task[Outcome]) -> None:
        self._verdicts.discard(task)
        if task.cancelled():
            self._cards.outcomes.pop(approval_id, None)
        else:
            outcome = task.result()
            self._cards.outcomes[approval_id] = (outcome.state, outcome.message)
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
        handle = getattr(self, "_flush_handle", None)
        if handle is not None:
            handle.cancel()
            self._flush_handle = None
        super().close()
