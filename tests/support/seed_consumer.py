"""The reference stream consumer of seed 004, written to the seed's pseudo-code.

The seed's five steps: (1) persist the run id before reading events; (2) persist
each event's offset before handling it; (3) after a restart, reconnect with the
saved offset; (4) skip events at or below it; (5) clear the saved state on
RUN_FINISHED or RUN_ERROR. This consumer stops at that terminal event, as a
client written to the seed does: if the run wrote anything after it (a state
event, a retried attempt's error, ...), the consumer has stopped early, and
the tests compare what it handled with the whole log.

A *source* is the seed's ``events(after=offset)``: any async iterator of events
that carry an offset. The ones here read the store by polling (they never end
on their own, so only the consumer decides when to stop) or the HTTP bridge's
SSE stream; ``Run.stream`` and ``nbdurable.subscribe`` are sources too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import nbdurable as nd

TERMINAL = ("run_finished", "run_error")
"""The seed's AgentEventTypeRunFinished and AgentEventTypeRunError."""

Source = Callable[[str, int], AsyncIterator[Any]]


class ConsumerCrash(Exception):
    """The consumer's process dying mid-stream (its saved state survives)."""


@dataclass
class SeedConsumer:
    """The seed's reference consumer; ``saved`` is its persisted reconnect state.

    Attributes:
        saved: What survives the consumer's crash: ``run_id`` and ``offset``.
        handled: Offsets of the events it handled, in order.
        types: Their types.
        cleared_at: Offsets at which it cleared its saved state.
    """

    saved: dict[str, Any] = field(default_factory=dict)
    handled: list[int] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    payloads: list[dict[str, Any]] = field(default_factory=list)
    cleared_at: list[int] = field(default_factory=list)

    def payloads_of(self, type_: str) -> list[dict[str, Any]]:
        """Payloads of the handled events of ``type_``, in order."""
        return [p for t, p in zip(self.types, self.payloads, strict=True) if t == type_]

    def save_run_id(self, run_id: str) -> None:
        """Step 1: persist the run id before reading any event."""
        self.saved["run_id"] = run_id

    async def consume(
        self, source: Source, *, crash_after: int | None = None, timeout: float = 60
    ) -> None:
        """Read from the saved offset until the terminal event (or a simulated crash)."""
        await asyncio.wait_for(self._consume(source, crash_after), timeout)

    async def _consume(self, source: Source, crash_after: int | None) -> None:
        run_id = str(self.saved["run_id"])
        saved_offset = int(self.saved.get("offset", 0))  # step 3: reconnect with the offset
        events = source(run_id, saved_offset)
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                offset, ok = event.position()
                if ok and offset <= saved_offset:
                    continue  # step 4: handled before the reconnect
                if ok:
                    self.saved["offset"] = offset  # step 2: persist before processing
                self._handle(event)
                if event.type in TERMINAL:
                    return
                if crash_after is not None and len(self.handled) >= crash_after:
                    raise ConsumerCrash

    def _handle(self, event: Any) -> None:
        self.handled.append(event.offset)
        self.types.append(event.type)
        self.payloads.append(dict(event.payload))
        if event.type in TERMINAL:  # step 5
            self.saved.clear()
            self.cleared_at.append(event.offset)


def polling(store: Any, interval: float = 0.01) -> Source:
    """``events(after=)`` on a store's log: polls forever, never ends on its own."""

    async def source(run_id: str, after: int) -> AsyncIterator[nd.Event]:
        cursor = after
        while True:
            try:
                batch = await nd.read_events(store, run_id, after=cursor)
            except nd.RunNotFoundError:
                batch = []  # submitted, nothing logged yet
            for event in batch:
                cursor = event.offset
                yield event
            await asyncio.sleep(interval)

    return source


@dataclass(frozen=True)
class SseEvent:
    """One SSE message of the bridge's event stream, as the consumer sees it."""

    offset: int
    type: str
    payload: dict[str, Any]

    def position(self) -> tuple[int, bool]:
        """``id:`` is the event's offset."""
        return self.offset, True


def sse(base_url: str, token: str | None) -> Source:
    """``events(after=)`` over the HTTP bridge: ``GET /runs/{id}/events`` with ``Last-Event-ID``."""
    import httpx
    from httpx_sse import aconnect_sse

    async def source(run_id: str, after: int) -> AsyncIterator[SseEvent]:
        headers = {"Last-Event-ID": str(after)}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        async with (
            httpx.AsyncClient(base_url=base_url, timeout=60) as http,
            aconnect_sse(http, "GET", f"/runs/{run_id}/events", headers=headers) as events,
        ):
            assert events.response.status_code == 200
            async for message in events.aiter_sse():
                data = json.loads(message.data)
                assert int(message.id) == data["offset"] and message.event == data["type"]
                yield SseEvent(data["offset"], data["type"], data["payload"])

    return source


def assert_read_the_whole_log(consumer: SeedConsumer, log: list[nd.Event]) -> None:
    """The consumer handled every event once, in order, and cleared its state at the last one."""
    assert consumer.handled == [e.offset for e in log], (consumer.types, [e.type for e in log])
    assert log[-1].type in TERMINAL
    assert consumer.cleared_at == [log[-1].offset]
    assert consumer.saved == {}
