"""Work on several threads at once, and several handles on one store: the racing tests' setup."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ._fixtures import Reopen

__all__ = ["handles", "in_threads"]

T = TypeVar("T")


def in_threads(work: Callable[[int], T], count: int, *, timeout: float | None = None) -> list[T]:
    """``work(0)`` ... ``work(count - 1)``, each on a thread of its own; their results, in order.

    A barrier holds every thread until all have started, so their calls race.
    The first exception a thread raised is raised here, once every thread has
    ended (or ``timeout`` passed for each).
    """
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except BaseException as exc:  # raised in the test's own thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    if errors:
        raise errors[0]
    return results


@contextmanager
def handles(store: Any, reopen: Reopen, count: int = 4) -> Iterator[list[Any]]:
    """``store`` and ``count - 1`` more handles on its data (two processes' view of it).

    The handles ``reopen`` opened are closed after (not ``store``, which may be
    one of them: an in-process store's ``reopen`` gives it again).
    """
    opened = [store, *(reopen() for _ in range(count - 1))]
    try:
        yield opened
    finally:
        for handle in opened[1:]:
            if handle is not store:
                handle.close()
