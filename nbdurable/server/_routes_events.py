"""A run's event log as Server-Sent Events: replay, then the live tail, no gap, no duplicate.

Each event is one SSE message: ``id:`` its offset, ``event:`` its type,
``data:`` the event's JSON. A client that reconnects with ``Last-Event-ID`` (or
``?after=``) gets exactly the events after that offset. The stream ends once the
run is finished (its terminal ``run_finished`` or ``run_error`` sent, the last
event a finished run writes) or, with ``?until=stop``, also when it waits for a
human (``waiting_approval``, ``needs_attention``).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from .._errors import ConfigurationError
from ..durable._offload import offload
from ..events._model import RUN_STATE, RUN_SUSPENDED, Event
from ..events._subscribe import read_events, wait_for_run
from ..runs import STOP_STATES, RuntimeRun
from ._context import Bridge
from ._handlers import error_responses

__all__ = [
    "KEEPALIVE",
    "MAX_OFFSET",
    "LastEventId",
    "SSE_MESSAGE",
    "STOP_STATES",
    "Tail",
    "Until",
    "events_router",
    "sse_frame",
    "sse_response",
]

Until = Annotated[
    Literal["finish", "stop"],
    Query(description="`finish`: end when the run finishes; `stop`: also when it waits"),
]
"""A stream's ``until`` parameter (the bridge's events and AG-UI's)."""

LastEventId = Annotated[
    str | None,
    Header(alias="Last-Event-ID", description="Reconnect: the last position received"),
]
"""A reconnecting stream's ``Last-Event-ID`` header."""

SSE_MESSAGE: dict[str, Any] = {
    "type": "object",
    "description": "One SSE message: one event of the run's log",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[1-9][0-9]*$", "description": "The offset"},
        "event": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$", "description": "The type"},
        "data": {
            "type": "string",
            "description": "The event as `read_events` returns it, in JSON",
            "contentMediaType": "application/json",
            "contentSchema": Event.model_json_schema(mode="serialization"),
        },
    },
    "additionalProperties": False,
}
"""The schema of each message of the event stream (before OpenAPI 3.2's ``itemSchema``,
a ``text/event-stream`` schema describes one message: schemathesis reads it so)."""
MAX_OFFSET = 2**62
KEEPALIVE = b": keep-alive\n\n"
"""An SSE comment: keeps proxies from closing a quiet stream."""
GRACE_S = 2.0
"""Seconds a stream waits for the event of a state its run record already shows."""


def sse_frame(event: Event) -> bytes:
    """One event as an SSE message."""
    return f"id: {event.offset}\nevent: {event.type}\ndata: {event.model_dump_json()}\n\n".encode()


_OFFSET_TEXT = re.compile(r"0*([0-9]{1,19})")
"""An offset as text: ASCII digits only (``str.isdigit()`` also takes ``\xb2``, which
``int()`` refuses), at most 19 significant ones (``MAX_OFFSET`` has 19), so ``int()``
never meets its 4,300-digit limit."""


def sse_response(frames: AsyncIterator[bytes]) -> StreamingResponse:
    """A response streaming ``frames`` as Server-Sent Events, past caches and proxy buffers."""
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _after(after: int, last_event_id: str | None) -> int:
    if last_event_id is None:
        return after
    digits = _OFFSET_TEXT.fullmatch(last_event_id.strip(" \t"))
    if digits is None or int(digits.group(1)) > MAX_OFFSET:
        shown = last_event_id if len(last_event_id) <= 40 else last_event_id[:40] + "..."
        raise ConfigurationError(
            f"Last-Event-ID must be an event offset (0 to {MAX_OFFSET}), not {shown!r}"
        )
    return int(digits.group(1))


class Tail:
    """Reads one run's log from an offset on, and knows when the stream is over."""

    def __init__(self, bridge: Bridge, run_id: str, after: int, until: str) -> None:
        self.runtime = bridge.runtime
        self.store = bridge.runtime.event_store
        self.run_id = run_id
        self.cursor = after
        self.until = until
        self.keepalive_s = bridge.keepalive_s
        self.last: Event | None = None

    def _record(self) -> RuntimeRun | None:
        return self.runtime.runtime_store.rt_get(self.run_id)

    async def start(self) -> None:
        """Check the run exists; learn the event at the cursor (a client may have seen the end).

        Raises:
            RunNotFoundError: The store knows no such run.
        """
        if await offload(self._record) is None:  # a loop-API run: its log must exist
            await read_events(self.store, self.run_id, after=0, limit=1)
        if self.cursor > 0:
            seen = await read_events(self.store, self.run_id, after=self.cursor - 1, limit=1)
            self.last = seen[0] if seen else None

    async def _over(self, grace: bool) -> bool:
        """Whether the stream is over: caught up, and nothing more to wait for.

        A finished run's terminal event (``run_finished`` or ``run_error``) is
        its last; a waiting run's ``run_state`` is written after its record: the
        stream waits for that event, or for ``grace`` (its write failed).
        """
        record = await offload(self._record)
        last = self.last
        if record is None:  # a loop-API run: its leg's end is the end
            if last is None:
                return False
            return last.ends_stream or (self.until == "stop" and last.type == RUN_SUSPENDED)
        if record.finished:  # its terminal event is the last one it writes
            return (last is not None and last.ends_stream) or grace
        said = last.payload.get("state") if last is not None and last.type == RUN_STATE else None
        if self.until == "stop" and record.state in STOP_STATES:
            return said == record.state or grace
        return False

    async def items(self) -> AsyncIterator[Event | None]:
        """Replay, then follow live: each event, and None after every ``keepalive_s`` of silence."""
        poll = max(self.runtime.poll_interval, 0.01)
        quiet_since = last_sent = time.monotonic()
        while True:
            batch = await read_events(self.store, self.run_id, after=self.cursor)
            if batch:
                for event in batch:
                    self.cursor = event.offset
                    yield event
                self.last = batch[-1]
                quiet_since = last_sent = time.monotonic()
                continue  # read again before sleeping: more may have arrived meanwhile
            if await self._over(grace=time.monotonic() - quiet_since >= GRACE_S):
                return
            await wait_for_run(self.store, self.run_id, poll, self.cursor)
            if time.monotonic() - last_sent >= self.keepalive_s:
                last_sent = time.monotonic()
                yield None

    async def frames(self) -> AsyncIterator[bytes]:
        """Replay, then follow live, as SSE; a comment every ``keepalive_s`` of silence."""
        async for event in self.items():
            yield KEEPALIVE if event is None else sse_frame(event)


def events_router(bridge: Bridge) -> APIRouter:
    """The ``/runs/{run_id}/events`` route of ``bridge``."""
    router = APIRouter(tags=["events"])

    @router.get(
        "/runs/{run_id}/events",
        summary="A run's events as Server-Sent Events",
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "`id:` offset, `event:` type, `data:` the event JSON; "
                "the schema describes one message (`: keep-alive` comments aside)",
                "content": {"text/event-stream": {"schema": SSE_MESSAGE}},
            },
            **error_responses({404: "No such run"}),
        },
    )
    async def events(
        run_id: str,
        after: Annotated[
            int, Query(ge=0, le=MAX_OFFSET, description="Replay offsets after this one")
        ] = 0,
        until: Until = "finish",
        last_event_id: LastEventId = None,
    ) -> StreamingResponse:
        """Replay the run's log after ``after`` (or ``Last-Event-ID``), then the live tail."""
        tail = Tail(bridge, run_id, _after(after, last_event_id), until)
        await tail.start()
        return sse_response(tail.frames())

    return router
