"""One lease keeper serves every run an engine executes (issue 42).

Each turn reads the runs being cancelled in one query, whatever the number of
runs held; each lease is renewed every third of ``lease_ms``, not every turn;
a run being cancelled is stopped at the next turn.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.runs import RunPatch, RuntimeRun
from nbdurable.runtime import DurableRuntime
from nbdurable.runtime._leases import LeaseKeeper
from nbdurable.runtime._outcome import LegOutcome
from nbdurable.runtime._waiting import Backoff

HOLDER = "this-worker"


@dataclass
class _Execution:
    record: RuntimeRun
    stop: LegOutcome | None = None

    @property
    def fence(self) -> int:
        return self.record.fence


class _Counting:
    """The runtime's store, counting the keeper's calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name not in ("rt_list", "rt_renew", "rt_get"):
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attribute(*args, **kwargs)

        return counted


def _running(store: Any, run_id: str) -> RuntimeRun:
    now = int(time.time() * 1000)
    record = RuntimeRun(
        run_id=run_id,
        agent_id="elsewhere",
        agent_version="1",
        session_id=run_id,
        prompt='"hi"',
        state="running",
        created_at=now,
        updated_at=now,
        fence=1,
        lease_owner=HOLDER,
        lease_expires_at=now + 600_000,
    )
    store.rt_insert(record, enqueue=False, max_pending=10)
    return record


@pytest.mark.slow  # a runtime opened and timed turns: seconds on a loaded machine
async def test_one_keeper_reads_once_a_turn_and_renews_a_third_of_the_lease(
    tmp_path: Path,
) -> None:
    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        records = [_running(store, f"r{i}") for i in range(3)]
        async with await DurableRuntime.open(
            store=store, agents=[], poll_interval=0.01, lease_ms=300
        ) as runtime:
            counting = _Counting(runtime.runtime_store)
            runtime.runtime_store = counting
            keeper = LeaseKeeper(runtime, HOLDER, lambda exc: None)
            legs = [asyncio.create_task(asyncio.sleep(30)) for _ in records]
            executions = [_Execution(record) for record in records]
            keeps = [
                asyncio.create_task(keeper.keep(execution, leg))
                for execution, leg in zip(executions, legs, strict=True)
            ]
            await asyncio.sleep(0.45)
            turns = counting.calls.get("rt_list", 0)
            renewals = counting.calls.get("rt_renew", 0)
            assert 2 <= turns <= 12  # one query a turn (every 0.04 s), not one a run
            assert 3 <= renewals <= 3 * 5  # each lease every 0.1 s, not every turn
            assert counting.calls.get("rt_get", 0) == 0
            assert store.rt_get("r0").lease_expires_at > int(time.time() * 1000)

            store.rt_update("r1", RunPatch(state="cancelling"), fence=1)
            await asyncio.wait_for(keeps[1], 5)
            assert executions[1].stop is not None and executions[1].stop.kind == "cancelled"
            assert legs[1].cancelled() or legs[1].cancelling()
            assert executions[0].stop is None and not legs[0].done()
            for task in (*keeps, *legs):
                task.cancel()
            await asyncio.gather(*keeps, *legs, return_exceptions=True)
            await keeper.close()
    finally:
        store.close()


def test_a_wait_s_poll_doubles_while_nothing_changes_and_starts_again_after_a_change() -> None:
    backoff = Backoff(0.05)
    assert [backoff.after("running") for _ in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff.after("waiting_approval") == 0.05
    assert Backoff(2.0).after("x") == 2.0 and Backoff(2.0).cap == 2.0
