"""``wait_event``: the package's loops wait for a wake-up or a period, and stay cancellable."""

from __future__ import annotations

import asyncio

import pytest

from nbdurable._aio import wait_event


async def test_it_says_whether_the_event_was_set() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5) is True
    assert await wait_event(event, 0) is True


async def test_a_cancellation_in_the_iteration_that_sets_the_event_ends_the_waiting_loop() -> None:
    # The event is set and the task cancelled in one loop iteration: asyncio.wait_for
    # (Python 3.11) returns the event's result and the loop below would go on for ever.
    event = asyncio.Event()
    woken = 0

    async def follow() -> None:
        nonlocal woken
        while True:
            if await wait_event(event, 30):
                woken += 1
            event.clear()

    task = asyncio.create_task(follow())
    await asyncio.sleep(0)
    event.set()
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=5)
    assert done == {task}
    assert task.cancelled()
    assert woken == 0


async def test_a_cancellation_at_the_timeout_still_propagates() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(wait_event(event, 0))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
