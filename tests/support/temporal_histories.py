"""What the Temporal server's workflow histories say went wrong with workflow tasks."""

from __future__ import annotations

from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client


async def broken_workflow_tasks(address: str, queue: str) -> list[str]:
    """The workflow tasks that failed or timed out once started, in the queue's histories.

    A task waiting on a stopped worker's sticky queue times out before it starts
    (schedule-to-start, 2 s) and goes to the task queue: that is not counted.
    """
    temporal = await Client.connect(address)
    broken = []
    async for execution in temporal.list_workflows(f"TaskQueue = '{queue}'"):
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        for event in (await handle.fetch_history()).events:
            if event.HasField("workflow_task_failed_event_attributes"):
                failure = event.workflow_task_failed_event_attributes.failure
                broken.append(f"{execution.id}: failed: {failure.message}")
            if event.HasField("workflow_task_timed_out_event_attributes"):
                kind = event.workflow_task_timed_out_event_attributes.timeout_type
                if kind == TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE:
                    broken.append(f"{execution.id}: timed out")
    return broken
