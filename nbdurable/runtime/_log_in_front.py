"""An event log standing in front of a store's: what it does not change is the store's.

A run owner's pending writes (:class:`~._step_commit.StepRiders`) and a leg's
outbox that holds a checkpoint back for the events after it
(:mod:`._legs_outside`) each stand where an event writer expects its store, and
change how some writes go; reads, waits, the channel that wakes subscribers and
every other attribute are the store's, said once here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..durable.store import Armed, EventLog, channel_of
from ..events._model import Event

__all__ = ["EventLogInFront"]


class EventLogInFront(EventLog):
    """Base of an event log in front of the store ``inner``; subclasses set ``inner``."""

    inner: Any

    def __getattr__(self, name: str) -> Any:
        # The store's other methods and attributes (reads, capabilities).
        return getattr(self.inner, name)

    @property
    def event_channel(self) -> object:
        """The store's channel: subscribers of the store are woken by these writes."""
        return channel_of(self.inner)

    @property
    def saves_extensions(self) -> bool:
        """As the store's."""
        return bool(self.inner.saves_extensions)

    def read_events(self, run_id: str, after: int = 0, limit: int | None = None) -> Sequence[Event]:
        """The store's events (what a subclass holds back is not among them yet)."""
        return self.inner.read_events(run_id, after, limit)  # type: ignore[no-any-return]

    async def wait_for_events(
        self, run_id: str, timeout: float, *, after: int | None = None, armed: Armed | None = None
    ) -> None:
        """As the store's."""
        await self.inner.wait_for_events(run_id, timeout, after=after, armed=armed)

    def listen(self, timeout: float = 10.0) -> bool:
        """As the store's."""
        return bool(self.inner.listen(timeout))
