"""Conformance: claiming a run's notifications, on every store declaring the runtime capability.

``rt_claim_notices`` returns the keys no one claimed before and records them on
the run (``RuntimeRun.notified``); handles racing from threads (two processes'
view of the store) each get a key at most once, and every key exactly once.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import nbdurable as nd

from ._fixtures import Reopen
from ._verdicts import waiting


def test_a_key_is_claimed_once_and_kept_on_the_record(runtime_store: Any) -> None:
    before = waiting(runtime_store)
    assert before.notified == []
    assert runtime_store.rt_claim_notices("r1", ["ap1", "ap2", "ap1"]) == ["ap1", "ap2"]
    assert runtime_store.rt_claim_notices("r1", ["ap2", "ap3"]) == ["ap3"]
    assert runtime_store.rt_claim_notices("r1", ["ap1"]) == []
    record = runtime_store.rt_get("r1")
    assert record.notified == ["ap1", "ap2", "ap3"]
    assert record.state == "waiting_approval" and record.updated_at == before.updated_at
    with pytest.raises(nd.RunNotFoundError):
        runtime_store.rt_claim_notices("nope", ["ap1"])


def test_racing_handles_claim_each_key_exactly_once(runtime_store: Any, reopen: Reopen) -> None:
    handles = [runtime_store] + [reopen() for _ in range(3)]
    try:
        for round_ in range(10):
            run_id = f"race{round_}"
            waiting(runtime_store, run_id)
            barrier = threading.Barrier(len(handles))
            results: list[list[str]] = [[] for _ in handles]

            def claim(
                i: int,
                handle: Any,
                run_id: str = run_id,
                barrier: threading.Barrier = barrier,
                results: list[list[str]] = results,
            ) -> None:
                barrier.wait()
                results[i] = handle.rt_claim_notices(run_id, ["ap1", "ap2"])

            threads = [threading.Thread(target=claim, args=(i, h)) for i, h in enumerate(handles)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            claimed = sorted(key for keys in results for key in keys)
            assert claimed == ["ap1", "ap2"], results
            assert sorted(runtime_store.rt_get(run_id).notified) == ["ap1", "ap2"]
    finally:
        for handle in handles[1:]:
            if handle is not runtime_store:
                handle.close()
