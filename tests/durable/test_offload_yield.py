"""The loop's thread hands the GIL to a store thread's call that holds the store's lock (issue 42)."""

from __future__ import annotations

import concurrent.futures
import threading
import time

from nbdurable.durable import _offload


def test_a_call_just_sent_is_let_finish_first() -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = threading.Event()

        def short() -> int:
            started.set()
            return sum(range(1000))  # Python code: it needs the GIL to end

        sent = time.perf_counter()
        future = pool.submit(short)
        started.wait()
        assert _offload._yielded_to(future, sent)
        assert future.result() == sum(range(1000))


def test_a_call_waiting_long_for_something_else_is_not_waited_for() -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        release = threading.Event()
        future = pool.submit(release.wait)
        began = time.perf_counter()
        # Sent long ago: it waits for something else (another process's lock).
        assert not _offload._yielded_to(future, began - 1.0)
        assert time.perf_counter() - began < _offload._YIELD_FOR
        # Just sent, but still waiting: given up after a bounded time.
        assert not _offload._yielded_to(future, time.perf_counter())
        assert time.perf_counter() - began < 0.5
        release.set()
