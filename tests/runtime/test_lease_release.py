"""A leg's end releases its lease while the lease keeper renews it: nothing was lost.

The execution writes its end (waiting for a human, finished) on a store thread;
the keeper, on the loop, may have read the run just before and then finds its
renewal refused. That is this owner's own release, not another owner's takeover:
no ``lease lost`` warning, and the execution is not stopped as superseded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.runs import RunPatch, RunState, RuntimeRun
from nbdurable.runtime import DurableRuntime
from nbdurable.runtime._leases import LeaseKeeper
from nbdurable.runtime._outcome import LegOutcome

HOLDER = "this-worker"


@dataclass
class _Execution:
    record: RuntimeRun
    stop: LegOutcome | None = None

    @property
    def fence(self) -> int:
        return self.record.fence


class _EndsBeforeRenewal:
    """The runtime's store; the run's end is written just before the keeper's first renewal."""

    def __init__(self, inner: Any, end: RunPatch) -> None:
        self.inner = inner
        self.end: RunPatch | None = end

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def rt_renew(self, run_id: str, *args: Any, **kwargs: Any) -> bool:
        if self.end is not None:
            end, self.end = self.end, None
            self.inner.rt_update(run_id, end, fence=1)
        return bool(self.inner.rt_renew(run_id, *args, **kwargs))


def _store_with_a_running_run(tmp_path: Path) -> tuple[Any, RuntimeRun]:
    """A SQLite store holding run ``r1``, running under HOLDER's lease."""
    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    now = int(time.time() * 1000)
    record = RuntimeRun(
        run_id="r1",
        agent_id="elsewhere",
        agent_version="1",
        session_id="s1",
        prompt='"hi"',
        state="running",
        created_at=now,
        updated_at=now,
        fence=1,
        lease_owner=HOLDER,
        lease_expires_at=now + 600_000,
    )
    store.rt_insert(record, enqueue=False, max_pending=10)
    return store, record


@pytest.mark.parametrize("state", ["waiting_approval", "completed"])
async def test_a_lease_released_by_the_leg_s_own_end_is_not_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, state: RunState
) -> None:
    store, record = _store_with_a_running_run(tmp_path)
    try:
        async with await DurableRuntime.open(
            store=store, agents=[], poll_interval=0.02, lease_ms=3000
        ) as runtime:
            end = RunPatch(state=state, lease_owner=None, lease_expires_at=None)
            runtime.runtime_store = _EndsBeforeRenewal(runtime.runtime_store, end)
            lost: list[BaseException] = []
            keeper = LeaseKeeper(runtime, HOLDER, lost.append)
            execution = _Execution(record)
            leg = asyncio.create_task(asyncio.sleep(30))
            with caplog.at_level(logging.INFO, logger="nbdurable.runs"):
                await asyncio.wait_for(keeper.keep(execution, leg), 10)
            assert not leg.cancelled() and not leg.done()
            leg.cancel()
            assert execution.stop is None
            assert lost == []
            assert "lease lost" not in caplog.text
            assert store.rt_get("r1").state == state
    finally:
        store.close()


async def test_a_lease_taken_by_another_owner_still_stops_the_execution(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, record = _store_with_a_running_run(tmp_path)
    try:
        async with await DurableRuntime.open(
            store=store, agents=[], poll_interval=0.02, lease_ms=3000
        ) as runtime:
            taken = RunPatch(fence=2, lease_owner="another-worker")
            runtime.runtime_store = _EndsBeforeRenewal(runtime.runtime_store, taken)
            keeper = LeaseKeeper(runtime, HOLDER, lambda exc: None)
            execution = _Execution(record)
            leg = asyncio.create_task(asyncio.sleep(30))
            with caplog.at_level(logging.INFO, logger="nbdurable.runs"):
                await asyncio.wait_for(keeper.keep(execution, leg), 10)
            assert execution.stop is not None and execution.stop.kind == "superseded"
            with pytest.raises(asyncio.CancelledError):
                await leg
            assert "lease lost to another owner" in caplog.text
    finally:
        store.close()
