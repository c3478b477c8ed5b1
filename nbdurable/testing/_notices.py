"""Conformance: claiming a run's notifications, on every store declaring the runtime capability.

``rt_claim_notices`` returns the keys no one claimed before and records them on
the run (``RuntimeRun.notified``); handles racing from threads (two processes'
view of the store) each get a key at most once, and every key exactly once.
"""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd

from ._fixtures import Reopen
from ._threads import handles, in_threads
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
    with handles(runtime_store, reopen) as racing:
        for round_ in range(10):
            run_id = f"race{round_}"
            waiting(runtime_store, run_id)

            def claim(i: int, run_id: str = run_id) -> list[str]:
                return racing[i].rt_claim_notices(run_id, ["ap1", "ap2"])  # type: ignore[no-any-return]

            results = in_threads(claim, len(racing), timeout=30)
            claimed = sorted(key for keys in results for key in keys)
            assert claimed == ["ap1", "ap2"], results
            assert sorted(runtime_store.rt_get(run_id).notified) == ["ap1", "ap2"]
