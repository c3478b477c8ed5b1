"""The recorded histories catch an unpatched change on every workflow path (issue 39).

Each case adds one unpatched timer to ``nbdurable.AgentRun`` at a point only
some paths reach (after a leg that needs attention, before continue-as-new,
after a timed-out or cancelled leg, before each leg) and replays the recorded
histories of the paths that reach it: every one of them must fail, so a real
change there without ``workflow.patched`` fails test_replay.py. Before these
recordings, a timer after a needs_attention leg or before continue-as-new
passed every replay test.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from nbdurable.runtime._outcome import LegOutcome
from nbdurable.temporal._config import TemporalConfig
from nbdurable.temporal._tasks import TaskRunWorkflow
from nbdurable.temporal._worker import WORKFLOW_NAME
from nbdurable.temporal._workflow import AgentRunWorkflow

from .test_replay import HISTORIES, INDEX
from .test_replay import worker_runtime as worker_runtime  # the recorded agents, autouse

CHANGES = {
    # point of the unpatched timer: the recording scenarios whose histories reach it
    "needs_attention": ["needs-attention"],
    "continue-as-new": ["continue-as-new"],
    "failed": ["timeout"],
    "cancelled": ["cancel"],
    "leg": ["drain", "needs-attention", "timeout", "cancel", "continue-as-new", "approval"],
}


POINT = ["nowhere"]
"""Where :class:`Changed` puts its timer (a test sets it before replaying)."""


@workflow.defn(name=WORKFLOW_NAME)
class Changed(AgentRunWorkflow):
    """``nbdurable.AgentRun`` with one unpatched timer at ``POINT``."""

    @workflow.run
    async def run(self, config: dict[str, Any], carried: dict[str, Any] | None = None) -> str:
        return await super().run(config, carried)

    async def _leg(self, config: TemporalConfig) -> str | None:
        if POINT[0] == "leg":
            await workflow.sleep(0.01)
        return await super()._leg(config)

    async def _hand_on(self, config: dict[str, Any], handed_back: int) -> None:
        if POINT[0] == "continue-as-new":
            await workflow.sleep(0.01)
        await super()._hand_on(config, handed_back)

    async def _finish(
        self, config: TemporalConfig, outcome: LegOutcome, fence: int | None = None
    ) -> str | None:
        state = await super()._finish(config, outcome, fence)
        if state == POINT[0]:
            await workflow.sleep(0.01)
        return state


def changed(point: str) -> type[AgentRunWorkflow]:
    """``nbdurable.AgentRun`` with one unpatched timer at ``point``."""
    POINT[0] = point
    return Changed


def histories(scenarios: list[str]) -> list[str]:
    """The recorded agent-run histories of ``scenarios``."""
    return sorted(name for name, entry in INDEX.items() if entry["scenario"] in scenarios)


@pytest.mark.parametrize("point", sorted(CHANGES))
async def test_an_unpatched_timer_fails_every_history_that_reaches_it(point: str) -> None:
    names = histories(CHANGES[point])
    # every scenario named has a recording
    assert {INDEX[name]["scenario"] for name in names} == set(CHANGES[point])
    replayer = Replayer(
        workflows=[changed(point), TaskRunWorkflow], workflow_runner=UnsandboxedWorkflowRunner()
    )
    for name in names:
        history = WorkflowHistory.from_json(
            INDEX[name]["workflow_id"], (HISTORIES / name).read_text()
        )
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is not None, f"{name} replays under a timer at {point}"


async def test_the_unchanged_subclass_replays_them() -> None:
    """The timers, not the subclassing, fail the replays above."""
    replayer = Replayer(
        workflows=[changed("nowhere"), TaskRunWorkflow], workflow_runner=UnsandboxedWorkflowRunner()
    )
    for name in histories([scenario for scenarios in CHANGES.values() for scenario in scenarios]):
        history = WorkflowHistory.from_json(
            INDEX[name]["workflow_id"], (HISTORIES / name).read_text()
        )
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{name}: {result.replay_failure!r}"
