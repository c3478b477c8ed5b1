"""Reading a run's log: replay, then follow live, with no gap and no duplicate."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence

from .._errors import ConfigurationError, RunNotFoundError
from ..durable._offload import offload
from ..durable.store import Armed, EventLog, RunStore
from ._model import RUN_SUSPENDED, Event

__all__ = ["DEFAULT_POLL_INTERVAL", "read_events", "subscribe", "wait_for_run"]

DEFAULT_POLL_INTERVAL = 0.02
"""Seconds between reads when no in-process writer wakes the subscriber."""


def _event_store(store: object) -> EventLog:
    """``store``, checked at run time: a store of another library may lack the log."""
    if not isinstance(store, EventLog):
        raise ConfigurationError(
            f"{type(store).__name__} keeps no event log; use a bundled store "
            "(memory://, sqlite:///, jsonl:///, postgresql://)"
        )
    return store


async def read_events(
    store: EventLog, run_id: str, after: int = 0, limit: int | None = None
) -> Sequence[Event]:
    """Exactly the events of ``run_id`` with offset > ``after``, in order.

    Works with sync and async stores. ``after=0`` replays the whole log.

    Raises:
        RunNotFoundError: The store knows no such run.
        ConfigurationError: The store keeps no event log.
    """
    return await offload(_event_store(store).read_events, run_id, after=after, limit=limit)


async def subscribe(
    store: EventLog,
    run_id: str,
    after: int = 0,
    *,
    stop_on_suspend: bool = False,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    wait: bool = False,
) -> AsyncIterator[Event]:
    """Replay a run's events after ``after``, then follow the live tail.

    Each event is read from the store by offset, so the seam between replay and
    tail has no gap and no duplicate. In-process writers wake the subscriber at
    once; writers in other processes are seen within ``poll_interval``, or at
    once on a store that is notified of them (PostgreSQL's LISTEN/NOTIFY). The
    iterator ends after the run's terminal event (``run_finished`` or
    ``run_error``) once nothing follows it, or at ``run_suspended`` with
    ``stop_on_suspend``. Cancelling the iteration never touches the run.

    Args:
        store: A store with an event log.
        run_id: The run to follow.
        after: Offset already seen; 0 replays everything.
        stop_on_suspend: End at ``run_suspended`` too.
        poll_interval: Seconds between reads when no local writer wakes us.
        wait: Wait for a run that has no events yet (one just submitted
            elsewhere) instead of raising :class:`RunNotFoundError`.

    Raises:
        RunNotFoundError: The store knows no such run (and ``wait`` is False).
    """
    events = _event_store(store)
    while wait:
        try:
            await offload(events.read_events, run_id, after=0, limit=1)
            break
        except RunNotFoundError:
            await wait_for_run(store, run_id, poll_interval, 0)
    cursor = after
    last: Event | None = None
    if after > 0:  # a subscriber that saw the terminal event must not wait forever
        seen = await offload(events.read_events, run_id, after=after - 1, limit=1)
        last = seen[0] if seen else None
    while True:
        armed = Armed(store, run_id)  # before the read: a write during it wakes the wait
        try:
            batch = await offload(events.read_events, run_id, after=cursor)
            if batch:
                armed.disarm()
            for event in batch:
                cursor = event.offset
                yield event
            if batch:
                last = batch[-1]
                continue  # read again before sleeping: more may have arrived meanwhile
            if last is not None:
                if stop_on_suspend and last.type == RUN_SUSPENDED:
                    return
                if last.ends_stream and await offload(_settled, store, run_id):
                    return
            await wait_for_run(store, run_id, poll_interval, cursor, armed=armed)
        finally:
            armed.disarm()


def wait_for_run(
    store: EventLog,
    run_id: str,
    timeout: float,
    after: int | None = None,
    armed: Armed | None = None,
) -> Awaitable[None]:
    """The store's own wait (PostgreSQL: LISTEN/NOTIFY) when it has one, else the local hub.

    ``after`` is the offset read so far: the store's wait returns at once when
    the log already goes further (an append between the read and the wait).
    ``armed``: the hub's wake-up, registered before that read (see :class:`Armed`).
    """
    return store.wait_for_events(run_id, timeout, after=after, armed=armed)


def _settled(store: EventLog, run_id: str) -> bool:
    """A runtime run may go on after a leg's end (a retry, a resume): ask its record."""
    if not isinstance(store, RunStore):
        return True
    record = store.rt_get(run_id)
    return record is None or record.finished
