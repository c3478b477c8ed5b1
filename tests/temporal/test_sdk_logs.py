"""The Temporal SDK core's warnings reach Python's logging, hence the worker's log format (issue 39).

A workflow task that fails (here: a workflow raising a plain exception) makes
the core warn ``Failing workflow task``; on a worker's :class:`SdkTelemetry`
runtime that line is a ``logging`` record under ``temporalio.core``, which
``--log-format json`` writes as JSON like every other library's warning.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest
from temporalio import workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from nbdurable.temporal import TemporalConnection
from nbdurable.temporal._telemetry import CORE_LOGGER, SdkTelemetry


@workflow.defn(name="nbdurable-test.Broken")
class Broken:
    @workflow.run
    async def run(self) -> None:
        raise RuntimeError("a bug in workflow code")  # fails the task, not the workflow


async def test_the_cores_warnings_are_logging_records(
    temporal_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=CORE_LOGGER)
    sdk = SdkTelemetry(metrics=False)
    client = await TemporalConnection().connect(temporal_server, runtime=sdk.runtime)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=queue, workflows=[Broken], workflow_runner=UnsandboxedWorkflowRunner()
    ):
        handle = await client.start_workflow("nbdurable-test.Broken", id=queue, task_queue=queue)
        deadline = time.monotonic() + 30
        while not any("Failing workflow task" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
            await asyncio.sleep(0.1)
        await handle.terminate()
    warned = [r for r in caplog.records if "Failing workflow task" in r.getMessage()]
    assert warned[0].name.startswith(CORE_LOGGER) and warned[0].levelno == logging.WARNING
