"""A leg's end, written by a local activity that Temporal may run twice.

A local activity's result is recorded with the workflow task that completes
it; when that task is retried (a signal arrived as it completed) the activity
runs again. Its second run must not undo what happened to the run since.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

import nbdurable as nd
from nbdurable.runs import RunPatch
from nbdurable.runtime import Agent, DurableRuntime
from nbdurable.temporal._activities import RunActivities

FAILED = {"state": "failed", "reason": "model_error", "error": "RuntimeError: 503"}


async def _leg(
    tmp_path: Path,
) -> tuple[DurableRuntime, RunActivities, ActivityEnvironment, str, int]:
    """A run claimed by its workflow's leg: the runtime, activities, environment, run id, fence."""
    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    rt = DurableRuntime(
        store=store, agents=[Agent("a", model=nd.ScriptedModel(["x"]), version="1")]
    )
    run = await rt.submit("a", "Go.")
    record = rt.runtime_store.rt_get(run.run_id)
    assert record is not None
    owner = f"temporal:{run.run_id}"
    record = rt.runtime_store.rt_update(
        run.run_id,
        RunPatch(state="running", fence=record.fence + 1, lease_owner=owner),
        fence=record.fence,
    )
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=run.run_id)
    return rt, RunActivities(rt), env, run.run_id, record.fence


async def test_a_leg_end_run_again_after_a_retry_leaves_the_retried_run_pending(
    tmp_path: Path,
) -> None:
    rt, acts, env, run_id, fence = await _leg(tmp_path)
    await env.run(acts.finish_leg, run_id, [], dict(FAILED), fence)
    assert rt.runtime_store.rt_get(run_id).state == "failed"
    await (await rt.get_run(run_id)).retry()
    ends = [e.type for e in rt.store.read_events(run_id)].count("run_error")

    await env.run(acts.finish_leg, run_id, [], dict(FAILED), fence)

    record = rt.runtime_store.rt_get(run_id)
    assert record.state == "pending" and record.retried
    assert [e.type for e in rt.store.read_events(run_id)].count("run_error") == ends == 1


async def test_a_leg_end_run_again_after_the_next_claim_leaves_that_leg_alone(
    tmp_path: Path,
) -> None:
    rt, acts, env, run_id, fence = await _leg(tmp_path)
    waiting = {"state": "waiting_approval", "verdicts": {}, "rerun_tool_calls": []}
    await env.run(acts.finish_leg, run_id, [], dict(waiting), fence)
    # decided, and the next leg claimed it under the same workflow id
    rt.runtime_store.rt_update(
        run_id,
        RunPatch(state="running", fence=fence + 1, lease_owner=f"temporal:{run_id}"),
        fence=fence,
    )

    await env.run(acts.finish_leg, run_id, [], dict(waiting), fence)

    assert rt.runtime_store.rt_get(run_id).state == "running"


@pytest.mark.parametrize("fence", [None, "current"])
async def test_a_leg_end_with_its_claim_is_written(tmp_path: Path, fence: str | None) -> None:
    rt, acts, env, run_id, current = await _leg(tmp_path)
    args = [run_id, [], dict(FAILED)] + ([current] if fence else [])
    await env.run(acts.finish_leg, *args)
    record = rt.runtime_store.rt_get(run_id)
    assert record.state == "failed" and record.lease_owner is None
    assert list(rt.store.read_events(run_id))[-1].type == "run_error"
