"""EventWriter: persists a leg's events in batches, then lets subscribers see them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from .._deps import Deps
from .._errors import FencedOutError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._offload import offload
from ..durable._transient import StoreRetry, StoreUnavailableError
from ..durable.store import EventLog, notify
from ..messages import Message
from ..models._base import ModelResponse
from ..parts import ErrorPart, FinishPart, StreamPart, TextDeltaPart, ToolCallDeltaPart
from ._model import (
    CHECKPOINT_SAVED,
    MODEL_ATTEMPT_FAILED,
    MODEL_ATTEMPT_STARTED,
    MODEL_COMPLETED,
    PART_EVENTS,
    RUN_ERROR,
    RUN_FINISHED,
    RUN_STARTED,
    RUN_SUSPENDED,
    NewEvent,
    delta_event,
)

__all__ = ["DEFAULT_FLUSH_INTERVAL", "MAX_BUFFERED", "EventWriter"]

DEFAULT_FLUSH_INTERVAL = 0.05
"""Seconds buffered events may wait before they are written (deltas mostly)."""
MAX_BUFFERED = 256
"""Events buffered before a write happens anyway (a model that never yields)."""

Publish = Callable[[StreamPart], None]

_set = object.__setattr__
_ALWAYS_SET = ("type", "step_index", "created_at")


def _made(values: dict[str, Any], fields_set: set[str]) -> NewEvent:
    # What validating NewEvent(**values) leaves, without the validation: for
    # events whose values the loop made from validated models (their strings
    # already follow the lone-surrogate policy, their payloads are JSON).
    event = NewEvent.__new__(NewEvent)
    _set(event, "__dict__", values)
    _set(event, "__pydantic_fields_set__", fields_set)
    _set(event, "__pydantic_extra__", None)
    _set(event, "__pydantic_private__", None)
    return event


class EventWriter:
    """Buffers one run's events and writes them in batches.

    Events are written before anyone sees them: the parts they carry are handed
    to ``publish`` (the in-process stream) only after the batch is committed,
    and in-process subscribers are woken then. A batch is written at every step
    boundary (with the checkpoint, in one transaction), at the end of the leg,
    and at least every ``flush_interval`` seconds while the model streams.

    A failed write is logged and the run goes on (like a failed checkpoint
    save); offsets stay gap-free because the store assigns them on commit.
    With ``retry``, a write that fails for a connection-level reason is sent
    again first, for the retry's budget; a runtime owner's writer (``strict``)
    then raises :class:`StoreUnavailableError` instead of logging it.

    With ``defer_terminal`` (a runtime run, whose end is decided by its owner
    after the leg) the leg's terminal events are not written: a completed
    leg's ``run_finished`` payload is kept in :attr:`finish` for the owner to
    write after the run's final ``run_state``, and an error writes nothing (the
    owner decides whether the run failed, waits to retry, or goes back to pending).
    """

    def __init__(
        self,
        store: EventLog,
        run_id: str,
        *,
        deps: Deps,
        publish: Publish | None = None,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        fence: int | None = None,
        retry: StoreRetry | None = None,
        defer_terminal: bool = False,
    ) -> None:
        self.store = store
        self.defer_terminal = defer_terminal
        self.finish: dict[str, Any] | None = None
        self.fence = fence
        self.retry = retry
        # A runtime owner's writer raises StoreUnavailableError (its engine stops), not logs it.
        self.strict = False
        self.run_id = run_id
        self.deps = deps
        self.publish = publish
        self.flush_interval = flush_interval
        self._buffer: list[tuple[NewEvent | None, StreamPart | None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- building events -----------------------------------------------------------

    def _event(
        self,
        type_: str,
        step_index: int | None = None,
        operation_id: str | None = None,
        attempt_id: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> NewEvent:
        """An event of values the loop made (validated models' dumps, ids, counters)."""
        fields_set = set(_ALWAYS_SET)
        if operation_id is not None:
            fields_set.add("operation_id")
        if attempt_id is not None:
            fields_set.add("attempt_id")
        if payload is None:
            payload = {}
        else:
            fields_set.add("payload")
        values = {
            "type": type_,
            "step_index": step_index,
            "operation_id": operation_id,
            "attempt_id": attempt_id,
            "payload": payload,
            "created_at": int(self.deps.clock.now()),
        }
        return _made(values, fields_set)

    def started(self, *, resumed: bool, next_step_index: int, retried: bool = False) -> None:
        """Record the start of a leg (``retried``: the first leg after a runtime retry())."""
        payload: dict[str, Any] = {"resumed": resumed, "next_step_index": next_step_index}
        if retried:
            payload["retried"] = True
        self._add(self._event(RUN_STARTED, payload=payload))

    def part(self, part: StreamPart) -> None:
        """Record a stream part emitted by the loop."""
        if isinstance(part, TextDeltaPart):
            return  # deltas are recorded with their attempt by ``delta``
        if isinstance(part, FinishPart):
            kind = RUN_SUSPENDED if part.status == "suspended" else RUN_FINISHED
            payload = _dumped(part)
            if kind == RUN_FINISHED and self.defer_terminal:
                self.finish = payload
                self._add(None, part)
                return
            self._add(self._event(kind, payload=payload), part)
            return
        event_type = PART_EVENTS.get(part.type)
        if event_type is None:
            self._add(None, part)
            return
        payload = _dumped(part)
        self._add(self._event(event_type, getattr(part, "step_index", None), payload=payload), part)

    def attempt_started(self, step_index: int, operation_id: str, attempt_id: str) -> None:
        """A model call begins."""
        self._add(
            self._event(
                MODEL_ATTEMPT_STARTED, step_index, operation_id=operation_id, attempt_id=attempt_id
            )
        )

    def delta(
        self, part: TextDeltaPart | ToolCallDeltaPart, operation_id: str, attempt_id: str
    ) -> None:
        """A streamed text delta (``model_delta``) or tool-argument delta of an attempt."""
        kind, payload = delta_event(part)
        self._add(
            self._event(
                kind,
                part.step_index,
                operation_id=operation_id,
                attempt_id=attempt_id,
                payload=payload,
            ),
            part,
        )
        self._schedule()

    def attempt_completed(
        self, step_index: int, operation_id: str, attempt_id: str, response: ModelResponse
    ) -> None:
        """The attempt's validated response: the model checkpoint."""
        self._add(
            self._event(
                MODEL_COMPLETED,
                step_index,
                operation_id=operation_id,
                attempt_id=attempt_id,
                payload={"response": response.model_dump(mode="json")},
            )
        )

    def attempt_failed(
        self,
        step_index: int,
        operation_id: str,
        attempt_id: str,
        error: BaseException,
        *,
        failure_kind: str = "model",
    ) -> None:
        """The attempt failed or was cancelled: its partial output is void."""
        # The error's text is not the loop's: validated (lone surrogates become U+FFFD).
        self._add(
            NewEvent(
                type=MODEL_ATTEMPT_FAILED,
                step_index=step_index,
                operation_id=operation_id,
                attempt_id=attempt_id,
                payload={
                    "failure_kind": failure_kind,
                    "error_type": type(error).__name__,
                    "message": str(error),
                },
                created_at=int(self.deps.clock.now()),
            )
        )

    def error(self, error: BaseException) -> None:
        """The leg failed (the in-process stream reports it with its own error part)."""
        if self.defer_terminal:
            return
        part = ErrorPart(error_type=type(error).__name__, message=str(error) or "cancelled")
        self._add(self._event(RUN_ERROR, payload=_dumped(part)))

    # -- writing -------------------------------------------------------------------

    def _add(self, event: NewEvent | None, part: StreamPart | None = None) -> None:
        # A part without an event of its own still waits in line, so the stream
        # keeps the loop's order.
        self._buffer.append((event, part))

    @property
    def backlog(self) -> int:
        """Events waiting to be written (the driver writes at :data:`MAX_BUFFERED`)."""
        return len(self._buffer)

    def _schedule(self) -> None:
        if self._timer is None and self.flush_interval > 0:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.flush_interval, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self._timed_flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Write everything buffered, then publish it."""
        await self._write(None)

    async def _timed_flush(self) -> None:
        try:
            await self.flush()
        except StoreUnavailableError as exc:  # nobody awaits this task: the next write tells
            self.deps.logger.error(
                "nbdurable: writing events of run %s failed: %r", self.run_id, exc
            )

    async def save_checkpoint(
        self, checkpoint: AgentCheckpoint, *, extends: Sequence[Message] | None = None
    ) -> None:
        """Write buffered events, the checkpoint and its ``checkpoint_saved`` event atomically.

        ``extends`` is handed to a store that declares ``saves_extensions``: the
        caller's promise that the checkpoint's history begins with the very
        message objects of that one, so only the tail is written.
        """
        saved = self._event(
            CHECKPOINT_SAVED,
            checkpoint.step_index,
            payload={"step_id": checkpoint.step_id, "status": checkpoint.status},
        )
        self._buffer.append((saved, None))
        await self._write(checkpoint, extends)

    async def close(self) -> None:
        """Flush what is left and stop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self.flush()

    async def _write(
        self, checkpoint: AgentCheckpoint | None, extends: Sequence[Message] | None = None
    ) -> None:
        async with self._lock:
            batch, self._buffer = self._buffer, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            events = [event for event, _ in batch if event is not None]
            # A runtime owner's writes carry its fencing token: the store refuses
            # them once another owner took the run over.
            options: dict[str, Any] = {} if self.fence is None else {"fence": self.fence}
            try:
                if checkpoint is not None:
                    if extends is not None and self.store.saves_extensions:
                        options["extends"] = extends
                    await self._call(
                        "save a checkpoint",
                        self.store.save_with_events,
                        checkpoint,
                        events,
                        **options,
                    )
                elif events:
                    await self._call(
                        "write events", self.store.append_events, self.run_id, events, **options
                    )
            except FencedOutError:
                raise  # not best-effort: this owner must stop
            except Exception as exc:  # best-effort, like checkpoint saves
                if self.strict and isinstance(exc, StoreUnavailableError):
                    raise  # a runtime owner stops; its run stays as it is in the store
                what = checkpoint.step_id if checkpoint is not None else f"{len(events)} events"
                self.deps.logger.error(
                    "nbdurable: writing %s of run %s failed: %r", what, self.run_id, exc
                )
            else:
                if events:
                    notify(self.store, self.run_id)
            if self.publish is not None:
                for _, part in batch:
                    if part is not None:
                        self.publish(part)

    async def _call(
        self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        if self.retry is None:
            await offload(fn, *args, **kwargs)
        else:
            await self.retry.acall(operation, fn, *args, **kwargs)


def _dumped(part: StreamPart) -> dict[str, Any]:
    """A part's JSON fields without its ``type`` (the event's type says it)."""
    payload = part.model_dump(mode="json")
    del payload["type"]
    return payload
